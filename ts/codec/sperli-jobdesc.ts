/**
 * The SPERLI job description (docs/sperli.md, "Job description"): the bytes the launcher
 * writes to a rank's standard input as one line of lower-case hex digits and a line feed.
 *
 *   0 [16] job id | 16 u32 size | 20 u32 rank | 24 u32 incarnation
 *   28 host list: `size` entries of u8 name length, name, u16 port
 *   u32 + [n] job CA certificate | u32 + [n] rank certificate | u32 + [n] rank key (PEM)
 *   u16 + [n] join token | u16 + [n] job secret key (rank 0 only) | [1344] job public key
 *
 * Every refusal is H1610 with `details.reason` "job-description" and `details.field`
 * naming the field. Whether a host is refused (SPERLI_REFUSED_HOSTS, the reserved names,
 * a deny file) is decided by the injected `isRefused`.
 */
import { isPlexusError } from '../core/errors.js';
import {
  _bytes,
  _copy,
  _isHostName,
  _latin1,
  _latin1Bytes,
  _reader,
  _uint,
  _writer,
  SperliCode,
  sperliError,
} from './sperli-errors.js';
import { decodeJoinToken, MAX_JOIN_TOKEN, PUBLIC_KEY_LENGTH } from './sperli-payloads.js';

export const MAX_JOB_SIZE = 4096;
export const MAX_INCARNATION = 0x7fff_ffff;
/** The largest PEM text of a job description. */
export const MAX_PEM = 16384;
/** The length of the job's CompositeSig secret key (rank 0 only). */
export const SECRET_KEY_LENGTH = 64;

export interface HostEntry {
  /** A DNS name or a dotted IPv4 address (printable ASCII, 1..253 bytes). */
  readonly name: string;
  readonly port: number;
}

export interface JobDescription {
  readonly jobId: Uint8Array;
  readonly size: number;
  readonly rank: number;
  readonly incarnation: number;
  /** One entry per rank, in rank order. */
  readonly hosts: readonly HostEntry[];
  /** PEM text of the job CA certificate. */
  readonly caCert: Uint8Array;
  /** PEM text of this rank's certificate. */
  readonly rankCert: Uint8Array;
  /** PEM text (PKCS #8) of this rank's Ed25519 key. Held in memory only. */
  readonly rankKey: Uint8Array;
  /** This rank's own join token. */
  readonly joinToken: Uint8Array;
  /** The job's CompositeSig secret key: rank 0 only, else null. */
  readonly jobSecretKey: Uint8Array | null;
  /** The job's CompositeSig public key (1344 bytes). */
  readonly jobPublicKey: Uint8Array;
}

export interface JobDescriptionOptions {
  /** Whether a host must never run a rank (provided by the refused-hosts module). */
  readonly isRefused: (host: string) => boolean;
}

function refused(field: string, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return sperliError(
    SperliCode.frame,
    'job-description',
    `job description refused: ${message}`,
    { ...details, field },
    cause,
  );
}

function checkSize(size: number): void {
  if (size < 1 || size > MAX_JOB_SIZE) {
    throw refused('size', `size ${size} is outside 1..${MAX_JOB_SIZE}`, { size });
  }
}

function checkRank(rank: number, size: number): void {
  if (rank >= size) throw refused('rank', `rank ${rank} is not below the size ${size}`, { rank });
}

function checkIncarnation(incarnation: number): void {
  if (incarnation < 1 || incarnation > MAX_INCARNATION) {
    throw refused('incarnation', `incarnation ${incarnation} is outside 1..${MAX_INCARNATION}`, { incarnation });
  }
}

function checkHost(i: number, nameBytes: Uint8Array, opts: Partial<JobDescriptionOptions>): string {
  const field = `hosts[${i}].name`;
  if (nameBytes.length === 0) throw refused(field, `the host of rank ${i} is empty`);
  const name = _latin1(nameBytes);
  if (!_isHostName(name)) {
    throw refused(
      field,
      `the host of rank ${i} is not a DNS name (labels of letters, digits and hyphens, 1..63 bytes each, separated by dots) or a dotted IPv4 address`,
    );
  }
  if (opts.isRefused?.(name)) {
    throw refused(field, `the host of rank ${i}, "${name}", is a refused host and never runs a rank`, { host: name });
  }
  return name;
}

