/**
 * The identity checks of the SPERLI mesh (the SPERLI protocol, "Transport and security"):
 * its identity policy for the job's TLS endpoint (ts/net/tls-endpoint.ts binds a peer's
 * certificate to its rank on both sides, and refuses through the policy's `refuse`), the
 * rank's own description and certificate before it listens, and the job and rank that
 * identity must be on an accepted or a dialled connection. Each refusal is an H1610
 * `PlexusError` (`job-description`, `peer-certificate` or `tls-handshake`).
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import type { JobDescription } from '../codec/sperli-jobdesc.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { certificateIdentity, jobIdHex, type RankIdentity } from '../crypto/x509.js';
import type { IdentityPolicy } from '../net/tls-endpoint.js';
import type { RefusedHosts } from './hosts.js';

function descriptionRefused(field: string, message: string, details: Record<string, unknown> = {}): PlexusError {
  return sperliError(SperliCode.frame, 'job-description', `job description refused: ${message}`, {
    ...details,
    field,
  });
}

/** The checks of a description that `openMesh` relies on (the decoder makes them too). */
export function checkDescription(desc: JobDescription, refused: RefusedHosts): RankIdentity {
  const { size, rank } = desc;
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw descriptionRefused('rank', `rank ${rank} of size ${size} is not a rank of the job`);
  }
  if (desc.hosts.length !== size) {
    throw descriptionRefused('hosts', `the host list has ${desc.hosts.length} entries for ${size} ranks`);
  }
  desc.hosts.forEach((h, i) => {
    if (!Number.isInteger(h.port) || h.port < 1 || h.port > 65535) {
      throw descriptionRefused(`hosts[${i}].port`, `the port of rank ${i} is ${h.port}; the launcher assigns 1..65535`);
    }
    refused.assertAllowed(h.name, `host of rank ${i}`);
  });
  let own: RankIdentity;
  try {
    own = certificateIdentity(Buffer.from(desc.rankCert).toString('latin1'));
  } catch (e) {
    throw descriptionRefused('rankCert', `the rank certificate cannot be read: ${(e as Error).message}`);
  }
  if (own.jobId !== jobIdHex(desc.jobId) || own.rank !== rank) {
    throw descriptionRefused(
      'rankCert',
      `the rank certificate names rank ${own.rank} of job ${own.jobId}, not rank ${rank} of job ${jobIdHex(desc.jobId)}`,
    );
  }
  return own;
}

export function peerCertificateRefused(
  rule: string,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return sperliError(
    SperliCode.frame,
    'peer-certificate',
    `connection refused: ${message}`,
    { ...details, rule },
    cause,
  );
}

export function handshakeRefused(peer: number | undefined, cause: unknown): PlexusError {
  const who = peer === undefined ? 'a connecting peer' : `rank ${peer}`;
  const why = cause instanceof Error ? cause.message : String(cause);
  return sperliError(
    SperliCode.frame,
    'tls-handshake',
    `the TLS 1.3 handshake with ${who} failed (${why}); both sides need TLS 1.3 and a certificate of the job CA`,
    {
      ...(peer === undefined ? {} : { peer }),
      tlsCode: isPlexusError(cause) ? null : ((cause as NodeJS.ErrnoException)?.code ?? null),
    },
    cause,
  );
}

/**
 * The mesh's identity policy for the job's TLS endpoint (ts/net/tls-endpoint.ts): a rank
 * certificate's common name names its job and rank; a connection without one is refused with
 * H1610 `peer-certificate` (rule `name`).
 */
export const rankIdentityPolicy: IdentityPolicy<RankIdentity> = {
  kind: 'rank',
  identify: (cert) => certificateIdentity(cert),
  refuse: (refused, cause) =>
    refused === 'unauthorized'
      ? peerCertificateRefused('name', 'the peer presented no certificate of the job CA')
      : peerCertificateRefused(
          'name',
          `the peer's certificate names no rank: ${cause instanceof Error ? cause.message : String(cause)}`,
          {},
          cause,
        ),
};

/**
 * The rank of a peer that connected to rank `rank` of job `jobHex` with the certificate
 * identity `id`: a lower rank of the same job that `isLinked` does not know yet. Throws the
 * refusal otherwise.
 */
export function acceptedPeerRank(
  id: RankIdentity,
  jobHex: string,
  rank: number,
  isLinked: (peer: number) => boolean,
): number {
  if (id.jobId !== jobHex) {
    throw peerCertificateRefused('job-id', `the peer is of job ${id.jobId}, not ${jobHex}`, { jobId: id.jobId });
  }
  if (id.rank >= rank || isLinked(id.rank)) {
    const why = id.rank >= rank ? `rank ${rank} connects to it, not the other way` : 'it is already connected';
    throw peerCertificateRefused('rank', `rank ${id.rank} is not expected here: ${why}`, { rank: id.rank });
  }
  return id.rank;
}

/**
 * Checks that the server dialled as rank `peer` of job `jobHex`, whose certificate names `id`,
 * is that rank; throws the refusal otherwise.
 */
export function checkDialledPeer(id: RankIdentity, jobHex: string, peer: number): void {
  if (id.jobId !== jobHex) {
    throw peerCertificateRefused('job-id', `rank ${peer}'s server is of job ${id.jobId}, not ${jobHex}`, {
      peer,
      jobId: id.jobId,
    });
  }
  if (id.rank !== peer) {
    throw peerCertificateRefused('rank', `the server dialled as rank ${peer} is rank ${id.rank}`, {
      peer,
      rank: id.rank,
    });
  }
}
