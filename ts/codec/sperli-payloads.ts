/**
 * SPERLI version 1 payloads (docs/sperli.md): HELLO and the join token, the collective
 * header, HEARTBEAT, ABORT, CKPT_BEGIN, CKPT_DATA (with the in-order chunk receiver),
 * CKPT_ACK and RESUME. Every decoder refuses a cut payload and bytes after the layout.
 * Encoders throw TypeError/RangeError for values outside their fields (a caller bug);
 * decoders throw PlexusError with the H-code and `details.reason`. Signatures are checked
 * by an injected `verify`, so nothing here imports a crypto library.
 */
import { reduceAllowed } from '../core/codes.js';
import type { PlexusError } from '../core/errors.js';
import { type ByteReader, getU32, getU64n, putU32, putU64n } from './bytes.js';
import {
  _bytes,
  _copy,
  _hex,
  _isHostName,
  _latin1,
  _latin1Bytes,
  _reader,
  _sameBytes,
  _sameHost,
  _u64,
  _uint,
  _verifies,
  _writer,
  SperliCode,
  sperliError,
  type Verify,
} from './sperli-errors.js';
import { MAX_COLLECTIVE_DATA } from './sperli-frame.js';

/** SPERLI protocol version carried by HELLO. */
export const PROTOCOL_VERSION = 1;
/** HELLO capability bit 0: version 1 framing (required). */
export const CAP_V1_FRAMING = 1;
/** The largest join token. */
export const MAX_JOIN_TOKEN = 4096;
/** CompositeSig (ML-DSA-44 + Ed25519) signature length. */
export const SIGNATURE_LENGTH = 2484;
/** CompositeSig public key length. */
export const PUBLIC_KEY_LENGTH = 1344;
/** Signing context of join tokens. */
export const JOIN_CONTEXT = 'SPERLI-JOIN-1';
/** Signing context of COMMIT files. */
export const COMMIT_CONTEXT = 'SPERLI-COMMIT-1';
/** The largest chunk of a CKPT_DATA frame: 1 MiB. */
export const MAX_CHUNK = 1_048_576;
/** The largest ABORT text in bytes. */
export const MAX_ABORT_TEXT = 1024;

function cutter(code: typeof SperliCode.frame | typeof SperliCode.collectiveMismatch, reason: string, what: string) {
  return (field: string, need: number, have: number): never => {
    throw sperliError(code, reason, `${what} is cut: ${field} needs ${need} bytes, ${have} left`, {
      rule: 'cut',
      field,
    });
  };
}

function trailing(reader: ByteReader, reason: string, what: string): void {
  if (reader.left !== 0) {
    throw sperliError(SperliCode.frame, reason, `${what} has ${reader.left} bytes after its end`, {
      rule: 'trailing',
      extra: reader.left,
    });
  }
}

function reservedZero(r: ByteReader, n: number, reason: string, what: string): void {
  const b = r.bytes(n, 'reserved bytes');
  if (b.some((x) => x !== 0)) {
    throw sperliError(SperliCode.frame, reason, `${what}: the ${n} reserved bytes must be 0`, { rule: 'reserved' });
  }
}

// ---------------------------------------------------------------------------------------
// HELLO (1)

export interface Hello {
  readonly version: number;
  /** Capability bits; bit 0 is set. Other bits are 0 from a version 1 sender and accepted as they come. */
  readonly capabilities: number;
  /** The sender's join token (decode with decodeJoinToken). */
  readonly token: Uint8Array;
}

/** HELLO payload: version 1, capability bit 0, the join token. */
export function encodeHello(token: Uint8Array, capabilities: number = CAP_V1_FRAMING): Uint8Array {
  _bytes(token, 'join token', undefined, MAX_JOIN_TOKEN);
  _uint(capabilities, 0, 0xffff_ffff, 'capabilities');
  if ((capabilities & CAP_V1_FRAMING) === 0) throw new RangeError('HELLO capabilities need bit 0 (version 1 framing)');
  return _writer(10 + token.length)
    .u32(PROTOCOL_VERSION)
    .u32(capabilities)
    .u16(token.length)
    .bytes(token)
    .finish();
}

