/**
 * Compaction under load through the real gRPC server: writers append, a deleter deletes
 * and truncates streams, readers page through $all and streams, a subscriber follows
 * $all, and compactions run again and again meanwhile. Nothing acknowledged and not
 * deleted may be lost or change its position or version; the space of deleted events in
 * closed segments is reclaimed; everything holds after a restart, idempotency keys of
 * deleted appends included.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChronactaClient } from '../../ts/chronacta/client.js';
import type { AppendResult, CompactionReport, RecordedEvent, SubscriptionMessage } from '../../ts/chronacta/types.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';
import { pace, type Running, serve, tempDir } from './helpers.js';

let tmp: { dir: string; remove: () => Promise<void> };
beforeAll(async () => {
  tmp = await tempDir('compact');
});
afterAll(async () => {
  await tmp?.remove();
});

interface StreamModel {
  /** data of each version written. */
  written: string[];
  /** Versions below this are gone. */
  truncateBefore: number;
  hard: boolean;
  positions: bigint[];
}

async function readAllPages(c: ChronactaClient): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  let from = 1n;
  for (;;) {
    const r = await c.readAll({ fromPosition: from, maxCount: 500 });
    out.push(...r.events);
    if (r.end) return out;
    from = r.nextPosition;
  }
}

function checkAgainst(model: Map<string, StreamModel>, all: RecordedEvent[]): string[] {
  const wrong: string[] = [];
  const seen = new Map<string, number[]>();
  let prev = 0n;
  for (const e of all) {
    if (e.position <= prev) wrong.push(`$all not increasing at ${e.position}`);
    prev = e.position;
    if (e.stream.startsWith('$$')) continue;
    const m = model.get(e.stream);
    if (!m) {
      wrong.push(`unknown stream ${e.stream}`);
      continue;
    }
    const v = Number(e.version);
    if (m.hard || v < m.truncateBefore) wrong.push(`${e.stream}@${v} should be gone`);
    if (Buffer.from(e.data).toString() !== m.written[v]) wrong.push(`${e.stream}@${v} has other data`);
    if (m.positions[v] !== e.position) wrong.push(`${e.stream}@${v} moved from ${m.positions[v]} to ${e.position}`);
    const list = seen.get(e.stream) ?? [];
    list.push(v);
    seen.set(e.stream, list);
  }
  for (const [name, m] of model) {
    if (m.hard) continue;
    const want = m.written.map((_, v) => v).filter((v) => v >= m.truncateBefore);
    const got = seen.get(name) ?? [];
    if (JSON.stringify(got) !== JSON.stringify(want))
      wrong.push(`${name}: $all has versions ${got} instead of ${want}`);
  }
  return wrong.slice(0, 10);
}