function checkPort(i: number, port: number): void {
  if (port === 0) throw refused(`hosts[${i}].port`, `the port of rank ${i} is 0`);
}

function checkSecretKey(rank: number, n: number): void {
  if (rank !== 0 && n !== 0) {
    throw refused('jobSecretKey', `the job secret key is present on rank ${rank}; only rank 0 holds it`);
  }
  if (rank === 0 && n !== SECRET_KEY_LENGTH) {
    throw refused('jobSecretKey', `rank 0's job secret key has ${n} bytes; it must have exactly ${SECRET_KEY_LENGTH}`);
  }
}

function checkBound(field: string, n: number, max: number): void {
  if (n > max) throw refused(field, `${field} has ${n} bytes, above its bound of ${max}`, { length: n });
}

function checkPem(field: string, n: number): void {
  if (n === 0) throw refused(field, `${field} is empty; it must be a PEM text`);
  checkBound(field, n, MAX_PEM);
}

/** The description's own join token must be well formed; its signature is the peers' to check. */
function checkToken(token: Uint8Array): void {
  try {
    decodeJoinToken(token);
  } catch (e) {
    if (!isPlexusError(e)) throw e;
    throw refused('joinToken', `the join token is not well formed: ${e.message}`, { rule: e.details.rule }, e);
  }
}

/**
 * The binary job description. The same rules as the decoder refuse a description that
 * no rank would take (H1610 `job-description`); `isRefused`, when given, is checked too.
 */
export function encodeJobDescription(d: JobDescription, opts: Partial<JobDescriptionOptions> = {}): Uint8Array {
  _bytes(d.jobId, 'jobId', 16);
  const size = _uint(d.size, 0, 0xffff_ffff, 'size');
  const rank = _uint(d.rank, 0, 0xffff_ffff, 'rank');
  const incarnation = _uint(d.incarnation, 0, 0xffff_ffff, 'incarnation');
  checkSize(size);
  checkRank(rank, size);
  checkIncarnation(incarnation);
  if (!Array.isArray(d.hosts) || d.hosts.length !== size) {
    throw refused('hosts', `the host list has ${String(d.hosts?.length)} entries; it needs one per rank (${size})`);
  }
  const names = d.hosts.map((h, i) => {
    if (typeof h?.name !== 'string') throw new TypeError(`hosts[${i}].name must be a string`);
    const b = _latin1Bytes(h.name) ?? new Uint8Array(h.name.length).fill(0x20);
    checkBound(`hosts[${i}].name`, b.length, 253);
    checkHost(i, b, opts);
    checkPort(i, _uint(h.port, 0, 65535, `hosts[${i}].port`));
    return b;
  });
  const pems: [string, Uint8Array][] = [
    ['caCert', d.caCert],
    ['rankCert', d.rankCert],
    ['rankKey', d.rankKey],
  ];
  for (const [f, b] of pems) checkPem(f, _bytes(b, f).length);
  checkBound('joinToken', _bytes(d.joinToken, 'joinToken').length, MAX_JOIN_TOKEN);
  checkToken(d.joinToken);
  const secret = d.jobSecretKey ?? new Uint8Array(0);
  checkSecretKey(rank, _bytes(secret, 'jobSecretKey').length);
  _bytes(d.jobPublicKey, 'jobPublicKey', PUBLIC_KEY_LENGTH);

  let total = 28 + 12 + 4 + PUBLIC_KEY_LENGTH + d.joinToken.length + secret.length;
  for (const n of names) total += 3 + n.length;
  for (const [, b] of pems) total += b.length;
  const w = _writer(total).bytes(d.jobId).u32(size).u32(rank).u32(incarnation);
  names.forEach((n, i) => {
    w.u8(n.length)
      .bytes(n)
      .u16((d.hosts[i] as HostEntry).port);
  });
  for (const [, b] of pems) w.u32(b.length).bytes(b);
  w.u16(d.joinToken.length).bytes(d.joinToken);
  w.u16(secret.length).bytes(secret);
  w.bytes(d.jobPublicKey);
  return w.finish();
}

/**
 * Decodes and checks a binary job description, field by field in order: a cut field, a
 * PEM length of 0 or a length above its bound, size, rank or incarnation out of range, a
 * host that is not a DNS name or dotted IPv4 address or is refused, a port 0, a join token
 * that is not well formed, a secret key on rank 0 of other than 64 bytes or on another
 * rank at all, or any byte after the public key is refused (H1610 `job-description`,
 * `details.field` naming the field). The returned byte fields are copies; the caller
 * wipes `bytes` (it holds the rank key) once decoded.
 */