/** Decodes a HELLO payload; refuses (H1610 `hello`) version, bit 0, a cut token, trailing bytes. */
export function decodeHello(payload: Uint8Array): Hello {
  const r = _reader(payload, cutter(SperliCode.frame, 'hello', 'HELLO'));
  const version = r.u32('version');
  const capabilities = r.u32('capabilities');
  if (version !== PROTOCOL_VERSION) {
    throw sperliError(SperliCode.frame, 'hello', `HELLO protocol version ${version} is not 1`, {
      rule: 'version',
      version,
    });
  }
  if ((capabilities & CAP_V1_FRAMING) === 0) {
    throw sperliError(
      SperliCode.frame,
      'hello',
      `HELLO capabilities 0x${capabilities.toString(16)} lack bit 0 (version 1 framing), which both sides need`,
      { rule: 'capabilities', capabilities },
    );
  }
  const n = r.u16('token length');
  if (n > MAX_JOIN_TOKEN) {
    throw sperliError(SperliCode.frame, 'hello', `HELLO join token length ${n} is above ${MAX_JOIN_TOKEN}`, {
      rule: 'token-length',
      tokenLength: n,
    });
  }
  const token = _copy(r.bytes(n, 'join token'));
  trailing(r, 'hello', 'HELLO');
  return { version, capabilities, token };
}

// ---------------------------------------------------------------------------------------
// Join token

export interface JoinTokenFields {
  readonly jobId: Uint8Array;
  readonly rank: number;
  readonly size: number;
  readonly incarnation: number;
  readonly host: string;
  /** Milliseconds since 1970-01-01T00:00:00Z. */
  readonly expiry: bigint;
}

export interface JoinToken extends JoinTokenFields {
  /** The signed message (signed under JOIN_CONTEXT). */
  readonly message: Uint8Array;
  readonly signature: Uint8Array;
}

/** The signed message of a join token. */
export function encodeJoinTokenMessage(f: JoinTokenFields): Uint8Array {
  _bytes(f.jobId, 'jobId', 16);
  if (typeof f.host !== 'string' || !_isHostName(f.host)) {
    throw new RangeError(`host "${String(f.host)}" is not a DNS name or dotted IPv4 address of 1 to 253 bytes`);
  }
  const host = _latin1Bytes(f.host) as Uint8Array;
  return _writer(37 + host.length)
    .bytes(f.jobId)
    .u32(_uint(f.rank, 0, 0xffff_ffff, 'rank'))
    .u32(_uint(f.size, 0, 0xffff_ffff, 'size'))
    .u32(_uint(f.incarnation, 0, 0xffff_ffff, 'incarnation'))
    .u8(host.length)
    .bytes(host)
    .u64n(_u64(f.expiry, 'expiry'))
    .finish();
}

/** A join token: the signed message, u16 2484, the signature. */
export function assembleJoinToken(message: Uint8Array, signature: Uint8Array): Uint8Array {
  _bytes(message, 'message');
  _bytes(signature, 'signature', SIGNATURE_LENGTH);
  const total = message.length + 2 + SIGNATURE_LENGTH;
  if (total > MAX_JOIN_TOKEN) throw new RangeError(`a join token of ${total} bytes is above ${MAX_JOIN_TOKEN}`);
  return _writer(total).bytes(message).u16(SIGNATURE_LENGTH).bytes(signature).finish();
}

function tokenRefusal(rule: string, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return sperliError(SperliCode.frame, 'join-token', `join token refused: ${message}`, { ...details, rule }, cause);
}

/**
 * Decodes a join token's structure: every field present, a host length of 1..253, a
 * signature length of 2484, nothing after the signature (else H1610 `join-token`). The
 * host is given as Latin-1 text of its bytes; checkJoinToken compares it with the host list.
 */
