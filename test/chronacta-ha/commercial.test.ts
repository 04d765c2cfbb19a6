/**
 * The seed's sustained-load tests on the replicated log (in this process, real files and real
 * sockets through fault-injecting proxies). The chaos run lasts a few seconds by default;
 * CHRONACTA_CHAOS_DURATION=10m (or 30s, 500ms) sets it, and CHRONACTA_CHAOS_FULL=1 makes the
 * default 30 minutes; CHRONACTA_CHAOS_SEED picks another fault schedule.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicatedLog } from '../../ts/chronacta/ha/replicated-log.js';
import { isPlexusError } from '../../ts/core/errors.js';
import type { LogRecord } from '../../ts/storage/types.js';
import { rng } from '../helpers/rng.js';
import { type Cluster, sleep, startCluster, text, until } from './helpers.js';

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

function chaosMs(): number {
  const raw = process.env.CHRONACTA_CHAOS_DURATION;
  if (raw) {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim());
    if (!m) throw new Error(`CHRONACTA_CHAOS_DURATION=${raw}: use e.g. 500ms, 30s, 10m`);
    const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's'] as number;
    return Number(m[1]) * unit;
  }
  return process.env.CHRONACTA_CHAOS_FULL === '1' ? 30 * 60_000 : 4000;
}

interface Acked {
  position: bigint;
  payload: string;
}

/** Appends unique payloads to whichever member accepts writes until `until()` is false. */
async function writer(
  c: Cluster,
  w: number,
  running: () => boolean,
  acked: Acked[],
  unknown: Set<string>,
): Promise<void> {
  for (let seq = 0; running(); seq++) {
    const leader = c.leader();
    if (!leader) {
      await sleep(10);
      seq--;
      continue;
    }
    const payload = `w${w}-${seq}`;
    try {
      const r = await leader.append([text(payload)]);
      acked.push({ position: r.first, payload });
    } catch (e) {
      // Refused before it was proposed: nothing written. Otherwise the outcome is unknown.
      const refused =
        isPlexusError(e, 'PLX_CHRONACTA_HA_NOT_LEADER') ||
        isPlexusError(e, 'PLX_CHRONACTA_HA_NOT_READY') ||
        isPlexusError(e, 'PLX_RAFT_NOT_LEADER') ||
        isPlexusError(e, 'PLX_RAFT_TRANSFER_IN_PROGRESS');
      if (!refused) unknown.add(payload);
      await sleep(5);
    }
  }
}

async function recordsFrom(log: ReplicatedLog, from: bigint): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  for (;;) {
    const recs = await log.read(from, { maxCount: 2000 });
    if (recs.length === 0) return out;
    out.push(...recs);
    from = (recs[recs.length - 1] as LogRecord).position + 1n;
  }
}

/** Heals everything, waits until every member holds the same log and checks the acknowledged appends. */
async function verify(c: Cluster, acked: Acked[], unknown: Set<string>): Promise<void> {
  c.mesh.heal();
  const leader = await c.waitLeader(c.ids, 20_000);
  await leader.append([text('final')]);
  await until(() => c.ids.every((id) => c.logs.get(id)?.last === leader.last), 20_000, 'convergence');
  const from = c.ids.reduce((m, id) => {
    const f = (c.logs.get(id) as ReplicatedLog).first;
    return f > m ? f : m;
  }, 1n);
  const logs = await Promise.all(c.ids.map((id) => recordsFrom(c.logs.get(id) as ReplicatedLog, from)));
  const key = (r: LogRecord) => `${r.position}|${Buffer.from(r.batchId).toString('hex')}|${r.epoch}|${r.payload}`;
  for (const l of logs) expect(l.map(key)).toEqual((logs[0] as LogRecord[]).map(key));
  const at = new Map((logs[0] as LogRecord[]).map((r) => [r.position, Buffer.from(r.payload).toString()]));
  const seen = new Map<string, number>();
  for (const r of logs[0] as LogRecord[]) {
    const p = Buffer.from(r.payload).toString();
    seen.set(p, (seen.get(p) ?? 0) + 1);
  }
  for (const a of acked) {
    if (a.position < from) continue; // compacted away on some member
    expect(at.get(a.position)).toBe(a.payload);
    expect(seen.get(a.payload)).toBe(1);
  }
  for (const u of unknown) expect(seen.get(u) ?? 0).toBeLessThanOrEqual(1);
  // Positions are dense: no gap anywhere.
  (logs[0] as LogRecord[]).forEach((r, i) => {
    expect(r.position).toBe(from + BigInt(i));
  });
}

