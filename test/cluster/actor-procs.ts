/** Cluster nodes as real processes (`plexus cluster node --control` from dist/) for tests. */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { initCluster } from '../../ts/cluster/init.js';
import { openJournalShards } from '../../ts/runtime/journal-dir.js';
import { shardDir } from '../../ts/runtime/log-journal.js';
import { openLog } from '../../ts/storage/index.js';
import { freePorts } from '../helpers/ports.js';
import { type Started, startNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

export const CLI = fileURLToPath(new URL('./fixtures/cluster-cli.mjs', import.meta.url));

export { freePorts };

// biome-ignore lint/suspicious/noExplicitAny: JSON lines
export type Line = Record<string, any>;

/**
 * A cluster node started through the shared `startNode` (tracked by PID, stopped by
 * `stopStarted()` whatever the test did), with its JSON control lines parsed as they come.
 */
export class NodeProc {
  readonly proc: Started;
  readonly lines: Line[] = [];
  private q = 0;
  private waiters: { pred: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  exited?: number | null;
  readonly exit: Promise<number | null>;

  constructor(
    readonly id: string,
    readonly config: string,
  ) {
    this.proc = startNode(CLI, ['node', '--config', config, '--control']);
    let buf = '';
    this.child.stdout?.on('data', (d: string | Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const text = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let l: Line;
        try {
          l = JSON.parse(text) as Line;
        } catch {
          continue;
        }
        this.lines.push(l);
        this.waiters = this.waiters.filter((w) => {
          if (!w.pred(l)) return true;
          w.resolve(l);
          return false;
        });
      }
    });
    this.exit = this.proc.exited.then(({ code }) => {
      this.exited = code;
      return code;
    });
  }

  get child(): ChildProcess {
    return this.proc.child;
  }

  get stderr(): string {
    return this.proc.stderr();
  }

  wait(pred: (l: Line) => boolean, what: string, ms = 15_000): Promise<Line> {
    const found = this.lines.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error(`node ${this.id}: timed out waiting for ${what}; stderr: ${this.stderr.slice(-500)}`)),
        ms,
      );
      this.waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(t);
          resolve(l);
        },
      });
    });
  }

  cmd(c: Line, ms = 15_000): Promise<Line> {
    const q = ++this.q;
    this.child.stdin?.write(`${JSON.stringify({ ...c, q })}\n`);
    return this.wait((l) => l.q === q, `reply to ${c.cmd}`, ms);
  }

  /** Writes a command without waiting (e.g. to a stopped process). */
  queue(c: Line): number {
    const q = ++this.q;
    this.child.stdin?.write(`${JSON.stringify({ ...c, q })}\n`);
    return q;
  }

  /** Sends `sig` to its PID while it runs (SIGSTOP, SIGCONT, SIGKILL, ...). */
  signal(sig: NodeJS.Signals): void {
    if (this.proc.running()) process.kill(this.proc.pid, sig);
  }

  /** Resumes it if stopped, then SIGTERM, SIGKILL after 30 s; resolves once it has exited. */
  async stop(): Promise<void> {
    this.signal('SIGCONT');
    await this.proc.stop('SIGTERM', 30_000);
    await this.exit;
  }
}

/** Rewrites fields of a node's config file. */
export async function patchConfig(file: string, patch: Line): Promise<void> {
  const cfg = JSON.parse(await readFile(file, 'utf8')) as Line;
  await writeFile(file, JSON.stringify({ ...cfg, ...patch }, null, 2));
}

export function dataDirOf(clusterDir: string, node: string): string {
  return join(clusterDir, 'nodes', node, 'data');
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The node processes and the cluster directory of one test file; `cleanup` (in afterAll) stops and removes them. */
export class ProcRun {
  readonly procs: NodeProc[] = [];
  dir = '';

  async cleanup(): Promise<void> {
    for (const p of this.procs) await p.stop();
    await stopStarted();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

type InitOptions = Parameters<typeof initCluster>[0];

/**
 * The files of a cluster `c1` in a fresh temporary directory (kept in `run.dir`), with the
 * timings the process tests share unless `opts` overrides them.
 */
export async function initProcCluster(
  run: ProcRun,
  prefix: string,
  opts: { shards: number; nodes: string[] } & Partial<Omit<InitOptions, 'dir' | 'ports'>>,
): Promise<Map<string, string>> {
  run.dir = await mkdtemp(join(tmpdir(), prefix));
  return initCluster({
    id: 'c1',
    lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
    detector: { suspectAfterMs: 600, failedAfterMs: 1500 },
    heartbeatEveryMs: 100,
    cluster: { deliveryDeadlineMs: 30_000, retryBackoffMs: 50 },
    ...opts,
    dir: run.dir,
    ports: await freePorts(opts.nodes.length),
  });
}

/** `p`'s status once it lists a lease of every one of `shards` shards; fails after `timeoutMs`. */
export async function statusWithAllLeases(p: NodeProc, shards: number, timeoutMs = 10_000): Promise<Line> {
  return until(
    async () => {
      const st: Line = await p.cmd({ cmd: 'status' });
      return st.leases.length >= shards && st;
    },
    { timeoutMs, what: `a status of node ${p.id} with a lease of each of ${shards} shards` },
  );
}

/**
 * The checked history of `shards` in `node`'s journal (read without an fsync); a shard the
 * store holds no journal of is skipped, or refused with `required`.
 */
export async function journalHistory(
  clusterDir: string,
  node: string,
  shards: readonly number[],
  required = false,
): Promise<ReturnType<typeof checkHistory>> {
  const stores = await openJournalShards(join(dataDirOf(clusterDir, node), 'journal'), { fsync: 'never' });
  try {
    const histories: ShardHistory[] = [];
    for (const s of shards) {
      const log = await stores.shard(s);
      if (log !== undefined) histories.push(await readShard(s, log));
      else if (required) throw new Error(`node ${node} holds no journal of shard ${s}`);
    }
    return checkHistory(histories);
  } finally {
    await stores.close();
  }
}

/** The checked history of every shard in a `shared` journal layout (`<clusterDir>/shared`). */
export async function sharedJournalHistory(
  clusterDir: string,
  shardCount: number,
): Promise<ReturnType<typeof checkHistory>> {
  const histories: ShardHistory[] = [];
  for (let s = 0; s < shardCount; s++) {
    const d = shardDir(join(clusterDir, 'shared'), s);
    if (!existsSync(d)) continue;
    const log = await openLog(d);
    try {
      histories.push(await readShard(s, log));
    } finally {
      await log.close();
    }
  }
  return checkHistory(histories);
}
