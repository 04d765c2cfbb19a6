/**
 * The expected-version and idempotency rules, property-tested against a deliberately
 * simple in-memory model: fast-check (fixed seed) makes sequences of appends (with
 * expected versions and idempotency keys), soft and hard deletes and server restarts; each
 * runs through the real gRPC server, and after every step the outcome (result or error
 * code, with the actual version) and, at the end, every stream and $all must match the model.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExpectedVersion } from '../../ts/chronacta/types.js';
import type { PlexusError } from '../../ts/core/errors.js';
import { type Running, serve, tempDir } from './helpers.js';

const SEED = 20_260_501;
const STREAMS = ['s0', 's1', 's2'];
const KEYS = ['k0', 'k1', 'k2', 'k3'];

type Expected = 'any' | 'no_stream' | 'exists' | number;

type Op =
  | {
      kind: 'append';
      stream: string;
      events: { type: string; data: string }[];
      expected: Expected;
      key: string | undefined;
    }
  | { kind: 'delete'; stream: string; hard: boolean; expected: Expected }
  | { kind: 'restart' };

interface ModelEvent {
  stream: string;
  version: number;
  position: number;
  type: string;
  data: string;
}

interface ModelStream {
  last: number;
  deleted: 'none' | 'soft' | 'hard';
  truncateBefore: number;
  metaVersion: number;
}

type Outcome =
  | {
      ok: true;
      firstVersion: number;
      lastVersion: number;
      firstPosition: number;
      lastPosition: number;
      duplicate: boolean;
    }
  | { ok: true; deleted: true; position: number }
  | { ok: false; code: string; actual?: number };

/** The reference: the rules of docs/chronacta.md, written as plainly as possible. */
class Model {
  streams = new Map<string, ModelStream>();
  keys = new Map<string, { stream: string; events: string; result: Outcome }>();
  events: ModelEvent[] = [];
  position = 0;

  private stream(name: string): ModelStream {
    let s = this.streams.get(name);
    if (!s) {
      s = { last: -1, deleted: 'none', truncateBefore: 0, metaVersion: -1 };
      this.streams.set(name, s);
    }
    return s;
  }

  private meets(s: ModelStream, e: Expected): boolean {
    if (e === 'any') return true;
    if (e === 'no_stream') return s.last === -1 || s.deleted === 'soft';
    if (e === 'exists') return s.last >= 0 && s.deleted === 'none';
    return s.last === e;
  }

