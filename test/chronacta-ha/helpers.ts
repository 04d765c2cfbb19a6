/**
 * A replicated-log cluster in this process: every member has real files (FileRaftStorage,
 * FileLog) in a temporary directory and a real TCP transport, and every link between two
 * members goes through a fault-injecting proxy (ProxyMesh).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HaMember } from '../../ts/chronacta/cluster-config.js';
import { openClusterLog, type ReplicatedLog, type ReplicatedLogOptions } from '../../ts/chronacta/cluster-log.js';
import type { LogRecord } from '../../ts/storage/types.js';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

export const TICK_MS = 20;
export const quiet = { warn: () => undefined, error: () => undefined };

/**
 * Keeps a fault (a partition, a slow link, a member down) in place for `ms` under load: the
 * time spent under the fault is the scenario itself, not a wait for something to happen.
 */
export const holdFault = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The pause of a loop that goes on regardless (a load generator between two attempts, a
 * sampler between two samples): it paces the loop and waits for nothing in particular.
 */
export const pace = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function advertise(id: number): string {
  return `127.0.0.1:${9000 + id}`;
}

export interface Cluster {
  readonly ids: number[];
  readonly root: string;
  readonly dirs: Map<number, string>;
  readonly logs: Map<number, ReplicatedLog>;
  readonly ports: Map<number, number>;
  readonly mesh: ProxyMesh;
  /** Member ids are 1..n; mesh indexes are id - 1. */
  leader(among?: number[]): ReplicatedLog | undefined;
  waitLeader(among?: number[], ms?: number): Promise<ReplicatedLog>;
  stop(id: number): Promise<void>;
  restart(id: number): Promise<ReplicatedLog>;
  close(): Promise<void>;
}

function members(n: number, ports?: Map<number, number>): HaMember[] {
  return Array.from({ length: n }, (_, i) => ({
    id: i + 1,
    raftAddress: `127.0.0.1:${ports?.get(i + 1) ?? 0}`,
    advertise: advertise(i + 1),
  }));
}

export async function startCluster(
  n = 3,
  extra: Partial<ReplicatedLogOptions> = {},
  perMember: (id: number, dir: string) => Partial<ReplicatedLogOptions> = () => ({}),
  /** Called with every log opened, at start and on each restart, before anything else sees it. */
  onOpen: (id: number, log: ReplicatedLog) => void = () => undefined,
): Promise<Cluster> {
  const ids = Array.from({ length: n }, (_, i) => i + 1);
  const dirs = new Map<number, string>();
  const logs = new Map<number, ReplicatedLog>();
  const ports = new Map<number, number>();
  const root = mkdtempSync(join(tmpdir(), 'plexus-ha-'));
  const open = (id: number, port = 0) =>
    openClusterLog({
      id,
      dir: dirs.get(id) as string,
      members: members(n),
      listen: { host: '127.0.0.1', port },
      tickMs: TICK_MS,
      timeoutMs: 2000,
      localFsync: 'never',
      segmentBytes: 64 * 1024,
      random: (
        (next) => (k: number) =>
          next() % k
      )(rng(id * 7919 + port)),
      logger: quiet,
      ...extra,
      ...perMember(id, dirs.get(id) as string),
    });
  try {
    for (const id of ids) {
      dirs.set(id, join(root, `m${id}`));
      const log = await open(id);
      onOpen(id, log);
      logs.set(id, log);
      ports.set(id, log.raftPort);
    }
  } catch (e) {
    for (const l of logs.values()) await l.close();
    rmSync(root, { recursive: true, force: true, maxRetries: 0 });
    throw e;
  }
  const mesh = await ProxyMesh.start(ids.map((id) => ports.get(id) as number));
  const wire = (id: number) => {
    const log = logs.get(id) as ReplicatedLog;
    for (const peer of ids) if (peer !== id) log.setDialAddress(peer, mesh.addressFor(id - 1, peer - 1));
  };
  for (const id of ids) wire(id);
  const leaderOf = (among = ids) => {
    const ls = among.map((id) => logs.get(id)).filter((l) => l?.status().acceptingWrites) as ReplicatedLog[];
    return ls.length === 1 ? ls[0] : undefined;
  };
  const stopped = new Set<number>();
  return {
    ids,
    root,
    dirs,
    logs,
    ports,
    mesh,
    leader: leaderOf,
    async waitLeader(among = ids, ms = 10_000) {
      await until(() => leaderOf(among) !== undefined, { timeoutMs: ms, what: `a leader among ${among.join(',')}` });
      return leaderOf(among) as ReplicatedLog;
    },
    async stop(id) {
      stopped.add(id);
      await logs.get(id)?.close();
    },
    async restart(id) {
      const log = await open(id, ports.get(id));
      onOpen(id, log);
      logs.set(id, log);
      stopped.delete(id);
      wire(id);
      return log;
    },
    async close() {
      for (const l of logs.values()) await l.close();
      await mesh.close();
      try {
        rmSync(root, { recursive: true, force: true });
      } catch {
        // a mount point inside (the full-disk test removes it after unmounting)
      }
    },
  };
}

/** Every record of a log, ascending. */
export async function readAll(log: { read(from: bigint, o?: { maxCount?: number }): Promise<LogRecord[]> }) {
  const out: LogRecord[] = [];
  let from = 1n;
  for (;;) {
    const recs = await log.read(from, { maxCount: 1000 });
    if (recs.length === 0) return out;
    out.push(...recs);
    from = (recs[recs.length - 1] as LogRecord).position + 1n;
  }
}

/** What a replica holds, in a form to compare: position, batch id, epoch, payload text. */
export async function snapshot(log: ReplicatedLog): Promise<string[]> {
  const recs = await readAll(log);
  return recs.map(
    (r) =>
      `${r.position}|${Buffer.from(r.batchId).toString('hex')}|${r.epoch}|${Buffer.from(r.payload).toString('utf8')}`,
  );
}

export const text = (s: string) => new TextEncoder().encode(s);
