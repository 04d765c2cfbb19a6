/**
 * A cluster member's deadlines run on the time it is given. Real stores in cluster mode in this
 * process (real files, real Raft over TCP on loopback) with a ManualClock as the store's timers
 * and the cluster API's clock: nothing happens before a deadline or an interval, whatever wall
 * time passes, and the timed behaviour follows once the clock is advanced past it.
 */
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { attachClusterApi } from '../../ts/chronacta/cluster-api.js';
import type { HaMember } from '../../ts/chronacta/cluster-config.js';
import type { CallContext, GrpcMethod, GrpcRoutes } from '../../ts/chronacta/grpc-server.js';
import { clusterFiles, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { EventStore } from '../../ts/chronacta/store.js';
import { ManualClock } from '../../ts/core/clock.js';
import { PlexusError } from '../../ts/core/errors.js';
import { freePorts } from '../../ts/net/ports.js';
import { quiet, tempDir } from '../chronacta/helpers.js';
import { until } from '../helpers/until.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const TICK_MS = 20;

/** Member ids 1..n on free loopback ports; opens member 1 only, its timers on `clock`. */
async function openMemberOne(n: number, clock: ManualClock, timeoutMs = 2000): Promise<EventStore> {
  const d = await tempDir('cluster-clock');
  cleanup.push(d.remove);
  const ports = await freePorts(2 * n);
  const members: HaMember[] = [];
  for (let id = 1; id <= n; id++) {
    members.push({
      id,
      raftAddress: `127.0.0.1:${ports[2 * id - 2]}`,
      advertise: `127.0.0.1:${ports[2 * id - 1]}`,
    });
  }
  await writeClusterFiles(d.dir, clusterFiles(`clock-${process.pid}`, members, 1));
  const store = await EventStore.open({
    dataDir: d.dir,
    fsync: 'never',
    logger: quiet,
    timers: clock,
    replication: { id: 1, members, tickMs: TICK_MS, timeoutMs, localFsync: 'never', logger: quiet },
  });
  cleanup.push(() => store.close());
  return store;
}

/** Routes holding the one method the read admission wraps; the inner one answers an empty message. */
function readRoutes(): { routes: GrpcRoutes; path: string } {
  const m = new Map<string, GrpcMethod>();
  const path = methodDefinition('EventStore', 'ReadAll').path;
  m.set(path, { kind: 'unary', handle: async () => new Uint8Array(5) });
  return { routes: { get: (p) => m.get(p), set: (p, v) => void m.set(p, v) }, path };
}

function context(headers: Record<string, string>): CallContext & { trailers: Map<string, string> } {
  const trailers = new Map<string, string>();
  return {
    cancelled: false,
    onCancel: () => undefined,
    header: (name) => headers[name],
    setTrailer: (name, value) => void trailers.set(name, value),
    trailers,
  };
}

/** Settles the event loop a few turns (real I/O may run meanwhile). */
const turns = async (n = 20) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

function track<T>(p: Promise<T>): { settled: () => boolean; result: Promise<T> } {
  let done = false;
  const result = p.finally(() => {
    done = true;
  });
  result.catch(() => undefined);
  return { settled: () => done, result };
}

describe('a Chronacta member on a manual clock', () => {
  it('a leader read on a member that knows no leader waits one and a half election timeouts of its clock', async () => {
    const clock = new ManualClock(0);
    const store = await openMemberOne(2, clock);
    const { routes, path } = readRoutes();
    const api = attachClusterApi(routes, store, { tickMs: TICK_MS, electionTick: 10, clock, logger: quiet });
    cleanup.push(() => api.close());
    const electionMs = TICK_MS * 10 * 1.5;
    const method = routes.get(path) as Extract<GrpcMethod, { kind: 'unary' }>;
    const read = track(method.handle(Buffer.alloc(0), context({ 'plexus-read-consistency': 'leader' })));
    await new Promise((r) => setTimeout(r, 100));
    expect(read.settled()).toBe(false);
    clock.advance(electionMs - 1);
    await turns();
    expect(read.settled()).toBe(false);
    clock.advance(1);
    const e = await read.result.then(
      () => undefined,
      (x: unknown) => x,
    );
    // Refused as NOT_LEADER, naming no leader: none became known.
    expect(e).toBeInstanceOf(PlexusError);
    expect((e as PlexusError).code).toBe('PLX_CHRONACTA_HA_NOT_LEADER');
    expect((e as PlexusError).details.leaderAddress).toBeUndefined();
    expect(clock.now()).toBe(electionMs);
  });

  it('rewrites cluster.json every reconcileMs of its clock', async () => {
    const clock = new ManualClock(0);
    const store = await openMemberOne(1, clock);
    await until(() => store.clusterStatus()?.acceptingWrites === true, { timeoutMs: 10_000, what: 'member 1 leading' });
    const { routes } = readRoutes();
    const api = attachClusterApi(routes, store, { reconcileMs: 200, clock, logger: quiet });
    cleanup.push(() => api.close());
    const file = store.prepared.paths.clusterFile;
    const members = async () => (JSON.parse(await readFile(file, 'utf8')) as { members: { id: string }[] }).members;
    await api.reconcile();
    expect((await members()).map((m) => m.id)).toEqual(['1']);
    // A learner added on the log itself (not through the API, which reconciles at once).
    const [raft, grpc] = await freePorts(2);
    await store.replicatedLog?.addMember(
      { id: 2, raftAddress: `127.0.0.1:${raft}`, advertise: `127.0.0.1:${grpc}` },
      { voter: false },
    );
    expect(store.clusterStatus()?.learners).toEqual([2]);
    clock.advance(199);
    await new Promise((r) => setTimeout(r, 100));
    expect((await members()).map((m) => m.id)).toEqual(['1']);
    clock.advance(1);
    await until(async () => (await members()).length === 2, { what: 'cluster.json naming the learner' });
    expect((await members()).find((m) => m.id === '2')).toMatchObject({ learner: true });
  });
});
