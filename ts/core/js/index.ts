/** The TypeScript backend: every kernel's pure reference twin. */
import type { Kernel } from '../types.js';
import { crc32c } from './crc32c.js';
import { fnv1a64, fnv1a64Batch, fnv1a64String, shardBatch } from './fnv1a.js';
import { headerCheck, headerDecodeBatch, headerEncode } from './header.js';
import { combine } from './reduce.js';
import { Sha256Js, sha256, sha256Batch } from './sha256.js';

export const jsKernel: Kernel = {
  name: 'js',
  fnv1a64,
  fnv1a64String,
  fnv1a64Batch,
  shardBatch,
  sha256,
  sha256Stream: () => new Sha256Js(),
  sha256Batch,
  crc32c,
  combine,
  headerCheck,
  headerDecodeBatch,
  headerEncode,
};
