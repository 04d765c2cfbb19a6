/**
 * The SPERLI version 1 frame header (docs/sperli.md, "Frame header"): 52 bytes, checked
 * length first and then field by field in the documented order, on the generic
 * length-first header kernel of plexus/core (WebAssembly, or its TypeScript twin).
 *
 *   0 u32 length | 4 u8 type | 5 u8 flags | 6 u16 service | 8 u32 membership epoch
 *   12 [16] job id | 28 u32 source rank | 32 u32 target rank | 36 u32 incarnation
 *   40 u64 epoch | 48 u32 tag
 *
 * After every header check has passed, and before any payload byte is read, the frame's
 * type decides the remaining checks, in this order: HELLO first and only once, a
 * COLLECTIVE of at least 16 bytes, and the payload sizes each type allows.
 */
import type { PlexusError } from '../core/errors.js';
import { checkHeader, defineHeader, encodeHeader, type HeaderCheckDef, type HeaderSchema } from '../core/index.js';
import { getU16, getU32, getU64n } from './bytes.js';
import { _bytes, _copy, _hex, _uint, SperliCode, sperliError } from './sperli-errors.js';

export const FRAME_HEADER_SIZE = 52;
/** The largest payload of one frame: 16 MiB. */
export const MAX_PAYLOAD = 16_777_216;
/** Collective data per frame: the maximum payload less the 16-byte collective header. */
export const MAX_COLLECTIVE_DATA = MAX_PAYLOAD - 16;
/** The largest user tag of a DATA frame; tags from 2^31 are reserved. */
export const MAX_USER_TAG = 0x7fff_ffff;

export const FrameType = {
  HELLO: 1,
  DATA: 2,
  COLLECTIVE: 3,
  HEARTBEAT: 4,
  ABORT: 5,
  CKPT_BEGIN: 6,
  CKPT_DATA: 7,
  CKPT_ACK: 8,
  CKPT_COMMIT: 9,
  RESUME: 10,
  BYE: 11,
} as const;
export type FrameTypeName = keyof typeof FrameType;
export type FrameTypeCode = (typeof FrameType)[FrameTypeName];

const TYPE_NAMES: readonly string[] = [
  'type 0',
  'HELLO',
  'DATA',
  'COLLECTIVE',
  'HEARTBEAT',
  'ABORT',
  'CKPT_BEGIN',
  'CKPT_DATA',
  'CKPT_ACK',
  'CKPT_COMMIT',
  'RESUME',
  'BYE',
];

/** The name of a frame type code ("type 12" for codes outside 1..11). */
export function frameTypeName(type: number): string {
  return TYPE_NAMES[type] ?? `type ${type}`;
}

/** Whether a frame type carries a checkpoint epoch (CKPT_BEGIN .. RESUME, 6..10). */
export function carriesEpoch(type: number): boolean {
  return type >= FrameType.CKPT_BEGIN && type <= FrameType.RESUME;
}

/** The reasons (`details.reason`) of H1610 refusals of a frame header and its size. */
export type FrameRefusalReason =
  | 'length'
  | 'type'
  | 'flags'
  | 'service'
  | 'membership-epoch'
  | 'job-id'
  | 'source-rank'
  | 'target-rank'
  | 'incarnation'
  | 'tag-reserved'
  | 'tag-nonzero'
  | 'epoch'
  | 'collective-short'
  | 'hello-order'
  | 'hello'
  | 'payload-size'
  | 'ckpt-data';

/** Kernel verdicts of the SPERLI schema, in the order their checks run. */
export const FrameVerdict = {
  accepted: 0,
  length: 1,
  type: 2,
  flags: 3,
  service: 4,
  membershipEpoch: 5,
  jobId: 6,
  sourceRank: 7,
  targetRank: 8,
  incarnation: 9,
  /** An older incarnation: the frame is dropped, not refused. */
  drop: 10,
  epoch: 11,
  tagReserved: 12,
  tagNonzero: 13,
} as const;

const REASON_OF_VERDICT: readonly (FrameRefusalReason | undefined)[] = [
  undefined,
  'length',
  'type',
  'flags',
  'service',
  'membership-epoch',
  'job-id',
  'source-rank',
  'target-rank',
  'incarnation',
  undefined,
  'epoch',
  'tag-reserved',
  'tag-nonzero',
];

/**
 * The header description for plexus/core: the fields of docs/sperli.md and their checks
 * in the documented order. "epoch is 0 unless the type is 6..10" is one conditional check.
 */
