/**
 * Throughput of durable actor messages (docs/runtime.md, "Measured"): 16 actor pairs pass
 * one message back and forth, every message a journaled macrostep, for 1.5 s per run, three
 * runs per row, median reported with the macrosteps per fsync. Opt-in (it measures, it does
 * not check): PLEXUS_RT_BENCH=1 npx vitest run test/runtime/throughput.test.ts
 */
import { afterAll, describe, expect, it } from 'vitest';
import { type ActorEvent, Node, openJournal } from '../../ts/runtime/index.js';
import type { FsyncMode } from '../../ts/storage/index.js';
import { openLog } from '../../ts/storage/index.js';
import { cleanup, tempDir } from './helpers.js';

afterAll(cleanup);

const ball = {
  initial: () => 0,
  transition: (n: number, _e: ActorEvent, ctx: { self: string }) => {
    const partner = ctx.self.endsWith('/a') ? ctx.self.replace(/\/a$/, '/b') : ctx.self.replace(/\/b$/, '/a');
    return { state: n + 1, sends: [{ target: partner, event: 'ball' }] };
  },
};

const RUN_MS = 1500;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

describe.skipIf(!process.env.PLEXUS_RT_BENCH)(
  'durable actor messages, 16 pairs (a measurement, skipped unless PLEXUS_RT_BENCH=1)',
  () => {
    for (const [shards, fsync] of [
      [1, 'batch'],
      [4, 'batch'],
      [64, 'batch'],
      [1, 'never'],
    ] as [number, FsyncMode][]) {
      it(`shards=${shards} fsync=${fsync}`, async () => {
        const rates: number[] = [];
        const groups: number[] = [];
        for (let run = 0; run < 3; run++) {
          let steps = 0;
          let syncs = 0;
          const storage = await openJournal(await tempDir(), {
            shardCount: shards,
            log: { fsync, onSync: () => syncs++ },
          });
          const node = Node.builder(storage)
            .chart('vt:p', ball)
            .onMacrostep(() => steps++)
            .config({ snapshotEvery: 1000 })
            .build();
          const t0 = Date.now();
          for (let i = 0; i < 16; i++) void node.send(`vt:p${i}/a`, 'ball');
          await new Promise((r) => setTimeout(r, RUN_MS));
          rates.push(steps / ((Date.now() - t0) / 1000));
          groups.push(syncs === 0 ? 0 : steps / syncs);
          await node.stop({ timeoutMs: 1 });
          await storage.close();
        }
        console.log(
          `runtime 16 pairs shards=${shards} fsync=${fsync}: ${Math.round(median(rates))} macrosteps/s (runs ${rates.map(Math.round).join(', ')}), ${median(groups).toFixed(1)} per fsync`,
        );
        expect(median(rates)).toBeGreaterThan(0);
      });
    }

    it('the log engine alone, 16 appenders of 100 bytes (fsync batch)', async () => {
      const rates: number[] = [];
      for (let run = 0; run < 3; run++) {
        const log = await openLog(await tempDir(), { fsync: 'batch' });
        let n = 0;
        const t0 = Date.now();
        const end = t0 + RUN_MS;
        await Promise.all(
          Array.from({ length: 16 }, async () => {
            while (Date.now() < end) {
              await log.append([new Uint8Array(100)]);
              n++;
            }
          }),
        );
        rates.push(n / ((Date.now() - t0) / 1000));
        await log.close();
      }
      console.log(
        `log engine 16 appenders: ${Math.round(median(rates))} appends/s (runs ${rates.map(Math.round).join(', ')})`,
      );
      expect(median(rates)).toBeGreaterThan(0);
    });
  },
);
