/**
 * X.509 for SPERLI: the job CA (an Ed25519 key and its self-signed CA certificate) and one
 * Ed25519 certificate per rank signed by it, as PEM texts that `node:tls` takes directly
 * (`key`, `cert`, `ca`); and the checks a rank makes on its peer's certificate: the subject
 * common name `sperli-<job id>-<rank>` and the host in the subjectAltName.
 *
 * Certificates are built with `@peculiar/x509` (ASN.1 and X.509 structures) and signed by
 * Node's WebCrypto (Ed25519). `@peculiar/x509` needs a Reflect metadata polyfill loaded before
 * it, hence the first import. docs/crypto.md describes the certificates.
 */
import 'reflect-metadata';
import { createPrivateKey, createPublicKey, randomBytes, webcrypto } from 'node:crypto';
import type { PeerCertificate } from 'node:tls';
import * as x509 from '@peculiar/x509';
import { PlexusError } from '../core/errors.js';
import { isDnsLabel } from '../core/names.js';

/** The largest number of ranks in a job (SPERLI version 1), so ranks are 0 ..= 4095. */
export const MAX_RANKS = 4096;
/** The longest rank common name: `sperli-` + 32 hex digits + `-` + 4 digits. */
export const MAX_COMMON_NAME_LENGTH = 44;

const ED25519 = { name: 'Ed25519' } as const;
const RANK_CN = /^sperli-([0-9a-f]{32})-(0|[1-9][0-9]{0,3})$/;
const JOB_HEX = /^[0-9a-f]{32}$/;
const IPV4_OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const DOTTED_IPV4 = new RegExp(`^${IPV4_OCTET}(?:\\.${IPV4_OCTET}){3}$`);
/** Allowance for clocks that run slightly behind the launcher's. */
const CLOCK_SKEW_MS = 5 * 60 * 1000;
/** Default lifetime of the certificates of a job. */
const DEFAULT_LIFETIME_MS = 30 * 24 * 60 * 60 * 1000;

/** A job id: 16 bytes, or the same as 32 lower-case hex digits. */
export type JobId = Uint8Array | string;

/**
 * A certificate to read: PEM text, DER bytes, or anything with the DER in `raw` (what
 * `tlsSocket.getPeerCertificate()` and `node:crypto`'s `X509Certificate` give).
 */
export type CertificateInput = string | Uint8Array | { raw: Uint8Array };

/** The job CA: its certificate and its Ed25519 key (PKCS #8), both PEM. */
export interface JobCa {
  /** The self-signed CA certificate: `ca` for `node:tls`. */
  cert: string;
  /** The CA's private key, PKCS #8 PEM. Stays with the launcher. */
  key: string;
}

/** A rank's credentials: its certificate and Ed25519 key, both PEM. */
export interface RankCredentials {
  /** The rank certificate: `cert` for `node:tls`. */
  cert: string;
  /** The rank's private key, PKCS #8 PEM: `key` for `node:tls`. */
  key: string;
  /** The subject common name, `sperli-<job id>-<rank>`. */
  commonName: string;
}

/** The job and rank a rank certificate names. */
export interface RankIdentity {
  /** The job id as 32 lower-case hex digits. */
  jobId: string;
  rank: number;
}

/** Validity of the certificates; by default from 5 minutes ago to 30 days from now. */
export interface ValidityOptions {
  notBefore?: Date;
  notAfter?: Date;
}

export interface CreateJobCaOptions extends ValidityOptions {
  jobId: JobId;
}

export interface IssueRankOptions extends ValidityOptions {
  jobId: JobId;
  rank: number;
  /** The rank's host as in the host list: a DNS name or a dotted IPv4 address. */
  host: string;
}

// ---------------------------------------------------------------------------------------------
// Names

/** The job id as 32 lower-case hex digits; refuses anything but 16 bytes or that text. */
export function jobIdHex(jobId: JobId): string {
  if (jobId instanceof Uint8Array && jobId.length === 16) return Buffer.from(jobId).toString('hex');
  if (typeof jobId === 'string' && JOB_HEX.test(jobId)) return jobId;
  throw new PlexusError('PLX_CRYPTO_BAD_NAME', 'a job id must be 16 bytes or 32 lower-case hex digits', {
    jobId: typeof jobId === 'string' ? jobId : null,
  });
}

function _rankArg(rank: unknown): number {
  if (typeof rank === 'number' && Number.isInteger(rank) && rank >= 0 && rank < MAX_RANKS) return rank;
  throw new PlexusError(
    'PLX_CRYPTO_BAD_NAME',
    `a rank must be an integer from 0 to ${MAX_RANKS - 1}, got ${String(rank)}`,
    {
      rank,
    },
  );
}

