import { afterAll, describe, expect, it } from 'vitest';
import { FrameType, MAX_COLLECTIVE_DATA, MAX_PAYLOAD } from '../../ts/codec/sperli-frame.js';
import { CollectiveOp, decodeCollective } from '../../ts/codec/sperli-payloads.js';
import { allocShared, backend, isPlexusError, type PlexusError, useBackend } from '../../ts/core/index.js';
import type { TransportFrame } from '../../ts/sperli/transport.js';
import { type MemoryJob, runJob, runOn, settleJob, TRANSPORTS } from '../helpers/comm-memory.js';
import { rng } from '../helpers/rng.js';

const SIZES = [1, 2, 3, 8];

// ---------------------------------------------------------------------------------------
// A straightforward reference for the reduce operations (docs/core.md): integers wrap,
// min and max compare signed or unsigned by type, logical operations give 0 or 1,
// floats are IEEE 754 rounded once to the type, min/max propagate NaN and order -0
// below +0. Storing into the typed array does the wrapping and the rounding.

type TypeName = 'u8' | 'i32' | 'u32' | 'i64' | 'u64' | 'f32' | 'f64';
type Arr = Uint8Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | Float32Array | Float64Array;
type Ctor = { new (n: number): Arr; new (a: Arr): Arr };

const CTOR: Record<TypeName, Ctor> = {
  u8: Uint8Array as unknown as Ctor,
  i32: Int32Array as unknown as Ctor,
  u32: Uint32Array as unknown as Ctor,
  i64: BigInt64Array as unknown as Ctor,
  u64: BigUint64Array as unknown as Ctor,
  f32: Float32Array as unknown as Ctor,
  f64: Float64Array as unknown as Ctor,
};
const TYPES = Object.keys(CTOR) as TypeName[];
const ALL_OPS = ['sum', 'prod', 'min', 'max', 'land', 'lor', 'lxor', 'band', 'bor', 'bxor'] as const;
type OpName = (typeof ALL_OPS)[number];
const OPS: Record<TypeName, readonly OpName[]> = {
  u8: ['band', 'bor', 'bxor'],
  i32: ALL_OPS,
  u32: ALL_OPS,
  i64: ALL_OPS,
  u64: ALL_OPS,
  f32: ['sum', 'prod', 'min', 'max'],
  f64: ['sum', 'prod', 'min', 'max'],
};
const isFloat = (t: TypeName) => t === 'f32' || t === 'f64';

function opNumber(op: OpName, x: number, y: number, float: boolean): number {
  switch (op) {
    case 'sum':
      return x + y;
    case 'prod':
      return float ? x * y : Math.imul(x, y);
    case 'min':
      return Math.min(x, y);
    case 'max':
      return Math.max(x, y);
    case 'land':
      return x !== 0 && y !== 0 ? 1 : 0;
    case 'lor':
      return x !== 0 || y !== 0 ? 1 : 0;
    case 'lxor':
      return (x !== 0) !== (y !== 0) ? 1 : 0;
    case 'band':
      return x & y;
    case 'bor':
      return x | y;
    case 'bxor':
      return x ^ y;
  }
}

function opBigint(op: OpName, x: bigint, y: bigint): bigint {
  switch (op) {
    case 'sum':
      return x + y;
    case 'prod':
      return x * y;
    case 'min':
      return x < y ? x : y;
    case 'max':
      return x > y ? x : y;
    case 'land':
      return x !== 0n && y !== 0n ? 1n : 0n;
    case 'lor':
      return x !== 0n || y !== 0n ? 1n : 0n;
    case 'lxor':
      return (x !== 0n) !== (y !== 0n) ? 1n : 0n;
    case 'band':
      return x & y;
    case 'bor':
      return x | y;
    case 'bxor':
      return x ^ y;
  }
}

/** Folds the contributions in rank order, the first as the left operand. */
function reference(type: TypeName, op: OpName, inputs: readonly Arr[]): Arr {
  const out = new CTOR[type](inputs[0] as Arr);
  for (let r = 1; r < inputs.length; r++) {
    const b = inputs[r] as Arr;
    for (let i = 0; i < out.length; i++) {
      if (type === 'i64' || type === 'u64') {
        (out as BigInt64Array)[i] = opBigint(op, (out as BigInt64Array)[i]!, (b as BigInt64Array)[i]!);
      } else {
        (out as Float64Array)[i] = opNumber(op, (out as Float64Array)[i]!, (b as Float64Array)[i]!, isFloat(type));
      }
    }
  }
  return out;
}

