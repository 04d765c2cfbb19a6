/**
 * The certificates of Chronacta cluster members (docs/chronacta-ha.md, "Member
 * certificates"). Every Raft and catch-up connection between members is mutual TLS 1.3
 * from one cluster CA (Ed25519, made by `plexus chronacta cluster init` with the certificate
 * code of ts/net/ca.ts). A member's certificate names its Raft id in exactly one
 * subjectAltName URI, `urn:plexus:chronacta:member:<id>`: Chronacta's identity scheme for
 * the replicated log's member certificates (ts/replication/member-tls.ts).
 *
 * Files: the CA at the cluster root (`ca.pem`, `ca-key.pem`: the key signs new members'
 * certificates and stays with the operator), and in each member's data directory
 * `cluster/tls/ca.pem`, `cluster/tls/member.pem` and `cluster/tls/member-key.pem`.
 */
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { PeerCertificate } from 'node:tls';
import { createCa } from '../net/ca.js';
import type { RaftTlsOptions } from '../raft-io/tcp-transport.js';
import {
  checkMemberCertificate as checkReplicaCertificate,
  issueMemberCertificate as issueReplicaCertificate,
  type MemberIdentity,
  type MemberTlsFiles,
  memberTlsOptions,
  type PemPair,
  memberOfCertificate as replicaOfCertificate,
} from '../replication/member-tls.js';
import { replaceFile } from '../storage/files.js';
import { HaErrorCode, haError, withHaCodes } from './ha-errors.js';

export type { PemPair } from '../replication/member-tls.js';

/** The subjectAltName URI that names member `id`: `urn:plexus:chronacta:member:<id>`. */
export const MEMBER_URI_PREFIX = 'urn:plexus:chronacta:member:';

/** How Chronacta names its members in certificates. */
export const CHRONACTA_MEMBER_IDENTITY: MemberIdentity = {
  uriPrefix: MEMBER_URI_PREFIX,
  commonName: (id) => `chronacta-member-${id}`,
};

/** The CA files at a cluster root (what `cluster init` writes, what `cluster join-files --ca-dir` reads). */
export function caPaths(dir: string): { readonly cert: string; readonly key: string } {
  return { cert: join(dir, 'ca.pem'), key: join(dir, 'ca-key.pem') };
}

/** A member's certificate files in its data directory. */
export function memberTlsPaths(dataDir: string): { dir: string; ca: string; cert: string; key: string } {
  const dir = join(dataDir, 'cluster', 'tls');
  return { dir, ca: join(dir, 'ca.pem'), cert: join(dir, 'member.pem'), key: join(dir, 'member-key.pem') };
}

export function memberUri(id: number): string {
  return `${MEMBER_URI_PREFIX}${id}`;
}

/**
 * The member id a certificate names, from its subjectAltName as node:tls reports it
 * (`"URI:urn:plexus:chronacta:member:2"`): exactly one member URI with a whole id from 1,
 * else undefined.
 */
export function memberOfCertificate(cert: Pick<PeerCertificate, 'subjectaltname'> | undefined): number | undefined {
  return replicaOfCertificate(CHRONACTA_MEMBER_IDENTITY, cert);
}

/** Makes a cluster's member CA (Ed25519, valid 10 years). */
export function createMemberCa(clusterId: string): Promise<PemPair> {
  return createCa(`plexus-chronacta-ca ${clusterId}`.slice(0, 64));
}

/** Issues member `id`'s certificate (Ed25519, valid 1 year by default) from the cluster CA. */
export const issueMemberCertificate: (ca: PemPair, id: number, opts?: { notAfter?: Date }) => Promise<PemPair> =
  withHaCodes((ca: PemPair, id: number, opts: { notAfter?: Date } = {}) =>
    issueReplicaCertificate(CHRONACTA_MEMBER_IDENTITY, ca, id, opts),
  );

function writeFileSynced(dir: string, name: string, text: string, mode: number): Promise<void> {
  return replaceFile(dir, name, Buffer.from(text), true, mode);
}

/** Writes the cluster CA into `dir` (`ca.pem`, and `ca-key.pem` readable by its owner only). */
export async function writeCa(dir: string, ca: PemPair): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFileSynced(dir, 'ca.pem', ca.cert, 0o644);
  await writeFileSynced(dir, 'ca-key.pem', ca.key, 0o600);
}

/** Reads the cluster CA from `dir`; PLX_CHRONACTA_HA_NO_CERTIFICATE when a file is missing. */
export async function readCa(dir: string): Promise<PemPair> {
  const p = caPaths(dir);
  return { cert: await readPem(p.cert, 'the cluster CA certificate'), key: await readPem(p.key, 'the cluster CA key') };
}

/** Writes member certificate files into a data directory (`cluster/tls/`, the key owner-only). */
export async function writeMemberTls(dataDir: string, files: MemberTlsFiles): Promise<void> {
  const p = memberTlsPaths(dataDir);
  await mkdir(p.dir, { recursive: true, mode: 0o700 });
  await writeFileSynced(p.dir, 'ca.pem', files.ca, 0o644);
  await writeFileSynced(p.dir, 'member.pem', files.cert, 0o644);
  await writeFileSynced(p.dir, 'member-key.pem', files.key, 0o600);
}

/** Issues member `id`'s certificate from `ca` and writes it, with the CA certificate, into `dataDir`. */
export async function issueMemberFiles(dataDir: string, ca: PemPair, id: number): Promise<void> {
  const creds = await issueMemberCertificate(ca, id);
  await writeMemberTls(dataDir, { ca: ca.cert, ...creds });
}

async function readPem(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw haError(
      HaErrorCode.NO_CERTIFICATE,
      `cannot read ${what} ${file} (${(e as { code?: string }).code ?? (e as Error).message}): make the member's certificate with \`plexus chronacta cluster certs\` (docs/chronacta-ha.md, "Member certificates")`,
      { file },
      e,
    );
  }
}

/**
 * Checks that `cert` is signed by `ca`, valid now, names member `id` and belongs to `key`;
 * PLX_CHRONACTA_HA_BAD_CERTIFICATE saying what is wrong otherwise.
 */
export const checkMemberCertificate: (files: MemberTlsFiles, id: number, where?: string) => void = withHaCodes(
  (files: MemberTlsFiles, id: number, where = '') =>
    checkReplicaCertificate(CHRONACTA_MEMBER_IDENTITY, files, id, where),
);

/**
 * The Raft transport's TLS options of member `id` from its data directory: PEM texts, and
 * the peer-id check that binds a connection to the member its certificate names. Refuses
 * missing files (PLX_CHRONACTA_HA_NO_CERTIFICATE) and a certificate that fails
 * `checkMemberCertificate` (PLX_CHRONACTA_HA_BAD_CERTIFICATE).
 */
export async function loadMemberTls(dataDir: string, id: number): Promise<RaftTlsOptions> {
  const p = memberTlsPaths(dataDir);
  const files = {
    ca: await readPem(p.ca, 'the cluster CA certificate'),
    cert: await readPem(p.cert, 'the member certificate'),
    key: await readPem(p.key, 'the member key'),
  };
  return withHaCodes(memberTlsOptions)(CHRONACTA_MEMBER_IDENTITY, files, id, `in ${p.cert}`);
}