describe('replicated log under sustained load', () => {
  it('TestHACommercialSustainedAppendTwoNode', async () => {
    const c = (cluster = await startCluster(2));
    await c.waitLeader();
    const acked: Acked[] = [];
    const unknown = new Set<string>();
    let running = true;
    const writers = [0, 1, 2, 3].map((w) => writer(c, w, () => running, acked, unknown));
    await sleep(1500);
    // Two voters: the leader needs the follower for every commit.
    const before = acked.length;
    expect(before).toBeGreaterThan(50);
    c.mesh.partition([[0], [1]]);
    await sleep(300);
    const during = acked.length;
    await sleep(700);
    expect(acked.length).toBe(during); // nothing acknowledged without the other voter
    c.mesh.heal();
    await until(() => acked.length > during + 20, 10_000, 'appends after healing');
    running = false;
    await Promise.all(writers);
    await verify(c, acked, unknown);
  });

  it('TestHACommercialRollingUpgradeWithMigrateThreeNode', async () => {
    // Followers first, one at a time, then the leader after handing over leadership. Each
    // member's "migration" rebuilds its local log (the state machine) from the Raft log, as a
    // change of the local record format would: nothing is copied between members' directories.
    const c = (cluster = await startCluster(3));
    let leader = await c.waitLeader();
    const acked: Acked[] = [];
    const unknown = new Set<string>();
    let running = true;
    const writers = [0, 1].map((w) => writer(c, w, () => running, acked, unknown));
    await until(() => acked.length > 30, 10_000, 'load');
    const upgrade = async (id: number) => {
      await c.stop(id);
      rmSync(join(c.dirs.get(id) as string, 'log'), { recursive: true, force: true });
      const back = await c.restart(id);
      const target = (c.leader() ?? (await c.waitLeader())).last;
      await until(() => back.last >= target, 10_000, `member ${id} to rebuild and catch up`);
      expect(back.status().failure).toBeUndefined();
      // Rebuilt: every batch was applied again, none found already there.
      expect(back.status().duplicatesSkipped).toBe(0);
      expect(back.status().appendEntriesApplied).toBeGreaterThan(30);
    };
    const lid = c.ids.find((id) => c.logs.get(id) === leader) as number;
    for (const id of c.ids) if (id !== lid) await upgrade(id);
    const heir = c.ids.find((id) => id !== lid) as number;
    await leader.transferLeadership(heir);
    leader = await c.waitLeader();
    expect(leader).toBe(c.logs.get(heir));
    const mark = acked.length;
    await upgrade(lid);
    await until(() => acked.length > mark + 20, 10_000, 'load after the upgrade');
    running = false;
    await Promise.all(writers);
    await verify(c, acked, unknown);
  });

  it(
    'TestHACommercialLongChaosUnderLoad',
    async () => {
      const c = (cluster = await startCluster(3, { segmentBytes: 4096 }));
      await c.waitLeader();
      const acked: Acked[] = [];
      const unknown = new Set<string>();
      let running = true;
      const writers = [0, 1, 2].map((w) => writer(c, w, () => running, acked, unknown));
      const next = rng(Number(process.env.CHRONACTA_CHAOS_SEED ?? 20_261_130));
      const end = Date.now() + chaosMs();
      const faults: string[] = [];
      while (Date.now() < end) {
        const victim = (next() % 3) + 1;
        const fault = next() % 6;
        if (fault === 0) {
          c.mesh.isolate(victim - 1);
          faults.push(`isolate ${victim}`);
        } else if (fault === 1) {
          const others = c.ids.filter((id) => id !== victim);
          c.mesh.partition([[victim - 1, (others[0] as number) - 1], [(others[1] as number) - 1]]);
          faults.push(`split ${victim}+${others[0]} | ${others[1]}`);
        } else if (fault === 2) {
          for (const id of c.ids) if (id !== victim) c.mesh.link(victim - 1, id - 1).delay(5, 20);
          faults.push(`delay ${victim}`);
        } else if (fault === 3) {
          await c.stop(victim);
          await sleep(150);
          await c.restart(victim);
          faults.push(`restart ${victim}`);
        } else if (fault === 4) {
          // Compaction under load: the member drops closed segments of its local log.
          const log = c.logs.get(victim) as ReplicatedLog;
          if (log.last > 50n) await log.compactBefore(log.last - 50n).catch(() => undefined);
          faults.push(`compact ${victim}`);
        } else {
          c.mesh.heal();
          faults.push('heal');
        }
        await sleep(250 + (next() % 250));
        if (next() % 2 === 0) c.mesh.heal();
      }
      running = false;
      await Promise.all(writers);
      expect(acked.length).toBeGreaterThan(20);
      expect(faults.length).toBeGreaterThan(3);
      await verify(c, acked, unknown);
      if (process.env.CHRONACTA_CHAOS_DURATION || process.env.CHRONACTA_CHAOS_FULL) {
        console.log(`chaos: ${faults.length} faults, ${acked.length} appends acknowledged, ${unknown.size} unknown`);
      }
    },
    chaosMs() + 120_000,
  );
});