/** Seeded inputs with zeros (for the logical operations), negatives, overflow and float specials. */
function makeData(type: TypeName, n: number, seed: number, rank: number): Arr {
  const next = rng(seed);
  const a = new CTOR[type](n);
  for (let i = 0; i < n; i++) {
    const u = next();
    const kind = u % 4;
    if (type === 'i64' || type === 'u64') {
      const wide = (BigInt(next()) << 32n) | BigInt(next());
      const v = kind === 0 ? 0n : kind === 1 ? BigInt((u % 41) - 20) : wide;
      (a as BigInt64Array)[i] = type === 'i64' ? BigInt.asIntN(64, v) : BigInt.asUintN(64, v);
    } else if (isFloat(type)) {
      const x = (next() / 2 ** 32 - 0.5) * (kind === 0 ? 1e-3 : kind === 1 ? 10 : 1e6);
      (a as Float64Array)[i] = kind === 3 ? Math.round(x) : x;
    } else {
      (a as Int32Array)[i] = kind === 0 ? 0 : kind === 1 ? (u % 21) - 10 : next() | 0;
    }
  }
  if (isFloat(type) && n > 4) {
    (a as Float64Array)[0] = rank % 2 === 0 ? -0 : 0;
    if (rank === 1) (a as Float64Array)[1] = Number.POSITIVE_INFINITY;
    if (rank === 2) (a as Float64Array)[2] = Number.NaN;
    if (rank === 0) (a as Float64Array)[3] = -0;
  }
  return a;
}

function expectSame(got: unknown, want: Arr, what: string): void {
  expect(got, what).toBeInstanceOf(want.constructor);
  const g = got as Arr;
  expect(g.length, what).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(g[i], want[i])) {
      throw new Error(`${what}: element ${i} is ${String(g[i])}, the reference has ${String(want[i])}`);
    }
  }
}

const text = (s: string) => new TextEncoder().encode(s);
const fill = (n: number, v: number) => new Uint8Array(n).fill(v);