function headerDef(expect: ConnectionExpectations) {
  const V = FrameVerdict;
  const epochChecks: HeaderCheckDef[] = [
    { name: 'epoch', field: 'epoch', op: 'eq', value: 0, verdict: V.epoch, when: { field: 'type', outside: [6, 10] } },
  ];
  return defineHeader({
    size: FRAME_HEADER_SIZE,
    fields: [
      { name: 'length', offset: 0, width: 4 },
      { name: 'type', offset: 4, width: 1 },
      { name: 'flags', offset: 5, width: 1 },
      { name: 'service', offset: 6, width: 2 },
      { name: 'membershipEpoch', offset: 8, width: 4 },
      { name: 'jobId', offset: 12, width: 16, kind: 'bytes' },
      { name: 'sourceRank', offset: 28, width: 4 },
      { name: 'targetRank', offset: 32, width: 4 },
      { name: 'incarnation', offset: 36, width: 4 },
      { name: 'epoch', offset: 40, width: 8 },
      { name: 'tag', offset: 48, width: 4 },
    ],
    length: { field: 'length', max: MAX_PAYLOAD, verdictTooLong: V.length },
    checks: [
      { name: 'type', field: 'type', op: 'range', min: 1, max: 11, verdict: V.type },
      { name: 'flags', field: 'flags', op: 'eq', value: 0, verdict: V.flags },
      { name: 'service', field: 'service', op: 'eq', value: 0, verdict: V.service },
      { name: 'membership-epoch', field: 'membershipEpoch', op: 'eq', value: 0, verdict: V.membershipEpoch },
      { name: 'job-id', field: 'jobId', op: 'bytes-eq', value: expect.jobId, verdict: V.jobId },
      { name: 'source-rank', field: 'sourceRank', op: 'eq', value: expect.peerRank, verdict: V.sourceRank },
      { name: 'target-rank', field: 'targetRank', op: 'eq', value: expect.ownRank, verdict: V.targetRank },
      {
        name: 'incarnation',
        field: 'incarnation',
        op: 'order',
        value: expect.incarnation,
        verdict: V.incarnation,
        below: V.drop,
      },
      ...epochChecks,
      {
        name: 'tag-reserved',
        field: 'tag',
        op: 'range',
        min: 0,
        max: MAX_USER_TAG,
        verdict: V.tagReserved,
        when: { field: 'type', equals: FrameType.DATA },
      },
      {
        name: 'tag-nonzero',
        field: 'tag',
        op: 'eq',
        value: 0,
        verdict: V.tagNonzero,
        when: { field: 'type', notEquals: FrameType.DATA },
      },
    ],
  });
}

/** What a receiver expects in every frame header of one connection. */
export interface ConnectionExpectations {
  /** The job id, 16 bytes. */
  readonly jobId: Uint8Array;
  /** The authenticated peer's rank (from its certificate): the only source rank allowed. */
  readonly peerRank: number;
  /** The receiver's own rank: the only target rank allowed. */
  readonly ownRank: number;
  /** The receiver's incarnation: older frames are dropped, newer ones refused. */
  readonly incarnation: number;
}

function checkExpectations(e: Partial<ConnectionExpectations>): void {
  if (e.jobId !== undefined) _bytes(e.jobId, 'jobId', 16);
  if (e.peerRank !== undefined) _uint(e.peerRank, 0, 0xffff_ffff, 'peerRank');
  if (e.ownRank !== undefined) _uint(e.ownRank, 0, 0xffff_ffff, 'ownRank');
  if (e.incarnation !== undefined) _uint(e.incarnation, 0, 0xffff_ffff, 'incarnation');
}

/**
 * The receive side of one connection: the compiled header schema with this
 * connection's expected values, and whether the peer's HELLO has arrived.
 * `decodeFrameHeader` marks the HELLO as received when it accepts one.
 */
export class FrameContext {
  /** The plexus/core header schema; its check arguments are this connection's values. */
  readonly schema: HeaderSchema;
  /** Whether the peer's HELLO was accepted on this connection. */
  helloReceived: boolean;
  private current: ConnectionExpectations;

  constructor(expect: ConnectionExpectations, options: { readonly helloReceived?: boolean } = {}) {
    checkExpectations(expect);
    this.current = { ...expect, jobId: _copy(expect.jobId) };
    this.schema = headerDef(this.current);
    this.helloReceived = options.helloReceived === true;
  }

