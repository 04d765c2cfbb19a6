/**
 * SPERLI checkpoint files (docs/sperli.md, "Rank file" and "COMMIT file").
 *
 * Rank file `<dir>/<job>/<epoch>/rank-<n>.ckpt`: an 80-byte header, then the state.
 *   0 "SPCK" | 4 u16 version 1 | 6 u16 0 | 8 [16] job id | 24 u64 epoch | 32 u32 rank
 *   36 u32 size | 40 u64 payload length p | 48 [32] SHA-256 of the payload
 *
 * COMMIT file `<dir>/<job>/<epoch>/COMMIT`, signed by rank 0 with the job key:
 *   0 "SPCM" | 4 u16 version 1 | 6 u16 0 | 8 [16] job id | 24 u64 epoch | 32 u32 size s
 *   36 u32 0 | 40 s x [32] SHA-256 of each whole rank file | u16 2484 | [2484] signature
 *   over bytes 0 .. 40 + 32s (context SPERLI-COMMIT-1)
 *
 * Rank file refusals: H1619 (not the file expected), H1620 (a SHA-256 that does not
 * match). COMMIT refusals: H1621 (malformed, bad signature, another job or epoch), H1623
 * (a correctly signed COMMIT of another size).
 */
import { sha256 } from '../core/index.js';
import {
  _bytes,
  _copy,
  _hex,
  _reader,
  _sameBytes,
  _u64,
  _uint,
  _verifies,
  _writer,
  SperliCode,
  sperliError,
  type Verify,
} from './sperli-errors.js';
import { SIGNATURE_LENGTH } from './sperli-payloads.js';

export const RANK_FILE_HEADER_SIZE = 80;
/** "SPCK" */
export const RANK_FILE_MAGIC = Uint8Array.of(0x53, 0x50, 0x43, 0x4b);
/** "SPCM" */
export const COMMIT_MAGIC = Uint8Array.of(0x53, 0x50, 0x43, 0x4d);
export const FILE_VERSION = 1;

/** Which rank file a reader expects. */
export interface RankFileIdentity {
  readonly jobId: Uint8Array;
  /** The checkpoint epoch, 1 or more. */
  readonly epoch: bigint;
  readonly rank: number;
  readonly size: number;
}

export interface RankFile extends RankFileIdentity {
  /** The state bytes (a view into the file). */
  readonly state: Uint8Array;
  /** The SHA-256 of the state, as stored in the header. */
  readonly stateSha256: Uint8Array;
}

/** The whole rank file for `state`: header (with the state's SHA-256) and the state. */
export function encodeRankFile(id: RankFileIdentity, state: Uint8Array): Uint8Array {
  _bytes(id.jobId, 'jobId', 16);
  _bytes(state, 'state');
  const epoch = _u64(id.epoch, 'epoch');
  if (epoch < 1n) throw new RangeError('a rank file epoch is 1 or more');
  return _writer(RANK_FILE_HEADER_SIZE + state.length)
    .bytes(RANK_FILE_MAGIC)
    .u16(FILE_VERSION)
    .u16(0)
    .bytes(id.jobId)
    .u64n(epoch)
    .u32(_uint(id.rank, 0, 0xffff_ffff, 'rank'))
    .u32(_uint(id.size, 0, 0xffff_ffff, 'size'))
    .u64n(BigInt(state.length))
    .bytes(sha256(state))
    .bytes(state)
    .finish();
}

/** The SHA-256 of a whole rank file, header included: what CKPT_ACK and COMMIT carry. */
export function rankFileDigest(file: Uint8Array): Uint8Array {
  return sha256(_bytes(file, 'rank file'));
}

function notExpected(reason: string, message: string, details: Record<string, unknown> = {}) {
  return sperliError(SperliCode.rankFile, reason, `rank file refused: ${message}`, details);
}

/**
 * Reads a rank file and checks it against what the reader expects, in order: a header
 * of 80 bytes, magic, version, the reserved u16, job id, epoch, rank, size, file length
 * 80 + p (H1619, `details.reason` naming the field); then the state's SHA-256 against
 * the header (H1620 `sha256`) and, when `fileSha256` is given (the COMMIT entry), the
 * whole file's SHA-256 against it (H1620 `commit-entry`).
 */
