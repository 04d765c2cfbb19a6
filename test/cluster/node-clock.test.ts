/**
 * A cluster node launched with a ManualClock (`launchClusterNode`'s `clock`) pauses between
 * join tries, bases its authority's lease epochs, measures its claim pauses and bounds the
 * shard hand-over when it stops on that clock (its wire's call timeouts too), not on wall
 * time: real nodes in this process, mutual TLS on loopback, fake time only.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { decodeReply, decodeRequest, encodeRequest } from '../../ts/cluster/codec.js';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { STORE_TAG } from '../../ts/cluster/store-host.js';
import { ManualClock } from '../../ts/core/clock.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { freePorts } from '../../ts/net/ports.js';
import type { CallHandler } from '../../ts/net/types.js';
import { loopTurns } from '../helpers/clock.js';
import { until } from '../helpers/until.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function cluster(nodes: string[], opts: { journal?: 'shared'; shards?: number } = {}) {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-node-clock-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true, maxRetries: 5 }));
  const files = await initCluster({
    dir,
    id: 'c1',
    shards: opts.shards ?? 4,
    nodes,
    ports: await freePorts(nodes.length),
    ...(opts.journal ? { journal: opts.journal } : {}),
  });
  return (name: string) => readNodeConfig(files.get(name) as string);
}

function started(cn: ClusterNode): ClusterNode {
  let stopped = false;
  cleanup.push(async () => {
    if (!stopped) await cn.stop();
    stopped = true;
  });
  return cn;
}

describe('a cluster node on a manual clock', () => {
  it('bases new lease epochs on its clock', async () => {
    const cfg = await cluster(['a']);
    const base = 1_000_000;
    const clock = new ManualClock(base);
    const a = started(await launchClusterNode(await cfg('a'), { clock }));
    await until(() => a.membership.view().leases.length === 4, { what: 'the four leases' });
    for (const l of a.membership.view().leases) {
      expect(l.epoch > BigInt(base) << 16n).toBe(true);
      expect(l.epoch >> 16n).toBe(BigInt(base));
    }
  });

  it('pauses 100 ms of its clock between join tries while the authority is down', async () => {
    const cfg = await cluster(['a', 'b']); // `a` is the lease authority
    const clock = new ManualClock(0);
    let joined: ClusterNode | undefined;
    let failed: unknown;
    const launching = launchClusterNode(await cfg('b'), { clock }).then(
      (cn) => {
        joined = started(cn);
      },
      (e: unknown) => {
        failed = e;
      },
    );
    // The first try fails (nothing listens at a's address); b then waits on its clock.
    // (its wire's deadline sweep is on the same clock, due later than the pause)
    await until(() => clock.nextDue() === 100 || failed !== undefined, { what: 'b pausing between join tries' });
    expect(failed).toBeUndefined();
    expect(clock.nextDue()).toBe(100);
    const a = started(await launchClusterNode(await cfg('a')));
    clock.advance(99);
    await new Promise((r) => setTimeout(r, 300)); // wall time passes; b's clock does not
    expect(joined).toBeUndefined();
    expect(a.membership.view().members.map((m) => m.id)).not.toContain('b');
    clock.advance(1);
    await launching;
    expect(failed).toBeUndefined();
    expect(joined).toBeDefined();
    await until(() => a.membership.view().members.some((m) => m.id === 'b'), { what: 'a admitting b' });
  });

  it('claims a shard given up with a pause again only once the pause passed on its clock', async () => {
    const cfg = await cluster(['a']);
    const clock = new ManualClock(0);
    const a = started(await launchClusterNode(await cfg('a'), { clock }));
    await until(() => a.membership.view().leases.length === 4, { what: 'the four leases' });
    const epochOf = (s: number) => a.membership.view().leases.find((l) => l.shard === s)?.epoch;
    const first = epochOf(0) as bigint;
    a.pauseClaims(0, 5000);
    await a.membership.release(0, first);
    // Given up without a pause, a shard is claimed again by the next rounds, which look at
    // shard 0 first: shard 0 freed before it and still free when it is claimed again shows
    // the rounds skipping it.
    const claimedAgain = async (s: number) => {
      const before = epochOf(s) as bigint;
      await a.membership.release(s, before);
      await until(() => (epochOf(s) ?? 0n) > before, { what: `shard ${s} claimed again` });
    };
    await claimedAgain(1);
    expect(epochOf(0)).toBeUndefined();
    clock.advance(4999);
    await claimedAgain(2);
    expect(epochOf(0)).toBeUndefined();
    clock.advance(1);
    await until(() => epochOf(0), { what: 'shard 0 claimed once the pause passed' });
    expect((epochOf(0) as bigint) > first).toBe(true);
  });

  it('gives up the shard hand-over when it stops 3 s of its clock after it began', async () => {
    // a hosts the lease authority, b the shared store (so a's calls hold only b's authority requests)
    const cfg = await cluster(['a', 'b'], { journal: 'shared', shards: 8 });
    const withStore = async (n: string) => ({ ...(await cfg(n)), storeHost: 'b' });
    const handlers = new Map<string, CallHandler>();
    const onCall = Http2Wire.prototype.onCall;
    const spy = vi.spyOn(Http2Wire.prototype, 'onCall').mockImplementation(function (this: Http2Wire, h) {
      handlers.set(this.self, h);
      onCall.call(this, h);
    });
    const a = started(await launchClusterNode(await withStore('a')));
    spy.mockRestore();
    const authority = handlers.get('a') as CallHandler;
    const clock = new ManualClock(0);
    const b = started(await launchClusterNode(await withStore('b'), { clock }));
    await until(() => b.membership.held().length > 0, { what: 'b holding a lease' });

    // From now on a's authority holds b's hand-over requests until the test lets one through.
    const heldBack: { type: string; answer: () => void }[] = [];
    a.wire.onCall((from, body) => {
      if (body[0] === STORE_TAG) return authority(from, body);
      const type = decodeRequest(body).type;
      if (from !== 'b' || !['drain', 'release', 'leave'].includes(type)) return authority(from, body);
      return new Promise<Uint8Array>((resolve, reject) =>
        heldBack.push({ type, answer: () => void authority(from, body).then(resolve, reject) }),
      );
    });
    let stopped = false;
    const stopping = b.stop().then(() => {
      stopped = true;
    });
    await until(() => heldBack.length === 1, { what: "b's drain request" });
    expect(heldBack[0]?.type).toBe('drain');
    // The drain is answered after 1.5 s of b's clock; the release that follows never is (its
    // call's own deadline, 2 s of the same clock, would come only at 3.5 s).
    clock.advance(1500);
    heldBack[0]?.answer();
    await until(() => heldBack.length === 2, { what: "b's release request" });
    expect(heldBack[1]?.type).toBe('release');
    clock.advance(1499);
    await loopTurns();
    expect(stopped).toBe(false);
    clock.advance(1);
    await stopping;
    expect(stopped).toBe(true);
    // Given up, not finished: b never asked to leave.
    expect(heldBack.map((c) => c.type)).toEqual(['drain', 'release']);
    const { view } = decodeReply(await authority('a', encodeRequest({ type: 'view' })));
    expect(view.members.some((m) => m.id === 'b')).toBe(true);
    expect(view.leases.some((l) => l.owner === 'b')).toBe(true);
  });
});
