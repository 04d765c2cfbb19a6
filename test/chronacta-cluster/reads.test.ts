/**
 * Linearizable leader reads: the replicated log's read barrier (ReadIndex) in this process
 * (real files, Raft over TCP through fault-injecting proxies), and three real `node
 * dist/cli/main.js chronacta serve --cluster` processes where the leader is SIGSTOPped, a new
 * one elected and written to, and the old one, resumed, must not serve its old view to a
 * `leader` read. Build first: `npx tsc -p tsconfig.build.json`.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import type { ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { clusterFiles, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { createMemberCa, issueMemberFiles } from '../../ts/chronacta/member-tls.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { type Cluster, startCluster, text } from '../chronacta-ha/helpers.js';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { until } from '../helpers/until.js';
import { freePort, MAIN, type ServeMember, signalMember, spawnMember, stopAll } from './helpers.js';

const NOT_LEADER = 'PLX_CHRONACTA_HA_NOT_LEADER';

function idOf(c: Cluster, log: ReplicatedLog): number {
  for (const [id, l] of c.logs) if (l === log) return id;
  throw new Error('not a member of the cluster');
}

const settle = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );

/** How long an old leader stays stopped after reads were sent to it (they wait in its socket). */
const STOPPED_WHILE_ASKED_MS = 100;

describe('ReplicatedLog.readBarrier (in process)', () => {
  let cluster: Cluster | undefined;
  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  it('batches concurrent barriers into shared ReadIndex rounds and returns the applied position', async () => {
    const c = (cluster = await startCluster(3));
    const leader = await c.waitLeader();
    for (let i = 0; i < 5; i++) await leader.append([text(`a${i}`)]);
    const before = leader.readBarrierRounds;
    // 50 reads that arrive together: one round serves them all.
    const first = await Promise.all(Array.from({ length: 50 }, () => leader.readBarrier()));
    expect(new Set(first)).toEqual(new Set([5n]));
    expect(leader.readBarrierRounds - before).toBe(1);
    // Reads arriving while a round runs wait for the next one (it started before them), and share it.
    const running = leader.readBarrier();
    await new Promise((r) => setImmediate(r));
    const appended = leader.append([text('b')]);
    const later = Array.from({ length: 20 }, () => leader.readBarrier());
    await appended;
    expect(await running).toBeGreaterThanOrEqual(5n);
    const laterAt = await Promise.all(later);
    expect(leader.readBarrierRounds - before).toBe(3);
    // A read that starts after an append resolved sees it.
    expect(await leader.readBarrier()).toBe(6n);
    expect(laterAt.every((p) => p >= 5n)).toBe(true);
    // A follower has no read barrier: it names the leader.
    const follower = c.logs.get(c.ids.find((id) => id !== idOf(c, leader)) as number) as ReplicatedLog;
    const refused = await settle(follower.readBarrier());
    expect(isPlexusError(refused.error, NOT_LEADER)).toBe(true);
    expect((refused.error as { details: { leader: number } }).details.leader).toBe(idOf(c, leader));
  });

  it('a leader cut off from its majority refuses a barrier (NOT_LEADER) instead of serving its old view', async () => {
    const c = (cluster = await startCluster(3));
    const old = await c.waitLeader();
    const oldId = idOf(c, old);
    await old.append([text('before')]);
    // Cut it off, then ask it at once: it still believes it leads.
    c.mesh.isolate(oldId - 1);
    const asked = performance.now();
    const read = settle(old.readBarrier());
    const next = await c.waitLeader(
      c.ids.filter((id) => id !== oldId),
      10_000,
    );
    await next.append([text('after')]);
    const r = await read;
    const ms = performance.now() - asked;
    expect(r.value).toBeUndefined();
    expect(isPlexusError(r.error, NOT_LEADER)).toBe(true);
    // Check-quorum steps it down within about two election timeouts (20 ms ticks x 10 here), not the 2 s timeout.
    expect(ms).toBeLessThan(1900);
    expect(old.last).toBe(1n);
    c.mesh.heal();
    // Back in touch, it follows the new leader; its barrier still refuses, the new leader's sees both.
    expect(await next.readBarrier()).toBe(2n);
    expect(isPlexusError((await settle(old.readBarrier())).error, NOT_LEADER)).toBe(true);
  });
});

/** Three `serve --cluster` processes whose Raft links each go through a fault-injecting proxy. */
interface Proxied {
  readonly root: string;
  readonly mesh: ProxyMesh;
  readonly members: ServeMember[];
  readonly children: Set<ChildProcess>;
  leader(among?: readonly ServeMember[], ms?: number): Promise<ServeMember>;
}

