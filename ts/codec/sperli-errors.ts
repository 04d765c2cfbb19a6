/**
 * The SPERLI error codes (docs/sperli.md, "Error codes") and the one helper that builds
 * them. Every refusal is a PlexusError whose `code` is the H-code and whose
 * `details.reason` names the exact check that failed. The `_`-prefixed byte helpers
 * below (bounds-checked reader, writer, argument guards) are shared by the SPERLI codecs
 * and are not part of the public surface.
 */
import { PlexusError } from '../core/errors.js';
import { ByteReader, ByteWriter } from './bytes.js';

export const SperliCode = {
  /** A frame header, a payload's size or shape, a job description or a join token. */
  frame: 'H1610',
  /** The job was aborted by another rank. */
  aborted: 'H1612',
  /** A collective frame differs from the call it answers, or is cut. */
  collectiveMismatch: 'H1617',
  /** A collective call's arguments are refused. */
  collectiveArgs: 'H1618',
  /** A rank file is not the one expected. */
  rankFile: 'H1619',
  /** A rank file's SHA-256 does not match its header or the COMMIT entry. */
  rankFileHash: 'H1620',
  /** A COMMIT file is malformed or its signature does not hold. */
  commit: 'H1621',
  /** No epoch can be resumed. */
  noEpoch: 'H1622',
  /** A correctly signed COMMIT is of another size than the job. */
  commitSize: 'H1623',
  /** A checkpoint was called with a send or receive still open. */
  checkpointOpen: 'H1624',
} as const;
export type SperliCodeValue = (typeof SperliCode)[keyof typeof SperliCode];

/** Builds a SPERLI refusal: `code`, a message saying what to do, and `details.reason`. */
export function sperliError(
  code: SperliCodeValue,
  reason: string,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, { ...details, reason }, cause === undefined ? undefined : { cause });
}

/**
 * A signature check bound by the caller to the job public key and the signing context
 * (`SPERLI-JOIN-1` or `SPERLI-COMMIT-1`). The codecs never import a crypto library.
 */
export type Verify = (message: Uint8Array, signature: Uint8Array) => boolean;

/** Runs an injected verify; a verify that throws counts as a signature that does not hold. */
export function _verifies(
  verify: Verify,
  message: Uint8Array,
  signature: Uint8Array,
): { ok: boolean; cause?: unknown } {
  try {
    return { ok: verify(message, signature) === true };
  } catch (cause) {
    return { ok: false, cause };
  }
}

/**
 * A copy of bytes[start .. end) in a new plain Uint8Array (Buffer.prototype.slice would
 * return a view into the same memory).
 */
export function _copy(bytes: Uint8Array, start = 0, end: number = bytes.length): Uint8Array {
  const out = new Uint8Array(end - start);
  out.set(bytes.subarray(start, end));
  return out;
}

/** Byte-for-byte equality of two byte strings. */
export function _sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Lower-case hex of bytes, for messages. */
export function _hex(b: Uint8Array): string {
  let s = '';
  for (const x of b) s += x.toString(16).padStart(2, '0');
  return s;
}

/**
 * A `ByteReader` over one SPERLI structure whose cut read throws `cut(what, need, have)`, the
 * structure's own refusal (H1610 and the others of docs/sperli.md).
 */
export function _reader(bytes: Uint8Array, cut: (what: string, need: number, have: number) => never): ByteReader {
  return new ByteReader(bytes, (_reason, what, _message, _at, need = 0, have = 0) => cut(what, need, have));
}

/** A `ByteWriter` over a new buffer of exactly `size` bytes (an encoder sizes its structure first). */
export function _writer(size: number): ByteWriter {
  return new ByteWriter(new Uint8Array(size));
}

/** Refuses (RangeError) an encoder argument that is not an integer in [min, max]. */
export function _uint(v: unknown, min: number, max: number, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`${what} must be an integer from ${min} to ${max}, got ${String(v)}`);
  }
  return v;
}

/** Refuses (RangeError) an encoder argument that is not a u64 bigint. */
export function _u64(v: unknown, what: string): bigint {
  if (typeof v !== 'bigint' || v < 0n || v > 0xffff_ffff_ffff_ffffn) {
    throw new RangeError(`${what} must be a bigint from 0 to 2^64 - 1, got ${String(v)}`);
  }
  return v;
}

/** Refuses (TypeError/RangeError) bytes of another length than `n` (or above `max` when n is undefined). */
export function _bytes(v: unknown, what: string, n?: number, max?: number): Uint8Array {
  if (!(v instanceof Uint8Array)) throw new TypeError(`${what} must be a Uint8Array`);
  if (n !== undefined && v.length !== n) throw new RangeError(`${what} must be ${n} bytes, got ${v.length}`);
  if (max !== undefined && v.length > max)
    throw new RangeError(`${what} must be at most ${max} bytes, got ${v.length}`);
  return v;
}

/** Bytes as text, one character per byte (Latin-1): lossless for any bytes. */
export function _latin1(b: Uint8Array): string {
  let s = '';
  for (const c of b) s += String.fromCharCode(c);
  return s;
}

/** Text of characters up to U+00FF as bytes, one per character; undefined for anything wider. */
export function _latin1Bytes(s: string): Uint8Array | undefined {
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) return undefined;
    b[i] = c;
  }
  return b;
}

function isLabelByte(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x2d;
}

/**
 * Whether a host name is one the host list allows (docs/sperli.md, "Job description"): 1
 * to 253 bytes, a DNS name of labels of letters, digits and hyphens, 1 to 63 bytes each,
 * separated by dots. A dotted IPv4 address is such a name too.
 */
export function _isHostName(name: string): boolean {
  if (name.length < 1 || name.length > 253) return false;
  let label = 0;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c === 0x2e) {
      if (label === 0) return false;
      label = 0;
    } else if (isLabelByte(c)) {
      if (++label > 63) return false;
    } else return false;
  }
  return label > 0;
}

/** Whether a name is a dotted IPv4 address: four decimal numbers 0..255. */
export function _isIpv4(name: string): boolean {
  const parts = name.split('.');
  return parts.length === 4 && parts.every((p) => /^[0-9]{1,3}$/.test(p) && Number(p) <= 255);
}

/** ASCII letters folded to lower case; every other character kept. */
function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
}

/**
 * Whether a join token's host names the host list entry `listed`: DNS names compare
 * without regard to (ASCII) letter case, dotted IPv4 addresses byte for byte.
 */
export function _sameHost(host: string, listed: string): boolean {
  if (_isIpv4(listed)) return host === listed;
  return asciiLower(host) === asciiLower(listed);
}