/** The subject common name of rank `rank` of job `jobId`: `sperli-<32 hex>-<rank>`. */
export function rankCommonName(jobId: JobId, rank: number): string {
  const cn = `sperli-${jobIdHex(jobId)}-${_rankArg(rank)}`;
  // Ranks below 4096 keep the name within 44 bytes; the check states the rule.
  if (cn.length > MAX_COMMON_NAME_LENGTH) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_NAME',
      `the common name ${cn} is longer than ${MAX_COMMON_NAME_LENGTH} bytes`,
      {
        commonName: cn,
      },
    );
  }
  return cn;
}

/**
 * The job and rank of a rank common name. Refuses (PLX_CRYPTO_BAD_NAME) anything that is not
 * exactly `sperli-<32 lower-case hex>-<rank>` with the rank in canonical decimal below 4096.
 */
export function parseRankCommonName(commonName: string): RankIdentity {
  const m =
    typeof commonName === 'string' && commonName.length <= MAX_COMMON_NAME_LENGTH ? RANK_CN.exec(commonName) : null;
  const rank = m ? Number(m[2]) : Number.NaN;
  if (!m || !(rank < MAX_RANKS)) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_NAME',
      `the common name ${JSON.stringify(commonName)} is not a SPERLI rank name (sperli-<32 lower-case hex digits>-<rank below ${MAX_RANKS}>)`,
      { commonName },
    );
  }
  return { jobId: m[1]!, rank };
}

function _caCommonName(jobId: JobId): string {
  return `sperli-ca-${jobIdHex(jobId)}`;
}

// ---------------------------------------------------------------------------------------------
// Hosts

/** Whether `host` is an IPv4 address in dotted decimal form (four octets, no leading zeros). */
export function isDottedIPv4(host: string): boolean {
  return DOTTED_IPV4.test(host);
}

/**
 * A host name as the host list carries it, in lower case without a trailing dot; or undefined
 * when `host` is neither a DNS name (letters, digits, hyphens; labels of 1 to 63; at most 253
 * bytes; a last label that is not all digits) nor a dotted IPv4 address.
 */
export function normalizeHost(host: string): string | undefined {
  if (typeof host !== 'string') return undefined;
  if (isDottedIPv4(host)) return host;
  const name = (host.endsWith('.') ? host.slice(0, -1) : host).replace(/[A-Z]/g, (c) => c.toLowerCase());
  if (name.length === 0 || name.length > 253) return undefined;
  const labels = name.split('.');
  if (!labels.every(isDnsLabel)) return undefined;
  if (/^[0-9]+$/.test(labels[labels.length - 1]!)) return undefined;
  return name;
}

function _hostArg(host: string): { kind: 'ip' | 'dns'; value: string } {
  const value = normalizeHost(host);
  if (value === undefined) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_HOST',
      `the host ${JSON.stringify(host)} is neither a DNS name nor a dotted IPv4 address`,
      { host },
    );
  }
  return { kind: isDottedIPv4(value) ? 'ip' : 'dns', value };
}

// ---------------------------------------------------------------------------------------------
// Making certificates

const _crypto = webcrypto;
type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

function _pem(label: string, der: ArrayBuffer | Uint8Array): string {
  const b64 = Buffer.from(der instanceof Uint8Array ? der : new Uint8Array(der)).toString('base64');
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

function _serial(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x01; // positive and exactly 16 bytes
  return b.toString('hex');
}

function _validity(opts: ValidityOptions): { notBefore: Date; notAfter: Date } {
  const now = Date.now();
  const notBefore = opts.notBefore ?? new Date(now - CLOCK_SKEW_MS);
  const notAfter = opts.notAfter ?? new Date(now + DEFAULT_LIFETIME_MS);
  if (!(notBefore.getTime() < notAfter.getTime())) {
    throw new PlexusError('PLX_CRYPTO_BAD_VALIDITY', 'notBefore must be earlier than notAfter', {
      notBefore: notBefore.toISOString(),
      notAfter: notAfter.toISOString(),
    });
  }
  return { notBefore, notAfter };
}

async function _generateKeys(): Promise<CryptoKeyPair> {
  return (await _crypto.subtle.generateKey(ED25519, true, ['sign', 'verify'])) as CryptoKeyPair;
}

async function _exportKey(key: CryptoKey): Promise<string> {
  return _pem('PRIVATE KEY', await _crypto.subtle.exportKey('pkcs8', key));
}

/** Makes a job CA: a fresh Ed25519 key and a self-signed CA certificate for job `jobId`. */
export async function createJobCa(opts: CreateJobCaOptions): Promise<JobCa> {
  const cn = _caCommonName(opts.jobId);
  const validity = _validity(opts);
  const keys = await _generateKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: _serial(),
      name: [{ CN: [cn] }],
      ...validity,
      signingAlgorithm: ED25519,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, _crypto),
      ],
    },
    _crypto,
  );
  return { cert: cert.toString('pem'), key: await _exportKey(keys.privateKey) };
}

/**
 * Issues the certificate of rank `rank` of job `jobId`, signed by the job CA: subject CN
 * `sperli-<job id>-<rank>`, the host in the subjectAltName (an IP address when it is a dotted
 * IPv4 address, a DNS name otherwise), usable as TLS server and client. A fresh Ed25519 key.
 */
