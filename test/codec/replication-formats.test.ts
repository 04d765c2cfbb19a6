/**
 * The replicated log's formats in codec/ (docs/formats.md): the catch-up stream refuses with
 * the refusal its caller passes, from the header, before a body byte is held; the greeting and
 * the Raft entry records keep the bytes docs/raft-wire.md and docs/chronacta-ha.md give.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CATCH_UP_HEADER_BYTES,
  CatchUpStream,
  decodeCatchUp,
  encodeFetch,
  encodeHolding,
  encodeRecords,
} from '../../ts/codec/catch-up.js';
import { decodeRaftGreeting, encodeRaftGreeting, RAFT_GREETING_BYTES } from '../../ts/codec/raft-greeting.js';
import {
  decodeCompactMarker,
  decodeMeta,
  encodeCompactMarker,
  encodeMeta,
  isCompactMarker,
  isMeta,
} from '../../ts/codec/replication-entries.js';
import { decodeSnapshotDescriptor, encodeSnapshotDescriptor } from '../../ts/codec/snapshot-descriptor.js';

class Refused extends Error {
  constructor(
    message: string,
    readonly details: Record<string, unknown>,
  ) {
    super(message);
  }
}
const refuse = (message: string, details: Record<string, unknown>) => new Refused(message, details);
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

describe('catch-up stream (ts/codec/catch-up.ts)', () => {
  it('lays a FETCH out as docs/chronacta-ha.md says', () => {
    const f = encodeFetch(7, 2 ** 40, 65_536);
    expect(f.length).toBe(CATCH_UP_HEADER_BYTES + 20);
    // magic "PXCU", version 1, type 1, reserved 0, body length 20
    expect(hex(f.subarray(0, 12))).toBe('505843550101000014000000');
    expect(hex(f.subarray(16))).toBe('0700000000000000' + '0000000000010000' + '00000100');
  });

  it('refuses with the caller’s refusal, from the header, before any body byte arrives', () => {
    const rec = { position: 1n, epoch: 2n, batchId: new Uint8Array(16), payload: new Uint8Array(200) };
    const f = encodeRecords(1n, 1n, [rec], refuse);
    const s = new CatchUpStream(refuse, 64);
    let err: unknown;
    try {
      s.push(f.subarray(0, CATCH_UP_HEADER_BYTES));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(Refused);
    expect((err as Refused).details.length).toBe(f.length - CATCH_UP_HEADER_BYTES);
    expect(s.buffered).toBe(0);
    // The refusal stays: every later push throws it again.
    expect(() => s.push(new Uint8Array(1))).toThrow(err as Error);
    expect(() => encodeHolding(1n, 2n, 3n, refuse)).toThrow(Refused);
  });

  it('throws nothing but the caller’s refusal on arbitrary bytes, whole or split', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.nat(200), (bytes, cut) => {
        const at = Math.min(cut, bytes.length);
        try {
          decodeCatchUp(bytes, refuse);
        } catch (e) {
          if (!(e instanceof Refused)) throw e;
        }
        const s = new CatchUpStream(refuse);
        try {
          s.push(bytes.subarray(0, at));
          s.push(bytes.subarray(at));
        } catch (e) {
          if (!(e instanceof Refused)) throw e;
        }
      }),
    );
  });
});

describe('Raft greeting (ts/codec/raft-greeting.ts)', () => {
  it('is 24 bytes: magic, version 1, sender, node dialled', () => {
    const g = encodeRaftGreeting(3, 0x1_0000_0005);
    expect(g.length).toBe(RAFT_GREETING_BYTES);
    expect(hex(g)).toBe('50585248' + '01000000' + '0300000000000000' + '0500000001000000');
    expect(hex(encodeRaftGreeting(3, 5, 'stream').subarray(0, 4))).toBe('50585253');
    expect(decodeRaftGreeting(g)).toEqual({ kind: 'messages', from: 3n, to: 0x1_0000_0005 });
    expect(decodeRaftGreeting(encodeRaftGreeting(9, 1, 'stream'))).toEqual({ kind: 'stream', from: 9n, to: 1 });
  });

  it('is not a greeting with another magic or version', () => {
    for (const at of [0, 3, 4]) {
      const g = encodeRaftGreeting(3, 5);
      g[at] = (g[at] as number) ^ 0x40;
      expect(decodeRaftGreeting(g)).toBeUndefined();
    }
  });
});

describe('replicated log records (ts/codec/replication-entries.ts, snapshot-descriptor.ts)', () => {
  it('lays a compaction record out as PXHC and a u64', () => {
    const c = encodeCompactMarker(2 ** 40 + 3);
    expect(hex(c)).toBe('50584843' + '0300000000010000');
    expect(isCompactMarker(c)).toBe(true);
    expect(isCompactMarker(c.subarray(0, 11))).toBe(false);
    expect(decodeCompactMarker(c)).toBe(2 ** 40 + 3);
  });

  it('round-trips a membership record and refuses another op', () => {
    const m = encodeMeta({ id: 4, address: '127.0.0.1:7000' });
    expect(hex(m.subarray(0, 4))).toBe('5058484d');
    expect(isMeta(m)).toBe(true);
    expect(decodeMeta(m, (msg) => new Refused(msg, {}))).toEqual({ id: 4, address: '127.0.0.1:7000' });
    const other = new Uint8Array([...m.subarray(0, 4), ...new TextEncoder().encode('{"op":"x"}')]);
    expect(() => decodeMeta(other, (msg) => new Refused(msg, {}))).toThrow(/unknown membership record op x/);
  });

  it('refuses data that is not a descriptor as corrupt, and a descriptor above 64 KiB as too large', () => {
    const reasons: string[] = [];
    const r = (reason: 'too-large' | 'corrupt', message: string) => {
      reasons.push(reason);
      return new Refused(message, {});
    };
    const d = { index: 5, term: 2, lastPosition: 9, lastBatchId: '', lastEpoch: '0', members: [] };
    expect(decodeSnapshotDescriptor(encodeSnapshotDescriptor(d, r), r)).toEqual(d);
    expect(() => decodeSnapshotDescriptor(new TextEncoder().encode('PXHSnull'), r)).toThrow(Refused);
    expect(() => encodeSnapshotDescriptor({ ...d, members: ['x'.repeat(70_000)] }, r)).toThrow(Refused);
    expect(reasons).toEqual(['corrupt', 'too-large']);
  });
});
