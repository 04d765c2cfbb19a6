/**
 * plexus/sperli: SPERLI version 1, the MPI-like job runtime. This entry point carries
 * the wire and disk formats (docs/sperli.md), signed join tokens and COMMIT files, and
 * the refused-host rules; the runtime (launcher, ranks, collectives) builds on them.
 */
export { SperliCode, type SperliCodeValue, sperliError, type Verify } from '../codec/sperli-errors.js';
export * from '../codec/sperli-files.js';
export * from '../codec/sperli-frame.js';
export * from '../codec/sperli-jobdesc.js';
export * from '../codec/sperli-payloads.js';
export * from '../codec/sperli-stream.js';
export * from './hosts.js';
export * from './tokens.js';
