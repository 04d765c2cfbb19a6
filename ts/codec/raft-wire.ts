/**
 * Raft messages on the wire (docs/raft-wire.md): how the drivers of plexus send the
 * messages of the Raft core (ts/codec/raft-types.ts) between processes over a byte stream.
 * Only messages between nodes travel; the local ones (MsgHup, MsgBeat, MsgProp) are refused.
 *
 *   0 u32 length (body bytes) | 4 u8 version (1) | 5 u8 type | 6 u8 flags | 7 u8 reserved
 *   8 u64 from | 16 u64 to | 24 u64 term | 32 u64 logTerm | 40 u64 index | 48 u64 commit
 *   56 u64 rejectHint | 64 u32 entry count | 68 u32 CRC-32C of bytes 0..67 and the body
 *   body: entries (u64 index, u64 term, u8 kind, u32 length, data), then the snapshot when
 *   flag 4 is set (u64 index, u64 term, u32 voters, u64 each, u32 learners, u64 each,
 *   u32 length, data), then the context when flag 8 is set (u32 length, bytes)
 *   flags: 1 reject, 2 transfer, 4 snapshot, 8 context
 *
 * The header is judged on the length-first header kernel of plexus/core before any body
 * byte is read; every count and length in the body is checked against the bytes that are
 * left before anything is allocated (ByteReader). Entry data, snapshot data and the context
 * are views into the input, not copies. A connection's bytes are cut into messages by the
 * shared FrameAssembler (`RaftMessageStream`).
 */
import { PlexusError } from '../core/errors.js';
import { checkHeader, crc32c, defineHeader, encodeHeader } from '../core/index.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';
import { FrameAssembler } from './frames.js';
import type { Entry, Message, MessageType, Snapshot } from './raft-types.js';

export const RAFT_HEADER_BYTES = 72;
export const RAFT_WIRE_VERSION = 1;
/** The largest body: 256 MiB (a snapshot travels in one message). */
export const RAFT_MAX_BODY = 256 * 1024 * 1024;
/** The most entries in one message. */
export const RAFT_MAX_ENTRIES = 1 << 20;
/** The most voters or learners a snapshot's configuration may name. */
export const RAFT_MAX_MEMBERS = 4096;
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Wire codes of the message types that travel between nodes (1..13). */
const TYPES: readonly MessageType[] = [
  'MsgApp',
  'MsgAppResp',
  'MsgVote',
  'MsgVoteResp',
  'MsgPreVote',
  'MsgPreVoteResp',
  'MsgSnap',
  'MsgHeartbeat',
  'MsgHeartbeatResp',
  'MsgTransferLeader',
  'MsgTimeoutNow',
  'MsgReadIndex',
  'MsgReadIndexResp',
];
const CODE = new Map<MessageType, number>(TYPES.map((t, i) => [t, i + 1]));

const F_REJECT = 1;
const F_TRANSFER = 2;
const F_SNAPSHOT = 4;
const F_CONTEXT = 8;

export type RaftWireRefusal =
  | 'length'
  | 'version'
  | 'type'
  | 'flags'
  | 'reserved'
  | 'from'
  | 'to'
  | 'term'
  | 'log-term'
  | 'index'
  | 'commit'
  | 'reject-hint'
  | 'entries'
  | 'crc'
  | 'body';

const REASONS: readonly RaftWireRefusal[] = [
  'length',
  'length',
  'version',
  'type',
  'flags',
  'reserved',
  'from',
  'to',
  'term',
  'log-term',
  'index',
  'commit',
  'reject-hint',
  'entries',
];

