/**
 * Gossip membership messages (SWIM with Lifeguard, ts/cluster/gossip/): probes, their acks and
 * nacks, piggybacked membership updates and the push-pull state exchange. Little-endian on
 * ByteReader/ByteWriter; the envelope is length-first (version, kind, body length checked
 * against `MAX_GOSSIP_BODY` before a body byte is read). Every refusal is
 * PLX_GOSSIP_BAD_MESSAGE with `details.reason`. Layout: docs/cluster.md, "Gossip membership".
 *
 *   u8 version (1) | u8 kind | u32 body length | body
 *   body = name from | kind fields | u16 update count | updates
 *   ping, ping-req: u32 seq, name target;  ack, nack: u32 seq;  gossip: nothing
 *   push-pull: u8 flags (1 join, 2 reply) | u32 count | count x (name, u32 incarnation, u8 state)
 *   update = u8 state | u32 incarnation | name member | name from
 *   name = u8 length (1..255) | UTF-8 bytes
 */
import { PlexusError } from '../core/errors.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';
import type { FrameFormat } from './frames.js';

export const GOSSIP_VERSION = 1;
/** version, kind, body length. */
export const GOSSIP_HEADER_SIZE = 6;
/** The largest body read or written (a push-pull of a few thousand members fits). */
export const MAX_GOSSIP_BODY = 1024 * 1024;
/** Updates piggybacked on one message at most. */
export const MAX_GOSSIP_UPDATES = 64;
/** Member states in one push-pull at most. */
export const MAX_GOSSIP_STATES = 16_384;
/** Bytes of a member name at most. */
export const MAX_GOSSIP_NAME = 255;

export type GossipState = 'alive' | 'suspect' | 'dead' | 'left';
const STATES: readonly GossipState[] = ['alive', 'suspect', 'dead', 'left'];
const STATE_BYTE: Readonly<Record<GossipState, number>> = { alive: 1, suspect: 2, dead: 3, left: 4 };

export type GossipKind = 'ping' | 'ping-req' | 'ack' | 'nack' | 'gossip' | 'push-pull';
const KINDS: readonly GossipKind[] = ['ping', 'ping-req', 'ack', 'nack', 'gossip', 'push-pull'];
const KIND_BYTE: Readonly<Record<GossipKind, number>> = {
  ping: 1,
  'ping-req': 2,
  ack: 3,
  nack: 4,
  gossip: 5,
  'push-pull': 6,
};

/** A membership fact: `member` is in `state` at `incarnation`, as `from` says. */
export interface GossipUpdate {
  readonly state: GossipState;
  readonly member: string;
  readonly incarnation: number;
  /** Who said it: the suspecter of a suspicion (confirmations count distinct ones). */
  readonly from: string;
}

/** One member's entry in a push-pull exchange. */
export interface GossipMemberState {
  readonly name: string;
  readonly incarnation: number;
  readonly state: GossipState;
}

interface Base {
  readonly from: string;
  readonly updates: readonly GossipUpdate[];
}

export type GossipMessage =
  | (Base & { readonly kind: 'ping'; readonly seq: number; readonly target: string })
  | (Base & { readonly kind: 'ping-req'; readonly seq: number; readonly target: string })
  | (Base & { readonly kind: 'ack'; readonly seq: number })
  | (Base & { readonly kind: 'nack'; readonly seq: number })
  | (Base & { readonly kind: 'gossip' })
  | (Base & {
      readonly kind: 'push-pull';
      readonly join: boolean;
      readonly reply: boolean;
      readonly states: readonly GossipMemberState[];
    });

function bad(reason: string, message: string, extra: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_GOSSIP_BAD_MESSAGE', message, { reason, ...extra });
}

const fail: ByteFail = (reason, what, message) =>
  bad(reason === 'short' ? 'short' : 'trailing', message, { field: what });

const utf8 = new TextDecoder('utf-8', { fatal: true });
const enc = new TextEncoder();

function readName(r: ByteReader, what: string): string {
  const n = r.u8(`${what} length`);
  if (n === 0) throw bad('name', `${what} is empty`, { field: what });
  const b = r.bytes(n, what);
  try {
    return utf8.decode(b);
  } catch {
    throw bad('name', `${what} is not UTF-8`, { field: what });
  }
}

function nameBytes(s: string, what: string): Uint8Array {
  const b = enc.encode(s);
  if (b.length === 0 || b.length > MAX_GOSSIP_NAME) {
    throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', `${what} must be 1 to ${MAX_GOSSIP_NAME} UTF-8 bytes`, {
      field: what,
      bytes: b.length,
    });
  }
  return b;
}

function readState(r: ByteReader): GossipState {
  const v = r.u8('state');
  const s = STATES[v - 1];
  if (s === undefined) throw bad('state', `state ${v} is not 1..4`, { state: v });
  return s;
}

function checkU32(v: number, what: string): void {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff_ffff) {
    throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', `${what} ${v} is not a u32`, { field: what });
  }
}

