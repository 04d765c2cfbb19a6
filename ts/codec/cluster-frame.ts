/**
 * The cluster frame (docs/cluster.md, "Frame format"): what one node sends another over the
 * cluster wire. A 40-byte little-endian header, then the sender IRI, the target IRI and the
 * payload. The header is checked on the generic length-first header kernel of plexus/core
 * (WebAssembly, or its TypeScript twin): the total length first, against the 1 MiB maximum,
 * before any other byte is looked at or any buffer is sized.
 *
 *   0 u32 length (whole frame, header included) | 4 u8 version (1) | 5 u8 kind
 *   6 u8 hops | 7 u8 status | 8 u32 shard | 12 u16 sender IRI length
 *   14 u16 target IRI length | 16 u64 fencing epoch | 24 [16] message id
 *
 * Kinds: DATA (1) carries a message; ACK (2) answers one DATA by message id with a status
 * (0 stored, 1 duplicate, 2 stale epoch, 3 refused) and no IRIs or payload.
 */
import { PlexusError } from '../core/errors.js';
import { checkHeader, defineHeader, encodeHeader, type HeaderSchema } from '../core/index.js';
import { ByteWriter, getU16, getU32, putU16, putU32, putU64n } from './bytes.js';
import { FrameAssembler, type FrameFormat, type FrameSink } from './frames.js';

export const CLUSTER_FRAME_VERSION = 1;
export const CLUSTER_HEADER_SIZE = 40;
/** The largest frame, header included: 1 MiB. */
export const MAX_CLUSTER_FRAME = 1_048_576;
/** The longest sender or target IRI in UTF-8 bytes. */
export const MAX_IRI_BYTES = 4096;

export const ClusterFrameKind = { DATA: 1, ACK: 2 } as const;
export type ClusterFrameKindCode = (typeof ClusterFrameKind)[keyof typeof ClusterFrameKind];

export const AckStatus = { stored: 0, duplicate: 1, stale: 2, refused: 3 } as const;
export type AckStatusCode = (typeof AckStatus)[keyof typeof AckStatus];
const ACK_NAMES = ['stored', 'duplicate', 'stale', 'refused'] as const;
export type AckStatusName = (typeof ACK_NAMES)[number];

/** The name of an ACK status code. */
export function ackStatusName(code: number): AckStatusName {
  const n = ACK_NAMES[code];
  if (n === undefined) throw new RangeError(`ACK status ${code} is not 0..3`);
  return n;
}

/** One decoded frame. */
export interface ClusterFrame {
  readonly kind: ClusterFrameKindCode;
  readonly shard: number;
  readonly epoch: bigint;
  readonly hops: number;
  /** ACK only: see AckStatus. */
  readonly status: number;
  /** 16 bytes. */
  readonly messageId: Uint8Array;
  readonly sender: string;
  readonly target: string;
  readonly payload: Uint8Array;
}

/** The fields of a frame to encode. */
export interface ClusterFrameInit {
  readonly kind?: ClusterFrameKindCode;
  readonly shard: number;
  readonly epoch: bigint | number;
  readonly hops?: number;
  readonly status?: number;
  readonly messageId: Uint8Array;
  readonly sender?: string;
  readonly target?: string;
  readonly payload?: Uint8Array;
  /** The sender IRI already encoded as UTF-8 (used instead of `sender` when given). */
  readonly senderBytes?: Uint8Array;
  /** The target IRI already encoded as UTF-8 (used instead of `target` when given). */
  readonly targetBytes?: Uint8Array;
}

/** Kernel verdicts, in the order the checks run (length first). */
export const ClusterVerdict = {
  accepted: 0,
  length: 1,
  version: 2,
  kind: 3,
  hops: 4,
  status: 5,
  senderLength: 6,
  targetLength: 7,
  ackShape: 8,
} as const;

const REASONS = ['accepted', 'length', 'version', 'kind', 'hops', 'status', 'sender', 'target', 'ack'] as const;
export type ClusterFrameReason = Exclude<(typeof REASONS)[number], 'accepted'> | 'short' | 'iris' | 'utf8' | 'ack-run';

