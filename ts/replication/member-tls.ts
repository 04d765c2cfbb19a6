/**
 * Member certificates of a replicated log (docs/replication.md, "Member identity"). Every
 * Raft and catch-up connection between members is mutual TLS 1.3 from one CA. A member's
 * certificate names its Raft id in exactly one subjectAltName URI, `<uriPrefix><id>`: the
 * transport takes the peer's id from it during the handshake, and a greeting that claims
 * another id is refused. The URI scheme is the product's (`MemberIdentity`): Chronacta names
 * its members `urn:plexus:chronacta:member:<id>` (ts/chronacta/member-tls.ts), and keeps
 * where the files live; this module only issues, checks and reads certificates.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import type { PeerCertificate } from 'node:tls';
import { issueCertificate } from '../net/ca.js';
import type { RaftTlsOptions } from '../raft-io/tcp-transport.js';
import { ReplicationErrorCode, replicationError } from './errors.js';

/** How a product names its members in certificates. */
export interface MemberIdentity {
  /** The subjectAltName URI of member `id` is this prefix followed by the id, e.g. `urn:plexus:chronacta:member:`. */
  readonly uriPrefix: string;
  /** The certificate's common name for member `id`. */
  readonly commonName: (id: number) => string;
}

export interface PemPair {
  readonly cert: string;
  readonly key: string;
}

/** The PEM texts a member's transport needs: the CA certificate, its certificate and its key. */
export interface MemberTlsFiles {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

const MEMBER_ID = /^[1-9][0-9]{0,15}$/;
const URI_PREFIX = /^[a-z][a-z0-9+.-]*:[\x21-\x7e]*$/i;

/** A member identity scheme; PLX_REPLICATION_BAD_CONFIG for a prefix that is not the start of a URI. */
export function memberIdentity(uriPrefix: string, commonName: (id: number) => string = (id) => `member-${id}`) {
  if (!URI_PREFIX.test(uriPrefix) || uriPrefix.includes(',')) {
    throw replicationError(
      ReplicationErrorCode.BAD_CONFIG,
      `member URI prefix "${uriPrefix}" is not the start of a URI`,
      {
        uriPrefix,
      },
    );
  }
  return { uriPrefix, commonName } satisfies MemberIdentity;
}

export function memberUri(identity: MemberIdentity, id: number): string {
  return `${identity.uriPrefix}${id}`;
}

/**
 * The member id a certificate names, from its subjectAltName as node:tls reports it
 * (`"URI:<prefix>2"`): exactly one member URI with a whole id from 1, else undefined.
 */
export function memberOfCertificate(
  identity: MemberIdentity,
  cert: Pick<PeerCertificate, 'subjectaltname'> | undefined,
): number | undefined {
  const san = cert?.subjectaltname;
  if (typeof san !== 'string') return undefined;
  const prefix = identity.uriPrefix;
  const ids = san
    .split(', ')
    .filter((e) => e.startsWith(`URI:${prefix}`))
    .map((e) => e.slice(4 + prefix.length));
  if (ids.length !== 1 || !MEMBER_ID.test(ids[0] as string)) return undefined;
  const id = Number(ids[0]);
  return Number.isSafeInteger(id) ? id : undefined;
}

/** Issues member `id`'s certificate (Ed25519, valid 1 year by default) from the CA. */
export function issueMemberCertificate(
  identity: MemberIdentity,
  ca: PemPair,
  id: number,
  opts: { notAfter?: Date } = {},
): Promise<PemPair> {
  if (!Number.isSafeInteger(id) || id < 1) {
    throw replicationError(ReplicationErrorCode.BAD_CONFIG, `member id ${id} must be a whole number from 1`, { id });
  }
  return issueCertificate(
    ca,
    { commonName: identity.commonName(id), altNames: [{ type: 'url', value: memberUri(identity, id) }] },
    opts,
  );
}

/**
 * Checks that `cert` is signed by `ca`, valid now, names member `id` and belongs to `key`;
 * PLX_REPLICATION_BAD_CERTIFICATE saying what is wrong otherwise.
 */
export function checkMemberCertificate(identity: MemberIdentity, files: MemberTlsFiles, id: number, where = ''): void {
  const bad = (what: string, cause?: unknown) =>
    replicationError(
      ReplicationErrorCode.BAD_CERTIFICATE,
      `the member certificate${where ? ` ${where}` : ''} ${what}`,
      { id },
      cause,
    );
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
  const named = memberOfCertificate(identity, { subjectaltname: cert.subjectAltName ?? '' });
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
 * The Raft transport's TLS options of member `id`: the PEM texts, and the peer-id check that
 * binds a connection to the member its certificate names. Refuses a certificate that fails
 * `checkMemberCertificate` (PLX_REPLICATION_BAD_CERTIFICATE).
 */
export function memberTlsOptions(
  identity: MemberIdentity,
  files: MemberTlsFiles,
  id: number,
  where = '',
): RaftTlsOptions {
  checkMemberCertificate(identity, files, id, where);
  return { ...files, peerId: (cert) => memberOfCertificate(identity, cert) };
}
