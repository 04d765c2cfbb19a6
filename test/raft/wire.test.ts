import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decodeRaftMessage,
  encodeRaftMessage,
  RAFT_HEADER_BYTES,
  RAFT_MAX_BODY,
  RaftMessageStream,
} from '../../ts/codec/raft-wire.js';
import { backend, isPlexusError, useBackend } from '../../ts/core/index.js';
import type { Message, MessageType } from '../../ts/raft/types.js';

const initial = backend().name;
afterAll(() => useBackend(initial));

const REMOTE: readonly MessageType[] = [
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

const safe = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const id = fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER });
const bytes = fc.uint8Array({ maxLength: 64 });

const message: fc.Arbitrary<Message> = fc
  .record({
    type: fc.constantFrom(...REMOTE),
    from: id,
    to: id,
    term: safe,
    logTerm: safe,
    index: safe,
    commit: safe,
    reject: fc.boolean(),
    rejectHint: safe,
    entries: fc.array(
      fc.record({
        index: safe,
        term: safe,
        type: fc.constantFrom('normal' as const, 'conf-change' as const),
        data: bytes,
      }),
      { maxLength: 5 },
    ),
    snapshot: fc.option(
      fc.record({
        metadata: fc.record({
          index: safe,
          term: safe,
          confState: fc.record({ voters: fc.array(id, { maxLength: 5 }), learners: fc.array(id, { maxLength: 3 }) }),
        }),
        data: bytes,
      }),
      { nil: undefined },
    ),
    context: fc.option(bytes, { nil: undefined }),
    transfer: fc.option(fc.constant(true), { nil: undefined }),
  })
  .map((m) => {
    const out: Record<string, unknown> = { ...m };
    for (const k of ['snapshot', 'context', 'transfer']) if (out[k] === undefined) delete out[k];
    return out as unknown as Message;
  });

/** Plain arrays for comparison (Uint8Array views compare by content). */
function plain(m: Message): unknown {
  return JSON.parse(JSON.stringify(m, (_k, v) => (v instanceof Uint8Array ? [...v] : v)));
}

function reasonOf(b: Uint8Array): string {
  try {
    return decodeRaftMessage(b).kind;
  } catch (err) {
    if (!isPlexusError(err, 'PLX_RAFT_WIRE_BAD_MESSAGE')) throw err;
    return String((err.details as { reason: string }).reason);
  }
}

describe.each(['wasm', 'js'] as const)('Raft messages on the wire (%s backend)', (name) => {
  it('round-trip every message between nodes', () => {
    useBackend(name);
    fc.assert(
      fc.property(message, (m) => {
        const b = encodeRaftMessage(m);
        const d = decodeRaftMessage(b);
        expect(d.kind).toBe('message');
        if (d.kind !== 'message') return;
        expect(d.consumed).toBe(b.length);
        expect(plain(d.message)).toEqual(plain(m));
      }),
      { numRuns: 300 },
    );
  });

  it('refuse any single changed byte', () => {
    useBackend(name);
    fc.assert(
      fc.property(message, fc.nat(), fc.integer({ min: 1, max: 255 }), (m, at, x) => {
        const b = encodeRaftMessage(m);
        const i = at % b.length;
        b[i] = (b[i] as number) ^ x;
        const r = reasonOf(b);
        // A changed length may only make the message look incomplete; anything else is refused.
        expect(r).not.toBe('message');
      }),
      { numRuns: 500 },
    );
  });

  it('decode a stream fed at every split point and one byte at a time', () => {
    useBackend(name);
    const msgs = fc.sample(message, { numRuns: 4, seed: 7 });
    const wire = msgs.map(encodeRaftMessage);
    const all = new Uint8Array(wire.reduce((n, w) => n + w.length, 0));
    let at = 0;
    for (const w of wire) {
      all.set(w, at);
      at += w.length;
    }
    for (let cut = 0; cut <= all.length; cut += 7) {
      const s = new RaftMessageStream();
      const got = [...s.push(all.slice(0, cut)), ...s.push(all.slice(cut))];
      expect(got.map(plain)).toEqual(msgs.map(plain));
      expect(s.buffered).toBe(0);
    }
    const s = new RaftMessageStream();
    const got: Message[] = [];
    for (const byte of all) got.push(...s.push(Uint8Array.of(byte)));
    expect(got.map(plain)).toEqual(msgs.map(plain));
  });

  it('answer random bytes with a message, a request for more, or a refusal', () => {
    useBackend(name);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (b) => {
        expect(typeof reasonOf(b)).toBe('string');
      }),
      { numRuns: 2000 },
    );
  });
});