function headerDef(hopLimit: number): HeaderSchema {
  const V = ClusterVerdict;
  return defineHeader({
    size: CLUSTER_HEADER_SIZE,
    fields: [
      { name: 'length', offset: 0, width: 4 },
      { name: 'version', offset: 4, width: 1 },
      { name: 'kind', offset: 5, width: 1 },
      { name: 'hops', offset: 6, width: 1 },
      { name: 'status', offset: 7, width: 1 },
      { name: 'shard', offset: 8, width: 4 },
      { name: 'senderLength', offset: 12, width: 2 },
      { name: 'targetLength', offset: 14, width: 2 },
      { name: 'epoch', offset: 16, width: 8 },
      { name: 'messageId', offset: 24, width: 16, kind: 'bytes' },
    ],
    length: {
      field: 'length',
      max: MAX_CLUSTER_FRAME,
      includesHeader: true,
      verdictTooLong: V.length,
      verdictTooShort: V.length,
    },
    checks: [
      { name: 'version', field: 'version', op: 'eq', value: CLUSTER_FRAME_VERSION, verdict: V.version },
      { name: 'kind', field: 'kind', op: 'range', min: 1, max: 2, verdict: V.kind },
      { name: 'hops', field: 'hops', op: 'range', min: 0, max: hopLimit, verdict: V.hops },
      {
        name: 'status-data',
        field: 'status',
        op: 'eq',
        value: 0,
        verdict: V.status,
        when: { field: 'kind', equals: ClusterFrameKind.DATA },
      },
      {
        name: 'status-ack',
        field: 'status',
        op: 'range',
        min: 0,
        max: 3,
        verdict: V.status,
        when: { field: 'kind', equals: ClusterFrameKind.ACK },
      },
      {
        name: 'sender',
        field: 'senderLength',
        op: 'range',
        min: 1,
        max: MAX_IRI_BYTES,
        verdict: V.senderLength,
        when: { field: 'kind', equals: ClusterFrameKind.DATA },
      },
      {
        name: 'target',
        field: 'targetLength',
        op: 'range',
        min: 1,
        max: MAX_IRI_BYTES,
        verdict: V.targetLength,
        when: { field: 'kind', equals: ClusterFrameKind.DATA },
      },
      {
        name: 'ack-sender',
        field: 'senderLength',
        op: 'eq',
        value: 0,
        verdict: V.ackShape,
        when: { field: 'kind', equals: ClusterFrameKind.ACK },
      },
      {
        name: 'ack-target',
        field: 'targetLength',
        op: 'eq',
        value: 0,
        verdict: V.ackShape,
        when: { field: 'kind', equals: ClusterFrameKind.ACK },
      },
      {
        name: 'ack-length',
        field: 'length',
        op: 'eq',
        value: CLUSTER_HEADER_SIZE,
        verdict: V.ackShape,
        when: { field: 'kind', equals: ClusterFrameKind.ACK },
      },
    ],
  });
}

/** The default hop limit of ClusterConfig; a schema with another limit comes from `clusterFrameSchema`. */
export const DEFAULT_HOP_LIMIT = 4;
const SCHEMAS = new Map<number, HeaderSchema>();

