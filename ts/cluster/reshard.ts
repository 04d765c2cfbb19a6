/**
 * Offline resharding (`plexus cluster reshard <dir> <out>`): doubles the shard count of a
 * stopped cluster made by `plexus cluster init` (static membership, per-node or shared
 * journal) into a new cluster directory, leaving `<dir>` as it was. docs/cluster.md,
 * "Offline resharding".
 *
 * - Running nodes: every node holds its logs open while it runs, and an open log keeps a
 *   `LOCK` file with the process id in its directory (ts/storage/files.ts). A `LOCK` whose
 *   process is alive and is a Node.js process (on Linux, `/proc/<pid>/cmdline`) refuses the
 *   reshard (PLX_CLUSTER_RESHARD_RUNNING); one a crashed node left behind (a dead process) does not.
 * - Re-hash: with a power-of-two count N, an actor of shard s lands in shard s or s + N of 2N
 *   (FNV-1a 64 mod 2N); a record found elsewhere means the journal is damaged.
 * - Epochs: every record keeps the epoch it was written with, and the new authority.state
 *   keeps an epoch ceiling at or above every epoch of the old cluster (its ceiling and every
 *   record's), so every lease the new cluster grants is above every old one.
 * - Verification: the new stores are read back and each actor's journal compared with the
 *   old one (same records, same order, by a digest per actor); a difference refuses the
 *   reshard (PLX_CLUSTER_RESHARD_DAMAGED) and `<out>` is removed.
 * The old journals are read from a copy inside `<out>` (opening a log repairs a torn tail; the
 * copy takes the repair), removed once the new stores are written. Once verified, every file
 * and directory of `<out>` is flushed (fsync) before the summary is returned.
 */
import { createHash, type Hash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { cp, mkdir, open, readdir, readFile, rm } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { encodeClusterMeta, META_FILE } from '../codec/cluster-meta.js';
import { decodeJournalRecord } from '../codec/journal-record.js';
import { MAX_SHARDS, shardOf } from '../core/index.js';
import { openJournalShards } from '../runtime/journal-dir.js';
import { openJournal, shardDir } from '../runtime/log-journal.js';
import { openLog } from '../storage/index.js';
import { MultiplexedLog } from '../storage/multiplexed-log.js';
import type { LogStorage } from '../storage/types.js';
import type { AuthorityDurable } from './authority.js';
import { AUTHORITY_STATE_FILE, loadAuthorityState, saveAuthorityState } from './authority-state.js';
import { writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { readShard } from './history.js';
import { type ClusterMeta, clusterMeta, readClusterMeta } from './meta.js';

export interface ReshardOptions {
  /** The stopped cluster's directory (as `plexus cluster init` wrote it). */
  readonly dir: string;
  /** Where the new cluster is written; must not exist. */
  readonly out: string;
  /** Called after each old shard is copied: shards done, shards in all. */
  readonly onProgress?: (done: number, total: number) => void;
  /** Milliseconds for the summary's `ms` (default `performance.now`). */
  readonly now?: () => number;
}

export interface ReshardSummary {
  readonly cluster: string;
  readonly layout: 'per-node' | 'shared';
  readonly actors: number;
  readonly entries: number;
  readonly shardsBefore: number;
  readonly shardsAfter: number;
  /** Payload bytes of the records copied. */
  readonly bytes: number;
  /** The epoch ceiling written to the new authority.state (decimal). */
  readonly epochCeiling: string;
  readonly ms: number;
}

interface NodeEntry {
  readonly id: string;
  readonly file: string;
  // biome-ignore lint/suspicious/noExplicitAny: the node config as JSON, rewritten field by field
  readonly cfg: Record<string, any>;
  readonly dataDir: string;
}

const LOCK = 'LOCK';

function refused(reason: string, message: string, details: Record<string, unknown> = {}) {
  return clusterError(ClusterCode.RESHARD_REFUSED, message, { reason, ...details });
}

function damaged(message: string, details: Record<string, unknown>, cause?: unknown) {
  return clusterError(ClusterCode.RESHARD_DAMAGED, message, details, cause);
}

/** Whether `pid` is a live Node.js process (where /proc cannot tell, a live process counts). */
export function isLiveNodeProcess(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return !existsSync('/proc/self');
  }
  const argv0 = cmdline.split('\0')[0] ?? '';
  return /node|plexus/i.test(basename(argv0));
}

async function lockFiles(dir: string, found: string[] = []): Promise<string[]> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return found;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await lockFiles(p, found);
    else if (e.name === LOCK) found.push(p);
  }
  return found;
}

