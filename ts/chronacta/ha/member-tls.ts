/**
 * The certificates of Chronacta cluster members (docs/chronacta-ha.md, "Member
 * certificates"). Every Raft and catch-up connection between members is mutual TLS 1.3
 * from one cluster CA (Ed25519, made by `plexus chronacta cluster init` with the certificate
 * code of ts/net/ca.ts). A member's certificate names its Raft id in exactly one
 * subjectAltName URI, `urn:plexus:chronacta:member:<id>`: the transport takes the peer's id
 * from it during the handshake, and a greeting that claims another id is refused.
 *
 * Files: the CA at the cluster root (`ca.pem`, `ca-key.pem`: the key signs new members'
 * certificates and stays with the operator), and in each member's data directory
 * `cluster/tls/ca.pem`, `cluster/tls/member.pem` and `cluster/tls/member-key.pem`.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { PeerCertificate } from 'node:tls';
import { createCa, issueCertificate } from '../../net/ca.js';
import { sanUriPolicy } from '../../net/tls-endpoint.js';
import type { RaftTlsOptions } from '../../raft-io/tcp-transport.js';
import { replaceFile } from '../../storage/files.js';
import { HaErrorCode, haError } from './errors.js';

/** The subjectAltName URI that names member `id`: `urn:plexus:chronacta:member:<id>`. */
export const MEMBER_URI_PREFIX = 'urn:plexus:chronacta:member:';
const MEMBER_ID = /^[1-9][0-9]{0,15}$/;

export interface PemPair {
  readonly cert: string;
  readonly key: string;
}

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
  return memberIdentityPolicy.identify(cert as PeerCertificate);
}

/** The Raft transport's identity policy: one subjectAltName URI `urn:plexus:chronacta:member:<id>`. */
export const memberIdentityPolicy = sanUriPolicy('member', MEMBER_URI_PREFIX, (rest) => {
  if (!MEMBER_ID.test(rest)) return undefined;
  const id = Number(rest);
  return Number.isSafeInteger(id) ? id : undefined;
});

/** Makes a cluster's member CA (Ed25519, valid 10 years). */
export function createMemberCa(clusterId: string): Promise<PemPair> {
  return createCa(`plexus-chronacta-ca ${clusterId}`.slice(0, 64));
}

/** Issues member `id`'s certificate (Ed25519, valid 1 year by default) from the cluster CA. */
export function issueMemberCertificate(ca: PemPair, id: number, opts: { notAfter?: Date } = {}): Promise<PemPair> {
  if (!Number.isSafeInteger(id) || id < 1) {
    throw haError(HaErrorCode.BAD_CONFIG, `member id ${id} must be a whole number from 1`, { id });
  }
  return issueCertificate(
    ca,
    { commonName: `chronacta-member-${id}`, altNames: [{ type: 'url', value: memberUri(id) }] },
    opts,
  );
}

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
export async function writeMemberTls(dataDir: string, files: { ca: string; cert: string; key: string }): Promise<void> {
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
export function checkMemberCertificate(files: { ca: string; cert: string; key: string }, id: number, where = ''): void {
  const bad = (what: string, cause?: unknown) =>
    haError(HaErrorCode.BAD_CERTIFICATE, `the member certificate${where ? ` ${where}` : ''} ${what}`, { id }, cause);
  let cert: X509Certificate;
  let ca: X509Certificate;
  try {
    cert = new X509Certificate(files.cert);
    ca = new X509Certificate(files.ca);
  } catch (e) {
    throw bad('or the CA certificate is not a PEM certificate', e);
  }
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) throw bad('is not signed by the cluster CA');
  const now = Date.now();
  if (Date.parse(cert.validFrom) > now + 5 * 60_000 || Date.parse(cert.validTo) < now) {
    throw bad(`is not valid now (${cert.validFrom} to ${cert.validTo})`);
  }
  const named = memberOfCertificate({ subjectaltname: cert.subjectAltName ?? '' });
  if (named !== id) {
    throw bad(named === undefined ? `names no member (expected member ${id})` : `names member ${named}, not ${id}`);
  }
  let matches = false;
  try {
    matches = cert.checkPrivateKey(createPrivateKey(files.key));
  } catch (e) {
    throw bad('key is not a PEM private key', e);
  }
  if (!matches) throw bad('does not match its key');
}

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
  checkMemberCertificate(files, id, `in ${p.cert}`);
  return { ...files, peerId: memberOfCertificate };
}