/** The compiled header schema for a hop limit (0..255), cached. */
export function clusterFrameSchema(hopLimit = DEFAULT_HOP_LIMIT): HeaderSchema {
  if (!Number.isInteger(hopLimit) || hopLimit < 0 || hopLimit > 255) {
    throw new PlexusError('PLX_WIRE_BAD_FRAME', `hop limit ${hopLimit} must be an integer from 0 to 255`, {
      reason: 'hops',
    });
  }
  let s = SCHEMAS.get(hopLimit);
  if (!s) {
    s = headerDef(hopLimit);
    SCHEMAS.set(hopLimit, s);
  }
  return s;
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder('utf-8', { fatal: true });

function refuse(reason: ClusterFrameReason, message: string, details: Record<string, unknown> = {}): PlexusError {
  const code = reason === 'length' ? 'PLX_WIRE_FRAME_TOO_LARGE' : 'PLX_WIRE_BAD_FRAME';
  return new PlexusError(code, message, { ...details, reason });
}

interface HeaderValues {
  readonly length: number;
  readonly kind: number;
  readonly hops: number;
  readonly status: number;
  readonly shard: number;
  readonly senderLength: number;
  readonly targetLength: number;
  readonly epoch: bigint;
  readonly messageId: Uint8Array;
}

const U64 = (1n << 64n) - 1n;

type AllocUnsafe = (n: number) => Uint8Array;
const _bufferAlloc = (globalThis as { Buffer?: { allocUnsafe: AllocUnsafe } }).Buffer?.allocUnsafe;

/** Frame bytes: from Node's Buffer pool where there is one (every byte is written before use). */
function _alloc(n: number): Uint8Array {
  return _bufferAlloc ? _bufferAlloc(n) : new Uint8Array(n);
}

function _field(name: string, v: number, max: number): void {
  if (!Number.isInteger(v) || v < 0 || v > max) {
    throw new PlexusError('PLX_WIRE_BAD_FRAME', `cannot encode the frame: ${name} ${v} is outside 0..${max}`, {
      reason: 'field',
    });
  }
}

/**
 * Writes the 40 header bytes with the fixed-offset field functions of codec/bytes. It writes exactly
 * what `encodeHeader(clusterFrameSchema(), ...)` of plexus/core writes (a test holds the two
 * to the same bytes).
 */
function writeHeader(out: Uint8Array, h: HeaderValues): void {
  _field('hops', h.hops, 255);
  _field('status', h.status, 255);
  _field('shard', h.shard, 0xffff_ffff);
  if (h.epoch < 0n || h.epoch > U64) {
    throw new PlexusError('PLX_WIRE_BAD_FRAME', `cannot encode the frame: epoch ${h.epoch} is outside 0..2^64-1`, {
      reason: 'field',
    });
  }
  if (out.length < CLUSTER_HEADER_SIZE) {
    throw new PlexusError('PLX_CODEC_OVERFLOW', `a cluster frame header needs ${CLUSTER_HEADER_SIZE} bytes`, {
      need: CLUSTER_HEADER_SIZE,
      size: out.length,
    });
  }
  putU32(out, 0, h.length);
  out[4] = CLUSTER_FRAME_VERSION;
  out[5] = h.kind;
  out[6] = h.hops;
  out[7] = h.status;
  putU32(out, 8, h.shard);
  putU16(out, 12, h.senderLength);
  putU16(out, 14, h.targetLength);
  putU64n(out, 16, h.epoch);
  out.set(h.messageId, 24);
}

/** The header bytes as the plexus/core header kernel encodes them (the reference for writeHeader). */
export function _kernelHeader(h: HeaderValues): Uint8Array {
  return encodeHeader(clusterFrameSchema(255), { ...h, version: CLUSTER_FRAME_VERSION });
}

const EMPTY = new Uint8Array(0);

function _iriLength(what: 'sender' | 'target', n: number): void {
  if (n < 1 || n > MAX_IRI_BYTES) {
    throw refuse(what, `the ${what} IRI has ${n} UTF-8 bytes; it must have 1 to ${MAX_IRI_BYTES}`);
  }
}

/** Encodes one frame. Refuses a frame above 1 MiB (PLX_WIRE_FRAME_TOO_LARGE) or bad fields. */
export function encodeClusterFrame(init: ClusterFrameInit): Uint8Array {
  const kind = init.kind ?? ClusterFrameKind.DATA;
  const data = kind === ClusterFrameKind.DATA;
  const sender = data ? (init.senderBytes ?? utf8.encode(init.sender ?? '')) : EMPTY;
  const target = data ? (init.targetBytes ?? utf8.encode(init.target ?? '')) : EMPTY;
  const payload = data ? (init.payload ?? EMPTY) : EMPTY;
  if (data) {
    _iriLength('sender', sender.length);
    _iriLength('target', target.length);
  }
  if (!(init.messageId instanceof Uint8Array) || init.messageId.length !== 16) {
    throw new PlexusError('PLX_WIRE_BAD_FRAME', 'a message id is exactly 16 bytes', { reason: 'message-id' });
  }
  const total = CLUSTER_HEADER_SIZE + sender.length + target.length + payload.length;
  if (total > MAX_CLUSTER_FRAME) {
    throw refuse(
      'length',
      `a frame of ${total} bytes is above the maximum of ${MAX_CLUSTER_FRAME} bytes (1 MiB); send a smaller payload`,
      { length: total, max: MAX_CLUSTER_FRAME },
    );
  }
  const out = _alloc(total);
  writeHeader(out, {
    length: total,
    kind,
    hops: init.hops ?? 0,
    status: init.status ?? 0,
    shard: init.shard,
    senderLength: sender.length,
    targetLength: target.length,
    epoch: typeof init.epoch === 'bigint' ? init.epoch : BigInt(init.epoch),
    messageId: init.messageId,
  });
  new ByteWriter(out, CLUSTER_HEADER_SIZE).bytes(sender).bytes(target).bytes(payload);
  return out;
}

/** An ACK for `frame` with `status`. */
export function encodeAck(
  frame: Pick<ClusterFrame, 'shard' | 'epoch' | 'messageId'>,
  status: AckStatusCode,
  out: Uint8Array = new Uint8Array(CLUSTER_HEADER_SIZE),
): Uint8Array {
  writeHeader(out, {
    length: CLUSTER_HEADER_SIZE,
    kind: ClusterFrameKind.ACK,
    hops: 0,
    status,
    shard: frame.shard,
    senderLength: 0,
    targetLength: 0,
    epoch: frame.epoch,
    messageId: frame.messageId,
  });
  return out;
}

/**
 * Checks the header at the start of `bytes` (at least 40 bytes): the length first, then
 * version, kind, hops, status and the IRI lengths. Returns the total frame length, or throws
 * PLX_WIRE_FRAME_TOO_LARGE / PLX_WIRE_BAD_FRAME with `details.reason`.
 */
export function checkClusterHeader(bytes: Uint8Array, hopLimit = DEFAULT_HOP_LIMIT): number {
  if (bytes.length < CLUSTER_HEADER_SIZE) {
    throw refuse('short', `a cluster frame header needs ${CLUSTER_HEADER_SIZE} bytes, got ${bytes.length}`);
  }
  const v = checkHeader(clusterFrameSchema(hopLimit), bytes.subarray(0, CLUSTER_HEADER_SIZE));
  const length = getU32(bytes, 0);
  if (v === ClusterVerdict.accepted) {
    const iris = getU16(bytes, 12) + getU16(bytes, 14);
    if (CLUSTER_HEADER_SIZE + iris > length) {
      throw refuse('iris', `the IRIs (${iris} bytes) do not fit in a frame of ${length} bytes`, { length });
    }
    return length;
  }
  const reason = (REASONS[v] ?? 'kind') as ClusterFrameReason;
  const what: Record<string, string> = {
    length:
      length > MAX_CLUSTER_FRAME
        ? `a frame of ${length} bytes is above the maximum of ${MAX_CLUSTER_FRAME} bytes (1 MiB)`
        : `a frame length of ${length} is shorter than the ${CLUSTER_HEADER_SIZE}-byte header`,
    version: `frame version ${bytes[4]} is not supported (this node speaks version ${CLUSTER_FRAME_VERSION})`,
    kind: `frame kind ${bytes[5]} is not defined (1 DATA, 2 ACK)`,
    hops: `the frame has travelled ${bytes[6]} hops, above the hop limit ${hopLimit}`,
    status: `status ${bytes[7]} is not allowed for frame kind ${bytes[5]}`,
    sender: 'a DATA frame needs a sender IRI of 1 to 4096 bytes',
    target: 'a DATA frame needs a target IRI of 1 to 4096 bytes',
    ack: 'an ACK frame is a bare 40-byte header without IRIs',
  };
  throw refuse(reason, what[reason] ?? 'bad frame header', { length, verdict: v });
}

/**
 * The verdict of the plexus/core header kernel for the 40 bytes at b[at ..], computed in
 * place by a check written out for this one schema (no copy into WebAssembly memory, no
 * schema walk): the reader's fast path. It gives exactly the kernel's verdict, checks in the
 * same order (a fuzz test holds the two together); the reader asks `checkClusterHeader` for
 * the refusal's message whenever it is not `accepted`.
 */
export function clusterHeaderVerdict(b: Uint8Array, at: number, hopLimit: number): number {
  const V = ClusterVerdict;
  const length = getU32(b, at);
  if (length > MAX_CLUSTER_FRAME || length < CLUSTER_HEADER_SIZE) return V.length;
  if (b[at + 4] !== CLUSTER_FRAME_VERSION) return V.version;
  const kind = b[at + 5]!;
  if (kind < 1 || kind > 2) return V.kind;
  if (b[at + 6]! > hopLimit) return V.hops;
  const status = b[at + 7]!;
  const sl = getU16(b, at + 12);
  const tl = getU16(b, at + 14);
  if (kind === ClusterFrameKind.DATA) {
    if (status !== 0) return V.status;
    if (sl < 1 || sl > MAX_IRI_BYTES) return V.senderLength;
    if (tl < 1 || tl > MAX_IRI_BYTES) return V.targetLength;
    return V.accepted;
  }
  if (status > 3) return V.status;
  if (sl !== 0 || tl !== 0 || length !== CLUSTER_HEADER_SIZE) return V.ackShape;
  return V.accepted;
}

/** A copy of bytes[start, end) as a plain Uint8Array (a Buffer's slice would share memory). */
function _copy(bytes: Uint8Array, start: number, end: number): Uint8Array {
  const out = new Uint8Array(end - start);
  out.set(bytes.subarray(start, end));
  return out;
}

/** Decodes exactly one whole frame. */
export function decodeClusterFrame(bytes: Uint8Array, hopLimit = DEFAULT_HOP_LIMIT): ClusterFrame {
  const length = checkClusterHeader(bytes, hopLimit);
  if (bytes.length !== length) {
    throw refuse('short', `the frame says ${length} bytes but ${bytes.length} were given`, { length });
  }
  return _decodeChecked(bytes);
}

/** Decodes a whole frame whose header `checkClusterHeader` accepted for exactly its length. */
function _decodeChecked(bytes: Uint8Array, memo?: DecodeMemo, at = 0, end = bytes.length): ClusterFrame {
  const sl = getU16(bytes, at + 12);
  const tl = getU16(bytes, at + 14);
  const s0 = at + CLUSTER_HEADER_SIZE;
  const t0 = s0 + sl;
  const p0 = t0 + tl;
  let sender: string;
  let target: string;
  if (memo) {
    sender = memo.iri(bytes, s0, t0);
    target = memo.iri(bytes, t0, p0);
  } else {
    try {
      sender = utf8d.decode(bytes.subarray(s0, t0));
      target = utf8d.decode(bytes.subarray(t0, p0));
    } catch {
      throw refuse('utf8', 'the sender or target IRI is not valid UTF-8');
    }
  }
  const lo = getU32(bytes, at + 16);
  const hi = getU32(bytes, at + 20);
  let messageId: Uint8Array;
  let payload: Uint8Array;
  if (memo) {
    // The id and the payload in one piece of the memo's slab.
    const both = memo.copy(bytes, at + 24, at + 40, p0, end);
    messageId = both.subarray(0, 16);
    payload = both.subarray(16);
  } else {
    messageId = _copy(bytes, at + 24, at + 40);
    payload = _copy(bytes, p0, end);
  }
  return {
    kind: bytes[at + 5] as ClusterFrameKindCode,
    hops: bytes[at + 6]!,
    status: bytes[at + 7]!,
    shard: getU32(bytes, at + 8),
    epoch: memo ? memo.epoch(lo, hi) : (BigInt(hi) << 32n) | BigInt(lo),
    messageId,
    sender,
    target,
    payload,
  };
}

/** IRIs remembered per reader before the memo starts over, and the longest one remembered. */
const IRI_MEMO = 256;
const IRI_MEMO_BYTES = 256;
/** Slab for the copies of small frames (ids and payloads), carved front to back. */
const COPY_SLAB = 8192;

/**
 * What a reader remembers between frames so that a stream of frames between the same actors
 * costs no UTF-8 decode, no BigInt and one small copy per frame: the IRI strings by their
 * bytes (at most 256 IRIs of up to 256 bytes, compared byte for byte), the last epoch, and a
 * slab the copies are carved from (plain Uint8Array views, each frame's own bytes; an 8 KiB
 * slab lives while any of its views does, as with Node's Buffer pool).
 */
class DecodeMemo {
  private readonly iris = new Map<number, { readonly bytes: Uint8Array; readonly text: string }>();
  private lastLo = -1;
  private lastHi = -1;
  private lastEpoch = 0n;
  private slab = new Uint8Array(0);
  private slabAt = 0;

  iri(b: Uint8Array, start: number, end: number): string {
    let h = 0x811c9dc5 ^ (end - start);
    for (let i = start; i < end; i++) h = Math.imul(h ^ b[i]!, 0x01000193);
    const hit = this.iris.get(h);
    if (hit !== undefined && hit.bytes.length === end - start) {
      const hb = hit.bytes;
      let same = true;
      for (let i = 0; i < hb.length; i++) {
        if (hb[i] !== b[start + i]) {
          same = false;
          break;
        }
      }
      if (same) return hit.text;
    }
    let text: string;
    try {
      text = utf8d.decode(b.subarray(start, end));
    } catch {
      throw refuse('utf8', 'the sender or target IRI is not valid UTF-8');
    }
    if (end - start <= IRI_MEMO_BYTES) {
      if (this.iris.size >= IRI_MEMO) this.iris.clear();
      this.iris.set(h, { bytes: _copy(b, start, end), text });
    }
    return text;
  }

  epoch(lo: number, hi: number): bigint {
    if (lo !== this.lastLo || hi !== this.lastHi) {
      this.lastEpoch = (BigInt(hi) << 32n) | BigInt(lo);
      this.lastLo = lo;
      this.lastHi = hi;
    }
    return this.lastEpoch;
  }

  /** A fresh copy of b[a0, a1) followed by b[c0, c1). */
  copy(b: Uint8Array, a0: number, a1: number, c0: number, c1: number): Uint8Array {
    const n = a1 - a0 + (c1 - c0);
    let out: Uint8Array;
    if (n > COPY_SLAB / 4) out = new Uint8Array(n);
    else {
      if (this.slabAt + n > this.slab.length) {
        this.slab = new Uint8Array(COPY_SLAB);
        this.slabAt = 0;
      }
      out = this.slab.subarray(this.slabAt, this.slabAt + n);
      this.slabAt += (n + 7) & ~7;
    }
    const k = a1 - a0;
    for (let i = 0; i < k; i++) out[i] = b[a0 + i]!;
    if (c1 - c0 <= 64) for (let i = c0; i < c1; i++) out[k + i - c0] = b[i]!;
    else out.set(b.subarray(c0, c1), k);
    return out;
  }
}

/**
 * The cluster frame as codec/frames' assembler judges it: the header's length first (against
 * 1 MiB), then every header check of `checkClusterHeader`, before any byte past the header is
 * gathered.
 */
function clusterFrameFormat(hopLimit: number): FrameFormat {
  const judgeAt = (b: Uint8Array, at: number): number => {
    const length = getU32(b, at);
    if (
      clusterHeaderVerdict(b, at, hopLimit) !== ClusterVerdict.accepted ||
      CLUSTER_HEADER_SIZE + getU16(b, at + 12) + getU16(b, at + 14) > length
    ) {
      return checkClusterHeader(b.subarray(at, at + CLUSTER_HEADER_SIZE), hopLimit);
    }
    return length;
  };
  return {
    headerBytes: CLUSTER_HEADER_SIZE,
    maxFrame: MAX_CLUSTER_FRAME,
    frameLength: (header) => judgeAt(header, 0),
    frameLengthAt: judgeAt,
  };
}

/**
 * A byte-fed reader of frames laid end to end, on codec/frames' `FrameAssembler`. `push()`
 * chunks as they arrive; `next()` gives the next whole frame or undefined. The header's length
 * is checked before the frame's bytes are gathered, so a frame above 1 MiB is refused at its
 * first 40 bytes. It holds at most the whole frames not yet taken and one partial frame: a
 * receiver that stops reading stops it growing. A refused header is thrown by the `next()`
 * (or `nextRaw()`) that reaches it, after the whole frames before it, and by every call after.
 */
export class ClusterFrameReader implements FrameSink {
  private readonly assembler: FrameAssembler;
  /**
   * Whole frames, header checked, not yet taken: spans bytes[i][starts[i], ends[i]) for i in
   * [head, count). The arrays are reused (a taken slot drops its chunk).
   */
  private readonly bytes: Uint8Array[] = [];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private head = 0;
  private count = 0;
  private held = 0;
  private failure: unknown;
  private readonly memo = new DecodeMemo();

  constructor(options: { readonly hopLimit?: number } = {}) {
    const hopLimit = options.hopLimit ?? DEFAULT_HOP_LIMIT;
    clusterFrameSchema(hopLimit);
    this.assembler = new FrameAssembler(clusterFrameFormat(hopLimit));
  }

  /** Bytes held and not yet returned as frames. */
  get bufferedBytes(): number {
    return this.held + this.assembler.buffered;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0 || this.failure !== undefined) return;
    try {
      this.assembler.feed(chunk, this);
    } catch (e) {
      this.failure = e;
    }
  }

  /** The assembler's sink: queues one whole frame (not for callers). */
  frame(frame: Uint8Array): void {
    this.span(frame, 0, frame.length);
  }

  /** The assembler's sink: queues one whole frame as a span (not for callers). */
  span(bytes: Uint8Array, start: number, end: number): void {
    const i = this.count++;
    this.bytes[i] = bytes;
    this.starts[i] = start;
    this.ends[i] = end;
    this.held += end - start;
  }

  /** Takes the next queued frame's span into `span`; false when none is queued (or throws the refusal). */
  private take(): boolean {
    if (this.head === this.count) {
      if (this.failure !== undefined) throw this.failure;
      return false;
    }
    const i = this.head++;
    this.spanBytes = this.bytes[i] as Uint8Array;
    this.bytes[i] = EMPTY;
    this.spanStart = this.starts[i] as number;
    this.spanEnd = this.ends[i] as number;
    this.held -= this.spanEnd - this.spanStart;
    if (this.head === this.count) {
      this.head = 0;
      this.count = 0;
    }
    return true;
  }
  private spanBytes: Uint8Array = EMPTY;
  private spanStart = 0;
  private spanEnd = 0;

  /**
   * The bytes of the next whole frame with its header checked, or undefined when more bytes
   * are needed (for readers of ACKs, which need only the header). The bytes may share
   * memory with the pushed chunks.
   */
  nextRaw(): Uint8Array | undefined {
    if (!this.take()) return undefined;
    const b = this.spanBytes;
    this.spanBytes = EMPTY;
    return this.spanStart === 0 && this.spanEnd === b.length ? b : b.subarray(this.spanStart, this.spanEnd);
  }

  /** The next whole frame, or undefined when more bytes are needed. Throws on a bad header. */
  next(): ClusterFrame | undefined {
    if (!this.take()) return undefined;
    const b = this.spanBytes;
    this.spanBytes = EMPTY;
    // Decoded in place, from the chunk the frame lies in (no view, no copy of the frame).
    return _decodeChecked(b, this.memo, this.spanStart, this.spanEnd);
  }
}

