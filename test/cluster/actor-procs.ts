/** Cluster nodes as real processes (`plexus cluster node --control` from dist/) for tests. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('./fixtures/cluster-cli.mjs', import.meta.url));

export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<ReturnType<typeof createServer>>((res) => {
          const s = createServer();
          s.listen(0, '127.0.0.1', () => res(s));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

// biome-ignore lint/suspicious/noExplicitAny: JSON lines
export type Line = Record<string, any>;

export class NodeProc {
  readonly child: ChildProcess;
  readonly lines: Line[] = [];
  private q = 0;
  private waiters: { pred: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  stderr = '';
  exited?: number | null;
  readonly exit: Promise<number | null>;

  constructor(
    readonly id: string,
    readonly config: string,
  ) {
    this.child = spawn(process.execPath, [CLI, 'node', '--config', config, '--control'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let buf = '';
    this.child.stdout?.on('data', (d: Buffer) => {
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
    this.child.stderr?.on('data', (d: Buffer) => {
      this.stderr += d.toString();
    });
    this.exit = new Promise((r) =>
      this.child.on('exit', (code) => {
        this.exited = code;
        r(code);
      }),
    );
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

  signal(sig: NodeJS.Signals): void {
    if (this.exited === undefined && this.child.pid !== undefined) process.kill(this.child.pid, sig);
  }

  async stop(): Promise<void> {
    if (this.exited !== undefined) return;
    this.signal('SIGCONT');
    this.signal('SIGTERM');
    const t = setTimeout(() => this.signal('SIGKILL'), 30_000);
    await this.exit;
    clearTimeout(t);
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