const SCHEMA = defineHeader({
  size: RAFT_HEADER_BYTES,
  fields: [
    { name: 'length', offset: 0, width: 4 },
    { name: 'version', offset: 4, width: 1 },
    { name: 'type', offset: 5, width: 1 },
    { name: 'flags', offset: 6, width: 1 },
    { name: 'reserved', offset: 7, width: 1 },
    { name: 'from', offset: 8, width: 8 },
    { name: 'to', offset: 16, width: 8 },
    { name: 'term', offset: 24, width: 8 },
    { name: 'logTerm', offset: 32, width: 8 },
    { name: 'index', offset: 40, width: 8 },
    { name: 'commit', offset: 48, width: 8 },
    { name: 'rejectHint', offset: 56, width: 8 },
    { name: 'count', offset: 64, width: 4 },
    { name: 'crc', offset: 68, width: 4 },
  ],
  length: { field: 'length', max: RAFT_MAX_BODY, verdictTooLong: 1 },
  checks: [
    { field: 'version', op: 'eq', value: RAFT_WIRE_VERSION, verdict: 2 },
    { field: 'type', op: 'range', min: 1, max: TYPES.length, verdict: 3 },
    { field: 'flags', op: 'mask-zero', mask: 0xf0, verdict: 4 },
    { field: 'reserved', op: 'eq', value: 0, verdict: 5 },
    { field: 'from', op: 'range', min: 1, max: MAX_SAFE, verdict: 6 },
    { field: 'to', op: 'range', min: 1, max: MAX_SAFE, verdict: 7 },
    { field: 'term', op: 'range', min: 0, max: MAX_SAFE, verdict: 8 },
    { field: 'logTerm', op: 'range', min: 0, max: MAX_SAFE, verdict: 9 },
    { field: 'index', op: 'range', min: 0, max: MAX_SAFE, verdict: 10 },
    { field: 'commit', op: 'range', min: 0, max: MAX_SAFE, verdict: 11 },
    { field: 'rejectHint', op: 'range', min: 0, max: MAX_SAFE, verdict: 12 },
    { field: 'count', op: 'range', min: 0, max: RAFT_MAX_ENTRIES, verdict: 13 },
  ],
});

function refuse(reason: RaftWireRefusal, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_RAFT_WIRE_BAD_MESSAGE', `Raft message refused (${reason}): ${message}`, {
    ...details,
    reason,
  });
}

function misuse(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_RAFT_WIRE_BAD_INPUT', message, details);
}

function safe(v: number, what: string, min = 0): void {
  if (!Number.isSafeInteger(v) || v < min) throw misuse(`${what} ${v} must be an integer from ${min} to 2^53 - 1`);
}

/** The body size of `m` on the wire. */
function bodySize(m: Message): number {
  let n = 0;
  for (const e of m.entries) n += 21 + e.data.length;
  if (m.snapshot) {
    const cs = m.snapshot.metadata.confState;
    n += 16 + 4 + cs.voters.length * 8 + 4 + cs.learners.length * 8 + 4 + m.snapshot.data.length;
  }
  if (m.context) n += 4 + m.context.length;
  return n;
}