  /** The values the header checks compare against. */
  get expectations(): ConnectionExpectations {
    return this.current;
  }

  /** Changes some expected values (through `schema.set`, so both backends see them). */
  update(change: Partial<ConnectionExpectations>): void {
    checkExpectations(change);
    if (change.jobId !== undefined) this.schema.set('job-id', change.jobId);
    if (change.peerRank !== undefined) this.schema.set('source-rank', change.peerRank);
    if (change.ownRank !== undefined) this.schema.set('target-rank', change.ownRank);
    if (change.incarnation !== undefined) this.schema.set('incarnation', change.incarnation);
    this.current = { ...this.current, ...change, jobId: _copy(change.jobId ?? this.current.jobId) };
  }
}

/** A decoded frame header. Integers of 8 bytes are bigint. */
export interface FrameHeader {
  readonly length: number;
  readonly type: number;
  readonly flags: number;
  readonly service: number;
  readonly membershipEpoch: number;
  readonly jobId: Uint8Array;
  readonly sourceRank: number;
  readonly targetRank: number;
  readonly incarnation: number;
  readonly tag: number;
  readonly epoch: bigint;
}

/** The outcome of one frame header. */
export type HeaderOutcome =
  | { readonly kind: 'accept'; readonly header: FrameHeader }
  /** An older incarnation: read and discard `header.length` payload bytes, nothing else. */
  | { readonly kind: 'drop'; readonly header: FrameHeader }
  | { readonly kind: 'refuse'; readonly error: PlexusError; readonly header: FrameHeader };

/** Reads the 52 header bytes at the start of `bytes`, without any check. */
export function readFrameHeader(bytes: Uint8Array): FrameHeader {
  if (!(bytes instanceof Uint8Array) || bytes.length < FRAME_HEADER_SIZE) {
    throw new RangeError(`a SPERLI frame header needs ${FRAME_HEADER_SIZE} bytes`);
  }
  return {
    length: getU32(bytes, 0),
    type: bytes[4] as number,
    flags: bytes[5] as number,
    service: getU16(bytes, 6),
    membershipEpoch: getU32(bytes, 8),
    jobId: _copy(bytes, 12, 28),
    sourceRank: getU32(bytes, 28),
    targetRank: getU32(bytes, 32),
    incarnation: getU32(bytes, 36),
    epoch: getU64n(bytes, 40),
    tag: getU32(bytes, 48),
  };
}

/** The payload sizes a frame type allows, and the reason given for any other size. */
export interface PayloadBounds {
  readonly min: number;
  readonly max: number;
  readonly reason: FrameRefusalReason;
}

const HELLO_MAX = 10 + 4096;
const ABORT_MAX = 14 + 1024;
const CKPT_DATA_MAX = 24 + 1_048_576;

/** Indexed by frame type; entry 0 is never used (type 0 is refused by the header checks). */
const BOUNDS: readonly PayloadBounds[] = [
  { min: 0, max: 0, reason: 'type' },
  { min: 10, max: HELLO_MAX, reason: 'hello' }, // HELLO
  { min: 0, max: MAX_PAYLOAD, reason: 'payload-size' }, // DATA
  { min: 16, max: MAX_PAYLOAD, reason: 'collective-short' }, // COLLECTIVE
  { min: 8, max: 8, reason: 'payload-size' }, // HEARTBEAT
  { min: 14, max: ABORT_MAX, reason: 'payload-size' }, // ABORT
  { min: 8, max: 8, reason: 'payload-size' }, // CKPT_BEGIN
  { min: 24, max: CKPT_DATA_MAX, reason: 'ckpt-data' }, // CKPT_DATA
  { min: 32, max: 32, reason: 'payload-size' }, // CKPT_ACK
  { min: 0, max: MAX_PAYLOAD, reason: 'payload-size' }, // CKPT_COMMIT
  { min: 4, max: MAX_PAYLOAD, reason: 'payload-size' }, // RESUME
  { min: 0, max: 0, reason: 'payload-size' }, // BYE
];

/**
 * The payload lengths a frame type can have at all, checked from the header before the
 * payload is read: fixed sizes (HEARTBEAT 8, CKPT_BEGIN 8, CKPT_ACK 32, BYE 0), a
 * COLLECTIVE of at least its 16-byte header, and the bounds that follow from each
 * layout, with the reason its payload rule gives (HELLO 10 + a token of at most 4096,
 * ABORT 14 + a text of at most 1024, CKPT_DATA 24 + a chunk of at most 1 MiB, RESUME at
 * least 4). A CKPT_COMMIT payload is a COMMIT file, judged as one (H1621, H1623).
 */