export function decodeJoinToken(token: Uint8Array): JoinToken {
  const r = _reader(token, (field, need, have) => {
    throw tokenRefusal('cut', `it is cut (${field} needs ${need} bytes, ${have} left)`, { field });
  });
  const jobId = _copy(r.bytes(16, 'job id'));
  const rank = r.u32('rank');
  const size = r.u32('size');
  const incarnation = r.u32('incarnation');
  const h = r.u8('host length');
  if (h < 1 || h > 253) throw tokenRefusal('host-length', `its host length ${h} is outside 1..253`);
  const host = _latin1(r.bytes(h, 'host'));
  const expiry = r.u64n('expiry');
  const message = _copy(token, 0, r.at);
  const sigLength = r.u16('signature length');
  if (sigLength !== SIGNATURE_LENGTH) {
    throw tokenRefusal('signature-length', `its signature length is ${sigLength}, not ${SIGNATURE_LENGTH}`, {
      signatureLength: sigLength,
    });
  }
  const signature = _copy(r.bytes(SIGNATURE_LENGTH, 'signature'));
  if (r.left !== 0) throw tokenRefusal('trailing', `${r.left} bytes follow the signature`, { extra: r.left });
  return { jobId, rank, size, incarnation, host, expiry, message, signature };
}

/** What a receiver knows to check a peer's join token against. */
export interface JoinExpectations {
  readonly jobId: Uint8Array;
  /** The source rank of the HELLO's frame header. */
  readonly headerRank: number;
  /** The rank in the subject of the peer's certificate. */
  readonly certificateRank: number;
  readonly size: number;
  readonly incarnation: number;
  /** Host names of the host list, by rank. */
  readonly hosts: readonly string[];
  /** The receiver's clock, milliseconds since 1970-01-01T00:00:00Z. */
  readonly now: number;
}

/**
 * Decodes (when given bytes) and checks a join token, in this order: the signature
 * (`verify`, bound to the job public key and JOIN_CONTEXT), job id, rank against the
 * header's source rank and the certificate's rank, size, incarnation, host against the
 * host list entry of that rank (DNS names without regard to letter case, IPv4 addresses
 * byte for byte), expiry later than `now`. Throws H1610 `join-token` with
 * `details.rule` naming the failed rule; returns the decoded token.
 */
export function checkJoinToken(token: Uint8Array | JoinToken, expect: JoinExpectations, verify: Verify): JoinToken {
  const t = token instanceof Uint8Array ? decodeJoinToken(token) : token;
  const v = _verifies(verify, t.message, t.signature);
  if (!v.ok) {
    throw tokenRefusal('signature', 'its signature does not verify with the job public key', {}, v.cause);
  }
  if (!_sameBytes(t.jobId, expect.jobId)) {
    throw tokenRefusal('job-id', `its job id ${_hex(t.jobId)} is not this job (${_hex(expect.jobId)})`);
  }
  if (t.rank !== expect.headerRank) {
    throw tokenRefusal('rank', `its rank ${t.rank} is not the frame header's source rank ${expect.headerRank}`, {
      rank: t.rank,
    });
  }
  if (t.rank !== expect.certificateRank) {
    throw tokenRefusal(
      'rank',
      `its rank ${t.rank} is not the rank of the peer's certificate (${expect.certificateRank})`,
      {
        rank: t.rank,
      },
    );
  }
  if (t.size !== expect.size) {
    throw tokenRefusal('size', `its size ${t.size} is not the job's size ${expect.size}`, { size: t.size });
  }
  if (t.incarnation !== expect.incarnation) {
    throw tokenRefusal('incarnation', `its incarnation ${t.incarnation} is not this run's (${expect.incarnation})`, {
      incarnation: t.incarnation,
    });
  }
  const listed = expect.hosts[t.rank];
  if (listed === undefined || !_sameHost(t.host, listed)) {
    throw tokenRefusal(
      'host',
      `its host ${JSON.stringify(t.host)} is not the host list entry of rank ${t.rank} (${listed === undefined ? 'none' : JSON.stringify(listed)})`,
      { host: t.host },
    );
  }
  if (!Number.isFinite(expect.now) || t.expiry <= BigInt(Math.floor(expect.now))) {
    throw tokenRefusal('expiry', `it expired at ${t.expiry} ms, not later than the clock (${expect.now} ms)`, {
      expiry: t.expiry,
      now: expect.now,
    });
  }
  return t;
}