export function decodeJobDescription(bytes: Uint8Array, opts: JobDescriptionOptions): JobDescription {
  if (typeof opts?.isRefused !== 'function') {
    throw new TypeError('decodeJobDescription needs options.isRefused (the refused-hosts check)');
  }
  _bytes(bytes, 'job description');
  const r = _reader(bytes, (field, need, have) => {
    throw refused(field, `${field} is cut (needs ${need} bytes, ${have} left)`);
  });
  const jobId = _copy(r.bytes(16, 'jobId'));
  const size = r.u32('size');
  checkSize(size);
  const rank = r.u32('rank');
  checkRank(rank, size);
  const incarnation = r.u32('incarnation');
  checkIncarnation(incarnation);
  const hosts: HostEntry[] = [];
  for (let i = 0; i < size; i++) {
    const n = r.u8(`hosts[${i}].name length`);
    checkBound(`hosts[${i}].name`, n, 253);
    const name = checkHost(i, r.bytes(n, `hosts[${i}].name`), opts);
    const port = r.u16(`hosts[${i}].port`);
    checkPort(i, port);
    hosts.push({ name, port });
  }
  const pem = (field: string): Uint8Array => {
    const n = r.u32(`${field} length`);
    checkPem(field, n);
    return _copy(r.bytes(n, field));
  };
  const caCert = pem('caCert');
  const rankCert = pem('rankCert');
  const rankKey = pem('rankKey');
  const t = r.u16('joinToken length');
  checkBound('joinToken', t, MAX_JOIN_TOKEN);
  const joinToken = _copy(r.bytes(t, 'joinToken'));
  checkToken(joinToken);
  const s = r.u16('jobSecretKey length');
  checkSecretKey(rank, s);
  const secret = _copy(r.bytes(s, 'jobSecretKey'));
  const jobPublicKey = _copy(r.bytes(PUBLIC_KEY_LENGTH, 'jobPublicKey'));
  if (r.left !== 0) {
    throw refused('jobPublicKey', `${r.left} bytes follow the job public key, which must come last`, {
      extra: r.left,
    });
  }
  return {
    jobId,
    size,
    rank,
    incarnation,
    hosts,
    caCert,
    rankCert,
    rankKey,
    joinToken,
    jobSecretKey: s === 0 ? null : secret,
    jobPublicKey,
  };
}

const HEX: readonly string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** The description as the launcher writes it: lower-case hex digits and a line feed. */
export function encodeJobLine(d: JobDescription, opts: Partial<JobDescriptionOptions> = {}): string {
  const b = encodeJobDescription(d, opts);
  const parts: string[] = [];
  for (let i = 0; i < b.length; i += 8192) {
    let s = '';
    const end = Math.min(b.length, i + 8192);
    for (let k = i; k < end; k++) {
      s += HEX[b[k] as number];
    }
    parts.push(s);
  }
  parts.push('\n');
  return parts.join('');
}

function nibble(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  return -1;
}

/**
 * Decodes the line a rank reads from standard input: lower-case hex digits, an even
 * count of them, then exactly one line feed and nothing after it. Anything else is
 * refused (H1610 `job-description`, field "line") before the bytes are decoded.
 */
export function decodeJobLine(line: string, opts: JobDescriptionOptions): JobDescription {
  if (typeof line !== 'string') throw new TypeError('decodeJobLine takes the line as a string');
  if (!line.endsWith('\n')) throw refused('line', 'the line does not end with a line feed');
  const n = line.length - 1;
  if (n % 2 !== 0) throw refused('line', `the line has ${n} hex digits, an odd count`);
  const out = new Uint8Array(n / 2);
  for (let i = 0; i < n; i += 2) {
    const hi = nibble(line.charCodeAt(i));
    const lo = nibble(line.charCodeAt(i + 1));
    if (hi < 0 || lo < 0) {
      const at = hi < 0 ? i : i + 1;
      throw refused('line', `character ${at} of the line is not a lower-case hex digit`, { at });
    }
    out[i / 2] = (hi << 4) | lo;
  }
  return decodeJobDescription(out, opts);
}