/** The logs of `dirs` held open by a live process: each `LOCK` file with its pid. */
export async function runningLocks(dirs: readonly string[]): Promise<{ lock: string; pid: number }[]> {
  const out: { lock: string; pid: number }[] = [];
  for (const d of dirs) {
    for (const lock of await lockFiles(d)) {
      const pid = Number.parseInt(await readFile(lock, 'utf8').catch(() => ''), 10);
      if (Number.isInteger(pid) && pid > 0 && isLiveNodeProcess(pid)) out.push({ lock, pid });
    }
  }
  return out;
}

async function readNodes(dir: string): Promise<NodeEntry[]> {
  const nodesDir = join(dir, 'nodes');
  let ids: string[];
  try {
    ids = (await readdir(nodesDir)).sort();
  } catch (e) {
    throw clusterError(
      ClusterCode.BAD_PATH,
      `${nodesDir} cannot be read: is ${dir} a cluster directory?`,
      {
        path: nodesDir,
      },
      e,
    );
  }
  const nodes: NodeEntry[] = [];
  for (const id of ids) {
    const file = join(nodesDir, id, 'node.json');
    if (!existsSync(file)) continue;
    let cfg: Record<string, unknown>;
    try {
      cfg = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    } catch (e) {
      throw clusterError(ClusterCode.BAD_CONFIG, `${file} is not a JSON node config`, { field: 'file', file }, e);
    }
    nodes.push({ id, file, cfg, dataDir: resolve(dirname(file), String(cfg.dataDir ?? 'data')) });
  }
  if (nodes.length === 0) throw refused('no-nodes', `${dir} holds no node config under nodes/`, { dir });
  return nodes;
}

/** Flushes every file and directory under `dir` to disk, the directory itself last (what `cp` wrote). */
async function syncTree(dir: string): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await syncTree(p);
    else if (e.isFile()) {
      const fh = await open(p, 'r');
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
    }
  }
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Where one old journal is read from and its new stores written. */
interface JournalPlace {
  /** The node whose store it is (per-node), or the store host (shared). */
  readonly node: string;
  readonly from: string;
  readonly to: string;
}

/** The new stores of one journal: `shard(n)` opens (once) the store of new shard n. */
async function newStores(
  layout: 'per-node' | 'shared',
  dir: string,
  shardCount: number,
): Promise<{ shard(n: number): Promise<LogStorage>; close(): Promise<void> }> {
  if (layout === 'per-node') {
    const j = await openJournal(dir, { shardCount });
    await j.close();
    const nl = await MultiplexedLog.open(join(dir, 'node'), { fsync: 'batch' });
    return { shard: async (n) => nl.shard(n), close: () => nl.close() };
  }
  const open = new Map<number, LogStorage>();
  return {
    shard: async (n) => {
      let l = open.get(n);
      if (l === undefined) {
        const d = shardDir(dir, n);
        await mkdir(d, { recursive: true });
        l = await openLog(d, { fsync: 'batch' });
        open.set(n, l);
      }
      return l;
    },
    close: async () => {
      for (const l of open.values()) await l.close();
      open.clear();
    },
  };
}

function digestOf(map: Map<string, { hash: Hash; n: number }>, iri: string, epoch: bigint, payload: Uint8Array) {
  let d = map.get(iri);
  if (d === undefined) {
    d = { hash: createHash('sha256'), n: 0 };
    map.set(iri, d);
  }
  const head = Buffer.alloc(12);
  head.writeBigUInt64BE(epoch);
  head.writeUInt32BE(payload.length, 8);
  d.hash.update(head);
  d.hash.update(payload);
  d.n++;
}

function iriOf(payload: Uint8Array, where: Record<string, unknown>): string {
  try {
    return decodeJournalRecord(payload).iri;
  } catch (e) {
    throw damaged(`a record of ${JSON.stringify(where)} is not a journal record: ${(e as Error).message}`, where, e);
  }
}