// ---------------------------------------------------------------------------------------
// COLLECTIVE (3)

export const CollectiveOp = {
  bytes: 1,
  barrier: 2,
  bcast: 3,
  reduce: 4,
  allreduce: 5,
  gather: 6,
  scatter: 7,
} as const;
export type CollectiveOpName = keyof typeof CollectiveOp;

/** Phase 1 travels towards the root, phase 2 from it. */
export const CollectivePhase = { toRoot: 1, fromRoot: 2 } as const;

export const COLLECTIVE_HEADER_SIZE = 16;

export interface CollectiveHeader {
  readonly op: number;
  readonly elementType: number;
  readonly reduceOp: number;
  readonly phase: number;
  readonly root: number;
  readonly sequence: bigint;
}

function isReducing(op: number): boolean {
  return op === CollectiveOp.reduce || op === CollectiveOp.allreduce;
}

/** Why a collective header is not one any call could send, or undefined when it could be. */
function collectiveHeaderFault(h: CollectiveHeader): string | undefined {
  if (h.op < 1 || h.op > 7) return `collective operation ${h.op} is not defined (1..7)`;
  if (h.phase !== 1 && h.phase !== 2) return `phase ${h.phase} is neither 1 (towards the root) nor 2 (from it)`;
  if (isReducing(h.op)) {
    if (!reduceAllowed(h.reduceOp, h.elementType)) {
      return `reduce operation ${h.reduceOp} on element type ${h.elementType} is not a defined pair`;
    }
  } else if (h.elementType !== 0 || h.reduceOp !== 0) {
    return `a non-reducing collective (${h.op}) carries element type ${h.elementType} and reduce operation ${h.reduceOp}; both must be 0`;
  }
  return undefined;
}

/** The 16-byte collective header. */
export function encodeCollectiveHeader(h: CollectiveHeader): Uint8Array {
  // Written with the field functions (every collective call sends one): op, element type,
  // reduce operation, phase, then root u32 and sequence u64, little-endian.
  const out = new Uint8Array(COLLECTIVE_HEADER_SIZE);
  out[0] = _uint(h.op, 0, 255, 'op');
  out[1] = _uint(h.elementType, 0, 255, 'elementType');
  out[2] = _uint(h.reduceOp, 0, 255, 'reduceOp');
  out[3] = _uint(h.phase, 0, 255, 'phase');
  putU32(out, 4, _uint(h.root, 0, 0xffff_ffff, 'root'));
  putU64n(out, 8, _u64(h.sequence, 'sequence'));
  const fault = collectiveHeaderFault(h);
  if (fault !== undefined) throw new RangeError(fault);
  return out;
}

/** A COLLECTIVE payload: the collective header, then at most MAX_COLLECTIVE_DATA bytes of data. */
export function encodeCollective(h: CollectiveHeader, data: Uint8Array = new Uint8Array(0)): Uint8Array {
  _bytes(data, 'data', undefined, MAX_COLLECTIVE_DATA);
  const out = new Uint8Array(COLLECTIVE_HEADER_SIZE + data.length);
  out.set(encodeCollectiveHeader(h));
  out.set(data, COLLECTIVE_HEADER_SIZE);
  return out;
}

/**
 * Splits a COLLECTIVE payload into its header and data (a view). Shorter than 16 bytes:
 * H1610 `collective-short`. Codes no call can send (an operation outside 1..7, a phase
 * other than 1 or 2, a refused type/operation pair, a non-reducing collective with a
 * type or operation): H1617 `collective-header`.
 */