async function rejection(p: Promise<unknown>): Promise<PlexusError> {
  try {
    await p;
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('nothing was refused');
}

function codeOf(s: PromiseSettledResult<unknown>): string {
  if (s.status === 'fulfilled') return 'ok';
  return isPlexusError(s.reason) ? s.reason.code : String(s.reason);
}

function errorOf(s: PromiseSettledResult<unknown>): PlexusError {
  if (s.status === 'fulfilled' || !isPlexusError(s.reason)) throw new Error(`not a PlexusError: ${codeOf(s)}`);
  return s.reason;
}

/** The collective headers of every COLLECTIVE frame sent. */
function collectiveHeaders(job: MemoryJob) {
  return job.sent.filter((f) => f.type === FrameType.COLLECTIVE).map((f) => decodeCollective(f.payload).header);
}

/** A tap that rewrites the COLLECTIVE frames from `from` to `to` (the `which`-th only, when given). */
function rewrite(from: number, to: number, change: (p: Uint8Array) => Uint8Array | undefined, which?: number) {
  let n = 0;
  return (job: MemoryJob) => {
    job.tap = (f: number, t: number, frame: TransportFrame) => {
      if (f !== from || t !== to || frame.type !== FrameType.COLLECTIVE) return frame;
      if (which !== undefined && n++ !== which) return frame;
      const payload = frame.payload.slice();
      return { ...frame, payload: change(payload) ?? payload };
    };
  };
}

// ---------------------------------------------------------------------------------------

describe.each(TRANSPORTS.flatMap((kind) => SIZES.map((size) => [kind, size] as const)))(
  'collectives on %s, %i ranks',
  (kind, size) => {
    const ranks = Array.from({ length: size }, (_, r) => r);

    it.each(TYPES)('allreduce and reduce of %s with every operation it takes', async (type) => {
      for (const op of OPS[type]) {
        const seed = size * 1000 + TYPES.indexOf(type) * 20 + ALL_OPS.indexOf(op);
        const inputs = ranks.map((r) => makeData(type, 37, seed * 16 + r, r));
        const copies = inputs.map((a) => new CTOR[type](a));
        const want = reference(type, op, inputs);
        const root = size - 1;
        const results = await runOn(kind, size, async (comm) => {
          const mine = inputs[comm.rank] as Arr;
          const all = await comm.allreduce(mine, op);
          const one = await comm.reduce(root, mine, op);
          const byCode = await comm.allreduce(mine, TYPES.indexOf(type), ALL_OPS.indexOf(op) + 1);
          return { all, one, byCode };
        });
        results.forEach((res, r) => {
          expectSame(res.all, want, `allreduce ${type} ${op} on rank ${r}`);
          expectSame(res.byCode, want, `allreduce ${type} ${op} by code on rank ${r}`);
          if (r === root) expectSame(res.one, want, `reduce ${type} ${op} at the root`);
          else expect(res.one).toBeNull();
        });
        inputs.forEach((a, r) => {
          expectSame(a, copies[r] as Arr, `input of rank ${r} after ${op}`);
        });
      }
    });

    it('barrier lets no rank through before every rank has arrived', async () => {
      const arrived = ranks.map(() => 0);
      await runJob(size, async (comm) => {
        for (let round = 1; round <= 3; round++) {
          for (let i = 0; i < comm.rank; i++) await new Promise((r) => setImmediate(r));
          arrived[comm.rank] = round;
          await comm.barrier();
          expect(Math.min(...arrived)).toBeGreaterThanOrEqual(round);
        }
      });
    });

    it('bcast gives the root bytes to every rank, from every root', async () => {
      const results = await runOn(kind, size, async (comm) => {
        const got: Uint8Array[] = [];
        for (let root = 0; root < size; root++) {
          const mine = comm.rank === root ? fill(root * 3 + 1, 0x40 + root) : undefined;
          const out = await comm.bcast(root, mine);
          if (mine !== undefined) expect(out).toBe(mine);
          got.push(out);
        }
        got.push(await comm.bcast(0, comm.rank === 0 ? new Uint8Array(0) : undefined));
        return got;
      });
      for (const got of results) {
        for (let root = 0; root < size; root++) expect(got[root]).toEqual(fill(root * 3 + 1, 0x40 + root));
        expect(got[size]?.length).toBe(0);
      }
    });

    it('gather gives the root every block in rank order, from every root', async () => {
      const results = await runOn(kind, size, async (comm) => {
        const got: (Uint8Array[] | null)[] = [];
        for (let root = 0; root < size; root++) got.push(await comm.gather(root, new Uint8Array([comm.rank, root, 7])));
        got.push(await comm.gather(0, new Uint8Array(0)));
        return got;
      });
      results.forEach((got, rank) => {
        for (let root = 0; root < size; root++) {
          if (rank !== root) expect(got[root]).toBeNull();
          else expect(got[root]).toEqual(ranks.map((r) => new Uint8Array([r, root, 7])));
        }
        if (rank === 0) expect(got[size]).toEqual(ranks.map(() => new Uint8Array(0)));
      });
    });

    it('scatter gives each rank its block, from blocks or from one buffer, from every root', async () => {
      const results = await runOn(kind, size, async (comm) => {
        const got: Uint8Array[] = [];
        for (let root = 0; root < size; root++) {
          const blocks = comm.rank === root ? ranks.map((r) => fill(5, r * 16 + root)) : undefined;
          got.push(await comm.scatter(root, blocks));
          const one = new Uint8Array(size * 3).map((_, i) => 100 + i + root);
          got.push(await comm.scatter(root, comm.rank === root ? one : undefined));
        }
        return got;
      });
      results.forEach((got, rank) => {
        for (let root = 0; root < size; root++) {
          expect(got[2 * root]).toEqual(fill(5, rank * 16 + root));
          expect(Array.from(got[2 * root + 1] as Uint8Array)).toEqual([0, 1, 2].map((i) => 100 + rank * 3 + i + root));
        }
      });
    });

    it('bytes gives the root every rank bytes of any length, in rank order', async () => {
      const results = await runOn(kind, size, async (comm) => {
        const root = size > 2 ? 2 : 0;
        return comm.bytes(root, fill(comm.rank * 2, comm.rank + 1));
      });
      const root = size > 2 ? 2 : 0;
      results.forEach((got, rank) => {
        if (rank === root) expect(got).toEqual(ranks.map((r) => fill(r * 2, r + 1)));
        else expect(got).toBeNull();
      });
    });

    it('reduce with an explicit element type gives the array type passed in', async () => {
      const results = await runOn(kind, size, async (comm) => {
        const bytes = new Uint8Array(new Int32Array([comm.rank + 1, -1]).buffer);
        const asBytes = await comm.allreduce(bytes, 'i32', 'sum');
        const asInt = await comm.allreduce(new Int32Array([comm.rank + 1, -1]), 'i32', 'prod');
        const empty = await comm.allreduce(new Float64Array(0), 'sum');
        return { asBytes, asInt, empty };
      });
      const sum = (size * (size + 1)) / 2;
      let prod = 1;
      for (let r = 1; r <= size; r++) prod *= r;
      for (const { asBytes, asInt, empty } of results) {
        expect(asBytes).toBeInstanceOf(Uint8Array);
        expect(Array.from(new Int32Array(asBytes.slice().buffer))).toEqual([sum, -size]);
        expect(asInt).toBeInstanceOf(Int32Array);
        expect(Array.from(asInt)).toEqual([prod, size % 2 === 0 ? 1 : -1]);
        expect(empty).toBeInstanceOf(Float64Array);
        expect(empty.length).toBe(0);
      }
    });
  },
);

describe('reduce on the TypeScript twin', () => {
  const was = backend().name;
  afterAll(() => useBackend(was));
  it.each(TYPES)('allreduce of %s on 3 ranks matches the reference', async (type) => {
    useBackend('js');
    for (const op of OPS[type]) {
      const inputs = [0, 1, 2].map((r) => makeData(type, 19, 7 * r + 1, r));
      const want = reference(type, op, inputs);
      const { results } = await runJob(3, (comm) => comm.allreduce(inputs[comm.rank] as Arr, op));
      results.forEach((got, r) => {
        expectSame(got, want, `${type} ${op} on rank ${r}`);
      });
    }
  });
});

describe('collective data larger than one frame', () => {
  const MIB40 = 40 * 1024 * 1024;

  it('allreduce of 40 MiB of f64 on 3 ranks splits into frames of one header', async () => {
    const n = MIB40 / 8;
    const inputs = [0, 1, 2].map((r) => {
      const a = new Float64Array(n);
      for (let i = 0; i < n; i++) a[i] = (i % 1000) * 0.25 + r * 1e-3;
      return a;
    });
    const want = reference('f64', 'sum', inputs);
    const { job, results } = await runJob(3, (comm) => comm.allreduce(inputs[comm.rank] as Float64Array, 'sum'));
    results.forEach((got, r) => {
      expectSame(got, want, `rank ${r}`);
    });
    for (const [from, to] of [
      [1, 0],
      [2, 0],
      [0, 1],
      [0, 2],
    ] as const) {
      const frames = job.frames(from, to, FrameType.COLLECTIVE);
      expect(frames.map((f) => f.payload.length)).toEqual([
        MAX_PAYLOAD,
        MAX_PAYLOAD,
        MIB40 - 2 * MAX_COLLECTIVE_DATA + 16,
      ]);
      const headers = frames.map((f) => Buffer.from(f.payload.subarray(0, 16)).toString('hex'));
      expect(new Set(headers).size).toBe(1);
      expect(decodeCollective(frames[0]!.payload).header).toMatchObject({ op: CollectiveOp.allreduce, sequence: 1n });
    }
  });

  it('allreduce and bcast of 40 MiB on 3 ranks of memory-transport', async () => {
    const n = MIB40 / 4;
    const inputs = [0, 1, 2].map((r) => new Float32Array(n).fill(r + 0.5));
    const data = new Uint8Array(MIB40).fill(9);
    data[MIB40 - 1] = 1;
    const results = await runOn('memory-transport', 3, async (comm) => {
      const sum = await comm.allreduce(inputs[comm.rank] as Float32Array, 'sum');
      const b = await comm.bcast(2, comm.rank === 2 ? data : undefined);
      return { sum, b };
    });
    for (const { sum, b } of results) {
      expect(sum.length).toBe(n);
      expect(sum.every((x) => x === 4.5)).toBe(true);
      expect(Buffer.compare(b, data)).toBe(0);
    }
  });

  it('bcast of 40 MiB on 3 ranks', async () => {
    const data = new Uint8Array(MIB40);
    for (let i = 0; i < data.length; i += 4093) data[i] = (i >> 12) & 0xff;
    const { job, results } = await runJob(3, (comm) => comm.bcast(1, comm.rank === 1 ? data : undefined));
    for (const got of results) expect(Buffer.compare(got, data)).toBe(0);
    expect(job.frames(1, 2, FrameType.COLLECTIVE)).toHaveLength(3);
  });

  it('data of exactly 16777200 bytes is a full frame and an empty one', async () => {
    const n = MAX_COLLECTIVE_DATA;
    const { job, results } = await runJob(2, async (comm) => {
      const red = await comm.allreduce(fill(n, comm.rank === 0 ? 0x0f : 0xf0), 'bxor');
      const sc = await comm.scatter(0, comm.rank === 0 ? [fill(n + 1, 1), fill(n + 1, 2)] : undefined);
      const ga = await comm.gather(1, fill(n + 1, 3 + comm.rank));
      return { red, sc, ga };
    });
    expect(results[0]?.red.every((x) => x === 0xff)).toBe(true);
    expect(results[1]?.red.length).toBe(n);
    expect(results[1]?.sc.length).toBe(n + 1);
    expect(results[1]?.sc.every((x) => x === 2)).toBe(true);
    expect(results[1]?.ga?.map((b) => [b.length, b[n]])).toEqual([
      [n + 1, 3],
      [n + 1, 4],
    ]);
    expect(job.frames(1, 0, FrameType.COLLECTIVE).map((f) => f.payload.length)).toEqual([MAX_PAYLOAD, 16]);
    expect(job.frames(0, 1, FrameType.COLLECTIVE).map((f) => f.payload.length)).toEqual([
      MAX_PAYLOAD,
      16,
      MAX_PAYLOAD,
      17,
      MAX_PAYLOAD,
      17,
    ]);
  });
});

describe('collectives on arena views', () => {
  it.runIf(backend().name === 'wasm')('allreduce reads views of allocShared that memory growth detached', async () => {
    const grown: { free(): void }[] = [];
    const { results } = await runJob(3, async (comm) => {
      const block = allocShared(8 * 1000);
      block.view(Float64Array).fill(comm.rank + 1);
      const p = comm.allreduce(block.view(Float64Array), 'sum');
      grown.push(allocShared(128 * 1024 * 1024));
      const out = await p;
      block.free();
      return out;
    });
    for (const g of grown) g.free();
    for (const out of results) expect(out.every((x) => x === 6)).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------

describe('refusals every rank makes alone (H1618) leave the job running', () => {
  it('refuses before anything is sent, counts the call, and a later call works', async () => {
    const { job, settled } = await settleJob(3, async (comm) => {
      const calls: [string, Promise<unknown>][] = [
        ['root', comm.reduce(3, new Int32Array(2), 'sum')],
        ['root', comm.bcast(-1, text('x'))],
        ['root', comm.scatter(1.5, [])],
        ['op-type', comm.allreduce(new Float64Array(2), 'band')],
        ['op-type', comm.allreduce(new Uint8Array(2), 'sum')],
        ['op-type', comm.allreduce(new Float32Array(2), 'lxor')],
        ['length', comm.allreduce(new Uint8Array(7), 'i32', 'sum')],
        ['length', comm.reduce(0, new Uint8Array(12), 'f64', 'max')],
        ['op', comm.allreduce(new Int32Array(2), 'avg' as 'sum')],
        ['op', comm.allreduce(new Int32Array(2), 0)],
        ['op', comm.allreduce(new Int32Array(2), 11)],
        ['type', comm.allreduce(new Uint8Array(8), 7, 'bxor')],
        ['type', comm.allreduce(new Int16Array(2) as unknown as Int32Array, 'sum')],
        ['data', comm.gather(0, 'x' as unknown as Uint8Array)],
        ['data', comm.bcast(comm.rank, undefined)],
      ];
      for (const [reason, p] of calls) {
        const e = await rejection(p);
        expect([e.code, e.details.reason]).toEqual(['H1618', reason]);
      }
      const before = comm.collectiveSequence;
      const sum = await comm.allreduce(new Int32Array([comm.rank, 1]), 'sum');
      return { before, after: comm.collectiveSequence, sum: Array.from(sum) };
    });
    expect(settled.map(codeOf)).toEqual(['ok', 'ok', 'ok']);
    for (const s of settled) {
      if (s.status !== 'fulfilled') continue;
      expect(s.value).toEqual({ before: 15n, after: 16n, sum: [3, 3] });
    }
    expect(job.aborts).toEqual([]);
    const headers = collectiveHeaders(job);
    expect(headers.length).toBeGreaterThan(0);
    expect(headers.every((h) => h.sequence === 16n)).toBe(true);
  });

  it('a rank that refuses a call the others make is found by its next frame (H1617, sequence)', async () => {
    const { job, settled } = await settleJob(3, async (comm) => {
      if (comm.rank === 1) {
        const e = await rejection(comm.allreduce(new Uint8Array(7), 'i32', 'sum'));
        expect(e.code).toBe('H1618');
      } else {
        await comm.allreduce(new Int32Array(2), 'sum');
      }
      await comm.barrier();
    });
    expect(settled.map(codeOf)).toEqual(['H1617', 'H1612', 'H1612']);
    expect(errorOf(settled[0]!).details).toMatchObject({ reason: 'operation', rank: 1 });
    expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1617' }]);
  });
});

describe('checks only one rank can make end the job', () => {
  const FIELDS: [string, (p: Uint8Array) => void][] = [
    ['operation', (p) => (p[0] = CollectiveOp.reduce)],
    ['element-type', (p) => (p[1] = 2)],
    ['reduce-op', (p) => (p[2] = 2)],
    ['phase', (p) => (p[3] = 2)],
    ['root', (p) => new DataView(p.buffer).setUint32(4, 1, true)],
    ['sequence', (p) => new DataView(p.buffer).setBigUint64(8, 2n, true)],
  ];

  it.each(FIELDS)('a collective header that differs in %s: H1617 and ABORT reason 3', async (field, change) => {
    const { job, comms, settled } = await settleJob(
      3,
      (comm) => comm.allreduce(new Int32Array([1, 2, 3]), 'sum'),
      rewrite(2, 0, (p) => {
        change(p);
        return p;
      }),
    );
    expect(settled.map(codeOf)).toEqual(['H1617', 'H1612', 'H1612']);
    const e = errorOf(settled[0]!);
    expect(e.details).toMatchObject({ reason: field, rank: 2 });
    expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1617' }]);
    // Every later call rejects with the failure.
    for (const c of comms) {
      expect(await rejection(c.barrier())).toBe(c.failed);
      expect(await rejection(c.send((c.rank + 1) % 3, 0, new Uint8Array(1)))).toBe(c.failed);
      expect(await rejection(c.recv())).toBe(c.failed);
    }
    expect(comms[0]?.failed).toBe(e);
  });

  it('a mismatch found by a rank that is not the root ends the job the same way', async () => {
    const { job, settled } = await settleJob(
      3,
      async (comm) => {
        await comm.allreduce(new Int32Array([1]), 'sum');
        await comm.barrier();
      },
      rewrite(0, 1, (p) => {
        p[2] = 3;
        return p;
      }),
    );
    expect(settled.map(codeOf)).toEqual(['H1612', 'H1617', 'H1612']);
    expect(errorOf(settled[1]!).details).toMatchObject({ reason: 'reduce-op', rank: 0 });
    expect(job.aborts).toEqual([{ rank: 1, reason: 3, code: 'H1617' }]);
  });

  it('a cut collective frame, and one no call can send: H1617 and ABORT reason 3', async () => {
    for (const [reason, change] of [
      ['cut', (p: Uint8Array) => p.subarray(0, 10)],
      ['collective-header', (p: Uint8Array) => p.map((x, i) => (i === 0 ? 9 : x))],
      ['collective-header', (p: Uint8Array) => p.map((x, i) => (i === 3 ? 0 : x))],
    ] as const) {
      const { job, settled } = await settleJob(
        3,
        (comm) => comm.allreduce(new Int32Array([1]), 'sum'),
        rewrite(1, 0, change),
      );
      expect(settled.map(codeOf)).toEqual(['H1617', 'H1612', 'H1612']);
      expect(errorOf(settled[0]!).details.reason).toBe(reason);
      expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1617' }]);
    }
  });

  it('a later frame of a split message with another header: H1617', async () => {
    const n = MAX_COLLECTIVE_DATA + 8;
    const { job, settled } = await settleJob(
      2,
      (comm) => comm.reduce(0, fill(n, comm.rank), 'bxor'),
      rewrite(
        1,
        0,
        (p) => {
          new DataView(p.buffer).setBigUint64(8, 7n, true);
          return p;
        },
        1,
      ),
    );
    expect(settled.map(codeOf)).toEqual(['H1617', 'ok']);
    expect(errorOf(settled[0]!).details).toMatchObject({ reason: 'sequence', got: 7n, expected: 1n });
    expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1617' }]);
  });

  it('barrier data and an allreduce result of another length: H1617', async () => {
    const extra = (p: Uint8Array) => {
      const q = new Uint8Array(p.length + 4);
      q.set(p);
      return q;
    };
    const b = await settleJob(2, (comm) => comm.barrier(), rewrite(1, 0, extra));
    expect(b.settled.map(codeOf)).toEqual(['H1617', 'H1612']);
    expect(errorOf(b.settled[0]!).details).toMatchObject({ reason: 'data-length', got: 4, expected: 0 });
    const a = await settleJob(2, (comm) => comm.allreduce(new Int32Array(3), 'max'), rewrite(0, 1, extra));
    expect(a.settled.map(codeOf)).toEqual(['ok', 'H1617']);
    expect(a.job.aborts).toEqual([{ rank: 1, reason: 3, code: 'H1617' }]);
  });

  it.each([
    ['shorter', 3, 0],
    ['longer', 5, 0],
    ['shorter, from rank 0 to root 1', 3, 1],
  ])('reduce contributions of different length (%s): H1618 and ABORT reason 3', async (_n, len, root) => {
    const odd = root === 0 ? 2 : 0;
    const { job, comms, settled } = await settleJob(3, (comm) =>
      comm.reduce(root, new Float64Array(comm.rank === odd ? len : 4), 'sum'),
    );
    // The other ranks only send; they learn of the end from the ABORT.
    expect(settled.map(codeOf)).toEqual([0, 1, 2].map((r) => (r === root ? 'H1618' : 'ok')));
    expect(errorOf(settled[root]!).details).toMatchObject({ reason: 'contribution-length', rank: odd });
    expect(job.aborts).toEqual([{ rank: root, reason: 3, code: 'H1618' }]);
    await new Promise((r) => setImmediate(r));
    expect(comms.map((c) => c.failed?.code)).toEqual([0, 1, 2].map((r) => (r === root ? 'H1618' : 'H1612')));
  });

  it('allreduce contributions of different length: H1618 at rank 0, H1612 elsewhere', async () => {
    const { job, settled } = await settleJob(3, (comm) =>
      comm.allreduce(new BigInt64Array(comm.rank === 1 ? 2 : 3), 'sum'),
    );
    expect(settled.map(codeOf)).toEqual(['H1618', 'H1612', 'H1612']);
    expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1618' }]);
  });

  it('gather blocks of different length: H1617 and ABORT reason 3', async () => {
    const { job, settled } = await settleJob(3, async (comm) => {
      await comm.gather(0, fill(comm.rank === 1 ? 5 : 4, 1));
      await comm.barrier();
    });
    expect(settled.map(codeOf)).toEqual(['H1617', 'H1612', 'H1612']);
    expect(errorOf(settled[0]!).details).toMatchObject({ reason: 'block-length', rank: 1, expected: 4 });
    expect(job.aborts).toEqual([{ rank: 0, reason: 3, code: 'H1617' }]);
  });

  it.each([
    ['a buffer that is not a whole number of blocks', new Uint8Array(10)],
    ['too few blocks', [fill(2, 1), fill(2, 2)]],
    ['blocks of different length', [fill(2, 1), fill(3, 2), fill(2, 3)]],
    ['a block that is not bytes', [fill(2, 1), 'no', fill(2, 3)]],
    ['no data', undefined],
  ])('scatter with %s at the root: H1618 there, ABORT reason 4, H1612 elsewhere', async (_n, data) => {
    const { job, settled } = await settleJob(3, (comm) =>
      comm.scatter(1, comm.rank === 1 ? (data as Uint8Array) : undefined),
    );
    expect(settled.map(codeOf)).toEqual(['H1612', 'H1618', 'H1612']);
    expect(errorOf(settled[1]!).details.reason).toBe('scatter-blocks');
    expect(job.aborts).toEqual([{ rank: 1, reason: 4, code: 'H1618' }]);
  });
});