describe('Raft wire header checks', () => {
  const base: Message = {
    type: 'MsgApp',
    from: 1,
    to: 2,
    term: 3,
    logTerm: 2,
    index: 10,
    commit: 9,
    reject: false,
    rejectHint: 0,
    entries: [{ index: 11, term: 3, type: 'normal', data: Uint8Array.of(1, 2) }],
  };

  function edited(edit: (dv: DataView) => void): Uint8Array {
    const b = encodeRaftMessage(base);
    edit(new DataView(b.buffer));
    return b;
  }

  it('refuse each field out of range before reading the body, length first', () => {
    expect(reasonOf(edited((dv) => dv.setUint32(0, RAFT_MAX_BODY + 1, true)))).toBe('length');
    expect(reasonOf(edited((dv) => dv.setUint8(4, 2)))).toBe('version');
    expect(reasonOf(edited((dv) => dv.setUint8(5, 0)))).toBe('type');
    expect(reasonOf(edited((dv) => dv.setUint8(5, 14)))).toBe('type');
    expect(reasonOf(edited((dv) => dv.setUint8(6, 0x10)))).toBe('flags');
    expect(reasonOf(edited((dv) => dv.setUint8(7, 1)))).toBe('reserved');
    expect(reasonOf(edited((dv) => dv.setBigUint64(8, 0n, true)))).toBe('from');
    expect(reasonOf(edited((dv) => dv.setBigUint64(16, 1n << 53n, true)))).toBe('to');
    expect(reasonOf(edited((dv) => dv.setBigUint64(24, 1n << 60n, true)))).toBe('term');
    expect(reasonOf(edited((dv) => dv.setUint32(64, (1 << 20) + 1, true)))).toBe('entries');
    expect(
      reasonOf(
        edited((dv) => {
          dv.setUint8(4, 9);
          dv.setUint32(0, RAFT_MAX_BODY + 1, true);
        }),
      ),
    ).toBe('length');
  });

  it('refuse a count or length the body cannot hold, without allocating by it', () => {
    // A damaged count with a matching checksum is still caught by the body walk.
    const b = encodeRaftMessage({ ...base, entries: [] });
    const dv = new DataView(b.buffer);
    dv.setUint32(64, 1000, true);
    expect(reasonOf(b)).toBe('crc');
    const huge = new Uint8Array(RAFT_HEADER_BYTES + 10);
    huge.set(encodeRaftMessage(base).subarray(0, RAFT_HEADER_BYTES));
    new DataView(huge.buffer).setUint32(0, RAFT_MAX_BODY, true);
    expect(decodeRaftMessage(huge)).toEqual({ kind: 'incomplete', need: RAFT_HEADER_BYTES + RAFT_MAX_BODY });
  });

  it('refuse local messages and bad values when encoding', () => {
    const bad = (m: Partial<Message>) => {
      try {
        encodeRaftMessage({ ...base, ...m } as Message);
        return 'encoded';
      } catch (err) {
        return isPlexusError(err, 'PLX_RAFT_WIRE_BAD_INPUT') ? 'refused' : String(err);
      }
    };
    expect(bad({ type: 'MsgHup' })).toBe('refused');
    expect(bad({ type: 'MsgProp' })).toBe('refused');
    expect(bad({ from: 0 })).toBe('refused');
    expect(bad({ term: -1 })).toBe('refused');
    expect(bad({ index: 2 ** 53 })).toBe('refused');
    expect(bad({ entries: [{ index: 1, term: 1, type: 'normal', data: 'x' as unknown as Uint8Array }] })).toBe(
      'refused',
    );
    expect(bad({})).toBe('encoded');
  });
});
