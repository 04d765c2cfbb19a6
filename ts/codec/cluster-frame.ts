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
export type ClusterFrameReason = Exclude<(typeof REASONS)[number], 'accepted'> | 'short' | 'iris' | 'utf8';

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

/** The 16-bit total length field, read without checks (for messages). */
function _u32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
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
 * Writes the 40 header bytes with a DataView: the fast path of the sender. It writes exactly
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
  const dv = new DataView(out.buffer, out.byteOffset, CLUSTER_HEADER_SIZE);
  dv.setUint32(0, h.length, true);
  out[4] = CLUSTER_FRAME_VERSION;
  out[5] = h.kind;
  out[6] = h.hops;
  out[7] = h.status;
  dv.setUint32(8, h.shard, true);
  dv.setUint16(12, h.senderLength, true);
  dv.setUint16(14, h.targetLength, true);
  dv.setBigUint64(16, h.epoch, true);
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
  out.set(sender, CLUSTER_HEADER_SIZE);
  out.set(target, CLUSTER_HEADER_SIZE + sender.length);
  out.set(payload, CLUSTER_HEADER_SIZE + sender.length + target.length);
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
  const length = _u32(bytes, 0);
  if (v === ClusterVerdict.accepted) {
    const iris = (bytes[12]! | (bytes[13]! << 8)) + (bytes[14]! | (bytes[15]! << 8));
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
function _decodeChecked(bytes: Uint8Array): ClusterFrame {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const sl = dv.getUint16(12, true);
  const tl = dv.getUint16(14, true);
  let sender = '';
  let target = '';
  try {
    sender = utf8d.decode(bytes.subarray(CLUSTER_HEADER_SIZE, CLUSTER_HEADER_SIZE + sl));
    target = utf8d.decode(bytes.subarray(CLUSTER_HEADER_SIZE + sl, CLUSTER_HEADER_SIZE + sl + tl));
  } catch {
    throw refuse('utf8', 'the sender or target IRI is not valid UTF-8');
  }
  return {
    kind: bytes[5] as ClusterFrameKindCode,
    hops: bytes[6]!,
    status: bytes[7]!,
    shard: dv.getUint32(8, true),
    epoch: dv.getBigUint64(16, true),
    messageId: _copy(bytes, 24, 40),
    sender,
    target,
    payload: _copy(bytes, CLUSTER_HEADER_SIZE + sl + tl, bytes.length),
  };
}

/**
 * A byte-fed reader of frames laid end to end. `push()` chunks as they arrive; `next()` gives
 * the next whole frame or undefined. The header's length is checked before the frame's bytes
 * are gathered, so a frame above 1 MiB is refused at its first 40 bytes. It holds at most
 * the unread chunks and one frame: a receiver that stops reading stops it growing.
 */
export class ClusterFrameReader {
  private chunks: Uint8Array[] = [];
  private head = 0;
  private buffered = 0;
  private readonly hopLimit: number;

  constructor(options: { readonly hopLimit?: number } = {}) {
    this.hopLimit = options.hopLimit ?? DEFAULT_HOP_LIMIT;
    clusterFrameSchema(this.hopLimit);
  }

  /** Bytes held and not yet returned as frames. */
  get bufferedBytes(): number {
    return this.buffered;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /**
   * The bytes of the next whole frame with its header checked, or undefined when more bytes
   * are needed (for readers of ACKs, which need only the header). The bytes may share
   * memory with the pushed chunks.
   */
  nextRaw(): Uint8Array | undefined {
    if (this.buffered < CLUSTER_HEADER_SIZE) return undefined;
    const length = checkClusterHeader(this.peek(CLUSTER_HEADER_SIZE), this.hopLimit);
    if (this.buffered < length) return undefined;
    return this.take(length);
  }

  /** The next whole frame, or undefined when more bytes are needed. Throws on a bad header. */
  next(): ClusterFrame | undefined {
    if (this.buffered < CLUSTER_HEADER_SIZE) return undefined;
    const header = this.peek(CLUSTER_HEADER_SIZE);
    const length = checkClusterHeader(header, this.hopLimit);
    if (this.buffered < length) return undefined;
    return _decodeChecked(this.take(length));
  }

  private peek(n: number): Uint8Array {
    const first = this.chunks[0]!;
    if (first.length - this.head >= n) return first.subarray(this.head, this.head + n);
    const out = new Uint8Array(n);
    let at = 0;
    let off = this.head;
    for (const c of this.chunks) {
      const k = Math.min(n - at, c.length - off);
      out.set(c.subarray(off, off + k), at);
      at += k;
      off = 0;
      if (at === n) break;
    }
    return out;
  }

  private take(n: number): Uint8Array {
    const first = this.chunks[0]!;
    if (first.length - this.head >= n) {
      const out = first.subarray(this.head, this.head + n);
      this.head += n;
      if (this.head === first.length) {
        this.chunks.shift();
        this.head = 0;
      }
      this.buffered -= n;
      return out;
    }
    const out = new Uint8Array(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0]!;
      const k = Math.min(n - at, c.length - this.head);
      out.set(c.subarray(this.head, this.head + k), at);
      at += k;
      this.head += k;
      if (this.head === c.length) {
        this.chunks.shift();
        this.head = 0;
      }
    }
    this.buffered -= n;
    return out;
  }
}
