import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { drainAndLeave } from '../../ts/cluster/drain.js';
import { DEAD_LETTER_LOG, DeadLetters, EpochGate, listDeadLetters } from '../../ts/cluster/fencing.js';
import { BoundedMailbox } from '../../ts/cluster/mailbox.js';
import { checkJoinMeta, clusterMeta, readClusterMeta, shardOfIri, writeClusterMeta } from '../../ts/cluster/meta.js';
import { fencedReceiver } from '../../ts/cluster/receive.js';
import { ClusterStorage } from '../../ts/cluster/storage.js';
import { decodeClusterFrame, encodeClusterFrame } from '../../ts/codec/cluster-frame.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { fnv1a64, shardOf } from '../../ts/core/index.js';
import { MemoryLog, openLog } from '../../ts/storage/index.js';
import { externalVectors } from '../helpers/paths.js';
import { until } from '../helpers/until.js';
import { localCluster, META } from './helpers.js';

const dirs: string[] = [];
async function tmp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-cluster-'));
  dirs.push(d);
  return d;
}
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function rejection(p: Promise<unknown>): Promise<PlexusError> {
  try {
    await p;
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

describe('ClusterMeta and cluster.meta', () => {
  it('checks the values: a power-of-two shard count, hash version 1, a DNS-label id', () => {
    expect(clusterMeta(META)).toEqual(META);
    for (const [field, value] of [
      ['shardCount', 12],
      ['shardCount', 0],
      ['hashVersion', 2],
      ['id', 'Bad Id'],
      ['replicationFactor', 0],
    ] as const) {
      try {
        clusterMeta({ ...META, [field]: value });
        throw new Error('accepted');
      } catch (e) {
        expect(e).toMatchObject({ code: 'PLX_CLUSTER_BAD_META', details: { field } });
      }
    }
  });

  it('is written once and refuses a different one naming the field', async () => {
    const d = await tmp();
    await writeClusterMeta(d, META);
    expect(await readClusterMeta(d)).toEqual(META);
    expect(JSON.parse(await readFile(join(d, 'cluster.meta'), 'utf8'))).toEqual(META);
    const e = await rejection(writeClusterMeta(d, { ...META, shardCount: 16 }));
    expect(e).toMatchObject({ code: 'PLX_CLUSTER_META_MISMATCH', details: { field: 'shardCount' } });
    await writeFile(join(d, 'cluster.meta'), '{not json');
    expect((await rejection(readClusterMeta(d))).code).toBe('PLX_CLUSTER_BAD_META');
    expect(() => checkJoinMeta(META, { ...META, replicationFactor: 3 })).toThrow(/replicationFactor/);
  });

  it('shard hash version 1 is FNV-1a 64 of the IRI mod the shard count (reference vectors)', async () => {
    const lines = (await readFile(externalVectors('fnv1a64.txt'), 'utf8'))
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    for (const line of lines) {
      const [hex, want] = line.split('\t') as [string, string];
      const bytes = Buffer.from(hex, 'hex');
      expect(fnv1a64(bytes).toString(16).padStart(16, '0')).toBe(want);
      const text = bytes.toString('utf8');
      if (Buffer.from(text, 'utf8').equals(bytes)) {
        expect(shardOfIri({ ...META, shardCount: 1024 }, text)).toBe(Number(BigInt(`0x${want}`) % 1024n));
      }
    }
    // Doubling the shard count splits shard s into s and s + N.
    for (const iri of ['vt:a', 'vt:order/17', 'vt:über']) {
      const s = shardOf(iri, 256);
      expect([s, s + 256]).toContain(shardOf(iri, 512));
    }
  });
});

describe('fencing', () => {
  it('a shared shard store refuses the stale owner’s append as PLX_CLUSTER_FENCED', async () => {
    const d = await tmp();
    const store = await openLog(join(d, 'shard-3'), { fsync: 'never' });
    try {
      let epochA: bigint | undefined = 1n;
      let epochB: bigint | undefined;
      const nodeA = new ClusterStorage({ shardCount: 8, open: async () => store, epochOf: () => epochA });
      const nodeB = new ClusterStorage({ shardCount: 8, open: async () => store, epochOf: () => epochB });
      await nodeA.append(3, [Buffer.from('a1')]);
      // A pauses; B takes the shard at epoch 2 and appends.
      epochB = 2n;
      await nodeB.append(3, [Buffer.from('b1')]);
      const e = await rejection(nodeA.append(3, [Buffer.from('a2')]));
      expect(e).toMatchObject({ code: 'PLX_CLUSTER_FENCED', details: { shard: 3, epoch: '1', highest: '2' } });
      expect((await store.read(1n)).map((r) => [Buffer.from(r.payload).toString(), r.epoch])).toEqual([
        ['a1', 1n],
        ['b1', 2n],
      ]);
      epochA = undefined;
      expect((await rejection(nodeA.append(3, [Buffer.from('a3')]))).code).toBe('PLX_CLUSTER_LEASE_LOST');
      expect((await rejection(nodeA.append(9, [Buffer.from('x')]))).code).toBe('PLX_CLUSTER_BAD_SHARD');
    } finally {
      await store.close();
    }
  });

  it('a receiver drops frames of a stale epoch into the dead-letter log and stores current ones', async () => {
    const d = await tmp();
    const log = await openLog(join(d, DEAD_LETTER_LOG), { fsync: 'always' });
    try {
      const gate = new EpochGate();
      gate.observe({ version: 3, members: [], leases: [{ shard: 2, owner: 'c', epoch: 5n }] });
      const dead = new DeadLetters(log);
      const box = new BoundedMailbox<string>(4);
      const handle = fencedReceiver(gate, dead, async (_from, f) => box.put(f.target));
      const mk = (epoch: bigint, target: string) =>
        decodeClusterFrame(
          encodeClusterFrame({
            shard: 2,
            epoch,
            messageId: new Uint8Array(16).fill(Number(epoch)),
            sender: 'vt:s',
            target,
            payload: new Uint8Array(7),
          }),
        );
      expect(await handle('b', mk(4n, 'vt:old'))).toBe('stale');
      expect(await handle('c', mk(5n, 'vt:now'))).toBe('stored');
      expect(await handle('c', mk(6n, 'vt:newer'))).toBe('stored');
      expect(await handle('c', mk(5n, 'vt:late'))).toBe('stale');
      expect(box.take()).toBe('vt:now');
      const list = await dead.list();
      expect(list.map((x) => [x.reason, x.from, x.epoch, x.current, x.target])).toEqual([
        ['stale-epoch', 'b', '4', '5', 'vt:old'],
        ['stale-epoch', 'c', '5', '6', 'vt:late'],
      ]);
      expect(list[0]).toMatchObject({ shard: 2, sender: 'vt:s', payloadBytes: 7 });
    } finally {
      await log.close();
    }
    // Queryable from the data directory once the node is stopped.
    expect((await listDeadLetters(d)).map((x) => x.target)).toEqual(['vt:old', 'vt:late']);
  });

  it('the dead-letter log works on the in-memory store too', async () => {
    const dead = new DeadLetters(new MemoryLog());
    const f = decodeClusterFrame(
      encodeClusterFrame({ shard: 0, epoch: 1n, messageId: new Uint8Array(16), sender: 'vt:a', target: 'vt:b' }),
    );
    await dead.record('stale-epoch', 'x', f, 2n);
    expect((await dead.list()).length).toBe(1);
  });
});

describe('leaving drains first', () => {
  it('refuses activations, finishes macrosteps, flushes outboxes, hands over each shard, then leaves', async () => {
    const c = await localCluster({ nodes: ['a', 'b'], transport: 'direct' });
    try {
      await c.members.get('a')?.join();
      await c.members.get('b')?.join();
      const a = c.members.get('a')!;
      await until(() => a.held().length === 8, { what: 'a to hold every shard' });
      const steps: string[] = [];
      await drainAndLeave(a, {
        refuseActivations: () => {
          steps.push('refuse');
        },
        finishMacrosteps: async () => {
          steps.push('finish');
        },
        flushOutboxes: async () => {
          steps.push('flush');
        },
        handOver: async (shard) => {
          expect(c.host.authority.view().members.find((m) => m.id === 'a')?.status).toBe('leaving');
          steps.push(`hand-over ${shard}`);
        },
      });
      expect(steps.slice(0, 3)).toEqual(['refuse', 'finish', 'flush']);
      expect(steps.slice(3).sort()).toEqual(Array.from({ length: 8 }, (_, s) => `hand-over ${s}`).sort());
      await until(
        () =>
          c.host.authority.view().leases.every((l) => l.owner === 'b') && c.host.authority.view().leases.length === 8,
        { what: 'b to own every shard' },
      );
      expect(c.host.authority.isMember('a')).toBe(false);
      expect(a.held()).toHaveLength(0);
    } finally {
      await c.close();
    }
  });
});

describe('StaticMembership views', () => {
  it('ignores a view whose version is not greater than the one it holds', async () => {
    const { StaticMembership } = await import('../../ts/cluster/static.js');
    const versions = [5, 3, 5, 7];
    let i = 0;
    const m = new StaticMembership({
      config: { meta: META, self: { id: 'a', address: '' }, members: [{ id: 'a', address: '' }], authority: 'a' },
      call: async () => ({ ok: true, view: { version: versions[i++] ?? 7, members: [], leases: [] } }),
    });
    const seen: number[] = [];
    m.subscribe((v) => seen.push(v.version));
    for (let k = 0; k < 4; k++) await m.revoke(0);
    expect(seen).toEqual([5, 7]);
    expect(m.view().version).toBe(7);
    await m.close();
  });
});
