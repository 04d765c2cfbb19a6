/**
 * The seed's sustained-load tests (in this process, real files and real sockets). The
 * two-node and chaos tests run on the replicated log with every link through a
 * fault-injecting proxy. The rolling upgrade runs three Chronacta cluster members (event store
 * and gRPC server on the replicated log) and migrates each one's data directory from format 1
 * to 2 (ts/chronacta/migrate.ts) while appends flow.
 *
 * The chaos run lasts a few seconds by default; CHRONACTA_CHAOS_DURATION=10m (or 30s, 500ms)
 * sets it, and CHRONACTA_CHAOS_FULL=1 makes the default 30 minutes; CHRONACTA_CHAOS_SEED picks
 * another fault schedule. HA_CHAOS_DURATION and HA_CHAOS_FULL are accepted as aliases (the
 * issue's names); when both are set, the CHRONACTA_ one wins.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import type { ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { clusterFiles, DEFAULT_GROUP_COMMIT_BYTES, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { migrateDataDir } from '../../ts/chronacta/migrate.js';
import { type ChronactaServer, startServer } from '../../ts/chronacta/server.js';
import { isPlexusError } from '../../ts/core/errors.js';
import type { LogRecord } from '../../ts/storage/types.js';
import { freePort } from '../chronacta-cluster/helpers.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';
import { type Cluster, holdFault, pace, quiet, startCluster, TICK_MS, text } from './helpers.js';

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

/** A chaos switch: the seed's CHRONACTA_ name, else the HA_ alias. */
function chaosEnv(name: 'FULL' | 'DURATION'): { name: string; value: string } | undefined {
  for (const prefix of ['CHRONACTA_CHAOS_', 'HA_CHAOS_']) {
    const value = process.env[`${prefix}${name}`];
    if (value !== undefined && value !== '') return { name: `${prefix}${name}`, value };
  }
  return undefined;
}

function chaosMs(): number {
  const raw = chaosEnv('DURATION');
  if (raw) {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.value.trim());
    if (!m) throw new Error(`${raw.name}=${raw.value}: use e.g. 500ms, 30s, 10m`);
    const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's'] as number;
    return Number(m[1]) * unit;
  }
  return chaosEnv('FULL')?.value === '1' ? 30 * 60_000 : 4000;
}

interface Acked {
  position: bigint;
  payload: string;
}

/** Appends in flight now, over every writer (`writer` counts them when given this). */
interface InFlight {
  n: number;
}

/**
 * Appends unique payloads to whichever member accepts writes while `running()` is true.
 * `pending` (when given) counts the appends proposed and not yet acknowledged or refused.
 */