export function payloadBounds(type: number): PayloadBounds | undefined {
  return type >= 1 && type <= 11 ? BOUNDS[type] : undefined;
}

function refusal(reason: FrameRefusalReason, message: string, h: FrameHeader, extra: Record<string, unknown> = {}) {
  return sperliError(SperliCode.frame, reason, message, {
    type: h.type,
    sourceRank: h.sourceRank,
    length: h.length,
    ...extra,
  });
}

function kernelRefusal(reason: FrameRefusalReason, h: FrameHeader, e: ConnectionExpectations): PlexusError {
  const t = frameTypeName(h.type);
  switch (reason) {
    case 'length':
      return refusal(
        reason,
        `frame length ${h.length} is above the maximum of ${MAX_PAYLOAD} bytes (16 MiB); a sender splits a larger message into frames`,
        h,
      );
    case 'type':
      return refusal(reason, `frame type ${h.type} is not defined in SPERLI version 1 (types are 1..11)`, h);
    case 'flags':
      return refusal(reason, `frame flags ${h.flags} are reserved and must be 0 in SPERLI version 1`, h);
    case 'service':
      return refusal(reason, `frame service ${h.service} is reserved and must be 0 in SPERLI version 1`, h);
    case 'membership-epoch':
      return refusal(
        reason,
        `frame membership epoch ${h.membershipEpoch} is reserved and must be 0 in SPERLI version 1`,
        h,
      );
    case 'job-id':
      return refusal(reason, `frame job id ${_hex(h.jobId)} is not this job (${_hex(e.jobId)})`, h);
    case 'source-rank':
      return refusal(
        reason,
        `frame source rank ${h.sourceRank} is not the authenticated peer's rank ${e.peerRank}; a peer sends only as the rank of its certificate`,
        h,
      );
    case 'target-rank':
      return refusal(reason, `frame target rank ${h.targetRank} is not this rank (${e.ownRank})`, h);
    case 'incarnation':
      return refusal(
        reason,
        `frame incarnation ${h.incarnation} is newer than this rank's incarnation ${e.incarnation}: the job was restarted, so this run must stop`,
        h,
      );
    case 'tag-reserved':
      return refusal(
        reason,
        `DATA frame tag ${h.tag} is reserved (tags from 2^31 are reserved); user tags are 0..${MAX_USER_TAG}`,
        h,
      );
    case 'tag-nonzero':
      return refusal(reason, `a ${t} frame carries tag ${h.tag}; only DATA frames have a tag, all others carry 0`, h);
    default:
      return refusal(
        'epoch',
        `a ${t} frame carries epoch ${h.epoch}; only the checkpoint types 6..10 carry an epoch, all others 0`,
        h,
      );
  }
}

/**
 * Turns a kernel verdict on the header `bytes` into an outcome, running the checks that
 * follow the header (HELLO order, then the payload size of the type). Internal: the
 * stream decoder calls it with verdicts from `decodeHeaders`.
 */
export function _outcomeOf(ctx: FrameContext, bytes: Uint8Array, verdict: number): HeaderOutcome {
  const header = readFrameHeader(bytes);
  if (verdict === FrameVerdict.drop) return { kind: 'drop', header };
  if (verdict !== FrameVerdict.accepted) {
    const reason = REASON_OF_VERDICT[verdict] ?? 'type';
    return { kind: 'refuse', error: kernelRefusal(reason, header, ctx.expectations), header };
  }
  const t = frameTypeName(header.type);
  if (header.type === FrameType.HELLO && ctx.helloReceived) {
    return {
      kind: 'refuse',
      error: refusal('hello-order', 'a second HELLO arrived on this connection; a peer sends HELLO once', header),
      header,
    };
  }
  if (header.type !== FrameType.HELLO && !ctx.helloReceived) {
    return {
      kind: 'refuse',
      error: refusal('hello-order', `a ${t} frame arrived before the peer's HELLO; HELLO must come first`, header),
      header,
    };
  }
  const b = BOUNDS[header.type] as PayloadBounds;
  if (header.length < b.min || header.length > b.max) {
    const want = b.min === b.max ? `${b.min} bytes` : `${b.min} to ${b.max} bytes`;
    const message =
      b.reason === 'collective-short'
        ? `a COLLECTIVE frame of ${header.length} bytes is shorter than its 16-byte collective header`
        : `a ${t} payload has ${header.length} bytes; it must have ${want}`;
    return { kind: 'refuse', error: refusal(b.reason, message, header, { min: b.min, max: b.max }), header };
  }
  if (header.type === FrameType.HELLO) ctx.helloReceived = true;
  return { kind: 'accept', header };
}