  append(op: Extract<Op, { kind: 'append' }>): Outcome {
    const fingerprint = JSON.stringify(op.events);
    if (op.key !== undefined) {
      const k = this.keys.get(op.key);
      if (k) {
        if (k.stream === op.stream && k.events === fingerprint) return { ...k.result, duplicate: true } as Outcome;
        return { ok: false, code: 'PLX_CHRONACTA_IDEMPOTENCY_CONFLICT' };
      }
    }
    const s = this.stream(op.stream);
    if (s.deleted === 'hard') return { ok: false, code: 'PLX_CHRONACTA_STREAM_DELETED' };
    if (!this.meets(s, op.expected)) return { ok: false, code: 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION', actual: s.last };
    const first = this.position + 1;
    const firstVersion = s.last + 1;
    op.events.forEach((e, i) => {
      this.events.push({ stream: op.stream, version: firstVersion + i, position: first + i, ...e });
    });
    this.position += op.events.length;
    s.last += op.events.length;
    s.deleted = 'none';
    const result: Outcome = {
      ok: true,
      firstVersion,
      lastVersion: s.last,
      firstPosition: first,
      lastPosition: this.position,
      duplicate: false,
    };
    if (op.key !== undefined) this.keys.set(op.key, { stream: op.stream, events: fingerprint, result });
    return result;
  }

  delete(op: Extract<Op, { kind: 'delete' }>): Outcome {
    const s = this.stream(op.stream);
    if (s.deleted === 'hard') return { ok: false, code: 'PLX_CHRONACTA_STREAM_DELETED' };
    if (!this.meets(s, op.expected)) return { ok: false, code: 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION', actual: s.last };
    if (!op.hard && s.last === -1) return { ok: false, code: 'PLX_CHRONACTA_STREAM_NOT_FOUND' };
    this.position++;
    s.metaVersion++;
    s.deleted = op.hard ? 'hard' : 'soft';
    s.truncateBefore = s.last + 1;
    this.events.push({
      stream: `$$${op.stream}`,
      version: s.metaVersion,
      position: this.position,
      type: op.hard ? '$tombstone' : '$deleted',
      data: '',
    });
    return { ok: true, deleted: true, position: this.position };
  }

  /** What readers see: metadata events, and events neither deleted nor truncated. */
  visible(): ModelEvent[] {
    return this.events.filter((e) => {
      if (e.stream.startsWith('$$')) return true;
      const s = this.streams.get(e.stream)!;
      return s.deleted !== 'hard' && e.version >= s.truncateBefore;
    });
  }
}

const expectedArb: fc.Arbitrary<Expected> = fc.oneof(
  fc.constantFrom<Expected>('any', 'no_stream', 'exists'),
  fc.integer({ min: -1, max: 6 }).map((n) => (n < 0 ? 'any' : n)),
);

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      stream: fc.constantFrom(...STREAMS),
      events: fc.array(fc.record({ type: fc.constantFrom('a', 'b'), data: fc.constantFrom('x', 'y', '') }), {
        minLength: 1,
        maxLength: 3,
      }),
      expected: expectedArb,
      key: fc.option(fc.constantFrom(...KEYS), { nil: undefined, freq: 2 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('delete' as const),
      stream: fc.constantFrom(...STREAMS),
      hard: fc.boolean(),
      expected: expectedArb,
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
);

function toExpected(e: Expected): ExpectedVersion {
  return typeof e === 'number' ? BigInt(e) : e;
}

let tmp: { dir: string; remove: () => Promise<void> };
beforeAll(async () => {
  tmp = await tempDir('model');
});
afterAll(async () => {
  await tmp?.remove();
});

async function outcome(p: Promise<Outcome>): Promise<Outcome> {
  try {
    return await p;
  } catch (e) {
    const err = e as PlexusError;
    if (typeof err.code !== 'string') throw e;
    return {
      ok: false,
      code: err.code,
      ...(err.code === 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION' ? { actual: Number(err.details.actual) } : {}),
    };
  }
}

let runNo = 0;

describe('expected versions and idempotency against a model', () => {
  it('match the model over random sequences with restarts (fixed seed)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 5, maxLength: 60, size: 'large' }), async (ops) => {
        const dir = join(tmp.dir, `run-${runNo++}`);
        let run: Running = await serve(dir);
        const model = new Model();
        try {
          for (const op of ops) {
            if (op.kind === 'restart') {
              await run.stop();
              run = await serve(dir);
              continue;
            }
            const c = run.client;
            if (op.kind === 'append') {
              const want = model.append(op);
              const got = await outcome(
                c
                  .append(op.stream, op.events, {
                    expectedVersion: toExpected(op.expected),
                    ...(op.key ? { idempotencyKey: op.key } : {}),
                  })
                  .then((r) => ({
                    ok: true as const,
                    firstVersion: Number(r.firstVersion),
                    lastVersion: Number(r.lastVersion),
                    firstPosition: Number(r.firstPosition),
                    lastPosition: Number(r.lastPosition),
                    duplicate: r.duplicate,
                  })),
              );
              expect(got, JSON.stringify(op)).toEqual(want);
            } else {
              const want = model.delete(op);
              const got = await outcome(
                c
                  .deleteStream(op.stream, { hard: op.hard, expectedVersion: toExpected(op.expected) })
                  .then((r) => ({ ok: true as const, deleted: true as const, position: Number(r.position) })),
              );
              expect(got, JSON.stringify(op)).toEqual(want);
            }
          }
          // Everything readers see matches the model.
          const all = await run.client.readAll({ maxCount: 10_000 });
          expect(all.events.map((e) => [Number(e.position), e.stream, Number(e.version), e.type])).toEqual(
            model.visible().map((e) => [e.position, e.stream, e.version, e.type]),
          );
          for (const name of STREAMS) {
            const s = model.streams.get(name);
            if (s?.deleted === 'hard') {
              await expect(run.client.readStream(name)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_STREAM_DELETED' });
              continue;
            }
            const r = await run.client.readStream(name);
            expect(r.lastVersion).toBe(BigInt(s?.last ?? -1));
            expect(
              r.events.map((e) => [Number(e.version), Number(e.position), Buffer.from(e.data).toString()]),
            ).toEqual(
              model
                .visible()
                .filter((e) => e.stream === name)
                .map((e) => [e.version, e.position, e.data]),
            );
          }
        } finally {
          await run.stop();
        }
      }),
      { seed: SEED, numRuns: 40, endOnFailure: true },
    );
  }, 60_000);

  it('lets exactly one of many concurrent appends at the same expected version through', async () => {
    const run = await serve(join(tmp.dir, 'race'));
    try {
      for (let round = 0; round < 5; round++) {
        const results = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) =>
            run.client.append('race', [{ type: 't', data: `${round}/${i}` }], {
              expectedVersion: round === 0 ? 'no_stream' : BigInt(round - 1),
            }),
          ),
        );
        const ok = results.filter((r) => r.status === 'fulfilled');
        expect(ok).toHaveLength(1);
        for (const r of results) {
          if (r.status === 'rejected') {
            expect(r.reason.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
            expect(r.reason.details.actual).toBe(BigInt(round));
          }
        }
      }
      expect((await run.client.readStream('race')).events.map((e) => Number(e.version))).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await run.stop();
    }
  });
});