async function writer(
  c: Cluster,
  w: number,
  running: () => boolean,
  acked: Acked[],
  unknown: Set<string>,
  pending: InFlight = { n: 0 },
): Promise<void> {
  for (let seq = 0; running(); seq++) {
    const leader = c.leader();
    if (!leader) {
      await pace(10);
      seq--;
      continue;
    }
    const payload = `w${w}-${seq}`;
    pending.n++;
    try {
      const r = await leader.append([text(payload)]);
      pending.n--;
      acked.push({ position: r.first, payload });
    } catch (e) {
      pending.n--;
      // Refused before it was proposed: nothing written. Otherwise the outcome is unknown,
      // and so is a NOT_LEADER that says so (the leader stepped down with it in flight).
      const inFlight = (e as { details?: { outcomeUnknown?: boolean } }).details?.outcomeUnknown === true;
      const refused =
        (isPlexusError(e, 'PLX_CHRONACTA_HA_NOT_LEADER') && !inFlight) ||
        isPlexusError(e, 'PLX_CHRONACTA_HA_NOT_READY') ||
        isPlexusError(e, 'PLX_RAFT_NOT_LEADER') ||
        isPlexusError(e, 'PLX_RAFT_TRANSFER_IN_PROGRESS');
      if (!refused) unknown.add(payload);
      await pace(5);
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
  // A leader cut off until the heal may still believe it leads for an election timeout: an
  // append it refuses or loses goes to whoever leads next.
  let leader = await c.waitLeader(c.ids, 20_000);
  for (let attempt = 0; ; attempt++) {
    try {
      await leader.append([text(`final-${attempt}`)]);
      break;
    } catch (e) {
      if (attempt >= 20 || !isPlexusError(e)) throw e;
      await pace(100);
      leader = await c.waitLeader(c.ids, 20_000);
    }
  }
  const top = leader;
  await until(() => c.ids.every((id) => c.logs.get(id)?.last === top.last), {
    timeoutMs: 20_000,
    what: 'convergence',
  }).catch((e) => {
    // Which member stayed behind, and where each one is.
    const at = c.ids.map((id) => {
      const l = c.logs.get(id) as ReplicatedLog;
      const { members: _m, voters: _v, learners: _l, ...s } = l.status();
      return { last: String(l.last), first: String(l.first), ...s };
    });
    throw new Error(
      `${(e as Error).message}; members: ${JSON.stringify(at, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`,
    );
  });
  const from = c.ids.reduce((m, id) => {
    const f = (c.logs.get(id) as ReplicatedLog).first;
    // biome-ignore lint/complexity/useMathMinMax: bigint operands, which Math.max does not take
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

// ---- the rolling upgrade: three Chronacta cluster members (EventStore on the replicated log,
// gRPC servers on loopback, real files) in this process.

interface Members {
  readonly root: string;
  readonly dirs: Map<number, string>;
  readonly addresses: Map<number, string>;
  readonly servers: Map<number, ChronactaServer>;
  start(id: number): Promise<ChronactaServer>;
  leader(): Promise<number>;
  close(): Promise<void>;
}

let members: Members | undefined;
afterEach(async () => {
  await members?.close();
  members = undefined;
});

/**
 * Three members whose data directories are as a format-1 plexus wrote them (`cluster init`
 * of that version: node.json without `clusterId`).
 */
async function startFormatOneMembers(): Promise<Members> {
  const root = mkdtempSync(join(tmpdir(), 'plexus-ha-upgrade-'));
  const ports: number[] = [];
  while (ports.length < 6) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const ha = [1, 2, 3].map((id) => ({
    id,
    advertise: `127.0.0.1:${ports[id - 1]}`,
    raftAddress: `127.0.0.1:${ports[id + 2]}`,
  }));
  const dirs = new Map<number, string>();
  const addresses = new Map<number, string>();
  for (const m of ha) {
    const dir = join(root, `node-${m.id}`);
    dirs.set(m.id, dir);
    addresses.set(m.id, m.advertise);
    const { cluster: clusterFile, node } = clusterFiles('rolling', ha, m.id);
    // The files of a cluster made before format 2 and before cluster.json had groupCommitBytes.
    const { groupCommitBytes: _new, ...olderCluster } = clusterFile;
    await writeClusterFiles(dir, {
      cluster: olderCluster,
      node: { version: 1, id: node.id, advertiseAddress: node.advertiseAddress },
    });
  }
  const servers = new Map<number, ChronactaServer>();
  const ms: Members = {
    root,
    dirs,
    addresses,
    servers,
    async start(id) {
      const s = await startServer({
        dataDir: dirs.get(id) as string,
        cluster: true,
        replication: { tickMs: TICK_MS, localFsync: 'never', segmentBytes: 64 * 1024 },
        logger: quiet,
      });
      servers.set(id, s);
      return s;
    },
    async leader() {
      await until(() => [...servers.values()].filter((s) => s.store.clusterStatus()?.acceptingWrites).length === 1, {
        timeoutMs: 10_000,
        what: 'one member accepting writes',
      });
      return [...servers].find(([, s]) => s.store.clusterStatus()?.acceptingWrites)?.[0] as number;
    },
    async close() {
      for (const s of servers.values()) await s.close().catch(() => undefined);
      servers.clear();
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await Promise.all([1, 2, 3].map((id) => ms.start(id)));
  } catch (e) {
    await ms.close();
    throw e;
  }
  return ms;
}

interface KeyedAck {
  key: string;
  position: bigint;
}

const RETRY = new Set([
  'PLX_CHRONACTA_HA_NOT_LEADER',
  'PLX_CHRONACTA_HA_NOT_READY',
  'PLX_CHRONACTA_HA_STOPPED',
  'PLX_CHRONACTA_UNAVAILABLE',
  'PLX_CHRONACTA_TIMEOUT',
]);

/**
 * A refusal to try elsewhere with the same key. A leader handing leadership over refuses an
 * append before proposing it; the server reports that as PLX_CHRONACTA_UNAVAILABLE with
 * `details.outcomeUnknown: false`.
 */
function retryable(e: unknown): boolean {
  return RETRY.has((e as { code?: string }).code ?? '');
}

/**
 * Appends keyed events (data = key) through gRPC to whichever member is up, retrying each key
 * (same idempotency key) on other members until it is acknowledged: so every key lands once.
 */
async function keyedWriter(
  ms: Members,
  clients: Map<number, ChronactaClient>,
  w: number,
  running: () => boolean,
  acked: KeyedAck[],
): Promise<void> {
  let next = w;
  for (let seq = 0; running(); seq++) {
    const key = `w${w}-${seq}`;
    const end = Date.now() + 30_000;
    for (;;) {
      const up = [...ms.servers.keys()];
      const id = up[next++ % Math.max(up.length, 1)];
      const client = id === undefined ? undefined : clients.get(id);
      if (!client) {
        await pace(10);
        continue;
      }
      try {
        const r = await client.append(`rolling-${w}`, [{ type: 't', data: key }], { idempotencyKey: key });
        acked.push({ key, position: r.lastPosition });
        break;
      } catch (e) {
        if (!retryable(e) || Date.now() > end) throw e;
        await pace(10);
      }
    }
  }
}

/** Every event a member's own store holds (read in this process: no redirect to the leader). */
async function heldBy(s: ChronactaServer): Promise<string[]> {
  const out: string[] = [];
  let from = 1n;
  for (;;) {
    const r = await s.store.readAll({ fromPosition: from, maxCount: 1000 });
    for (const e of r.events) out.push(`${e.position}|${e.stream}|${e.version}|${Buffer.from(e.data).toString()}`);
    if (r.events.length === 0 || r.end) return out;
    from = (r.events[r.events.length - 1]?.position as bigint) + 1n;
  }
}

// ---- the chaos run's storage lifecycle: Raft snapshots, snapshot installs, agreed compaction.

/** Small Raft snapshot intervals: the chaos run takes snapshots every few hundred appends. */
const CHAOS_SNAPSHOTS = { snapshotEvery: 100, snapshotRetain: 25 } as const;
/** Group commit as clusters made by `cluster init` run it (cluster.json `groupCommitBytes`). */
const CHAOS_GROUP_COMMIT = { groupCommitBytes: DEFAULT_GROUP_COMMIT_BYTES } as const;

function idOf(c: Cluster, log: ReplicatedLog): number | undefined {
  return [...c.logs].find(([, l]) => l === log)?.[0];
}

/** The position the event store would compact below: its open segment's base, at most last + 1. */
function storeCutoff(log: ReplicatedLog): bigint {
  const segments = log.segmentFiles;
  const tail = segments.length > 0 ? BigInt((segments[segments.length - 1] as string).slice(0, 20)) : 1n;
  return tail < log.last + 1n ? tail : log.last + 1n;
}

/**
 * Wires every log opened in a chaos cluster as the event store does in cluster mode (each
 * member compacts its local log once a cutoff is agreed), keeps what each member applied
 * (position -> payload, from `onApply`, catch-up runs included), and adds up the snapshot
 * counters of members stopped along the way.
 */
class Lifecycle {
  readonly applied = new Map<number, Map<bigint, string>>();
  readonly conflicts: string[] = [];
  readonly below: string[] = [];
  private readonly retired = {
    snapshotsTaken: 0,
    snapshotsInstalled: 0,
    recordsCaughtUp: 0,
    appendsGrouped: 0,
    appendGroupsProposed: 0,
  };
  agreed = 0;
  compacted = 0;
  private highestAgreed = 1n;

  watch(id: number, log: ReplicatedLog): void {
    let mine = this.applied.get(id);
    if (!mine) {
      mine = new Map();
      this.applied.set(id, mine);
    }
    const m = mine;
    log.onApply((b) => {
      for (const r of b.records) {
        const p = Buffer.from(r.payload).toString();
        const had = m.get(r.position);
        if (had !== undefined && had !== p) this.conflicts.push(`member ${id} at ${r.position}: ${had} then ${p}`);
        m.set(r.position, p);
      }
    });
    log.onCompactionAgreed((below) => {
      if (below > this.highestAgreed) this.highestAgreed = below;
      log.compactBefore(below).then(
        () => {
          this.compacted++;
          this.checkCompactionLimit(log);
        },
        () => undefined, // closed meanwhile
      );
    });
  }

  /**
   * A member's local log never starts above the highest cutoff agreed so far (nothing not
   * agreed was dropped). The member's own `compactionLimit` may lag that for a moment after a
   * restart, until it has replayed the compaction records after its snapshot.
   */
  checkCompactionLimit(log: ReplicatedLog): void {
    const [first, own, agreed] = [log.first, log.compactionLimit, this.highestAgreed];
    if (first > own && first > agreed)
      this.below.push(`member ${log.status().id}: first ${first} above ${own}, ${agreed}`);
  }

  retire(log: ReplicatedLog): void {
    const s = log.status();
    this.retired.snapshotsTaken += s.snapshotsTaken;
    this.retired.snapshotsInstalled += s.snapshotsInstalled;
    this.retired.recordsCaughtUp += s.recordsCaughtUp;
    this.retired.appendsGrouped += s.appendsGrouped;
    this.retired.appendGroupsProposed += s.appendGroupsProposed;
  }

  totals(c: Cluster) {
    const n = { ...this.retired, compactionLimit: 0n };
    for (const log of c.logs.values()) {
      const s = log.status();
      n.snapshotsTaken += s.snapshotsTaken;
      n.snapshotsInstalled += s.snapshotsInstalled;
      n.recordsCaughtUp += s.recordsCaughtUp;
      n.appendsGrouped += s.appendsGrouped;
      n.appendGroupsProposed += s.appendGroupsProposed;
      if (log.compactionLimit > n.compactionLimit) n.compactionLimit = log.compactionLimit;
    }
    return n;
  }

  /** What the event store's compact() does on the leader: agree a cutoff through Raft. */
  async agreeCompaction(c: Cluster): Promise<string> {
    const leader = c.leader();
    if (!leader) return 'agree-compaction: no leader';
    const before = leader.compactionLimit;
    const wanted = storeCutoff(leader);
    try {
      const cutoff = await leader.agreeCompaction(wanted);
      if (cutoff > before) this.agreed++;
      return `agree-compaction ${idOf(c, leader)}: wanted ${wanted}, agreed ${cutoff}`;
    } catch (e) {
      return `agree-compaction ${idOf(c, leader)}: ${(e as { code?: string }).code ?? String(e)}`;
    }
  }

  /** Each member applied positions 1..last once each, the same payloads, every acknowledged one once. */
  async verifyApplied(c: Cluster, acked: Acked[], unknown: Set<string>): Promise<void> {
    expect(this.conflicts).toEqual([]);
    expect(this.below).toEqual([]);
    const last = (c.logs.get(c.ids[0] as number) as ReplicatedLog).last;
    const first = this.applied.get(c.ids[0] as number) as Map<bigint, string>;
    const wrong: string[] = [];
    for (const id of c.ids) {
      const m = this.applied.get(id) as Map<bigint, string>;
      expect((c.logs.get(id) as ReplicatedLog).last).toBe(last);
      expect(BigInt(m.size)).toBe(last);
      for (let p = 1n; p <= last; p++) {
        const v = m.get(p);
        if (v === undefined || v !== first.get(p)) wrong.push(`member ${id} at ${p}: ${v} vs ${first.get(p)}`);
        if (wrong.length > 20) break;
      }
    }
    expect(wrong).toEqual([]);
    const seen = new Map<string, number>();
    for (const v of first.values()) seen.set(v, (seen.get(v) ?? 0) + 1);
    const lost = acked.filter((a) => first.get(a.position) !== a.payload || seen.get(a.payload) !== 1);
    expect(lost).toEqual([]);
    for (const u of unknown) expect(seen.get(u) ?? 0).toBeLessThanOrEqual(1);
  }
}

describe('replicated log under sustained load', () => {
  it('TestHACommercialSustainedAppendTwoNode', async () => {
    const c = (cluster = await startCluster(2));
    await c.waitLeader();
    const acked: Acked[] = [];
    const unknown = new Set<string>();
    let running = true;
    const inFlight: InFlight = { n: 0 };
    const writers = [0, 1, 2, 3].map((w) => writer(c, w, () => running, acked, unknown, inFlight));
    // Two voters: the leader needs the follower for every commit.
    await until(() => acked.length > 50, { timeoutMs: 10_000, what: 'more than 50 appends acknowledged' });
    const before = acked.length;
    expect(before).toBeGreaterThan(50);
    c.mesh.partition([[0], [1]]);
    // Check-quorum: the leader steps down an election timeout after it last heard from its
    // follower, and fails the appends it holds (outcome unknown); pre-vote keeps either member
    // from leading alone. Once no member leads, nothing can be acknowledged any more.
    await until(() => c.ids.every((id) => c.logs.get(id)?.status().role !== 'leader'), {
      timeoutMs: 10_000,
      what: 'the cut-off leader to step down',
    });
    const during = acked.length;
    // Every append proposed to the leader before it stepped down has settled: none of them was
    // acknowledged, and no member leads to take new ones.
    await until(() => inFlight.n === 0, { timeoutMs: 10_000, what: 'the appends in flight to settle' });
    expect(c.leader()).toBeUndefined();
    expect(acked.length).toBe(during); // nothing acknowledged without the other voter
    c.mesh.heal();
    await until(() => acked.length > during + 20, { timeoutMs: 10_000, what: 'appends after healing' });
    running = false;
    await Promise.all(writers);
    await verify(c, acked, unknown);
  });

  it('TestHACommercialRollingUpgradeWithMigrateThreeNode', async () => {
    // Data format 1 -> 2 (ts/chronacta/migrate.ts: node.json gains the cluster id), one
    // member at a time while appends flow: followers first, then the leader after handing
    // leadership over. Each member is stopped, migrated on its own directory (refused while it
    // runs), started again on the migrated files, and catches up; members of both formats
    // serve side by side meanwhile.
    const ms = (members = await startFormatOneMembers());
    const clients = new Map<number, ChronactaClient>();
    const retired: ChronactaClient[] = [];
    // Both loops below end when the test does, also when it fails.
    let sampling = true;
    let running = true;
    // More than one attempt: a failed attempt drops the client's leader hint (it may name a stopped member).
    const clientOf = (address: string) =>
      new ChronactaClient(address, { deadlineMs: 5000, appendAttempts: 3, retryDelayMs: 20 });
    for (const [id, address] of ms.addresses) clients.set(id, clientOf(address));
    try {
      const first = await ms.leader();
      // No dual writers: at no sample do two members accept writes, and each term has one leader.
      const leadersByTerm = new Map<number, Set<number>>();
      let dual = 0;
      const sampler = (async () => {
        while (sampling) {
          let writers = 0;
          for (const [id, s] of ms.servers) {
            const st = s.store.clusterStatus();
            if (!st?.acceptingWrites) continue;
            writers++;
            const set = leadersByTerm.get(st.term) ?? new Set<number>();
            set.add(id);
            leadersByTerm.set(st.term, set);
          }
          if (writers > 1) dual++;
          // The sampling period of a watch that runs for the whole upgrade.
          await pace(5);
        }
      })();
      const acked: KeyedAck[] = [];
      const failures: unknown[] = [];
      const writers = [0, 1].map((w) =>
        keyedWriter(ms, clients, w, () => running && failures.length === 0, acked).catch((e: unknown) => {
          failures.push(e);
        }),
      );
      const load = (n: number, what: string) =>
        until(
          () => {
            if (failures.length > 0) throw failures[0];
            return acked.length > n;
          },
          { timeoutMs: 10_000, what: what },
        );
      await load(30, 'load');
      const upgrade = async (id: number) => {
        const dir = ms.dirs.get(id) as string;
        await expect(migrateDataDir(dir)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_LOCKED' });
        const server = ms.servers.get(id) as ChronactaServer;
        ms.servers.delete(id);
        await server.close();
        // Appends go on while the member is down (two of three voters are a majority).
        await load(acked.length + 10, `appends while member ${id} is down`);
        expect(await migrateDataDir(dir)).toEqual({ dataDir: dir, from: 1, to: 2, changed: true });
        expect(await migrateDataDir(dir)).toMatchObject({ changed: false });
        const back = await ms.start(id);
        // A fresh channel to the restarted member (the old one may be in its reconnect backoff).
        retired.push(clients.get(id) as ChronactaClient);
        clients.set(id, clientOf(back.address));
        const before = acked.length;
        expect(back.store.prepared.node).toMatchObject({ version: 2, clusterId: 'rolling' });
        const leader = ms.servers.get(await ms.leader()) as ChronactaServer;
        const target = leader.store.lastPosition;
        await until(() => back.store.lastPosition >= target, { timeoutMs: 10_000, what: `member ${id} to catch up` });
        expect(back.store.clusterStatus()?.role).toBe('follower');
        // Appends go on with the member back.
        await load(before + 10, 'appends during the upgrade');
      };
      for (const id of [1, 2, 3]) if (id !== first) await upgrade(id);
      const heir = first === 1 ? 2 : 1;
      // Hands leadership over (rolling upgrades: ReplicatedLog.transferLeadership of the
      // leader's store; EventStore has no public call for it).
      const leaderStore = (ms.servers.get(first) as ChronactaServer).store;
      const log = (leaderStore as unknown as { replicated: ReplicatedLog }).replicated;
      await log.transferLeadership(heir);
      expect(await ms.leader()).toBe(heir);
      await upgrade(first);
      const mark = acked.length;
      await load(mark + 20, 'load after the upgrade');
      running = false;
      await Promise.all(writers);
      expect(failures).toEqual([]);
      sampling = false;
      await sampler;
      expect(dual).toBe(0);
      for (const set of leadersByTerm.values()) expect(set.size).toBe(1);

      // Every member holds the same events; every acknowledged key once, at its position.
      const lead = ms.servers.get(await ms.leader()) as ChronactaServer;
      const last = lead.store.lastPosition;
      for (const s of ms.servers.values())
        await until(() => s.store.lastPosition === last, { timeoutMs: 10_000, what: 'convergence' });
      const views = await Promise.all([1, 2, 3].map((id) => heldBy(ms.servers.get(id) as ChronactaServer)));
      for (const v of views) expect(v).toEqual(views[0]);
      const all = views[0] as string[];
      expect(all.map((l) => l.split('|')[0])).toEqual(all.map((_, i) => String(i + 1))); // dense
      const at = new Map<string, string[]>();
      for (const l of all) {
        const [pos, , , key] = l.split('|') as [string, string, string, string];
        at.set(key, [...(at.get(key) ?? []), pos]);
      }
      expect(at.size).toBe(all.length); // no key twice
      for (const a of acked) expect(at.get(a.key)).toEqual([String(a.position)]);
      expect(new Set(acked.map((a) => a.key)).size).toBe(acked.length);
      for (const dir of ms.dirs.values()) {
        const node = JSON.parse(readFileSync(join(dir, 'cluster/node.json'), 'utf8'));
        expect(node).toMatchObject({ version: 2, clusterId: 'rolling' });
      }
    } finally {
      running = false;
      sampling = false;
      for (const c of [...clients.values(), ...retired]) c.close();
    }
  });

  it(
    'TestHACommercialLongChaosUnderLoad',
    async () => {
      const life = new Lifecycle();
      const c = (cluster = await startCluster(
        3,
        { segmentBytes: 4096, ...CHAOS_SNAPSHOTS, ...CHAOS_GROUP_COMMIT },
        undefined,
        (id, log) => life.watch(id, log),
      ));
      await c.waitLeader();
      const acked: Acked[] = [];
      const unknown = new Set<string>();
      let running = true;
      const writers = [0, 1, 2].map((w) => writer(c, w, () => running, acked, unknown));
      const next = rng(Number(process.env.CHRONACTA_CHAOS_SEED ?? 20_261_130));
      const end = Date.now() + chaosMs();
      const faults: string[] = [];
      /**
       * Stops a member and restarts it after `downMs` or once the others' snapshots passed it.
       * With `compact`, the others agree a compaction cutoff meanwhile (which the stopped
       * member has to hold back: it still needs the records after its own last one).
       */
      const bounce = async (id: number, how: string, downMs: number, compact: boolean) => {
        const log = c.logs.get(id) as ReplicatedLog;
        // Past what the member may hold in its Raft log (its commit plus entries in flight).
        const mark = log.status().commit + 32;
        life.retire(log);
        await c.stop(id);
        const began = Date.now();
        const others = c.ids.filter((x) => x !== id);
        const live = () => others.map((x) => c.logs.get(x) as ReplicatedLog);
        if (compact) {
          const elected = await c.waitLeader(others, 3000).then(
            () => true,
            () => false,
          );
          // A moment of load under the new leader before the cutoff is agreed (the schedule).
          if (elected) await holdFault(100);
          faults.push(`${await life.agreeCompaction(c)} (member ${id} down)`);
        }
        await until(() => Date.now() - began >= downMs || live().every((l) => l.status().snapshotIndex > mark), {
          timeoutMs: downMs + 1000,
          what: 'the member to stay down',
        });
        const passed = live().every((l) => l.status().snapshotIndex > mark);
        await c.restart(id);
        faults.push(`${how} ${id} (${Date.now() - began} ms down${passed ? ', snapshots passed it' : ''})`);
      };
      // The run opens with a leader kill that lasts until the others' Raft logs no longer hold
      // what the stopped leader lacks (its restart has to go through a snapshot install), with
      // a compaction agreed while it is down (it has to hold the cutoff back); then a
      // compaction agreed with every member up. Random faults follow.
      const opening = [6, 5];
      let fault = opening.shift() as number;
      let first = true;
      // At least four faults, also where a loaded machine makes the opening ones slow.
      while (Date.now() < end || faults.length < 4) {
        const victim = (next() % 3) + 1;
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
          await bounce(victim, 'restart', 150, next() % 2 === 0);
        } else if (fault === 4) {
          // A member's own compaction request: never below the cutoff the members agreed.
          const log = c.logs.get(victim) as ReplicatedLog;
          if (log.last > 50n) await log.compactBefore(log.last - 50n).catch(() => undefined);
          life.checkCompactionLimit(log);
          faults.push(`compact ${victim}`);
        } else if (fault === 5) {
          faults.push(await life.agreeCompaction(c));
        } else if (fault === 6) {
          // The current leader, killed; restarted once the others snapshotted past it (at most
          // 3 s later; the opening one waits up to 8 s for that, on a slow machine).
          const leader = c.leader();
          const id = leader ? idOf(c, leader) : undefined;
          if (id === undefined) faults.push('kill-leader: no leader');
          else await bounce(id, 'kill-leader', first ? 8000 : 3000, next() % 2 === 0 || first);
          first = false;
        } else {
          c.mesh.heal();
          faults.push('heal');
        }
        // The fault lasts a while under load before the next one (or a heal).
        await holdFault(250 + (next() % 250));
        if (next() % 2 === 0) c.mesh.heal();
        fault = opening.shift() ?? next() % 8;
      }
      running = false;
      await Promise.all(writers);
      expect(acked.length).toBeGreaterThan(20);
      expect(faults.length).toBeGreaterThan(3);
      await verify(c, acked, unknown);
      // Every member applied every position once, also those compacted away since.
      await life.verifyApplied(c, acked, unknown);
      const n = life.totals(c);
      console.log(
        `chaos: ${faults.length} faults, ${acked.length} appends acknowledged, ${unknown.size} unknown; ` +
          `${n.snapshotsTaken} snapshots taken, ${n.snapshotsInstalled} installed ` +
          `(${n.recordsCaughtUp} records caught up), ${life.agreed} compactions agreed ` +
          `(cutoff ${n.compactionLimit}), ${life.compacted} local compactions; ` +
          `${n.appendsGrouped} appends proposed in ${n.appendGroupsProposed} Raft entries`,
      );
      if (process.env.CHRONACTA_CHAOS_VERBOSE === '1') console.log(faults.join('\n'));
      expect(n.snapshotsTaken).toBeGreaterThan(0);
      expect(n.snapshotsInstalled).toBeGreaterThan(0);
      // The faults hit grouped entries too: the writers' appends shared Raft entries.
      expect(n.appendGroupsProposed).toBeLessThan(n.appendsGrouped);
      // A longer run also agrees compaction cutoffs (the smoke run's few faults may not get one).
      if (chaosEnv('DURATION') || chaosEnv('FULL')) expect(life.agreed).toBeGreaterThan(0);
    },
    chaosMs() + 120_000,
  );
});
