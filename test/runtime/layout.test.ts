/**
 * SEED-RULE: a single-node runtime shards its journal files by the same `shardOf`
 * (ts/core), so its data directory can become a cluster's without re-hashing.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeJournalRecord } from '../../ts/codec/journal-record.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { shardOf } from '../../ts/core/index.js';
import { LogJournalStorage, Node, openJournal, shardDir } from '../../ts/runtime/index.js';
import { openLog } from '../../ts/storage/index.js';
import { type CounterState, cleanup, counterChart, stateOf, tempDir } from './helpers.js';

afterAll(cleanup);

const SHARDS = 8;
const ACTORS = Array.from({ length: 120 }, (_, i) => `vt:orders/${i * 7919}`);

describe('the single-node journal layout', () => {
  it('puts every actor record in the shard directory shardOf(iri) names, and a cluster-style opener reads them back', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: SHARDS });
    const node = Node.builder(storage).chart('vt:orders/', counterChart()).config({ snapshotEvery: 3 }).build();
    await Promise.all(
      ACTORS.map(async (iri, i) => {
        for (let k = 0; k <= i % 5; k++) await node.send(iri, 'inc', { id: `${iri}-${k}` });
      }),
    );
    await node.stop();
    await storage.close();

    expect(JSON.parse(await readFile(join(dir, 'journal.meta'), 'utf8'))).toEqual({
      format: 'plexus-actor-journal',
      version: 1,
      shardCount: SHARDS,
      hash: 'fnv1a64-v1',
    });
    const names = (await readdir(join(dir, 'shards'))).sort();
    const used = [...new Set(ACTORS.map((a) => shardOf(a, SHARDS)))].sort((a, b) => a - b);
    expect(names).toEqual(used.map((n) => String(n).padStart(7, '0')));

    const seen = new Set<string>();
    for (const n of used) {
      const log = await openLog(shardDir(dir, n));
      for (const rec of await log.read(1n, { maxBytes: Number.POSITIVE_INFINITY })) {
        const d = decodeJournalRecord(rec.payload);
        expect(shardOf(d.iri, SHARDS), `${d.iri} found in shard ${n}`).toBe(n);
        seen.add(d.iri);
      }
      await log.close();
    }
    expect(seen.size).toBe(ACTORS.length);

    // A cluster opens each shard's store by itself (here: the same files, one opener per shard)
    // and routes by the same hash: every actor's history is where it expects it.
    const asCluster = new LogJournalStorage(SHARDS, (n) => openLog(shardDir(dir, n)));
    for (const [i, iri] of ACTORS.entries()) {
      const h = await asCluster.history(iri);
      expect(h.lastSeq, iri).toBe((i % 5) + 1);
    }
    const node2 = Node.builder(asCluster).chart('vt:orders/', counterChart()).build();
    await node2.send(ACTORS[4] as string, 'inc', { id: 'after' });
    expect(stateOf<CounterState>(node2, ACTORS[4] as string).count).toBe(6);
    await node2.stop();
    await asCluster.close();
  });

  it('refuses to open a directory with another shard count (PLX_JOURNAL_LAYOUT)', async () => {
    const dir = await tempDir();
    await (await openJournal(dir, { shardCount: 4 })).close();
    let err: unknown;
    try {
      await openJournal(dir, { shardCount: 8 });
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_JOURNAL_LAYOUT')).toBe(true);
    const again = await openJournal(dir);
    expect(again.shardCount).toBe(4);
    await again.close();
    expect(() => new LogJournalStorage(3, async () => undefined as never)).toThrow(/power of two/);
  });
});
