/**
 * A cluster node launched with a ManualClock (`launchClusterNode`'s `clock`) pauses between
 * join tries and bases its authority's lease epochs on that clock, not on wall time: real
 * nodes in this process, mutual TLS on loopback, fake time only.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { ManualClock } from '../../ts/core/clock.js';
import { freePorts } from '../../ts/net/ports.js';
import { until } from '../helpers/until.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function cluster(nodes: string[]) {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-node-clock-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true, maxRetries: 5 }));
  const files = await initCluster({ dir, id: 'c1', shards: 4, nodes, ports: await freePorts(nodes.length) });
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
    await until(() => clock.pending() === 1 || failed !== undefined, { what: 'b pausing between join tries' });
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
});