export function decodeCollective(payload: Uint8Array): { header: CollectiveHeader; data: Uint8Array } {
  if (!(payload instanceof Uint8Array) || payload.length < COLLECTIVE_HEADER_SIZE) {
    throw sperliError(
      SperliCode.frame,
      'collective-short',
      `a COLLECTIVE payload of ${payload.length} bytes is shorter than its 16-byte collective header`,
      { length: payload.length },
    );
  }
  // The 16 bytes are there (checked above): read them with the field functions.
  const header: CollectiveHeader = {
    op: payload[0] as number,
    elementType: payload[1] as number,
    reduceOp: payload[2] as number,
    phase: payload[3] as number,
    root: getU32(payload, 4),
    sequence: getU64n(payload, 8),
  };
  const fault = collectiveHeaderFault(header);
  if (fault !== undefined) {
    throw sperliError(SperliCode.collectiveMismatch, 'collective-header', `collective frame refused: ${fault}`, {
      header,
    });
  }
  return { header, data: payload.subarray(COLLECTIVE_HEADER_SIZE) };
}

const COLLECTIVE_FIELDS: readonly [keyof CollectiveHeader, string][] = [
  ['op', 'operation'],
  ['elementType', 'element-type'],
  ['reduceOp', 'reduce-op'],
  ['phase', 'phase'],
  ['root', 'root'],
  ['sequence', 'sequence'],
];

/**
 * Refuses (H1617, `details.reason` the field: operation, element-type, reduce-op, phase,
 * root, sequence) a collective header that differs from the call it answers.
 */
export function matchCollective(got: CollectiveHeader, expected: CollectiveHeader): void {
  for (const [k, reason] of COLLECTIVE_FIELDS) {
    if (got[k] !== expected[k]) {
      throw sperliError(
        SperliCode.collectiveMismatch,
        reason,
        `collective frame differs from the call it answers: ${reason} is ${got[k]}, the call has ${expected[k]}`,
        { got: got[k], expected: expected[k] },
      );
    }
  }
}

// ---------------------------------------------------------------------------------------
// HEARTBEAT (4)

export function encodeHeartbeat(counter: bigint): Uint8Array {
  return _writer(8).u64n(_u64(counter, 'counter')).finish();
}

/** The sender's heartbeat counter; any length other than 8: H1610 `payload-size`. */
export function decodeHeartbeat(payload: Uint8Array): bigint {
  const r = _reader(payload, cutter(SperliCode.frame, 'payload-size', 'HEARTBEAT'));
  const counter = r.u64n('counter');
  trailing(r, 'payload-size', 'HEARTBEAT');
  return counter;
}

// ---------------------------------------------------------------------------------------
// ABORT (5)

export const AbortReason = {
  lostPeer: 1,
  protocolViolation: 2,
  collectiveMismatch: 3,
  badScatter: 4,
  failedCheckpoint: 5,
} as const;