/** Encodes one message between nodes into a new buffer. */
export function encodeRaftMessage(m: Message): Uint8Array {
  const code = CODE.get(m.type);
  if (code === undefined)
    throw misuse(`${String(m.type)} is a local message or unknown; only messages between nodes travel`);
  safe(m.from, 'from', 1);
  safe(m.to, 'to', 1);
  for (const [k, v] of [
    ['term', m.term],
    ['logTerm', m.logTerm],
    ['index', m.index],
    ['commit', m.commit],
    ['rejectHint', m.rejectHint],
  ] as const) {
    safe(v, k);
  }
  if (m.entries.length > RAFT_MAX_ENTRIES) throw misuse(`${m.entries.length} entries is above ${RAFT_MAX_ENTRIES}`);
  for (const e of m.entries) {
    safe(e.index, 'entry index');
    safe(e.term, 'entry term');
    if (!(e.data instanceof Uint8Array)) throw misuse('entry data must be a Uint8Array');
  }
  if (m.snapshot) {
    const md = m.snapshot.metadata;
    safe(md.index, 'snapshot index');
    safe(md.term, 'snapshot term');
    if (md.confState.voters.length > RAFT_MAX_MEMBERS || md.confState.learners.length > RAFT_MAX_MEMBERS) {
      throw misuse(`a configuration names at most ${RAFT_MAX_MEMBERS} voters and ${RAFT_MAX_MEMBERS} learners`);
    }
    for (const id of [...md.confState.voters, ...md.confState.learners]) safe(id, 'member id', 1);
  }
  const body = bodySize(m);
  if (body > RAFT_MAX_BODY)
    throw misuse(`the message body takes ${body} bytes; at most ${RAFT_MAX_BODY} travel in one message`);
  const buf = new Uint8Array(RAFT_HEADER_BYTES + body);
  const flags =
    (m.reject ? F_REJECT : 0) |
    (m.transfer ? F_TRANSFER : 0) |
    (m.snapshot ? F_SNAPSHOT : 0) |
    (m.context ? F_CONTEXT : 0);
  encodeHeader(
    SCHEMA,
    {
      length: body,
      version: RAFT_WIRE_VERSION,
      type: code,
      flags,
      from: m.from,
      to: m.to,
      term: m.term,
      logTerm: m.logTerm,
      index: m.index,
      commit: m.commit,
      rejectHint: m.rejectHint,
      count: m.entries.length,
      crc: 0,
    },
    buf,
  );
  const w = new ByteWriter(buf, RAFT_HEADER_BYTES);
  for (const e of m.entries) {
    w.u64(e.index);
    w.u64(e.term);
    w.u8(e.type === 'conf-change' ? 1 : 0);
    w.lenBytes(e.data);
  }
  if (m.snapshot) {
    const md = m.snapshot.metadata;
    w.u64(md.index);
    w.u64(md.term);
    w.u32(md.confState.voters.length);
    for (const id of md.confState.voters) w.u64(id);
    w.u32(md.confState.learners.length);
    for (const id of md.confState.learners) w.u64(id);
    w.lenBytes(m.snapshot.data);
  }
  if (m.context) w.lenBytes(m.context);
  const crc = crc32c(buf.subarray(RAFT_HEADER_BYTES), crc32c(buf.subarray(0, 68)));
  new DataView(buf.buffer).setUint32(68, crc, true);
  return buf;
}

/** A cut-short field or a u64 above 2^53 - 1 in the body is a refused body. */
const bodyFail: ByteFail = (_reason, _what, message) => refuse('body', message);

export type RaftDecoded =
  | { readonly kind: 'message'; readonly message: Message; readonly consumed: number }
  | { readonly kind: 'incomplete'; readonly need: number };

/**
 * Decodes the message at the start of `bytes`: `incomplete` with the total size needed
 * (trusted only after the header is accepted, so at most 256 MiB + 72), or a message and
 * the bytes it took; a refused message throws PLX_RAFT_WIRE_BAD_MESSAGE with
 * `details.reason`.
 */
export function decodeRaftMessage(bytes: Uint8Array): RaftDecoded {
  if (!(bytes instanceof Uint8Array)) throw misuse('decodeRaftMessage takes a Uint8Array');
  if (bytes.length < RAFT_HEADER_BYTES) return { kind: 'incomplete', need: RAFT_HEADER_BYTES };
  const head = bytes.subarray(0, RAFT_HEADER_BYTES);
  const h = judgeHeader(head);
  const size = RAFT_HEADER_BYTES + h.length!;
  if (bytes.length < size) return { kind: 'incomplete', need: size };
  return { kind: 'message', message: decodeBody(bytes.subarray(0, size), h), consumed: size };
}

type Header = Record<string, number>;

/** The fields of an accepted header (72 bytes); a header out of range is refused, length first. */
function judgeHeader(head: Uint8Array): Header {
  const verdict = checkHeader(SCHEMA, head);
  if (verdict !== 0) {
    const reason = REASONS[verdict] ?? 'length';
    throw refuse(reason, `the header's ${reason} field is out of range`, { verdict });
  }
  return SCHEMA.read(head) as Header;
}