/** The bytes of `m`; refuses names, counts and sizes the decoder would refuse. */
export function encodeGossip(m: GossipMessage): Uint8Array {
  if (m.updates.length > MAX_GOSSIP_UPDATES) {
    throw bad('count', `${m.updates.length} updates are above ${MAX_GOSSIP_UPDATES}`, { count: m.updates.length });
  }
  const w = new ByteWriter(128);
  w.u8(GOSSIP_VERSION).u8(KIND_BYTE[m.kind]).u32(0);
  const from = nameBytes(m.from, 'from');
  w.u8(from.length).bytes(from);
  switch (m.kind) {
    case 'ping':
    case 'ping-req': {
      checkU32(m.seq, 'seq');
      const t = nameBytes(m.target, 'target');
      w.u32(m.seq).u8(t.length).bytes(t);
      break;
    }
    case 'ack':
    case 'nack':
      checkU32(m.seq, 'seq');
      w.u32(m.seq);
      break;
    case 'gossip':
      break;
    case 'push-pull': {
      if (m.states.length > MAX_GOSSIP_STATES) {
        throw bad('count', `${m.states.length} member states are above ${MAX_GOSSIP_STATES}`, {
          count: m.states.length,
        });
      }
      w.u8((m.join ? 1 : 0) | (m.reply ? 2 : 0)).u32(m.states.length);
      for (const s of m.states) {
        checkU32(s.incarnation, 'incarnation');
        const nb = nameBytes(s.name, 'name');
        w.u8(nb.length).bytes(nb).u32(s.incarnation).u8(STATE_BYTE[s.state]);
      }
      break;
    }
  }
  w.u16(m.updates.length);
  for (const u of m.updates) {
    checkU32(u.incarnation, 'incarnation');
    const mb = nameBytes(u.member, 'member');
    const fb = nameBytes(u.from, 'from');
    w.u8(STATE_BYTE[u.state]).u32(u.incarnation).u8(mb.length).bytes(mb).u8(fb.length).bytes(fb);
  }
  const out = w.finish();
  const body = out.length - GOSSIP_HEADER_SIZE;
  if (body > MAX_GOSSIP_BODY)
    throw bad('length', `a body of ${body} bytes is above ${MAX_GOSSIP_BODY}`, { length: body });
  new DataView(out.buffer, out.byteOffset, out.length).setUint32(2, body, true);
  return out;
}

/** The body length the header announces, checked: a length above the maximum is refused here. */
export function gossipBodyLength(header: Uint8Array): number {
  const r = new ByteReader(header, fail);
  const v = r.u8('version');
  if (v !== GOSSIP_VERSION) throw bad('version', `gossip version ${v} is not ${GOSSIP_VERSION}`, { version: v });
  const k = r.u8('kind');
  if (KINDS[k - 1] === undefined) throw bad('kind', `gossip kind ${k} is not 1..6`, { kind: k });
  const n = r.u32('length');
  if (n > MAX_GOSSIP_BODY) throw bad('length', `a body of ${n} bytes is above ${MAX_GOSSIP_BODY}`, { length: n });
  return n;
}

/**
 * Gossip messages back to back on a stream (a connection between members): a `FrameAssembler`
 * with this format hands out whole messages, refusing a body above the maximum from the header.
 */
export const GOSSIP_FRAME: FrameFormat = Object.freeze({
  headerBytes: GOSSIP_HEADER_SIZE,
  maxFrame: GOSSIP_HEADER_SIZE + MAX_GOSSIP_BODY,
  frameLength: (header: Uint8Array) => GOSSIP_HEADER_SIZE + gossipBodyLength(header),
});

/** Decodes one whole message (a datagram or a frame): header, then exactly the announced body. */
export function decodeGossip(bytes: Uint8Array): GossipMessage {
  const n = gossipBodyLength(bytes.subarray(0, GOSSIP_HEADER_SIZE));
  if (bytes.length - GOSSIP_HEADER_SIZE !== n) {
    throw bad('length', `the header announces ${n} body bytes; ${bytes.length - GOSSIP_HEADER_SIZE} follow`, {
      length: n,
    });
  }
  const kind = KINDS[(bytes[1] as number) - 1] as GossipKind;
  const r = new ByteReader(bytes, fail, GOSSIP_HEADER_SIZE);
  const from = readName(r, 'from');
  let m: GossipMessage;
  switch (kind) {
    case 'ping':
    case 'ping-req': {
      const seq = r.u32('seq');
      const target = readName(r, 'target');
      m = { kind, from, seq, target, updates: readUpdates(r) };
      break;
    }
    case 'ack':
    case 'nack': {
      const seq = r.u32('seq');
      m = { kind, from, seq, updates: readUpdates(r) };
      break;
    }
    case 'gossip':
      m = { kind, from, updates: readUpdates(r) };
      break;
    case 'push-pull': {
      const flags = r.u8('flags');
      if (flags > 3) throw bad('state', `push-pull flags ${flags} has unknown bits`, { flags });
      const count = r.u32('count');
      // A state is at least 7 bytes: refuse a count the body cannot hold before allocating.
      if (count > MAX_GOSSIP_STATES || count * 7 > r.left) {
        throw bad('count', `${count} member states do not fit`, { count });
      }
      const states: GossipMemberState[] = [];
      for (let i = 0; i < count; i++) {
        const name = readName(r, 'name');
        const incarnation = r.u32('incarnation');
        states.push({ name, incarnation, state: readState(r) });
      }
      m = { kind, from, join: (flags & 1) !== 0, reply: (flags & 2) !== 0, states, updates: readUpdates(r) };
      break;
    }
  }
  r.end('gossip message');
  return m;
}

function readUpdates(r: ByteReader): GossipUpdate[] {
  const count = r.u16('update count');
  if (count > MAX_GOSSIP_UPDATES) throw bad('count', `${count} updates are above ${MAX_GOSSIP_UPDATES}`, { count });
  const out: GossipUpdate[] = [];
  for (let i = 0; i < count; i++) {
    const state = readState(r);
    const incarnation = r.u32('incarnation');
    const member = readName(r, 'member');
    out.push({ state, incarnation, member, from: readName(r, 'from') });
  }
  return out;
}