export interface Abort {
  /** 1..5, see AbortReason. */
  readonly reason: number;
  /** The H-code as a number (1617 for H1617), or 0. */
  readonly code: number;
  /** The rank that first stopped (the sender, or the lost rank for reason 1). */
  readonly rank: number;
  /** UTF-8 text for the operator. */
  readonly text: string;
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8');

export function encodeAbort(a: Abort): Uint8Array {
  _uint(a.reason, 1, 5, 'reason');
  const text = utf8.encode(a.text);
  if (text.length > MAX_ABORT_TEXT) {
    throw new RangeError(`ABORT text is ${text.length} bytes of UTF-8; at most ${MAX_ABORT_TEXT}`);
  }
  return _writer(14 + text.length)
    .u8(a.reason)
    .bytes(new Uint8Array(3))
    .u32(_uint(a.code, 0, 0xffff_ffff, 'code'))
    .u32(_uint(a.rank, 0, 0xffff_ffff, 'rank'))
    .u16(text.length)
    .bytes(text)
    .finish();
}

/**
 * Decodes ABORT; a reason outside 1..5, nonzero reserved bytes, a text above 1024 bytes,
 * a cut text or bytes after it: H1610 `payload-size`. Invalid UTF-8 in the text becomes
 * U+FFFD (the text is for the operator; the abort itself still counts).
 */
export function decodeAbort(payload: Uint8Array): Abort {
  const r = _reader(payload, cutter(SperliCode.frame, 'payload-size', 'ABORT'));
  const reason = r.u8('reason');
  if (reason < 1 || reason > 5) {
    throw sperliError(SperliCode.frame, 'payload-size', `ABORT reason ${reason} is not defined (1..5)`, {
      rule: 'abort-reason',
    });
  }
  reservedZero(r, 3, 'payload-size', 'ABORT');
  const code = r.u32('code');
  const rank = r.u32('rank');
  const t = r.u16('text length');
  if (t > MAX_ABORT_TEXT) {
    throw sperliError(SperliCode.frame, 'payload-size', `ABORT text length ${t} is above ${MAX_ABORT_TEXT}`, {
      rule: 'text-length',
    });
  }
  const text = utf8Decoder.decode(r.bytes(t, 'text'));
  trailing(r, 'payload-size', 'ABORT');
  return { reason, code, rank, text };
}

// ---------------------------------------------------------------------------------------
// CKPT_BEGIN (6)

export const CHECKPOINT_VERSION = 1;

export function encodeCkptBegin(size: number): Uint8Array {
  return _writer(8)
    .u32(CHECKPOINT_VERSION)
    .u32(_uint(size, 0, 0xffff_ffff, 'size'))
    .finish();
}

/**
 * Decodes CKPT_BEGIN and checks it against this rank: a length other than 8 is H1610
 * `payload-size`; a version other than 1 or a size other than `ownSize` is H1610
 * `ckpt-begin`.
 */
export function decodeCkptBegin(payload: Uint8Array, ownSize: number): { version: number; size: number } {
  const r = _reader(payload, cutter(SperliCode.frame, 'payload-size', 'CKPT_BEGIN'));
  const version = r.u32('version');
  const size = r.u32('size');
  trailing(r, 'payload-size', 'CKPT_BEGIN');
  if (version !== CHECKPOINT_VERSION) {
    throw sperliError(SperliCode.frame, 'ckpt-begin', `CKPT_BEGIN checkpoint version ${version} is not 1`, {
      rule: 'version',
      version,
    });
  }
  if (size !== ownSize) {
    throw sperliError(SperliCode.frame, 'ckpt-begin', `CKPT_BEGIN size ${size} is not this job's size ${ownSize}`, {
      rule: 'size',
      size,
    });
  }
  return { version, size };
}

// ---------------------------------------------------------------------------------------
// CKPT_DATA (7)

export const CkptDataKind = {
  /** A chunk of the sender's own rank file, for its buddy. */
  ownChunk: 0,
  /** A request for the file of `rank`. */
  request: 1,
  /** A chunk answering a request. */
  answerChunk: 2,
  /** The buddy has no valid copy. */
  noCopy: 3,
  /** The sender needs nothing. */
  needNothing: 4,
} as const;

export interface CkptData {
  readonly kind: number;
  /** The rank whose file this is about. */
  readonly rank: number;
  /** Bytes of the file sent before this chunk. */
  readonly offset: bigint;
  /** Total length of the file. */
  readonly total: bigint;
  /** The chunk (kinds 0 and 2); empty for kinds 1, 3 and 4. */
  readonly chunk: Uint8Array;
}

function carriesChunk(kind: number): boolean {
  return kind === CkptDataKind.ownChunk || kind === CkptDataKind.answerChunk;
}

function ckptDataFault(d: CkptData): { rule: string; message: string } | undefined {
  if (d.kind > 4) return { rule: 'kind', message: `kind ${d.kind} is not defined (0..4)` };
  if (d.chunk.length > MAX_CHUNK) {
    return { rule: 'chunk-size', message: `a chunk of ${d.chunk.length} bytes is above 1 MiB` };
  }
  if (!carriesChunk(d.kind)) {
    if (d.chunk.length !== 0 || d.offset !== 0n || d.total !== 0n) {
      return { rule: 'no-chunk', message: `kind ${d.kind} carries no chunk and offset = total = 0` };
    }
  } else if (d.offset + BigInt(d.chunk.length) > d.total) {
    return {
      rule: 'past-total',
      message: `a chunk at offset ${d.offset} of ${d.chunk.length} bytes goes past the total ${d.total}`,
    };
  }
  return undefined;
}

function ckptDataRefusal(rule: string, message: string): PlexusError {
  return sperliError(SperliCode.frame, 'ckpt-data', `CKPT_DATA refused: ${message}`, { rule });
}

/** The fixed part of a CKPT_DATA payload before its chunk (docs/sperli.md): kind, 3 reserved, rank, offset, total. */
export const CKPT_DATA_HEADER_SIZE = 24;

export function encodeCkptData(d: CkptData): Uint8Array {
  _uint(d.kind, 0, 4, 'kind');
  _bytes(d.chunk, 'chunk', undefined, MAX_CHUNK);
  const w = _writer(CKPT_DATA_HEADER_SIZE + d.chunk.length)
    .u8(d.kind)
    .bytes(new Uint8Array(3))
    .u32(_uint(d.rank, 0, 0xffff_ffff, 'rank'))
    .u64n(_u64(d.offset, 'offset'))
    .u64n(_u64(d.total, 'total'))
    .bytes(d.chunk);
  const fault = ckptDataFault(d);
  if (fault !== undefined) throw new RangeError(fault.message);
  return w.finish();
}

/**
 * Decodes CKPT_DATA (the chunk is a view into `payload`). Refused (H1610 `ckpt-data`): a
 * cut payload, a kind above 4, nonzero reserved bytes, a chunk above 1 MiB, a chunk or a
 * nonzero offset or total on kinds 1, 3 and 4, a chunk past its total.
 */
export function decodeCkptData(payload: Uint8Array): CkptData {
  const r = _reader(payload, cutter(SperliCode.frame, 'ckpt-data', 'CKPT_DATA'));
  const kind = r.u8('kind');
  reservedZero(r, 3, 'ckpt-data', 'CKPT_DATA');
  const d: CkptData = {
    kind,
    rank: r.u32('rank'),
    offset: r.u64n('offset'),
    total: r.u64n('total'),
    chunk: r.bytes(r.left, 'chunk'),
  };
  const fault = ckptDataFault(d);
  if (fault !== undefined) throw ckptDataRefusal(fault.rule, fault.message);
  return d;
}

/**
 * Receives the chunks of one rank file in order: each chunk's offset is the number of
 * bytes received so far, the total and the rank never change, and no chunk goes past the
 * total (H1610 `ckpt-data` otherwise). It counts bytes; storing them is the caller's.
 */
export class ChunkReceiver {
  private got = 0n;
  private chunks = 0;
  private fixedTotal: bigint | undefined;
  private fixedRank: number | undefined;
  private fixedKind: number | undefined;

