/**
 * `allreduce(data, op, { into })`: the result written into a given array (MPI's receive
 * buffer) on every rank (and `reduce`'s at the root), on the small path (one frame) and the general one (streamed
 * results of several frames), on both in-memory transports and across real processes;
 * a bad `into` is refused on the rank alone (H1618) before anything is sent.
 */
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runOn, TRANSPORTS } from '../helpers/comm-memory.js';
import { ROOT } from '../helpers/paths.js';
import { runPlexus, stopStarted } from '../helpers/processes.js';
import { refusal } from '../helpers/refusal.js';

describe('allreduce into a given array', () => {
  it.each(TRANSPORTS.flatMap((t) => [1, 2, 3, 4].map((n) => [t, n] as const)))(
    '%s, %i ranks: small and large results land in `into`, which the call returns',
    async (kind, size) => {
      const results = await runOn(kind, size, async (comm) => {
        const r = comm.rank;
        const out: string[] = [];
        for (const n of [1, 500, 5000, 300_000]) {
          const data = new Float64Array(n);
          for (let i = 0; i < n; i++) data[i] = r + i * 0.25;
          const into = new Float64Array(n).fill(Number.NaN);
          const got = await comm.allreduce(data, 'sum', { into });
          expect(got).toBe(into);
          const base = (size * (size - 1)) / 2;
          for (let i = 0; i < n; i += Math.max(1, n >> 8)) expect(into[i]).toBe(base + size * i * 0.25);
          expect(into[n - 1]).toBe(base + size * (n - 1) * 0.25);
          // The input is left as it was.
          expect(data[n - 1]).toBe(r + (n - 1) * 0.25);
          out.push(`${n}:${into[n - 1]}`);
        }
        // The explicit-type form, and a result array used again.
        const bytes = new Uint8Array(16).fill(1 << (r % 8));
        const into = new Uint8Array(16);
        for (let k = 0; k < 3; k++) expect(await comm.allreduce(bytes, 'u8', 'bor', { into })).toBe(into);
        out.push(String(into[15]));
        return out.join(' ');
      });
      expect(new Set(results).size).toBe(1);
    },
  );

  it.each(TRANSPORTS)('%s: reduce into a given array at the root; the others get null', async (kind) => {
    const results = await runOn(kind, 3, async (comm) => {
      const out: unknown[] = [];
      for (const n of [2, 40_000]) {
        const data = new Int32Array(n).fill(comm.rank + 1);
        const into = new Int32Array(n);
        const got = await comm.reduce(1, data, 'sum', { into });
        out.push(got === null ? null : got === into ? into[n - 1] : 'another array');
      }
      const bytes = new Uint8Array([1 << comm.rank]);
      const into = new Uint8Array(1);
      const got = await comm.reduce(2, bytes, 'u8', 'bor', { into });
      out.push(got === null ? null : got === into ? into[0] : 'another array');
      return out;
    });
    expect(results).toEqual([
      [null, null, null],
      [6, 6, null],
      [null, null, 7],
    ]);
  });

  it('a bad `into` is refused on the rank alone (H1618, reason into), and the job goes on', async () => {
    const results = await runOn('memory-transport', 2, async (comm) => {
      const buf = new ArrayBuffer(128);
      const data = new Float64Array(buf, 0, 8);
      const reasons: string[] = [];
      for (const into of [
        new Float64Array(7), // another length
        new Float32Array(16), // another kind, same bytes
        new Float64Array(buf, 32, 8), // overlaps data
        data, // data itself
        'x',
      ]) {
        const e = await refusal(comm.allreduce(data, 'sum', { into: into as Float64Array }));
        reasons.push(`${e.code}:${String(e.details.reason)}`);
      }
      // A number third is the explicit-type form's operation: 'sum' is then not a type.
      const e = await refusal(comm.allreduce(data, 'sum', 7 as unknown as { into: Float64Array }));
      reasons.push(`${e.code}:${String(e.details.reason)}`);
      const o = await refusal(comm.allreduce(data, 'f64', 'sum', 7 as unknown as { into: Float64Array }));
      reasons.push(`${o.code}:${String(o.details.reason)}`);
      const shared = new Float64Array(new SharedArrayBuffer(64));
      const s = await refusal(comm.allreduce(data, 'sum', { into: shared as unknown as Float64Array }));
      reasons.push(`${s.code}:${String(s.details.reason)}`);
      // Refused calls sent nothing: the next calls pair up on every rank. The rest of the
      // buffer that holds data is a fine `into`.
      data.fill(comm.rank + 1);
      const beside = new Float64Array(buf, 64, 8);
      await comm.allreduce(data, 'sum', { into: beside });
      const into = new Float64Array(2);
      await comm.allreduce(new Float64Array([comm.rank, 1]), 'sum', { into });
      return { reasons, sum: Array.from(into), beside: beside[7], data: data[7] };
    });
    for (const r of results) {
      expect(r.reasons).toEqual([
        'H1618:into',
        'H1618:into',
        'H1618:into',
        'H1618:into',
        'H1618:into',
        'H1618:type',
        'H1618:options',
        'H1618:into',
      ]);
      expect(r.sum).toEqual([1, 2]);
      expect(r.beside).toBe(3);
    }
  });
});

describe('allreduce into a given array across processes', () => {
  afterAll(() => stopStarted());

  it('2 ranks over the TLS mesh: 8 bytes and 16 MiB, results checked', async () => {
    const r = await runPlexus(
      [
        'sperli',
        'launch',
        '-n',
        '2',
        '--',
        process.execPath,
        join(ROOT, 'bench/sperli/allreduce-cpu.mjs'),
        String(16 << 20),
        '3',
        'into',
      ],
      { timeoutMs: 120_000, cwd: ROOT },
    );
    expect(r.code, r.stderr).toBe(0);
    const lines = [...r.stdout.matchAll(/CPU (\{.*\})/g)].map((m) => JSON.parse(m[1] as string));
    expect(lines.map((l) => l.rank).sort()).toEqual([0, 1]);
    for (const l of lines) expect(l.into).toBe(true);
  });
});
