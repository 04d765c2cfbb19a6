/**
 * The root's fold straight from arriving pieces (ts/sperli/reduce-fold.ts), and the
 * receive path of a connection that reads into one reused buffer (the dialled TLS
 * connections of the mesh; the memory transport's `readBuffer` option does the same and
 * overwrites the buffer after every read, so a view kept without a copy shows as wrong
 * bytes).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_COLLECTIVE_DATA } from '../../ts/codec/sperli-frame.js';
import { combine, ELEMENT_WIDTH, reduceAllowed } from '../../ts/core/index.js';
import { Comm } from '../../ts/sperli/comm.js';
import { HeldBytes } from '../../ts/sperli/comm-bytes.js';
import { createMemoryTransports } from '../../ts/sperli/memory-transport.js';
import { type FoldKind, PieceFold } from '../../ts/sperli/reduce-fold.js';
import { READ_BUFFER, StaticReader } from '../../ts/sperli/static-reader.js';
import { randomBytes as bytesFrom, rng } from '../helpers/rng.js';

const KINDS: readonly FoldKind[] = ['copy', 'seed', 'fold'];

function randomBytes(n: number, seed: number): Uint8Array {
  return bytesFrom(rng(seed), n);
}

/** What the fold must give: the kernel run once over the whole arrays. */
function expected(kind: FoldKind, before: Uint8Array, own: Uint8Array, arriving: Uint8Array, op: number, type: number) {
  if (kind === 'copy') return arriving.slice();
  const out = kind === 'seed' ? own.slice() : before.slice();
  combine(out, arriving, op, type);
  return out;
}

describe('PieceFold', () => {
  it('equals one kernel call over the whole arrays for every type, operation and kind, cut anywhere', () => {
    const pairs: [number, number][] = [];
    for (let type = 0; type <= 6; type++)
      for (let op = 1; op <= 10; op++) if (reduceAllowed(op, type)) pairs.push([type, op]);
    fc.assert(
      fc.property(
        fc.constantFrom(...pairs),
        fc.constantFrom(...KINDS),
        fc.integer({ min: 0, max: 40 }),
        fc.array(fc.integer({ min: 1, max: 23 }), { minLength: 1, maxLength: 12 }),
        fc.integer(),
        ([type, op], kind, elements, cuts, seed) => {
          const n = elements * (ELEMENT_WIDTH[type] as number);
          const before = randomBytes(n, seed);
          const own = randomBytes(n, seed + 1);
          const arriving = randomBytes(n, seed + 2);
          const result = before.slice();
          const fold = new PieceFold(result, kind, type, op, HeldBytes.of(own));
          let at = 0;
          for (let i = 0; at < n; i++) {
            const end = Math.min(n, at + (cuts[i % cuts.length] as number));
            // Each piece lives in a buffer overwritten once the fold has taken it.
            const piece = arriving.slice(at, end);
            fold.piece(piece);
            piece.fill(0xee);
            expect(fold.folded).toBeLessThanOrEqual(end);
            expect(fold.folded % (ELEMENT_WIDTH[type] as number)).toBe(0);
            at = end;
          }
          expect(fold.folded).toBe(n);
          expect(result).toEqual(expected(kind, before, own, arriving, op, type));
        },
      ),
      { numRuns: 400 },
    );
  });

  it('writes nothing past the elements that have arrived whole', () => {
    const result = new Uint8Array(24).fill(9);
    const fold = new PieceFold(result, 'copy', 6, 1);
    fold.piece(new Uint8Array(13).fill(1));
    expect(fold.folded).toBe(8);
    expect([...result.subarray(8)]).toEqual(new Array(16).fill(9));
    fold.piece(new Uint8Array(3).fill(1));
    expect(fold.folded).toBe(16);
    expect([...result.subarray(0, 16)]).toEqual(new Array(16).fill(1));
  });
});

/** Runs `body` on every rank of a memory job whose ranks read into one reused buffer. */
async function runReused<T>(size: number, readBuffer: number, body: (comm: Comm) => Promise<T>): Promise<T[]> {
  const comms = createMemoryTransports(size, { readBuffer }).map((t) => new Comm(t));
  const results = await Promise.all(comms.map((c) => body(c)));
  await Promise.all(comms.map((c) => c.finalize()));
  return results;
}