// ------------------------------------------------------------------------------------------
// ACK runs: the records of a connection's ACK stream (docs/cluster.md, "ACK runs").

/**
 * One ACK run is 8 little-endian bytes:
 *
 *   0 u32 HTTP/2 stream id of the frame stream | 4 u16 count (1..65535) | 6 u8 status (0..3)
 *   7 u8 marker (0xA1)
 *
 * It acknowledges the next `count` DATA frames of that stream, in the order they were sent,
 * with one status. A receiver handles a stream's frames strictly in order, so the ACKs of a
 * stream are a sequence of runs.
 */
export const ACK_RUN_SIZE = 8;
export const ACK_RUN_MARKER = 0xa1;
export const MAX_ACK_RUN = 0xffff;

/** Writes one ACK run at out[at, at + 8). */
export function encodeAckRun(out: Uint8Array, at: number, streamId: number, count: number, status: number): void {
  putU32(out, at, streamId);
  putU16(out, at + 4, count);
  out[at + 6] = status;
  out[at + 7] = ACK_RUN_MARKER;
}

/** Receives ACK runs: (stream id, count, status). */
export type AckRunSink = (streamId: number, count: number, status: AckStatusCode) => void;

/**
 * A byte-fed reader of ACK runs. It holds at most 7 bytes between chunks and allocates
 * nothing per run. A run with another marker, a status above 3, a count of 0 or a stream id
 * that a client cannot have opened (even, 0, or above 2^31 - 1) is refused with
 * PLX_WIRE_BAD_FRAME (`details.reason` 'ack-run'); the reader then refuses everything after.
 */
