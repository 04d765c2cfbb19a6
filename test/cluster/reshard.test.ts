/**
 * Offline resharding on real files: a cluster directory from `initCluster` whose journals are
 * written the way nodes write them (node-wide logs per node, or the shared store's per-shard
 * logs), resharded from 8 to 16 shards; then the refusals (damaged journal, a shard count
 * that is not a power of two, an out directory that exists, a log held open).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadAuthorityState, saveAuthorityState } from '../../ts/cluster/authority-state.js';
import { DEAD_LETTER_LOG } from '../../ts/cluster/fencing.js';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { initCluster } from '../../ts/cluster/init.js';
import { readClusterMeta } from '../../ts/cluster/meta.js';
import { reshardCluster } from '../../ts/cluster/reshard.js';
import { decodeJournalRecord, encodeJournalRecord } from '../../ts/codec/journal-record.js';
import { shardOf } from '../../ts/core/index.js';
import { openJournalShards } from '../../ts/runtime/journal-dir.js';
import { openJournal, shardDir } from '../../ts/runtime/log-journal.js';
import { openLog } from '../../ts/storage/index.js';
import { MultiplexedLog } from '../../ts/storage/multiplexed-log.js';
import type { LogStorage } from '../../ts/storage/types.js';

const N = 8;
const ACTORS = 60;
const dirs: string[] = [];

afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tmp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-reshard-'));
  dirs.push(d);
  return d;
}

const iri = (i: number) => `vt:counter/r${i}`;

function macrostep(name: string, seq: number): Uint8Array {
  return encodeJournalRecord({
    kind: 'macrostep',
    iri: name,
    seq,
    time: 1_700_000_000_000 + seq,
    dispatchedThrough: seq,
    messageId: `${name}#${seq}`,
    event: { name: 'inc' },
    state: { n: seq },
    sends: [],
  });
}

/** Every file under `d` with its sha256: the directory before and after must be the same. */
async function tree(d: string, out = new Map<string, string>(), base = d): Promise<Map<string, string>> {
  for (const e of await readdir(d, { withFileTypes: true })) {
    const p = join(d, e.name);
    if (e.isDirectory()) await tree(p, out, base);
    else
      out.set(
        p.slice(base.length),
        createHash('sha256')
          .update(await readFile(p))
          .digest('hex'),
      );
  }
  return out;
}

/**
 * A stopped cluster of nodes a and b with `ACTORS` actors of 1 to 4 macrosteps each, epochs
 * rising over the run; per-node: even shards in a's node log, odd in b's, and a's
 * authority.state with those homes.
 */
async function stoppedCluster(
  layout: 'per-node' | 'shared',
): Promise<{ dir: string; expected: Map<string, Uint8Array[]>; maxEpoch: bigint }> {
  const dir = await tmp();
  await initCluster({ dir, id: 'c1', shards: N, nodes: ['a', 'b'], basePort: 7400, journal: layout });
  const meta = await readClusterMeta(dir);
  const expected = new Map<string, Uint8Array[]>();
  const stores = new Map<string, { shard(n: number): Promise<LogStorage>; close(): Promise<void> }>();
  const storeOf = async (s: number) => {
    const key = layout === 'shared' ? 'shared' : s % 2 === 0 ? 'a' : 'b';
    let st = stores.get(key);
    if (st === undefined) {
      if (layout === 'shared') {
        const open = new Map<number, LogStorage>();
        st = {
          shard: async (n) => {
            let l = open.get(n);
            if (!l) {
              const d = shardDir(join(dir, 'shared'), n);
              await mkdir(d, { recursive: true });
              l = await openLog(d, { fsync: 'never' });
              open.set(n, l);
            }
            return l;
          },
          close: async () => {
            for (const l of open.values()) await l.close();
          },
        };
      } else {
        const jd = join(dir, 'nodes', key, 'data', 'journal');
        await (await openJournal(jd, { shardCount: N })).close();
        const nl = await MultiplexedLog.open(join(jd, 'node'), { fsync: 'never' });
        st = { shard: async (n) => nl.shard(n), close: () => nl.close() };
      }
      stores.set(key, st);
    }
    return st.shard(s);
  };
  let epoch = 5n << 16n;
  for (let round = 1; round <= 4; round++) {
    epoch += 3n;
    for (let i = 0; i < ACTORS; i++) {
      if (round > (i % 4) + 1) continue;
      const name = iri(i);
      const p = macrostep(name, round);
      await (await storeOf(shardOf(name, N))).append([p], { epoch });
      expected.set(name, [...(expected.get(name) ?? []), p]);
    }
  }
  for (const st of stores.values()) await st.close();
  const homes = new Map<number, string>();
  if (layout === 'per-node') for (let s = 0; s < N; s++) homes.set(s, s % 2 === 0 ? 'a' : 'b');
  await mkdir(join(dir, 'nodes', 'a', 'data'), { recursive: true });
  await saveAuthorityState(join(dir, 'nodes', 'a', 'data'), meta, {
    epochCeiling: 5n << 16n,
    viewCeiling: 7,
    homes,
  });
  return { dir, expected, maxEpoch: epoch };
}

