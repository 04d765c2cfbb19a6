/**
 * The local log of committed records is written without an fsync on the acknowledgement path
 * (`localFsync: 'never'`, the default). A power loss can then lose or damage anything written
 * since it was last fsynced, in any segment. These tests stop members cleanly, then make their
 * files look like a power loss did it (the clean-close marker gone, the tail cut off, a record
 * in a closed segment damaged with intact records after it) and check that every member opens
 * again, cuts what is damaged, re-applies it from its Raft log and ends with the same records
 * as the others.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { CLEAN_MARKER } from '../../ts/replication/local-tail.js';
import { until } from '../helpers/until.js';
import { type Cluster, snapshot, startCluster } from './helpers.js';

let cluster: Cluster | undefined;
afterEach(async () => {
  warnings.length = 0;
  await cluster?.close();
  cluster = undefined;
});

/** Every warning the members log, with the member's id. */
const warnings: string[] = [];
const capture = (id: number) => ({
  logger: {
    warn: (message: string) => {
      warnings.push(`${id}: ${message}`);
    },
    error: () => undefined,
  },
});

const payload = (i: number, k: number) => new TextEncoder().encode(`${i}-${k}-${'x'.repeat(300)}`);

/** Appends `batches` batches of 5 records on the leader (about 1.6 KB each: several 64 KiB segments). */
async function fill(c: Cluster, batches: number, tag: number): Promise<void> {
  const leader = await c.waitLeader();
  for (let i = 0; i < batches; i += 8) {
    await Promise.all(
      Array.from({ length: Math.min(8, batches - i) }, (_, j) =>
        leader.append(Array.from({ length: 5 }, (_, k) => payload(tag * 100_000 + i + j, k))),
      ),
    );
  }
}

async function converged(c: Cluster): Promise<string[]> {
  const leader = await c.waitLeader();
  await until(() => c.ids.every((id) => c.logs.get(id)?.last === leader.last), {
    timeoutMs: 10_000,
    what: 'convergence',
  });
  const snaps = await Promise.all(c.ids.map((id) => snapshot(c.logs.get(id) as ReplicatedLog)));
  for (const s of snaps) expect(s).toEqual(snaps[0]);
  return snaps[0] as string[];
}

function segments(c: Cluster, id: number): string[] {
  const dir = join(c.dirs.get(id) as string, 'log');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.seg'))
    .sort()
    .map((f) => join(dir, f));
}

/** What a power loss leaves: no clean-close marker (the open after it must check every record). */
function powerLoss(c: Cluster, id: number): void {
  const marker = join(c.dirs.get(id) as string, CLEAN_MARKER);
  expect(existsSync(marker)).toBe(true); // a clean close left it
  rmSync(marker);
}

describe('the local log after a power loss (localFsync never)', () => {
  it('a follower whose unsynced tail was lost re-applies it from its Raft log', async () => {
    const c = (cluster = await startCluster(3, { localFsync: undefined }, capture));
    await fill(c, 120, 1);
    const before = await converged(c);
    const leader = await c.waitLeader();
    const f = c.ids.find((id) => c.logs.get(id) !== leader) as number;
    await c.stop(f);
    powerLoss(c, f);
    const segs = segments(c, f);
    expect(segs.length).toBeGreaterThanOrEqual(3);
    // The last segment lost its second half (cut inside a record).
    const last = segs[segs.length - 1] as string;
    truncateSync(last, Math.floor(statSync(last).size / 2) + 7);
    const log = await c.restart(f);
    // The log engine cut the torn record away on open.
    expect(warnings.some((w) => w.startsWith(`${f}: `) && /torn/i.test(w))).toBe(true);
    await fill(c, 16, 2);
    const after = await converged(c);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.length).toBe(before.length + 80);
    expect(log.status().failure).toBeUndefined();
  });

  it('damage in a closed segment, with intact records after it, is cut and rebuilt', async () => {
    const c = (cluster = await startCluster(3, {}, capture));
    await fill(c, 120, 1);
    const before = await converged(c);
    const leader = await c.waitLeader();
    const f = c.ids.find((id) => c.logs.get(id) !== leader) as number;
    await c.stop(f);
    powerLoss(c, f);
    const segs = segments(c, f);
    expect(segs.length).toBeGreaterThanOrEqual(3);
    // Garbage in the middle of the second segment: a record there no longer checks out, the
    // records after it (and the later segments) are intact. The storage engine refuses that.
    const victim = segs[1] as string;
    const bytes = readFileSync(victim);
    const at = Math.floor(bytes.length / 2);
    bytes.fill(0x5a, at, at + 64);
    writeFileSync(victim, bytes);
    const log = await c.restart(f);
    expect(warnings.filter((w) => w.includes('cut the local log at damage'))).toEqual([
      `${f}: replicated log: cut the local log at damage left by a power loss; the rest is re-applied`,
    ]);
    await converged(c);
    await fill(c, 8, 2);
    const after = await converged(c);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(log.status().failure).toBeUndefined();
    // The Raft log was replayed over the part kept (skipped as duplicates) and applied the rest.
    expect(log.status().duplicatesSkipped).toBeGreaterThan(0);
  });

  it('every member losing its unsynced tail at once: each rebuilds from its own Raft log, nothing acknowledged is lost', async () => {
    const c = (cluster = await startCluster(3));
    await fill(c, 80, 1);
    const before = await converged(c);
    for (const id of c.ids) await c.stop(id);
    for (const id of c.ids) {
      powerLoss(c, id);
      const segs = segments(c, id);
      // Each member lost a different amount: the last segment cut, and for member 2 also emptied.
      const last = segs[segs.length - 1] as string;
      truncateSync(last, id === 2 ? 0 : Math.floor((statSync(last).size * id) / 4));
    }
    for (const id of c.ids) await c.restart(id);
    await fill(c, 8, 2);
    const after = await converged(c);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.length).toBe(before.length + 40);
  });

  it('a clean close leaves the marker and the next open takes it; the default is localFsync never', async () => {
    const c = (cluster = await startCluster(3, { localFsync: undefined }));
    await fill(c, 8, 1);
    await converged(c);
    const id = 1;
    const marker = join(c.dirs.get(id) as string, CLEAN_MARKER);
    expect(existsSync(marker)).toBe(false); // open took it
    await c.stop(id);
    expect(existsSync(marker)).toBe(true);
    await c.restart(id);
    expect(existsSync(marker)).toBe(false);
    await converged(c);
  });
});
