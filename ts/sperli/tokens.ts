/**
 * Join tokens and COMMIT files with real signatures: the SPERLI codecs (ts/codec/)
 * composed with CompositeSig (ts/crypto/) under the two contexts of docs/sperli.md,
 * `SPERLI-JOIN-1` and `SPERLI-COMMIT-1`.
 */

import type { Verify } from '../codec/sperli-errors.js';
import {
  assembleCommit,
  type Commit,
  type CommitExpectations,
  type CommitFields,
  encodeCommitSigned,
  verifyCommit,
} from '../codec/sperli-files.js';
import {
  assembleJoinToken,
  COMMIT_CONTEXT,
  checkJoinToken,
  encodeJoinTokenMessage,
  JOIN_CONTEXT,
  type JoinExpectations,
  type JoinToken,
  type JoinTokenFields,
} from '../codec/sperli-payloads.js';
import { CompositeSig } from '../crypto/index.js';

/** A verify function bound to the job public key and one context. */
export function verifier(publicKey: Uint8Array, context: string): Verify {
  if (publicKey.length !== CompositeSig.lengths.publicKey) {
    // Refused here, once, rather than as a failed signature on every frame.
    CompositeSig.verify(publicKey, new Uint8Array(0), new Uint8Array(CompositeSig.lengths.signature), context);
  }
  return (message, signature) => CompositeSig.verify(publicKey, message, signature, context);
}

/** Makes and signs a rank's join token (the launcher holds the job secret key). */
export function signJoinToken(secretKey: Uint8Array, fields: JoinTokenFields): Uint8Array {
  const message = encodeJoinTokenMessage(fields);
  return assembleJoinToken(message, CompositeSig.sign(secretKey, message, JOIN_CONTEXT));
}

/**
 * Checks a peer's join token against the job (every rule of docs/sperli.md, signature
 * first); throws H1610 `join-token` naming the failed rule.
 */
export function verifyJoinToken(
  token: Uint8Array | JoinToken,
  expect: JoinExpectations,
  publicKey: Uint8Array,
): JoinToken {
  return checkJoinToken(token, expect, verifier(publicKey, JOIN_CONTEXT));
}

/** Makes and signs a COMMIT file (rank 0 holds the job secret key for this). */
export function signCommit(secretKey: Uint8Array, fields: CommitFields): Uint8Array {
  const signed = encodeCommitSigned(fields);
  return assembleCommit(signed, CompositeSig.sign(secretKey, signed, COMMIT_CONTEXT));
}

/** Parses and verifies a COMMIT file: H1621 malformed or badly signed, H1623 another size. */
export function verifyCommitFile(
  commit: Uint8Array | Commit,
  expect: CommitExpectations,
  publicKey: Uint8Array,
): Commit {
  return verifyCommit(commit, expect, verifier(publicKey, COMMIT_CONTEXT));
}