describe('compaction under load', () => {
  it('loses nothing while appends, reads, deletes and a subscription go on, and reclaims space', async () => {
    const dir = join(tmp.dir, 'data');
    let run: Running = await serve(dir, { segmentBytes: 32 * 1024 });
    const c = run.client;
    const model = new Map<string, StreamModel>();
    const next = rng(4242);
    const firstKeyed: { stream: string; events: { type: string; data: string }[]; result?: AppendResult } = {
      stream: 'temp-keyed',
      events: [{ type: 'k', data: 'temp-keyed#0' }],
    };
    try {
      firstKeyed.result = await c.append(firstKeyed.stream, firstKeyed.events, { idempotencyKey: 'early-key' });
      model.set('temp-keyed', {
        written: ['temp-keyed#0'],
        truncateBefore: 0,
        hard: false,
        positions: [firstKeyed.result.firstPosition],
      });

      const appendTo = async (name: string) => {
        let m = model.get(name);
        if (!m) {
          m = { written: [], truncateBefore: 0, hard: false, positions: [] };
          model.set(name, m);
        }
        if (m.hard) return;
        const n = 1 + (next() % 3);
        const base = m.written.length;
        const events = Array.from({ length: n }, (_, k) => ({
          type: 'e',
          data: `${name}#${base + k}`.padEnd(200, '.'),
        }));
        const r = await c.append(name, events, { expectedVersion: base === 0 ? 'any' : BigInt(base - 1) });
        expect(Number(r.firstVersion)).toBe(base);
        events.forEach((e, k) => {
          m!.written[base + k] = e.data;
          m!.positions[base + k] = r.firstPosition + BigInt(k);
        });
      };

      // A subscriber from the start follows everything that is never deleted.
      const subMessages: SubscriptionMessage[] = [];
      const sub = c.subscribe({ all: true, streamPrefix: 'keep-' });
      const subDone = (async () => {
        for await (const m of sub) subMessages.push(m);
      })();

      let stop = false;
      const reports: CompactionReport[] = [];
      // The generation of temp- stream each writer is on; it never goes back to an older one.
      const writerGen = [0, 0, 0];
      const writers = Array.from({ length: 3 }, async (_, w) => {
        for (let i = 0; !stop; i++) {
          await appendTo(`keep-${w}`);
          writerGen[w] = Math.floor(i / 15);
          await appendTo(`temp-${w}-${writerGen[w]}`);
          await appendTo(`trim-${w}`);
        }
      });
      let deleterRounds = 0;
      const deleter = (async () => {
        for (let round = 0; !stop; round++) {
          await pace(40);
          deleterRounds = round;
          for (let w = 0; w < 3; w++) {
            const gen = round - 1;
            const name = `temp-${w}-${gen}`;
            const m = model.get(name);
            if (m && !m.hard && m.truncateBefore < m.written.length && gen >= 0 && (writerGen[w] as number) > gen) {
              // The writer moved on from this one (so no append to it is in flight): delete it
              // (every other one hard).
              if (gen % 2 === 0) {
                await c.deleteStream(name);
                m.truncateBefore = m.written.length;
              } else {
                await c.deleteStream(name, { hard: true });
                m.hard = true;
              }
            }
          }
          const tm = model.get(`trim-${round % 3}`);
          if (tm && tm.written.length > 5) {
            const r = await c.truncateStream(`trim-${round % 3}`, { maxCount: 3 });
            tm.truncateBefore = Number(r.truncateBefore);
          }
          if (round === 2) {
            await c.deleteStream('temp-keyed');
            model.get('temp-keyed')!.truncateBefore = 1;
          }
        }
      })();
      const readsSoFar = [0, 0];
      const readers = Array.from({ length: 2 }, async (_, ri) => {
        let reads = 0;
        while (!stop) {
          const all = await readAllPages(c);
          const ps = all.map((e) => e.position);
          for (let i = 1; i < ps.length; i++) expect(ps[i]! > ps[i - 1]!).toBe(true);
          for (const e of all) {
            if (e.stream.startsWith('$$')) continue;
            expect(Buffer.from(e.data).toString().startsWith(`${e.stream}#${e.version}`)).toBe(true);
          }
          const keep = await c.readStream('keep-0');
          expect(keep.events.map((e) => Number(e.version))).toEqual(keep.events.map((_, i) => i));
          reads++;
          readsSoFar[ri] = reads;
        }
        return reads;
      });
      const compactor = (async () => {
        while (!stop) {
          reports.push(await c.compact());
          await pace(60);
        }
      })();

      // The load runs until compaction reclaimed deleted events more than once (space too),
      // every reader read everything at least once, and the deleter went past its third round.
      await until(
        () => {
          const useful = reports.filter((r) => r.dropped > 0);
          return (
            useful.length > 1 &&
            useful.some((r) => r.bytesAfter < r.bytesBefore) &&
            readsSoFar.every((n) => n > 0) &&
            deleterRounds > 2
          );
        },
        { timeoutMs: 60_000, what: 'compactions that reclaim space under load' },
      );
      stop = true;
      const [readCounts] = await Promise.all([Promise.all(readers), ...writers, deleter, compactor]);
      reports.push(await c.compact());

      // Compaction ran many times, moved the cutoff and reclaimed the deleted events.
      const useful = reports.filter((r) => r.dropped > 0);
      expect(useful.length).toBeGreaterThan(1);
      expect(reports.at(-1)!.cutoff).toBeGreaterThan(1n);
      expect(useful.some((r) => r.bytesAfter < r.bytesBefore)).toBe(true);
      expect(readCounts.every((n) => n > 0)).toBe(true);
      console.info(
        `compactions: ${reports.length}, reclaiming ${useful.length}; dropped ${reports.reduce((a, r) => a + r.dropped, 0)}; cutoff ${reports.at(-1)!.cutoff}; reads ${readCounts}; streams ${model.size}`,
      );

      expect(checkAgainst(model, await readAllPages(c))).toEqual([]);
      for (const [name, m] of model) {
        if (m.hard) {
          await expect(c.readStream(name)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_STREAM_DELETED' });
          continue;
        }
        const r = await c.readStream(name, { maxCount: 10_000 });
        expect(r.events.map((e) => Number(e.version))).toEqual(
          m.written.map((_, v) => v).filter((v) => v >= m.truncateBefore),
        );
      }

      // The subscriber got every keep- event once, in order.
      const keepPositions = [...model.entries()]
        .filter(([n]) => n.startsWith('keep-'))
        .flatMap(([, m]) => m.positions)
        .sort((a, b) => (a < b ? -1 : 1));
      await until(() => subMessages.filter((m) => m.kind === 'event').length >= keepPositions.length, {
        timeoutMs: 10_000,
        what: 'the subscriber',
      });
      expect(subMessages.flatMap((m) => (m.kind === 'event' ? [m.event.position] : []))).toEqual(keepPositions);
      sub.close();
      await subDone.catch(() => {});

      // The same after a restart, from the archive and the log.
      await run.stop();
      run = await serve(dir, { segmentBytes: 32 * 1024 });
      const c2 = run.client;
      expect(checkAgainst(model, await readAllPages(c2))).toEqual([]);
      // The deleted first append's key is still known (a redacted record in the archive).
      const retry = await c2.append(firstKeyed.stream, firstKeyed.events, { idempotencyKey: 'early-key' });
      expect(retry).toEqual({ ...firstKeyed.result, duplicate: true });
      await expect(c2.append('temp-keyed', [{ type: 'other' }], { idempotencyKey: 'early-key' })).rejects.toMatchObject(
        { code: 'PLX_CHRONACTA_IDEMPOTENCY_CONFLICT' },
      );
      // Appends continue at the next position after everything, compacted or not.
      const last = (await c2.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition;
      const after = await c2.append('keep-0', [{ type: 'e', data: 'after' }]);
      expect(after.firstPosition).toBe(last + 1n);
      expect(after.firstVersion).toBe(BigInt(model.get('keep-0')!.written.length));
    } finally {
      await run.stop();
    }
  }, 60_000);
});
