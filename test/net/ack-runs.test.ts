/**
 * The wire's batch formats: ACK runs (docs/cluster.md, "ACK runs"), the sender's in-place DATA
 * frame writer, the reader's in-place header check, and frames read from chunks of any shape.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ACK_RUN_MARKER,
  ACK_RUN_SIZE,
  AckRunReader,
  CLUSTER_HEADER_SIZE,
  type ClusterFrame,
  ClusterFrameReader,
  clusterFrameSchema,
  clusterHeaderVerdict,
  encodeAckRun,
  encodeClusterFrame,
  writeDataFrame,
} from '../../ts/codec/cluster-frame.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { checkHeader } from '../../ts/core/index.js';

type Run = [number, number, number];

function runsOf(bytes: Uint8Array, cuts: number[]): Run[] {
  const r = new AckRunReader();
  const out: Run[] = [];
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    r.feed(bytes.subarray(at, c), (sid, count, status) => out.push([sid, count, status]));
    at = c;
  }
  return out;
}

function encodeRuns(runs: Run[]): Uint8Array {
  const b = new Uint8Array(runs.length * ACK_RUN_SIZE);
  runs.forEach(([sid, count, status], i) => {
    encodeAckRun(b, i * ACK_RUN_SIZE, sid, count, status);
  });
  return b;
}

const runArb = fc.tuple(
  fc.integer({ min: 0, max: 0x3fff_ffff }).map((n) => 2 * n + 1),
  fc.integer({ min: 1, max: 0xffff }),
  fc.integer({ min: 0, max: 3 }),
);

describe('ACK runs', () => {
  it('pins the 8-byte layout', () => {
    const b = encodeRuns([[0x0102_0305, 0x0a0b, 2]]);
    expect([...b]).toEqual([0x05, 0x03, 0x02, 0x01, 0x0b, 0x0a, 2, ACK_RUN_MARKER]);
  });

  it('reads runs split at every offset and byte by byte', () => {
    const runs: Run[] = [
      [1, 1, 0],
      [3, 65_535, 1],
      [0x7fff_ffff, 7, 3],
      [5, 2, 2],
    ];
    const bytes = encodeRuns(runs);
    for (let cut = 0; cut <= bytes.length; cut++) expect(runsOf(bytes, [cut])).toEqual(runs);
    expect(
      runsOf(
        bytes,
        Array.from({ length: bytes.length }, (_, i) => i),
      ),
    ).toEqual(runs);
  });

  it('refuses a bad marker, status, count or stream id, and everything after', () => {
    const good = encodeRuns([[3, 1, 0]]);
    const edits: [number, number, string][] = [
      [7, 0x00, 'marker'],
      [6, 4, 'status'],
      [4, 0, 'count'],
      [0, 2, 'even stream id'],
      [3, 0x80, 'stream id above 2^31 - 1'],
    ];
    for (const [at, v, what] of edits) {
      const b = good.slice();
      b[at] = v;
      if (what === 'count') b[5] = 0;
      const r = new AckRunReader();
      let err: unknown;
      try {
        r.feed(b, () => {});
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_WIRE_BAD_FRAME'), what).toBe(true);
      expect((err as { details: { reason: string } }).details.reason).toBe('ack-run');
      expect(() => r.feed(good, () => {})).toThrow(/bad run/);
    }
  });

  it('fuzz: runs round-trip at any cuts; any bytes give runs or a PlexusError', () => {
    fc.assert(
      fc.property(fc.array(runArb, { maxLength: 20 }), fc.array(fc.nat(), { maxLength: 6 }), (runs, rawCuts) => {
        const bytes = encodeRuns(runs);
        const cuts = rawCuts.map((c) => c % (bytes.length + 1)).sort((a, b) => a - b);
        expect(runsOf(bytes, cuts)).toEqual(runs);
      }),
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        try {
          for (const [sid, count, status] of runsOf(bytes, [3])) {
            expect(sid % 2).toBe(1);
            expect(count).toBeGreaterThan(0);
            expect(status).toBeLessThanOrEqual(3);
          }
        } catch (e) {
          expect(isPlexusError(e, 'PLX_WIRE_BAD_FRAME')).toBe(true);
        }
      }),
    );
  });
});

const enc = new TextEncoder();

describe('the sender’s in-place DATA frame writer', () => {
  it('fuzz: writes exactly the bytes of encodeClusterFrame, at any offset of a shared buffer', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 40 }),
        fc.string({ minLength: 1, maxLength: 200 }),
        fc.uint8Array({ maxLength: 300 }),
        fc.integer({ min: 0, max: 0xffff_ffff }),
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        fc.integer({ min: 0, max: 255 }),
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        fc.nat({ max: 50 }),
        (sender, target, payload, shard, epoch, hops, messageId, at) => {
          const s = enc.encode(sender);
          const t = enc.encode(target);
          const want = encodeClusterFrame({ shard, epoch, hops, messageId, sender, target, payload });
          const out = new Uint8Array(at + want.length + 7).fill(0xee);
          const idPool = new Uint8Array(48);
          idPool.set(messageId, 9);
          writeDataFrame(out, at, want.length, shard, epoch, hops, idPool, 9, s, t, payload);
          expect(out.subarray(at, at + want.length)).toEqual(new Uint8Array(want));
          expect(out[at + want.length]).toBe(0xee);
        },
      ),
    );
  });

  it('refuses a shard, hop count or epoch out of range', () => {
    const out = new Uint8Array(100);
    const id = new Uint8Array(16);
    const s = enc.encode('vt:a');
    const cases: [number, bigint, number][] = [
      [-1, 1n, 0],
      [2 ** 32, 1n, 0],
      [1, -1n, 0],
      [1, 1n << 64n, 0],
      [1, 1n, 256],
    ];
    for (const [shard, epoch, hops] of cases) {
      let err: unknown;
      try {
        writeDataFrame(out, 0, 48, shard, epoch, hops, id, 0, s, s, new Uint8Array(0));
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_WIRE_BAD_FRAME'), `${shard} ${epoch} ${hops}`).toBe(true);
    }
  });
});

describe('the reader’s in-place header check', () => {
  it('fuzz: gives the verdict of the plexus/core header kernel for any 40 bytes', () => {
    const fields = fc.record({
      length: fc.oneof(fc.integer({ min: 0, max: 2_000_000 }), fc.constantFrom(39, 40, 41, 1_048_576, 1_048_577)),
      version: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: 255 })),
      kind: fc.integer({ min: 0, max: 4 }),
      hops: fc.integer({ min: 0, max: 255 }),
      status: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 255 })),
      sl: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 5000 }), fc.constant(4096), fc.constant(4097)),
      tl: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 5000 })),
      hopLimit: fc.constantFrom(0, 4, 255),
      at: fc.nat({ max: 9 }),
    });
    fc.assert(
      fc.property(fields, (f) => {
        const b = new Uint8Array(f.at + CLUSTER_HEADER_SIZE);
        const dv = new DataView(b.buffer);
        dv.setUint32(f.at, f.length, true);
        b[f.at + 4] = f.version;
        b[f.at + 5] = f.kind;
        b[f.at + 6] = f.hops;
        b[f.at + 7] = f.status;
        dv.setUint16(f.at + 12, f.sl, true);
        dv.setUint16(f.at + 14, f.tl, true);
        const kernel = checkHeader(clusterFrameSchema(f.hopLimit), b.subarray(f.at));
        expect(clusterHeaderVerdict(b, f.at, f.hopLimit)).toBe(kernel);
      }),
      { numRuns: 3000 },
    );
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 40, maxLength: 40 }), (b) => {
        expect(clusterHeaderVerdict(b, 0, 4)).toBe(checkHeader(clusterFrameSchema(4), b));
      }),
    );
  });
});

describe('ClusterFrameReader over chunks of any shape', () => {
  const frameArb = fc.record({
    sender: fc.oneof(fc.constantFrom('vt:a', 'vt:b'), fc.string({ minLength: 1, maxLength: 12 })),
    // Past 256 bytes an IRI is decoded each time rather than remembered.
    target: fc.oneof(fc.string({ minLength: 1, maxLength: 12 }), fc.string({ minLength: 257, maxLength: 300 })),
    payload: fc.uint8Array({ maxLength: 600 }),
    shard: fc.nat(),
    epoch: fc.bigInt({ min: 0n, max: 5n }),
    id: fc.uint8Array({ minLength: 16, maxLength: 16 }),
  });

  it('fuzz: many frames in one chunk and frames split across chunks read back whole and in order', () => {
    fc.assert(
      fc.property(
        fc.array(frameArb, { minLength: 1, maxLength: 30 }),
        fc.array(fc.nat(), { maxLength: 10 }),
        (fs, rawCuts) => {
          const encoded = fs.map((f) =>
            encodeClusterFrame({ ...f, messageId: f.id, hops: 0, sender: f.sender, target: f.target }),
          );
          const all = Buffer.concat(encoded);
          const cuts = [...new Set(rawCuts.map((c) => c % (all.length + 1)))].sort((a, b) => a - b);
          const reader = new ClusterFrameReader();
          const got: ClusterFrame[] = [];
          let at = 0;
          for (const c of [...cuts, all.length]) {
            // Each chunk is its own Buffer, as node:http2 hands them over.
            reader.push(Buffer.from(all.subarray(at, c)));
            at = c;
            for (let fr = reader.next(); fr; fr = reader.next()) got.push(fr);
          }
          expect(reader.bufferedBytes).toBe(0);
          expect(got.length).toBe(fs.length);
          got.forEach((g, i) => {
            const f = fs[i]!;
            expect(g.sender).toBe(f.sender);
            expect(g.target).toBe(f.target);
            expect(g.shard).toBe(f.shard);
            expect(g.epoch).toBe(f.epoch);
            expect([...g.messageId]).toEqual([...f.id]);
            expect([...g.payload]).toEqual([...f.payload]);
            // Each frame owns its bytes: no view of the chunk it came in.
            expect(g.payload.buffer).not.toBe(all.buffer);
          });
          // Frames stay intact after later frames are read (the copies do not overlap).
          expect([...got[0]!.payload]).toEqual([...fs[0]!.payload]);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuses a bad header in the middle of a chunk with the kernel’s reason', () => {
    const ok = encodeClusterFrame({ shard: 1, epoch: 1n, messageId: new Uint8Array(16), sender: 'a', target: 'b' });
    const bad = Uint8Array.from(ok);
    bad[6] = 9; // hops above the limit of 4
    const reader = new ClusterFrameReader();
    reader.push(Buffer.concat([ok, bad]));
    expect(reader.next()?.sender).toBe('a');
    let err: unknown;
    try {
      reader.next();
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_WIRE_BAD_FRAME')).toBe(true);
    expect((err as { details: { reason: string } }).details.reason).toBe('hops');
  });
});
