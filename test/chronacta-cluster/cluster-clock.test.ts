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
import {
  type CallContext,
  CallFailure,
  type GrpcMethod,
  type GrpcRoutes,
  startGrpcServer,
} from '../../ts/chronacta/grpc-server.js';
import { clusterFiles, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { ChronactaMetrics } from '../../ts/chronacta/metrics.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { serverMethods } from '../../ts/chronacta/server-methods.js';
import { toCallStatus } from '../../ts/chronacta/status.js';
import { EventStore } from '../../ts/chronacta/store.js';
import { ManualClock } from '../../ts/core/clock.js';
import { PlexusError } from '../../ts/core/errors.js';
import { freePorts } from '../../ts/net/ports.js';
import { quiet, tempDir } from '../chronacta/helpers.js';
import { FaultProxy } from '../helpers/fault-proxy.js';
import { until } from '../helpers/until.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const TICK_MS = 20;

/** Members 1..n on free loopback ports (`advertise` may be replaced, e.g. by a proxy's address). */
async function memberList(n: number): Promise<HaMember[]> {
  const ports = await freePorts(n);
  const members: HaMember[] = [];
  for (let id = 1; id <= n; id++) {
    members.push({ id, raftAddress: `127.0.0.1:${ports[id - 1]}`, advertise: '127.0.0.1:1' });
  }
  return members;
}

/** Opens member `id` of `members` in cluster mode, its timers on `clock`. */
async function openMember(members: HaMember[], id: number, clock: ManualClock, timeoutMs = 2000): Promise<EventStore> {
  const d = await tempDir('cluster-clock');
  cleanup.push(d.remove);
  await writeClusterFiles(d.dir, clusterFiles(`clock-${process.pid}`, members, id));
  const store = await EventStore.open({
    dataDir: d.dir,
    fsync: 'never',
    logger: quiet,
    timers: clock,
    replication: { id, members, tickMs: TICK_MS, timeoutMs, localFsync: 'never', logger: quiet },
  });
  cleanup.push(() => store.close());
  return store;
}

/** Member ids 1..n; opens member 1 only, its timers on `clock`. */
async function openMemberOne(n: number, clock: ManualClock, timeoutMs = 2000): Promise<EventStore> {
  return openMember(await memberList(n), 1, clock, timeoutMs);
}

/** The server's methods of `store` as routes the cluster API wraps, and the path of ReadAll. */
function readRoutes(store: EventStore): { routes: GrpcRoutes; methods: Map<string, GrpcMethod>; path: string } {
  const methods = serverMethods({
    store,
    metrics: new ChronactaMetrics(),
    subs: new Set(),
    cluster: () => store.prepared,
  });
  const path = methodDefinition('EventStore', 'ReadAll').path;
  return { routes: { get: (p) => methods.get(p), set: (p, v) => void methods.set(p, v) }, methods, path };
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

const unaryAt = (routes: GrpcRoutes, path: string) => routes.get(path) as Extract<GrpcMethod, { kind: 'unary' }>;

describe('a Chronacta member on a manual clock', () => {
  it('a follower serves follower reads until maxReadStalenessMs of its clock passed since it heard its leader', async () => {
    const listed = await memberList(2);
    // Each member's gRPC port, reached through a proxy: the address other members dial.
    const grpcPorts = await freePorts(2);
    const proxies: FaultProxy[] = [];
    const members: HaMember[] = [];
    for (const m of listed) {
      const proxy = await FaultProxy.start({ port: grpcPorts[m.id - 1] as number });
      cleanup.push(() => proxy.close());
      proxies.push(proxy);
      members.push({ ...m, advertise: proxy.address });
    }
    const clocks = [new ManualClock(0), new ManualClock(0)];
    const stores = await Promise.all(members.map((m) => openMember(members, m.id, clocks[m.id - 1] as ManualClock)));
    const apis: { routes: GrpcRoutes }[] = [];
    for (const [i, store] of stores.entries()) {
      const { routes, methods } = readRoutes(store);
      const server = await startGrpcServer('127.0.0.1', grpcPorts[i] as number, methods, {
        maxMessageBytes: 4 << 20,
        statusOf: toCallStatus,
      });
      cleanup.push(() => server.close(0));
      const api = attachClusterApi(routes, store, {
        maxReadStalenessMs: 1000,
        clock: clocks[i] as ManualClock,
        logger: quiet,
      });
      cleanup.push(() => api.close());
      apis.push({ routes });
    }
    await until(() => stores.some((s) => s.clusterStatus()?.acceptingWrites), { timeoutMs: 10_000, what: 'a leader' });
    const leader = stores.findIndex((s) => s.clusterStatus()?.acceptingWrites);
    const follower = 1 - leader;
    const clock = clocks[follower] as ManualClock;
    const fs = stores[follower] as EventStore;
    await until(() => fs.clusterStatus()?.leader === leader + 1, { what: 'the follower knowing its leader' });
    const read = async () => {
      const ctx = context({ 'plexus-read-consistency': 'follower' });
      await unaryAt(
        (apis[follower] as { routes: GrpcRoutes }).routes,
        methodDefinition('EventStore', 'ReadAll').path,
      ).handle(Buffer.alloc(0), ctx);
      return ctx.trailers.get('plexus-read');
    };
    // Heard now (t = 0): the follower asks its leader once and serves.
    expect(await read()).toBe('follower');
    // The leader's client port goes silent (its Raft stays up: it still leads).
    (proxies[leader] as FaultProxy).partition();
    clock.advance(1000); // exactly the bound: still served, the news is 1000 ms old
    expect(await read()).toBe('follower');
    clock.advance(1);
    const e = await read().then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(CallFailure);
    expect((e as CallFailure).status.code).toBe(9); // FAILED_PRECONDITION
    expect((e as CallFailure).status.details).toContain('has not heard from its leader');
    expect(JSON.stringify((e as CallFailure).status.metadata)).toContain('PLX_CHRONACTA_STALE_READ');
    expect(stores[leader]?.clusterStatus()?.acceptingWrites).toBe(true);
  });

  it("holds a leader's append for readiness up to replication.timeoutMs of the store's timers", async () => {
    const clock = new ManualClock(0);
    const store = await openMemberOne(1, clock, 1000);
    await until(() => store.clusterStatus()?.acceptingWrites === true, { timeoutMs: 10_000, what: 'member 1 leading' });
    // The replicated log stops under the store: still a leader by role, it never accepts writes again.
    const log = store.replicatedLog as NonNullable<EventStore['replicatedLog']>;
    await log.close();
    expect(log.role).toBe('leader');
    expect(log.acceptingWrites).toBe(false);
    const append = track(store.append('s-1', [{ type: 'T', data: new TextEncoder().encode('x') }]));
    await new Promise((r) => setTimeout(r, 100)); // wall time passes; the store's timers do not
    expect(append.settled()).toBe(false);
    clock.advance(1000); // at the deadline, not past it
    await turns();
    expect(append.settled()).toBe(false);
    clock.advance(1);
    const e = await append.result.then(
      () => undefined,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(PlexusError);
    expect((e as PlexusError).code).toBe('PLX_CHRONACTA_HA_STOPPED');
    expect(store.lastPosition).toBe(0n);
  });

  it('a leader read on a member that knows no leader waits one and a half election timeouts of its clock', async () => {
    const clock = new ManualClock(0);
    const store = await openMemberOne(2, clock);
    const { routes, path } = readRoutes(store);
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
    const { routes } = readRoutes(store);
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