/** Doubles the shard count of the stopped cluster in `o.dir` into `o.out` (module comment). */
export async function reshardCluster(o: ReshardOptions): Promise<ReshardSummary> {
  const now = o.now ?? (() => performance.now());
  const started = now();
  const dir = resolve(o.dir);
  const out = resolve(o.out);
  const meta = await readClusterMeta(dir);
  const n = meta.shardCount;
  if (n * 2 > MAX_SHARDS) {
    throw refused('shard-count', `${dir} has ${n} shards: doubling passes the most a cluster has, ${MAX_SHARDS}`, {
      shardCount: n,
    });
  }
  const next: ClusterMeta = clusterMeta({ ...meta, shardCount: n * 2 });
  const nodes = await readNodes(dir);
  for (const nd of nodes) {
    const kind = (nd.cfg.membership as { kind?: string } | undefined)?.kind ?? 'static';
    if (kind !== 'static') {
      throw refused(
        'membership',
        `node ${nd.id} uses ${kind} membership: offline resharding handles static membership only (the ${kind} authority keeps every shard's epoch outside ${dir})`,
        { node: nd.id, membership: kind },
      );
    }
  }
  const layout: 'per-node' | 'shared' = nodes[0]?.cfg.journal === 'shared' ? 'shared' : 'per-node';
  const first = nodes[0] as NodeEntry;
  const authority = String(first.cfg.authority ?? first.id);
  const storeHost = String(first.cfg.storeHost ?? authority);
  const hostEntry = nodes.find((x) => x.id === storeHost) ?? first;
  const sharedDir =
    layout === 'shared'
      ? hostEntry.cfg.sharedDir !== undefined
        ? resolve(dirname(hostEntry.file), String(hostEntry.cfg.sharedDir))
        : join(hostEntry.dataDir, 'shared')
      : undefined;
  for (const nd of nodes) {
    if (!nd.dataDir.startsWith(`${dir}/`) || (sharedDir !== undefined && !sharedDir.startsWith(`${dir}/`))) {
      throw refused('outside', `node ${nd.id} keeps its data outside ${dir}: reshard copies only what is inside it`, {
        node: nd.id,
        dataDir: nd.dataDir,
      });
    }
  }
  const running = await runningLocks([...nodes.map((x) => x.dataDir), ...(sharedDir ? [sharedDir] : [])]);
  if (running.length > 0) {
    const r = running[0] as { lock: string; pid: number };
    throw clusterError(
      ClusterCode.RESHARD_RUNNING,
      `a node of ${dir} is running: process ${r.pid} holds ${r.lock} open; stop every node before resharding`,
      { pid: r.pid, lock: r.lock, locks: running.length },
    );
  }
  if (existsSync(out)) throw refused('out-exists', `${out} exists: reshard writes a new directory`, { out });
  if (out === dir || out.startsWith(`${dir}/`) || dir.startsWith(`${out}/`)) {
    throw refused('out-inside', `${out} and ${dir} overlap: reshard writes beside the cluster`, { out, dir });
  }
  const stateDir = (nodes.find((x) => x.id === authority) ?? first).dataDir;
  const oldState: AuthorityDurable | undefined = await loadAuthorityState(stateDir, meta);

  const places: JournalPlace[] =
    layout === 'shared'
      ? [{ node: storeHost, from: sharedDir as string, to: join(out, relative(dir, sharedDir as string)) }]
      : nodes.map((x) => ({
          node: x.id,
          from: join(x.dataDir, 'journal'),
          to: join(out, relative(dir, join(x.dataDir, 'journal'))),
        }));
  const skip = new Set(places.map((p) => p.from));
  const staging = join(out, '.reshard-old');
  try {
    // Everything but the journals, every cluster.meta and authority.state (rewritten below) and lock files.
    await cp(dir, out, {
      recursive: true,
      filter: (src) =>
        !skip.has(src) &&
        basename(src) !== LOCK &&
        basename(src) !== META_FILE &&
        basename(src) !== AUTHORITY_STATE_FILE,
    });
    let actors = 0;
    let entries = 0;
    let bytes = 0;
    let maxEpoch = 0n;
    const homes = new Map<number, string>();
    const before = new Map<string, { hash: Hash; n: number }>();
    const total = places.length * n;
    let done = 0;
    for (const [i, place] of places.entries()) {
      if (!existsSync(place.from)) {
        done += n;
        o.onProgress?.(done, total);
        continue;
      }
      const copy = join(staging, String(i));
      await cp(place.from, copy, { recursive: true, filter: (src) => basename(src) !== LOCK });
      let old: Awaited<ReturnType<typeof openJournalShards>>;
      try {
        old = await openJournalShards(copy, { fsync: 'never' });
      } catch (e) {
        throw damaged(
          `the journal in ${place.from} cannot be opened: ${(e as Error).message}`,
          { path: place.from },
          e,
        );
      }
      const fresh = await newStores(layout, place.to, n * 2);
      try {
        for (let s = 0; s < n; s++) {
          let log: LogStorage | undefined;
          let records: Awaited<ReturnType<typeof readShard>>['records'];
          try {
            log = await old.shard(s);
            records = log === undefined ? [] : (await readShard(s, log)).records;
          } catch (e) {
            throw damaged(
              `shard ${s} of the journal in ${place.from} cannot be read: ${(e as Error).message}`,
              { path: place.from, shard: s },
              e,
            );
          }
          if (records.length > 0 && layout === 'per-node') {
            homes.set(s, place.node);
            homes.set(s + n, place.node);
          }
          // Runs of records of one epoch and one new shard, appended in order.
          let run: { to: number; epoch: bigint; payloads: Uint8Array[] } | undefined;
          const flush = async () => {
            if (run === undefined || run.payloads.length === 0) return;
            await (await fresh.shard(run.to)).append(run.payloads, { epoch: run.epoch });
            run = undefined;
          };
          for (const r of records) {
            const iri = iriOf(r.payload, { path: place.from, shard: s, position: r.position.toString() });
            const to = shardOf(iri, n * 2);
            if (to !== s && to !== s + n) {
              throw damaged(`${iri} is in shard ${s} of ${place.from}, but it hashes to shard ${to % n} of ${n}`, {
                path: place.from,
                shard: s,
                iri,
              });
            }
            if (!before.has(iri)) actors++;
            digestOf(before, iri, r.epoch, r.payload);
            entries++;
            bytes += r.payload.length;
            if (r.epoch > maxEpoch) maxEpoch = r.epoch;
            if (run !== undefined && (run.to !== to || run.epoch !== r.epoch || run.payloads.length >= 1024)) {
              await flush();
            }
            if (run === undefined) run = { to, epoch: r.epoch, payloads: [] };
            run.payloads.push(r.payload);
          }
          await flush();
          o.onProgress?.(++done, total);
        }
      } finally {
        await old.close();
        await fresh.close();
      }
    }
    await rm(staging, { recursive: true, force: true });

    // Verification: every actor's journal, read back from the new stores, is the old one.
    const after = new Map<string, { hash: Hash; n: number }>();
    for (const place of places) {
      if (!existsSync(place.to)) continue;
      const stores = await openJournalShards(place.to, { fsync: 'never' });
      try {
        for (let t = 0; t < n * 2; t++) {
          const log = await stores.shard(t);
          if (log === undefined) continue;
          for (const r of (await readShard(t, log)).records) {
            const iri = iriOf(r.payload, { path: place.to, shard: t });
            if (shardOf(iri, n * 2) !== t) {
              throw damaged(`${iri} was written to shard ${t} of ${place.to}, not its own`, {
                path: place.to,
                shard: t,
                iri,
              });
            }
            digestOf(after, iri, r.epoch, r.payload);
          }
        }
      } finally {
        await stores.close();
      }
    }
    const digests = (m: Map<string, { hash: Hash; n: number }>) =>
      new Map([...m].map(([k, v]) => [k, `${v.n}:${v.hash.digest('hex')}`]));
    const a = digests(before);
    const b = digests(after);
    for (const [iri, d] of a) {
      if (b.get(iri) !== d) {
        throw damaged(`the journal of ${iri} differs after the copy (${d} before, ${b.get(iri) ?? 'none'} after)`, {
          iri,
        });
      }
    }
    if (b.size !== a.size) throw damaged(`${b.size} actors after the copy, ${a.size} before`, { actors: b.size });

    // Metadata: cluster.meta (the directory's and each data directory's), node configs, authority.state.
    const metaText = encodeClusterMeta(next);
    await writeFileDurably(join(out, META_FILE), metaText);
    for (const nd of nodes) {
      const data = join(out, relative(dir, nd.dataDir));
      await mkdir(data, { recursive: true });
      await writeFileDurably(join(data, META_FILE), metaText);
      const file = join(out, relative(dir, nd.file));
      await writeFileDurably(file, `${JSON.stringify({ ...nd.cfg, meta: next }, null, 2)}\n`);
    }
    for (const [s, node] of oldState?.homes ?? []) {
      if (!homes.has(s)) {
        homes.set(s, node);
        homes.set(s + n, node);
      }
    }
    const ceiling = (oldState?.epochCeiling ?? 0n) > maxEpoch ? (oldState?.epochCeiling as bigint) : maxEpoch;
    await saveAuthorityState(join(out, relative(dir, stateDir)), next, {
      epochCeiling: ceiling,
      viewCeiling: oldState?.viewCeiling ?? 0,
      homes: layout === 'per-node' ? homes : new Map(),
    });
    await syncTree(out);
    const parent = await open(dirname(out), 'r');
    try {
      await parent.sync();
    } finally {
      await parent.close();
    }
    return {
      cluster: meta.id,
      layout,
      actors,
      entries,
      shardsBefore: n,
      shardsAfter: n * 2,
      bytes,
      epochCeiling: ceiling.toString(),
      ms: Math.round(now() - started),
    };
  } catch (e) {
    await rm(out, { recursive: true, force: true });
    throw e;
  }
}