async function readAll(root: string, count: number): Promise<ShardHistory[]> {
  const stores = await openJournalShards(root, { fsync: 'never' });
  try {
    const out: ShardHistory[] = [];
    for (let s = 0; s < count; s++) {
      const log = await stores.shard(s);
      if (log) out.push(await readShard(s, log));
    }
    return out;
  } finally {
    await stores.close();
  }
}

async function refusal(p: Promise<unknown>): Promise<{ code: string; details: Record<string, unknown> }> {
  try {
    await p;
  } catch (e) {
    return e as { code: string; details: Record<string, unknown> };
  }
  throw new Error('not refused');
}

describe('reshardCluster', () => {
  for (const layout of ['per-node', 'shared'] as const) {
    it(`doubles ${N} shards to ${2 * N} (${layout} journal): each actor's journal intact in shard s or s+N, epochs kept, the old directory untouched`, async () => {
      const { dir, expected, maxEpoch } = await stoppedCluster(layout);
      const before = await tree(dir);
      const out = join(await tmp(), 'next');
      const progress: number[] = [];
      const s = await reshardCluster({ dir, out, onProgress: (d) => progress.push(d) });
      const entries = [...expected.values()].reduce((a, l) => a + l.length, 0);
      expect(s).toMatchObject({ cluster: 'c1', layout, actors: ACTORS, entries, shardsBefore: N, shardsAfter: 2 * N });
      expect(s.bytes).toBe([...expected.values()].flat().reduce((a, p) => a + p.length, 0));
      expect(progress.at(-1)).toBe(layout === 'shared' ? N : 2 * N);
      expect(await tree(dir)).toEqual(before);

      const roots =
        layout === 'shared'
          ? [join(out, 'shared')]
          : [join(out, 'nodes/a/data/journal'), join(out, 'nodes/b/data/journal')];
      const got = new Map<string, Uint8Array[]>();
      const all: ShardHistory[] = [];
      for (const [k, root] of roots.entries()) {
        for (const h of await readAll(root, 2 * N)) {
          all.push(h);
          // Per-node: a's journal keeps the even old shards, so new shards s and s+8 with s even.
          if (layout === 'per-node') expect((h.shard % N) % 2).toBe(k);
          for (const r of h.records) {
            const name = decodeJournalRecord(r.payload).iri;
            expect(shardOf(name, 2 * N)).toBe(h.shard);
            expect(shardOf(name, 2 * N) % N).toBe(shardOf(name, N));
            expect(r.epoch).toBeGreaterThan(5n << 16n);
            got.set(name, [...(got.get(name) ?? []), r.payload]);
          }
        }
      }
      expect(checkHistory(all).problems).toEqual([]);
      expect(got.size).toBe(expected.size);
      for (const [name, list] of expected) expect(got.get(name)).toEqual(list);
      // Some actors moved up to s + N, some stayed.
      expect(all.some((h) => h.shard >= N && h.records.length > 0)).toBe(true);
      expect(all.some((h) => h.shard < N && h.records.length > 0)).toBe(true);

      const meta = await readClusterMeta(out);
      expect(meta.shardCount).toBe(2 * N);
      for (const id of ['a', 'b']) {
        const cfg = JSON.parse(await readFile(join(out, 'nodes', id, 'node.json'), 'utf8'));
        expect(cfg.meta.shardCount).toBe(2 * N);
        expect((await readClusterMeta(join(out, 'nodes', id, 'data'))).shardCount).toBe(2 * N);
        expect(existsSync(join(out, 'nodes', id, 'cert.pem'))).toBe(true);
      }
      expect(existsSync(join(out, 'ca-key.pem'))).toBe(true);
      expect(existsSync(join(out, '.reshard-old'))).toBe(false);
      const state = await loadAuthorityState(join(out, 'nodes/a/data'), meta);
      expect(state?.epochCeiling).toBe(maxEpoch);
      expect(BigInt(s.epochCeiling)).toBe(maxEpoch);
      expect(state?.viewCeiling).toBe(7);
      if (layout === 'per-node') {
        for (let t = 0; t < 2 * N; t++) expect(state?.homes.get(t)).toBe((t % N) % 2 === 0 ? 'a' : 'b');
      }
      // A new store keeps the highest epoch of the records it holds: an append of an older epoch
      // (an owner of the old layout) is fenced.
      const busiest = all.reduce((x, y) => (y.records.length > x.records.length ? y : x));
      // Epochs never go back within a shard: its last record has the highest.
      const top = busiest.records.at(-1)?.epoch as bigint;
      const root = roots[layout === 'shared' ? 0 : (busiest.shard % N) % 2] as string;
      const stores = await openJournalShards(root, { fsync: 'never' });
      try {
        const log = (await stores.shard(busiest.shard)) as LogStorage;
        expect(log.highestEpoch).toBe(top);
        const stale = await refusal(log.append([macrostep(iri(0), 99)], { epoch: top - 1n }));
        expect(stale.code).toBe('PLX_STORAGE_FENCED');
      } finally {
        await stores.close();
      }
    });
  }

  it('refuses a damaged shard file and removes what it wrote', async () => {
    const { dir } = await stoppedCluster('shared');
    // A byte in the middle of shard 3's segment: its checksum no longer matches.
    const d = shardDir(join(dir, 'shared'), 3);
    const files = await Promise.all((await readdir(d)).map(async (f) => ({ f, size: (await stat(join(d, f))).size })));
    const biggest = files.sort((a, b) => b.size - a.size)[0] as { f: string; size: number };
    expect(biggest.size).toBeGreaterThan(100);
    const file = join(d, biggest.f);
    const bytes = await readFile(file);
    const at = Math.floor(bytes.length / 3);
    bytes[at] = (bytes[at] as number) ^ 0xff;
    await writeFile(file, bytes);
    const before = await tree(dir);
    const out = join(await tmp(), 'next');
    const e = await refusal(reshardCluster({ dir, out }));
    expect(e.code).toBe('PLX_CLUSTER_RESHARD_DAMAGED');
    expect(existsSync(out)).toBe(false);
    expect(await tree(dir)).toEqual(before);
  });

  it('refuses a record in a shard its IRI does not hash to', async () => {
    const { dir } = await stoppedCluster('shared');
    const wrong = iri(0);
    const s = (shardOf(wrong, N) + 1) % N;
    const log = await openLog(shardDir(join(dir, 'shared'), s), { fsync: 'never' });
    await log.append([macrostep(wrong, 9)], { epoch: 6n << 16n });
    await log.close();
    const out = join(await tmp(), 'next');
    const e = await refusal(reshardCluster({ dir, out }));
    expect(e.code).toBe('PLX_CLUSTER_RESHARD_DAMAGED');
    expect(e.details.iri).toBe(wrong);
    expect(existsSync(out)).toBe(false);
  });

  it('refuses a cluster.meta whose shard count is not a power of two', async () => {
    const { dir } = await stoppedCluster('shared');
    const m = JSON.parse(await readFile(join(dir, 'cluster.meta'), 'utf8'));
    await writeFile(join(dir, 'cluster.meta'), JSON.stringify({ ...m, shardCount: 12 }));
    const out = join(await tmp(), 'next');
    const e = await refusal(reshardCluster({ dir, out }));
    expect(e.code).toBe('PLX_CLUSTER_BAD_META');
    expect(e.details.field).toBe('shardCount');
    expect(existsSync(out)).toBe(false);
  });

  it('refuses an out directory that exists, and leaves it as it was', async () => {
    const { dir } = await stoppedCluster('per-node');
    const out = await tmp();
    await writeFile(join(out, 'keep'), 'mine');
    const e = await refusal(reshardCluster({ dir, out }));
    expect(e.code).toBe('PLX_CLUSTER_RESHARD_REFUSED');
    expect(e.details.reason).toBe('out-exists');
    expect(await readdir(out)).toEqual(['keep']);
  });

  it('refuses while a log of a node is held open, and not for a lock a dead process left', async () => {
    const { dir } = await stoppedCluster('per-node');
    // The dead-letter log every node holds open while it runs.
    const dead = await openLog(join(dir, 'nodes/b/data', DEAD_LETTER_LOG), { fsync: 'never' });
    const out = join(await tmp(), 'next');
    try {
      const e = await refusal(reshardCluster({ dir, out }));
      expect(e.code).toBe('PLX_CLUSTER_RESHARD_RUNNING');
      expect(e.details.pid).toBe(process.pid);
      expect(existsSync(out)).toBe(false);
    } finally {
      await dead.close();
    }
    // A crashed node's lock: the process it names has exited.
    const child = spawn(process.execPath, ['-e', '0']);
    const pid = child.pid as number;
    await new Promise((r) => child.once('exit', r));
    await writeFile(join(dir, 'nodes/b/data', DEAD_LETTER_LOG, 'LOCK'), `${pid}\n`);
    const s = await reshardCluster({ dir, out });
    expect(s.actors).toBe(ACTORS);
    expect(existsSync(join(out, 'nodes/b/data', DEAD_LETTER_LOG, 'LOCK'))).toBe(false);
  });
});
