/**
 * Making a SPERLI job: a fresh 128-bit job id, the Ed25519 job CA, one certificate and
 * key per rank (its host in the subjectAltName), the job's CompositeSig key pair and one
 * signed join token per rank, assembled into each rank's job description. The launcher
 * keeps the secret key; only rank 0's description carries it (for COMMIT files).
 */
import { randomBytes } from 'node:crypto';
import type { HostEntry, JobDescription } from '../codec/sperli-jobdesc.js';
import { type Clock, systemClock } from '../core/clock.js';
import { CompositeSig } from '../crypto/index.js';
import { createJobCa, issueRankCertificate } from '../crypto/x509.js';
import { signJoinToken } from './tokens.js';

export interface MakeJobOptions {
  /** One entry per rank, in rank order. */
  readonly hosts: readonly HostEntry[];
  /** 1 for a first run; each restart adds 1. */
  readonly incarnation?: number;
  /** How long the join tokens stay valid, in ms (default one hour). */
  readonly tokenTtlMs?: number;
  /** The job id (default: 16 random bytes). */
  readonly jobId?: Uint8Array;
  /** The job key pair (default: a fresh one). Restarts of a job keep its key. */
  readonly keys?: { readonly publicKey: Uint8Array; readonly secretKey: Uint8Array };
  /** Wall time in ms since 1970 for the join tokens' expiry (default the system clock). */
  readonly clock?: Clock;
}

export interface Job {
  readonly jobId: Uint8Array;
  readonly publicKey: Uint8Array;
  readonly secretKey: Uint8Array;
  /** The job description of each rank, in rank order. */
  readonly descriptions: readonly JobDescription[];
}

const utf8 = new TextEncoder();

export async function makeJob(opts: MakeJobOptions): Promise<Job> {
  const size = opts.hosts.length;
  const jobId = opts.jobId ?? new Uint8Array(randomBytes(16));
  const incarnation = opts.incarnation ?? 1;
  const keys = opts.keys ?? CompositeSig.keygen();
  const now = (opts.clock ?? systemClock).now();
  const expiry = BigInt(now + (opts.tokenTtlMs ?? 3_600_000));
  const ca = await createJobCa({ jobId });
  const caCert = utf8.encode(ca.cert);
  const descriptions: JobDescription[] = [];
  for (let rank = 0; rank < size; rank++) {
    const host = (opts.hosts[rank] as HostEntry).name;
    const creds = await issueRankCertificate(ca, { jobId, rank, host });
    descriptions.push({
      jobId,
      size,
      rank,
      incarnation,
      hosts: opts.hosts,
      caCert,
      rankCert: utf8.encode(creds.cert),
      rankKey: utf8.encode(creds.key),
      joinToken: signJoinToken(keys.secretKey, { jobId, rank, size, incarnation, host, expiry }),
      jobSecretKey: rank === 0 ? keys.secretKey : null,
      jobPublicKey: keys.publicKey,
    });
  }
  return { jobId, publicKey: keys.publicKey, secretKey: keys.secretKey, descriptions };
}