  /** Bytes received so far. */
  get received(): bigint {
    return this.got;
  }

  /** The file's total length, once the first chunk has come. */
  get total(): bigint | undefined {
    return this.fixedTotal;
  }

  /** Whether every byte of the file has come. */
  get complete(): boolean {
    return this.fixedTotal !== undefined && this.got === this.fixedTotal;
  }

  /** Takes the next chunk; returns whether the file is complete. */
  accept(d: CkptData): boolean {
    const fault = ckptDataFault(d);
    if (fault !== undefined) throw ckptDataRefusal(fault.rule, fault.message);
    if (!carriesChunk(d.kind)) throw ckptDataRefusal('kind', `kind ${d.kind} carries no chunk`);
    if (this.fixedTotal === undefined) {
      this.fixedTotal = d.total;
      this.fixedRank = d.rank;
      this.fixedKind = d.kind;
    }
    if (d.kind !== this.fixedKind) {
      throw ckptDataRefusal('kind', `a kind ${d.kind} chunk came in a transfer of kind ${this.fixedKind}`);
    }
    if (d.rank !== this.fixedRank) {
      throw ckptDataRefusal('rank', `a chunk of rank ${d.rank}'s file came in a transfer of rank ${this.fixedRank}'s`);
    }
    if (d.total !== this.fixedTotal) {
      throw ckptDataRefusal('total', `the total changed from ${this.fixedTotal} to ${d.total}`);
    }
    if (d.offset !== this.got) {
      throw ckptDataRefusal(
        'order',
        `a chunk at offset ${d.offset} came after ${this.got} bytes; chunks come in order`,
      );
    }
    if (this.chunks > 0 && this.complete) {
      throw ckptDataRefusal('past-total', `a chunk came after the whole file (${this.got} bytes)`);
    }
    this.chunks++;
    this.got += BigInt(d.chunk.length);
    return this.complete;
  }
}

// ---------------------------------------------------------------------------------------
// CKPT_ACK (8)

export function encodeCkptAck(digest: Uint8Array): Uint8Array {
  return _copy(_bytes(digest, 'digest', 32));
}

/** The SHA-256 of the acknowledged rank file; any length other than 32: H1610 `payload-size`. */
export function decodeCkptAck(payload: Uint8Array): Uint8Array {
  const r = _reader(payload, cutter(SperliCode.frame, 'payload-size', 'CKPT_ACK'));
  const digest = _copy(r.bytes(32, 'SHA-256'));
  trailing(r, 'payload-size', 'CKPT_ACK');
  return digest;
}

// ---------------------------------------------------------------------------------------
// RESUME (10)

export const ResumeStatus = {
  /** The chosen epoch (rank 0, with the COMMIT), loaded a state, or go on. */
  go: 0,
  /** Nothing to load for this rank: fresh. */
  fresh: 1,
  /** Cannot load. */
  cannotLoad: 2,
  /** An offer: the best COMMIT file the sender holds (empty when none). */
  offer: 3,
} as const;

export interface Resume {
  readonly status: number;
  /** The COMMIT file (statuses 0 and 3), or null when the payload carries none. */
  readonly commit: Uint8Array | null;
}

export function encodeResume(status: number, commit: Uint8Array | null = null): Uint8Array {
  _uint(status, 0, 3, 'status');
  const c = commit ?? new Uint8Array(0);
  _bytes(c, 'commit');
  if (c.length > 0 && status !== ResumeStatus.go && status !== ResumeStatus.offer) {
    throw new RangeError(`RESUME status ${status} carries no COMMIT file`);
  }
  return _writer(4 + c.length)
    .u8(status)
    .bytes(new Uint8Array(3))
    .bytes(c)
    .finish();
}

/**
 * Decodes RESUME. Refused (H1610 `payload-size`): fewer than 4 bytes, a status above 3,
 * nonzero bytes 1..3. The bytes after them (a copy) are the COMMIT file, parsed and
 * verified by sperli-files; statuses 1 and 2 carry none, and any bytes there are returned
 * as they came for the caller to ignore (the layout names no refusal for them).
 */
export function decodeResume(payload: Uint8Array): Resume {
  const r = _reader(payload, cutter(SperliCode.frame, 'payload-size', 'RESUME'));
  const status = r.u8('status');
  if (status > 3) {
    throw sperliError(SperliCode.frame, 'payload-size', `RESUME status ${status} is not defined (0..3)`, {
      rule: 'status',
    });
  }
  reservedZero(r, 3, 'payload-size', 'RESUME');
  const rest = _copy(r.bytes(r.left, 'commit'));
  return { status, commit: rest.length > 0 ? rest : null };
}