export function decodeRankFile(
  file: Uint8Array,
  expect: RankFileIdentity & { readonly fileSha256?: Uint8Array },
): RankFile {
  _bytes(file, 'rank file');
  if (file.length < RANK_FILE_HEADER_SIZE) {
    throw notExpected('length', `${file.length} bytes is shorter than the 80-byte header`, { length: file.length });
  }
  const r = _reader(file, () => {
    throw notExpected('length', 'the header is cut');
  });
  const magic = r.bytes(4, 'magic');
  if (!_sameBytes(magic, RANK_FILE_MAGIC)) {
    throw notExpected('magic', `magic ${_hex(magic)} is not "SPCK" (5350434b)`);
  }
  const version = r.u16('version');
  if (version !== FILE_VERSION) throw notExpected('version', `version ${version} is not 1`, { version });
  const reserved = r.u16('reserved');
  if (reserved !== 0) throw notExpected('reserved', `the reserved field at offset 6 is ${reserved}, not 0`);
  const jobId = _copy(r.bytes(16, 'job id'));
  if (!_sameBytes(jobId, expect.jobId)) {
    throw notExpected('job-id', `job id ${_hex(jobId)} is not the expected ${_hex(expect.jobId)}`);
  }
  const epoch = r.u64n('epoch');
  if (epoch !== expect.epoch) {
    throw notExpected('epoch', `epoch ${epoch} is not the expected ${expect.epoch}`, { epoch });
  }
  const rank = r.u32('rank');
  if (rank !== expect.rank) throw notExpected('rank', `rank ${rank} is not the expected ${expect.rank}`, { rank });
  const size = r.u32('size');
  if (size !== expect.size) throw notExpected('size', `size ${size} is not the expected ${expect.size}`, { size });
  const p = r.u64n('payload length');
  if (BigInt(file.length - RANK_FILE_HEADER_SIZE) !== p) {
    throw notExpected('length', `the file has ${file.length} bytes, not 80 + ${p}`, {
      length: file.length,
      payloadLength: p,
    });
  }
  const stateSha256 = _copy(r.bytes(32, 'SHA-256'));
  const state = file.subarray(RANK_FILE_HEADER_SIZE);
  const actual = sha256(state);
  if (!_sameBytes(actual, stateSha256)) {
    throw sperliError(
      SperliCode.rankFileHash,
      'sha256',
      `rank file refused: its state hashes to ${_hex(actual)}, the header says ${_hex(stateSha256)}`,
    );
  }
  if (expect.fileSha256 !== undefined) {
    const whole = sha256(file);
    if (!_sameBytes(whole, _bytes(expect.fileSha256, 'fileSha256', 32))) {
      throw sperliError(
        SperliCode.rankFileHash,
        'commit-entry',
        `rank file refused: it hashes to ${_hex(whole)}, the COMMIT entry says ${_hex(expect.fileSha256)}`,
      );
    }
  }
  return { jobId, epoch, rank, size, state, stateSha256 };
}

// ---------------------------------------------------------------------------------------
// COMMIT file

export interface CommitFields {
  readonly jobId: Uint8Array;
  readonly epoch: bigint;
  /** The SHA-256 of each whole rank file of the epoch, in rank order (size = count). */
  readonly hashes: readonly Uint8Array[];
}

export interface Commit extends CommitFields {
  readonly size: number;
  /** Bytes 0 .. 40 + 32s: what the signature covers. */
  readonly signed: Uint8Array;
  readonly signature: Uint8Array;
}

/** The signed part of a COMMIT file (sign it under COMMIT_CONTEXT, then assembleCommit). */
export function encodeCommitSigned(f: CommitFields): Uint8Array {
  _bytes(f.jobId, 'jobId', 16);
  if (!Array.isArray(f.hashes)) throw new TypeError('hashes must be an array of 32-byte digests');
  const w = _writer(40 + 32 * f.hashes.length)
    .bytes(COMMIT_MAGIC)
    .u16(FILE_VERSION)
    .u16(0)
    .bytes(f.jobId)
    .u64n(_u64(f.epoch, 'epoch'))
    .u32(f.hashes.length)
    .u32(0);
  f.hashes.forEach((h, i) => {
    w.bytes(_bytes(h, `hashes[${i}]`, 32));
  });
  return w.finish();
}

/** The COMMIT file: the signed part, u16 2484, the signature. */
export function assembleCommit(signed: Uint8Array, signature: Uint8Array): Uint8Array {
  _bytes(signed, 'signed');
  _bytes(signature, 'signature', SIGNATURE_LENGTH);
  return _writer(signed.length + 2 + SIGNATURE_LENGTH)
    .bytes(signed)
    .u16(SIGNATURE_LENGTH)
    .bytes(signature)
    .finish();
}