export class AckRunReader {
  private readonly carry = new Uint8Array(ACK_RUN_SIZE);
  private carried = 0;
  private failed = false;

  /** Feeds a chunk; calls `sink` for each whole run, in order. Throws on a bad run. */
  feed(chunk: Uint8Array, sink: AckRunSink): void {
    if (this.failed) throw refuse('ack-run', 'the ACK stream already carried a bad run');
    let at = 0;
    if (this.carried > 0) {
      const k = Math.min(ACK_RUN_SIZE - this.carried, chunk.length);
      this.carry.set(chunk.subarray(0, k), this.carried);
      this.carried += k;
      at = k;
      if (this.carried < ACK_RUN_SIZE) return;
      this.carried = 0;
      this.one(this.carry, 0, sink);
    }
    const end = chunk.length - ((chunk.length - at) % ACK_RUN_SIZE);
    for (; at < end; at += ACK_RUN_SIZE) this.one(chunk, at, sink);
    if (at < chunk.length) {
      this.carry.set(chunk.subarray(at), 0);
      this.carried = chunk.length - at;
    }
  }

  private one(b: Uint8Array, at: number, sink: AckRunSink): void {
    const streamId = getU32(b, at);
    const count = getU16(b, at + 4);
    const status = b[at + 6]!;
    if (b[at + 7] !== ACK_RUN_MARKER || status > 3 || count === 0 || streamId % 2 === 0 || streamId > 0x7fff_ffff) {
      this.failed = true;
      throw refuse(
        'ack-run',
        `a bad ACK run (stream ${streamId}, count ${count}, status ${status}, marker ${b[at + 7]}): ` +
          'the peer does not speak this ACK stream format; upgrade both nodes to the same plexus version',
      );
    }
    sink(streamId, count, status as AckStatusCode);
  }
}