/**
 * Checks the frame header at the start of `bytes` (at least 52 bytes) for the connection
 * of `ctx`: the length first, then type, flags, service, membership epoch, job id,
 * source rank, target rank, incarnation (older: drop), epoch, tag, then HELLO order
 * and the payload size of the type. Accepting a HELLO marks it received in `ctx`.
 */
export function decodeFrameHeader(ctx: FrameContext, bytes: Uint8Array): HeaderOutcome {
  if (!(bytes instanceof Uint8Array) || bytes.length < FRAME_HEADER_SIZE) {
    throw new RangeError(
      `decodeFrameHeader needs the ${FRAME_HEADER_SIZE} header bytes; wait for them (the stream decoder does)`,
    );
  }
  return _outcomeOf(ctx, bytes, checkHeader(ctx.schema, bytes.subarray(0, FRAME_HEADER_SIZE)));
}

/** The fields of a frame to encode; the length comes from the payload. */
export interface FrameInit {
  readonly type: number;
  readonly jobId: Uint8Array;
  readonly sourceRank: number;
  readonly targetRank: number;
  readonly incarnation: number;
  /** DATA only (default 0). */
  readonly tag?: number;
  /** Checkpoint types 6..10 only (default 0). */
  readonly epoch?: bigint | number;
  /** Reserved, 0 in version 1 (default 0). */
  readonly flags?: number;
  /** Reserved, 0 in version 1 (default 0). */
  readonly service?: number;
  /** Reserved, 0 in version 1 (default 0). */
  readonly membershipEpoch?: number;
}

const ENCODER = headerDef({ jobId: new Uint8Array(16), peerRank: 0, ownRank: 0, incarnation: 0 });

/**
 * Writes the 52-byte header of a frame with `length` payload bytes into `out` (default a
 * new buffer). Values are written as given, each checked only to fit its field; a length
 * above 16 MiB is refused (PLX_CORE_HEADER_VALUE).
 */
export function encodeFrameHeader(
  init: FrameInit & { readonly length: number },
  out: Uint8Array = new Uint8Array(FRAME_HEADER_SIZE),
): Uint8Array {
  _bytes(init.jobId, 'jobId', 16);
  encodeHeader(
    ENCODER,
    {
      length: init.length,
      type: init.type,
      flags: init.flags ?? 0,
      service: init.service ?? 0,
      membershipEpoch: init.membershipEpoch ?? 0,
      jobId: init.jobId,
      sourceRank: init.sourceRank,
      targetRank: init.targetRank,
      incarnation: init.incarnation,
      tag: init.tag ?? 0,
      epoch: init.epoch ?? 0n,
    },
    out,
  );
  return out;
}

/** One whole frame: the 52-byte header, then the payload. */
export function encodeFrame(init: FrameInit, payload: Uint8Array = new Uint8Array(0)): Uint8Array {
  _bytes(payload, 'payload');
  const out = new Uint8Array(FRAME_HEADER_SIZE + payload.length);
  encodeFrameHeader({ ...init, length: payload.length }, out);
  out.set(payload, FRAME_HEADER_SIZE);
  return out;
}

/**
 * Splits a message into the payloads of consecutive frames (views, no copy): every one
 * but the last exactly `perFrame` bytes (MAX_PAYLOAD for DATA, MAX_COLLECTIVE_DATA for
 * collective data), the last shorter, possibly empty. A message of 0 bytes is one empty
 * frame; a message of exactly `perFrame` bytes is a full frame and an empty one.
 */
export function splitMessage(message: Uint8Array, perFrame: number = MAX_PAYLOAD): Uint8Array[] {
  _bytes(message, 'message');
  _uint(perFrame, 1, MAX_PAYLOAD, 'perFrame');
  const parts: Uint8Array[] = [];
  let at = 0;
  while (message.length - at >= perFrame) {
    parts.push(message.subarray(at, at + perFrame));
    at += perFrame;
  }
  parts.push(message.subarray(at));
  return parts;
}

/** Whether a frame of `length` data bytes is the last of its message (shorter than `perFrame`). */
export function endsMessage(length: number, perFrame: number = MAX_PAYLOAD): boolean {
  return length < perFrame;
}