function malformed(reason: string, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return sperliError(SperliCode.commit, reason, `COMMIT refused: ${message}`, details, cause);
}

/**
 * Parses a COMMIT file without verifying it. Refused (H1621): a cut file, another magic
 * or version, a nonzero reserved field, bytes after the signature, a signature length
 * other than 2484. The file length is checked against the size before any hash is read.
 */
export function parseCommit(file: Uint8Array): Commit {
  _bytes(file, 'COMMIT file');
  const r = _reader(file, (field, need, have) => {
    throw malformed('cut', `the file is cut (${field} needs ${need} bytes, ${have} left)`, { field });
  });
  const magic = r.bytes(4, 'magic');
  if (!_sameBytes(magic, COMMIT_MAGIC)) throw malformed('magic', `magic ${_hex(magic)} is not "SPCM" (5350434d)`);
  const version = r.u16('version');
  if (version !== FILE_VERSION) throw malformed('version', `version ${version} is not 1`, { version });
  if (r.u16('reserved') !== 0) throw malformed('reserved', 'the reserved field at offset 6 is not 0');
  const jobId = _copy(r.bytes(16, 'job id'));
  const epoch = r.u64n('epoch');
  const size = r.u32('size');
  if (r.u32('reserved') !== 0) throw malformed('reserved', 'the reserved field at offset 36 is not 0');
  const signedEnd = 40 + 32 * size;
  const want = signedEnd + 2 + SIGNATURE_LENGTH;
  if (file.length < want) {
    throw malformed('cut', `a COMMIT of size ${size} has ${want} bytes; this one has ${file.length}`, { size });
  }
  if (file.length > want) {
    throw malformed('trailing', `a COMMIT of size ${size} has ${want} bytes; ${file.length - want} more follow`, {
      size,
      extra: file.length - want,
    });
  }
  const hashes: Uint8Array[] = [];
  for (let i = 0; i < size; i++) hashes.push(_copy(r.bytes(32, `hashes[${i}]`)));
  const sigLength = r.u16('signature length');
  if (sigLength !== SIGNATURE_LENGTH) {
    throw malformed('signature-length', `the signature length is ${sigLength}, not ${SIGNATURE_LENGTH}`);
  }
  const signature = _copy(r.bytes(SIGNATURE_LENGTH, 'signature'));
  if (r.left !== 0) throw malformed('trailing', `${r.left} bytes follow the signature`, { extra: r.left });
  return { jobId, epoch, size, hashes, signed: _copy(file, 0, signedEnd), signature };
}

/** What a rank checks a COMMIT file against. */
export interface CommitExpectations {
  readonly jobId: Uint8Array;
  /** The epoch expected, when the caller knows it. */
  readonly epoch?: bigint;
  /** The job's size. */
  readonly size: number;
}

/**
 * Parses (when given bytes) and verifies a COMMIT file, in this order: malformed
 * (H1621), the signature with `verify` bound to the job public key and COMMIT_CONTEXT
 * (H1621 `signature`), job id and epoch (H1621 `job-id`, `epoch`), then the size: a
 * correctly signed COMMIT of another size than the job is H1623 `size`.
 */
export function verifyCommit(commit: Uint8Array | Commit, expect: CommitExpectations, verify: Verify): Commit {
  const c = commit instanceof Uint8Array ? parseCommit(commit) : commit;
  const v = _verifies(verify, c.signed, c.signature);
  if (!v.ok) {
    throw malformed('signature', 'its signature does not verify with the job public key', {}, v.cause);
  }
  if (!_sameBytes(c.jobId, expect.jobId)) {
    throw malformed('job-id', `job id ${_hex(c.jobId)} is not this job (${_hex(expect.jobId)})`);
  }
  if (expect.epoch !== undefined && c.epoch !== expect.epoch) {
    throw malformed('epoch', `epoch ${c.epoch} is not the expected ${expect.epoch}`, { epoch: c.epoch });
  }
  if (c.size !== expect.size) {
    throw sperliError(
      SperliCode.commitSize,
      'size',
      `COMMIT refused: it is signed for a job of ${c.size} ranks, this job has ${expect.size}; version 1 resumes only at the same size`,
      { size: c.size },
    );
  }
  return c;
}