// ------------------------------------------------------------------------------------------
// The sender's fast path: frames written straight into a batch buffer.

let _lastEpoch = -1n;
let _lastEpochLo = 0;
let _lastEpochHi = 0;

/**
 * Writes one DATA frame at out[at, at + length) with the given already-encoded IRIs and a
 * message id taken from id[idAt, idAt + 16). The caller checked the IRI lengths (1..4096) and
 * that `length` (40 + IRIs + payload) is at most 1 MiB; the other fields are checked here.
 * Writes exactly what `encodeClusterFrame` writes (a test holds the two to the same bytes).
 */
export function writeDataFrame(
  out: Uint8Array,
  at: number,
  length: number,
  shard: number,
  epoch: bigint,
  hops: number,
  id: Uint8Array,
  idAt: number,
  sender: Uint8Array,
  target: Uint8Array,
  payload: Uint8Array,
): void {
  if (hops !== (hops & 0xff)) _field('hops', hops, 255);
  if (!(shard >= 0 && shard <= 0xffff_ffff && Number.isInteger(shard))) _field('shard', shard, 0xffff_ffff);
  if (epoch !== _lastEpoch) {
    if (epoch < 0n || epoch > U64) {
      throw new PlexusError('PLX_WIRE_BAD_FRAME', `cannot encode the frame: epoch ${epoch} is outside 0..2^64-1`, {
        reason: 'field',
      });
    }
    _lastEpochLo = Number(epoch & 0xffff_ffffn);
    _lastEpochHi = Number(epoch >> 32n);
    _lastEpoch = epoch;
  }
  const sl = sender.length;
  const tl = target.length;
  putU32(out, at, length);
  out[at + 4] = CLUSTER_FRAME_VERSION;
  out[at + 5] = ClusterFrameKind.DATA;
  out[at + 6] = hops;
  out[at + 7] = 0;
  putU32(out, at + 8, shard);
  putU16(out, at + 12, sl);
  putU16(out, at + 14, tl);
  putU32(out, at + 16, _lastEpochLo);
  putU32(out, at + 20, _lastEpochHi);
  for (let i = 0; i < 16; i++) out[at + 24 + i] = id[idAt + i]!;
  let p = at + CLUSTER_HEADER_SIZE;
  if (sl <= 64) for (let i = 0; i < sl; i++) out[p + i] = sender[i]!;
  else out.set(sender, p);
  p += sl;
  if (tl <= 64) for (let i = 0; i < tl; i++) out[p + i] = target[i]!;
  else out.set(target, p);
  p += tl;
  if (payload.length <= 64) for (let i = 0; i < payload.length; i++) out[p + i] = payload[i]!;
  else out.set(payload, p);
}