async function startProxied(): Promise<Proxied> {
  const root = mkdtempSync(join(tmpdir(), 'plexus-chronacta-reads-'));
  const children = new Set<ChildProcess>();
  const ports: number[] = [];
  while (ports.length < 6) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const grpc = ports.slice(0, 3);
  const raft = ports.slice(3);
  const mesh = await ProxyMesh.start(raft);
  const members: ServeMember[] = [];
  const c: Proxied = {
    root,
    mesh,
    members,
    children,
    leader: (among = members, ms = 15_000) =>
      until(
        async () => {
          const st = await Promise.all(among.map((m) => m.client.clusterStatus().catch(() => undefined)));
          const ls = among.filter((_, i) => st[i]?.acceptingWrites === true);
          return ls.length === 1 ? ls[0] : undefined;
        },
        { timeoutMs: ms, what: 'one leader accepting writes', intervalMs: 25 },
      ),
  };
  proxied = c;
  const clusterId = `reads-${process.pid}-${Date.now()}`;
  const ca = await createMemberCa(clusterId); // mutual TLS between members, as `cluster init` makes it
  for (let self = 1; self <= 3; self++) {
    // Member `self` listens on its own Raft port and reaches every peer through the proxy self -> peer.
    const view = [1, 2, 3].map((id) => ({
      id,
      raftAddress: id === self ? `127.0.0.1:${raft[id - 1]}` : mesh.addressFor(self - 1, id - 1),
      advertise: `127.0.0.1:${grpc[id - 1]}`,
    }));
    await writeClusterFiles(join(root, `node-${self}`), clusterFiles(clusterId, view, self));
    await issueMemberFiles(join(root, `node-${self}`), ca, self);
  }
  const started = await Promise.allSettled(
    [1, 2, 3].map((id) => spawnMember(id, join(root, `node-${id}`), ['--tick-ms', '50'], children)),
  );
  for (const r of started) if (r.status === 'fulfilled') members.push(r.value);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  members.sort((a, b) => a.id - b.id);
  return c;
}

let proxied: Proxied | undefined;

describe('leader reads on three serve --cluster processes', () => {
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
    await startProxied();
  }, 60_000);
  afterAll(async () => {
    const c = proxied;
    if (!c) return;
    for (const m of c.members) m.client.close();
    await stopAll(c.children);
    await c.mesh.close();
    rmSync(c.root, { recursive: true, force: true });
  });

  it('a SIGSTOPped leader, resumed after a new leader took an append, refuses or redirects a leader read: never its old view', async () => {
    const t = proxied as Proxied;
    const old = await t.leader();
    const clients: ChronactaClient[] = [];
    const client = (address: string, o: ConstructorParameters<typeof ChronactaClient>[1] = {}) => {
      const c = new ChronactaClient(address, { deadlineMs: 5000, ...o });
      clients.push(c);
      return c;
    };
    const data = (r: { events: readonly { data: Uint8Array }[] }) =>
      r.events.map((e) => Buffer.from(e.data).toString());
    try {
      await client(old.address).append('acct', [{ type: 't', data: 'before' }], { idempotencyKey: 'before' });
      const seen = await client(old.address).readStream('acct');
      expect(seen.read).toMatchObject({ servedBy: 'leader', address: old.address });
      expect(data(seen)).toEqual(['before']);
      // A client with an open connection to the old leader, no redirects: what the old leader itself answers.
      const strict = client(old.address, { followReadRedirects: false });
      expect(data(await strict.readAll())).toEqual(['before']);

      // Frozen, and its Raft links cut (so nothing tells it about the new term when it wakes):
      // it resumes believing it leads, for up to about two election timeouts.
      signalMember(old, 'SIGSTOP');
      t.mesh.isolate(old.id - 1);
      const others = t.members.filter((m) => m !== old);
      let next: ServeMember;
      let asked: Promise<{ value: unknown; error: unknown }>[] = [];
      try {
        next = await t.leader(others);
        await client(next.address).append('acct', [{ type: 't', data: 'after' }], { idempotencyKey: 'after' });
        // Reads sent while it is stopped wait in its socket and reach it the moment it resumes.
        asked = [
          settle(strict.readStream('acct', { readConsistency: 'leader' })),
          settle(strict.readAll({ readConsistency: 'leader' })),
        ];
        // The stopped member stays stopped a moment more, so that the reads reach its socket
        // before it resumes: a SIGSTOPped process marks nothing, and their arrival is the fault.
        await new Promise((r) => setTimeout(r, STOPPED_WHILE_ASKED_MS));
      } finally {
        signalMember(old, 'SIGCONT');
      }
      const immediate = [
        settle(strict.readStream('acct', { readConsistency: 'leader' })),
        settle(strict.readAll({ readConsistency: 'leader' })),
      ];
      const results = await Promise.all([...asked, ...immediate]);
      // Still believing it leads, it could only have answered ['before']: it refuses instead.
      for (const r of results) {
        expect(r.value).toBeUndefined();
        expect(r.error).toMatchObject({ code: NOT_LEADER });
      }
      // Back in touch with the others, it names the new leader, and the client reads there.
      t.mesh.heal();
      const named = await until(
        async () => {
          const r = await settle(strict.readStream('acct', { readConsistency: 'leader' }));
          const addr = (r.error as { details?: { leaderAddress?: string } } | undefined)?.details?.leaderAddress;
          expect(r.value).toBeUndefined();
          return addr ? addr : undefined;
        },
        { timeoutMs: 10_000, what: 'the old leader naming the new one', intervalMs: 25 },
      );
      expect(named).toBe(next.address);
      const redirected = await client(old.address).readStream('acct');
      expect(data(redirected)).toEqual(['before', 'after']);
      expect(redirected.read).toMatchObject({ servedBy: 'leader', address: next.address });
      // A subscription asked at the old leader starts at the new one and catches up with both.
      const sub = client(old.address).subscribe({ stream: 'acct', fromVersion: 'start' });
      const got: string[] = [];
      for await (const m of sub) {
        if (m.kind === 'event') got.push(Buffer.from(m.event.data).toString());
        if (got.length === 2) break;
      }
      expect(got).toEqual(['before', 'after']);
    } finally {
      for (const c of clients) c.close();
    }
  }, 60_000);
});