export async function issueRankCertificate(ca: JobCa, opts: IssueRankOptions): Promise<RankCredentials> {
  const commonName = rankCommonName(opts.jobId, opts.rank);
  const host = _hostArg(opts.host);
  const validity = _validity(opts);
  const caCert = _parse(ca.cert);
  const caNames = caCert.subjectName.getField('CN');
  if (caNames.length !== 1 || caNames[0] !== _caCommonName(opts.jobId)) {
    throw new PlexusError('PLX_CRYPTO_BAD_CERT', `the CA certificate is not the CA of job ${jobIdHex(opts.jobId)}`, {
      subject: caCert.subject,
    });
  }
  const signingKey = await _importCaKey(ca.key, caCert);
  const keys = await _generateKeys();
  const cert = await x509.X509CertificateGenerator.create(
    {
      serialNumber: _serial(),
      subject: [{ CN: [commonName] }],
      issuer: caCert.subjectName,
      ...validity,
      signingAlgorithm: ED25519,
      publicKey: keys.publicKey,
      signingKey,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], false),
        new x509.SubjectAlternativeNameExtension([{ type: host.kind, value: host.value }], false),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, _crypto),
        await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey, false, _crypto),
      ],
    },
    _crypto,
  );
  return { cert: cert.toString('pem'), key: await _exportKey(keys.privateKey), commonName };
}

async function _importCaKey(pem: string, caCert: x509.X509Certificate): Promise<CryptoKey> {
  let der: Buffer;
  try {
    const key = createPrivateKey(pem);
    if (key.asymmetricKeyType !== 'ed25519') throw new Error(`a ${key.asymmetricKeyType ?? 'secret'} key`);
    const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
    if (!spki.equals(Buffer.from(caCert.publicKey.rawData))) throw new Error('not the key of the CA certificate');
    der = key.export({ format: 'der', type: 'pkcs8' });
  } catch (e) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_KEY',
      `the CA key must be the Ed25519 PKCS #8 key of the CA certificate: ${(e as Error).message}`,
      {},
      { cause: e },
    );
  }
  return _crypto.subtle.importKey('pkcs8', der, ED25519, false, ['sign']);
}

// ---------------------------------------------------------------------------------------------
// Reading certificates

function _parse(cert: CertificateInput): x509.X509Certificate {
  try {
    if (typeof cert === 'string') return new x509.X509Certificate(cert);
    const der = cert instanceof Uint8Array ? cert : cert?.raw;
    if (!(der instanceof Uint8Array)) throw new Error('no DER bytes');
    return new x509.X509Certificate(Uint8Array.from(der));
  } catch (e) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_CERT',
      `the certificate cannot be read: ${(e as Error).message}`,
      {},
      { cause: e },
    );
  }
}

/**
 * The job and rank named by a rank certificate's subject common name. Refuses
 * (PLX_CRYPTO_BAD_CERT) a certificate that cannot be read or has no or several common names,
 * and (PLX_CRYPTO_BAD_NAME) a common name that is not a rank name.
 */
export function certificateIdentity(cert: CertificateInput): RankIdentity {
  const names = _parse(cert).subjectName.getField('CN');
  if (names.length !== 1) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_CERT',
      `a rank certificate has exactly one common name, this one has ${names.length}`,
      {
        commonNames: names,
      },
    );
  }
  return parseRankCommonName(names[0]!);
}

/**
 * Whether the subjectAltName of `cert` names `host`. A dotted IPv4 host is matched only
 * against IP address entries, any other host only against DNS name entries (exactly, in any
 * letter case, a trailing dot ignored; no wildcards, never the common name).
 */
export function certificateHasHost(cert: CertificateInput, host: string): boolean {
  const want = normalizeHost(host);
  if (want === undefined) return false;
  const kind = isDottedIPv4(want) ? 'ip' : 'dns';
  const san = _parse(cert).getExtension(x509.SubjectAlternativeNameExtension);
  if (!san) return false;
  return san.names.items.some((n) => {
    if (n.type !== kind) return false;
    if (kind === 'ip') return n.value === want;
    return normalizeHost(n.value) === want;
  });
}

/**
 * A `checkServerIdentity` for `tls.connect` that accepts the server only when its
 * certificate's subjectAltName names `expectedHost` (the host list entry being dialled), by
 * the rules of `certificateHasHost`. The chain is checked by `node:tls` against `ca` before.
 */
export function serverIdentityCheck(
  expectedHost: string,
): (hostname: string, cert: PeerCertificate) => Error | undefined {
  return (_hostname, cert) => {
    try {
      if (certificateHasHost(cert, expectedHost)) return undefined;
    } catch (e) {
      return e as Error;
    }
    return new PlexusError(
      'PLX_CRYPTO_HOST_MISMATCH',
      `the peer's certificate does not name the host ${expectedHost} in its subjectAltName`,
      { host: expectedHost },
    );
  };
}