describe('receiving through one reused read buffer (as the dialled TLS connections do)', () => {
  it('refuses a read buffer size out of range', () => {
    expect(() => createMemoryTransports(2, { readBuffer: 0 })).toThrow(/readBuffer/);
  });

  it('allreduce and reduce from every root give the straightforward sums, pieces cut inside elements', async () => {
    const size = 3;
    const n = 40_000; // 320 KB of f64: streamed frames
    const inputs = Array.from({ length: size }, (_, r) => Float64Array.from({ length: n }, (_, i) => r * 0.25 + i));
    const ints = Array.from({ length: size }, (_, r) =>
      BigInt64Array.from({ length: n }, (_, i) => BigInt(i * (r + 1))),
    );
    const results = await runReused(size, 999, async (comm) => {
      const all = await comm.allreduce(inputs[comm.rank] as Float64Array, 'sum');
      const small = await comm.allreduce(new Int32Array([comm.rank, 5, -comm.rank]), 'max');
      const atRoot: (BigInt64Array | null)[] = [];
      for (let root = 0; root < size; root++)
        atRoot.push(await comm.reduce(root, ints[comm.rank] as BigInt64Array, 'sum'));
      return { all, small, atRoot };
    });
    results.forEach((res, rank) => {
      for (let i = 0; i < n; i += 97) expect(res.all[i]).toBe(0.75 + 3 * i);
      expect(res.all[n - 1]).toBe(0.75 + 3 * (n - 1));
      expect([...res.small]).toEqual([2, 5, 0]);
      res.atRoot.forEach((got, root) => {
        if (root !== rank) expect(got).toBeNull();
        else for (let i = 0; i < n; i += 89) expect(got?.[i]).toBe(BigInt(6 * i));
      });
    });
  });

  it('messages, bcast, gather and an allreduce of more than one frame arrive intact', async () => {
    const big = randomBytes(300_000, 7);
    const n = Math.ceil((MAX_COLLECTIVE_DATA + 4096) / 8);
    const results = await runReused(2, 65_536, async (comm) => {
      const other = 1 - comm.rank;
      const sends = [
        comm.send(other, 3, big),
        comm.send(other, 4, new Uint8Array([comm.rank, 1, 2])),
        // Its header and its payload arrive in separate reads.
        comm.send(other, 5, big.subarray(0, 10_000)),
      ];
      const m1 = await comm.recv(other, 3);
      const m2 = await comm.recv(other, 4);
      const m3 = await comm.recv(other, 5);
      await Promise.all(sends);
      const b = await comm.bcast(1, comm.rank === 1 ? big : undefined);
      const g = await comm.gather(0, new Uint8Array([comm.rank + 10, 20]));
      const data = new Float64Array(n).fill(comm.rank + 1);
      const sum = await comm.allreduce(data, 'sum');
      return { m1: m1.data, m2: [...m2.data], m3: m3.data, b, g, sum };
    });
    results.forEach((res, rank) => {
      expect(Buffer.compare(res.m1, big)).toBe(0);
      expect(res.m2).toEqual([1 - rank, 1, 2]);
      expect(Buffer.compare(res.m3, big.subarray(0, 10_000))).toBe(0);
      expect(Buffer.compare(res.b, big)).toBe(0);
      if (rank === 0)
        expect(res.g?.map((x) => [...x])).toEqual([
          [10, 20],
          [11, 20],
        ]);
      expect(res.sum.length).toBe(n);
      expect(res.sum.indexOf(3) === 0 && res.sum.findIndex((x) => x !== 3) === -1).toBe(true);
    });
  });
});

describe('StaticReader (the reads of a dialled TLS connection)', () => {
  it('copies and holds reads until attached, then hands them over in order, later reads as transient views', () => {
    const reader = new StaticReader();
    const read = (bytes: number[]): void => {
      reader.onread.buffer.set(bytes);
      expect(reader.onread.callback(bytes.length, reader.onread.buffer)).toBe(true);
      reader.onread.buffer.fill(0xee);
    };
    read([1, 2, 3]);
    read([4]);
    const got: [number[], boolean, boolean][] = [];
    reader.attach((bytes, transient) =>
      got.push([[...bytes], transient, bytes.buffer === reader.onread.buffer.buffer]),
    );
    read([5, 6]);
    expect(got).toEqual([
      [[1, 2, 3], false, false],
      [[4], false, false],
      [[5, 6], true, true],
    ]);
    expect(reader.onread.buffer.length).toBe(READ_BUFFER);
  });
});