/** The message of a whole frame (`bytes`: header and body) whose header `h` was accepted. */
function decodeBody(bytes: Uint8Array, h: Header): Message {
  const body = bytes.subarray(RAFT_HEADER_BYTES);
  if (crc32c(body, crc32c(bytes.subarray(0, 68))) !== h.crc) {
    throw refuse('crc', 'the checksum does not match: the message was damaged in transit');
  }
  const flags = h.flags!;
  const count = h.count!;
  const r = new ByteReader(body, bodyFail);
  // Each entry takes at least 21 bytes: refuse a count the body cannot hold before looping.
  if (count * 21 > body.length) throw refuse('entries', `${count} entries cannot fit in ${body.length} body bytes`);
  const entries: Entry[] = [];
  for (let i = 0; i < count; i++) {
    const index = r.u64('entry index');
    const term = r.u64('entry term');
    const kind = r.u8('entry kind');
    if (kind > 1) throw refuse('body', `entry ${i} has kind ${kind}; 0 (normal) and 1 (conf change) exist`);
    entries.push({ index, term, type: kind === 1 ? 'conf-change' : 'normal', data: r.lenBytes('entry data') });
  }
  let snapshot: Snapshot | undefined;
  if (flags & F_SNAPSHOT) {
    const index = r.u64('snapshot index');
    const term = r.u64('snapshot term');
    const ids = (what: string): number[] => {
      const n = r.u32(`${what} count`);
      if (n > RAFT_MAX_MEMBERS || n * 8 > r.left) throw refuse('body', `${n} ${what} do not fit the message`);
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        const id = r.u64(what);
        if (id < 1) throw refuse('body', `a ${what} id is 0`);
        out.push(id);
      }
      return out;
    };
    const voters = ids('voters');
    const learners = ids('learners');
    snapshot = { metadata: { index, term, confState: { voters, learners } }, data: r.lenBytes('snapshot data') };
  }
  const context = flags & F_CONTEXT ? r.lenBytes('context') : undefined;
  if (r.left !== 0) throw refuse('body', `${r.left} bytes follow the message's last field`);
  const message: Message = {
    type: TYPES[h.type! - 1] as MessageType,
    from: h.from!,
    to: h.to!,
    term: h.term!,
    logTerm: h.logTerm!,
    index: h.index!,
    commit: h.commit!,
    reject: (flags & F_REJECT) !== 0,
    rejectHint: h.rejectHint!,
    entries,
    ...(snapshot ? { snapshot } : {}),
    ...(context ? { context } : {}),
    ...(flags & F_TRANSFER ? { transfer: true } : {}),
  };
  return message;
}

/**
 * A byte-fed decoder for one connection: `push` takes whatever bytes arrived and returns
 * the messages they complete. Bytes are held only as they arrive (FrameAssembler); a refused
 * message throws, every later `push` throws the same, and the connection is to be closed.
 */
export class RaftMessageStream {
  private readonly frames: FrameAssembler;
  /** Headers judged whose frames are not yet whole (at most one at a time). */
  private readonly heads: Header[] = [];
  private failure: Error | undefined;

  /**
   * @param maxBody the largest body accepted (at most RAFT_MAX_BODY): a header announcing more
   * is refused (`length`) before its body is held.
   */
  constructor(maxBody = RAFT_MAX_BODY) {
    this.frames = new FrameAssembler({
      headerBytes: RAFT_HEADER_BYTES,
      maxFrame: RAFT_HEADER_BYTES + Math.min(maxBody, RAFT_MAX_BODY),
      frameLength: (head) => {
        const h = judgeHeader(head);
        this.heads.push(h);
        return RAFT_HEADER_BYTES + h.length!;
      },
      tooLarge: (length) =>
        refuse('length', `a body of ${length - RAFT_HEADER_BYTES} bytes is above this peer's ${maxBody}`),
    });
  }

  push(chunk: Uint8Array): Message[] {
    if (this.failure) throw this.failure;
    try {
      return this.frames.push(chunk).map((frame) => decodeBody(frame, this.heads.shift() as Header));
    } catch (e) {
      this.failure = e as Error;
      throw e;
    }
  }

  /** Bytes held of a message not yet complete. */
  get buffered(): number {
    return this.frames.buffered;
  }
}
