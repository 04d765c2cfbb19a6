// What the membership benchmarks (bench/cluster/*.mjs) share: child processes that print one
// JSON line per event, each tracked by its PID and stopped by it (also on SIGINT and on
// failure), the cluster CA and node certificates written to a temporary directory, and the
// statistics the tables print.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, '../..');
export const dist = (p) => import(resolve(ROOT, 'dist', p));

/** Every child this process started and has not seen exit, by PID. */
const live = new Map();
/** Directories to remove when the process ends. */
const dirs = new Set();

/** Kills every child still running by its PID (SIGKILL, also when stopped) and removes the temporary directories. */
export function killAll() {
  for (const [pid] of live) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs.clear();
}

/** Tracks a process started some other way (etcd), so that `killAll` stops it by its PID. */
export function track(pid, proc) {
  live.set(pid, proc);
  proc.once('exit', () => live.delete(pid));
}

let handlers = false;
/** Installs SIGINT/SIGTERM handlers that stop every child by PID before exiting. */
export function onInterrupt() {
  if (handlers) return;
  handlers = true;
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      killAll();
      process.exit(130);
    });
  }
  process.on('exit', killAll);
}

export function tempDir(prefix) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.add(d);
  return d;
}

export function removeDir(d) {
  rmSync(d, { recursive: true, force: true });
  dirs.delete(d);
}

/**
 * A child process running `script` under node, whose stdout is JSON lines: `lines` holds them
 * in order, `waitFor(pred)` resolves with the first (past or future) line matching.
 */
export class Child {
  constructor(script, args, { name = script } = {}) {
    this.name = name;
    this.lines = [];
    this.waiters = [];
    this.stderr = '';
    this.proc = spawn(process.execPath, [script, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.pid = this.proc.pid;
    live.set(this.pid, this);
    this.exited = new Promise((res) => {
      this.proc.once('exit', (code, signal) => {
        live.delete(this.pid);
        this.exitCode = code;
        this.exitSignal = signal;
        res();
      });
    });
    let buf = '';
    this.proc.stdout.on('data', (c) => {
      buf += c.toString('utf8');
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const text = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (text.trim() === '') continue;
        let line;
        try {
          line = JSON.parse(text);
        } catch {
          line = { ev: 'text', text };
        }
        this.lines.push(line);
        this.onLine?.(line);
        const due = this.waiters.filter((w) => w.pred(line));
        this.waiters = this.waiters.filter((w) => !due.includes(w));
        for (const w of due) w.res(line);
      }
    });
    this.proc.stderr.on('data', (c) => {
      if (this.stderr.length < 200_000) this.stderr += c.toString('utf8');
    });
  }

  /** The first line matching `pred`, already printed or to come; rejects after `timeoutMs` or when the child exits. */
  waitFor(pred, timeoutMs, what = 'a line') {
    const found = this.lines.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((res, rej) => {
      const w = {
        pred,
        res: (l) => {
          clearTimeout(t);
          res(l);
        },
      };
      const t = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        rej(
          new Error(
            `${this.name} (PID ${this.pid}): no ${what} within ${timeoutMs} ms; stderr: ${this.stderr.slice(-2000)}`,
          ),
        );
      }, timeoutMs);
      this.waiters.push(w);
      this.exited.then(() => {
        if (!this.waiters.includes(w)) return;
        this.waiters = this.waiters.filter((x) => x !== w);
        clearTimeout(t);
        rej(
          new Error(
            `${this.name} (PID ${this.pid}) exited (${this.exitCode ?? this.exitSignal}) before ${what}: ${this.stderr.slice(-2000)}`,
          ),
        );
      });
    });
  }

  send(obj) {
    if (live.has(this.pid)) this.proc.stdin.write(`${JSON.stringify(obj)}\n`);
  }

  signal(sig) {
    if (!live.has(this.pid)) return false;
    try {
      process.kill(this.pid, sig);
      return true;
    } catch {
      return false;
    }
  }

  get running() {
    return live.has(this.pid);
  }

  /** SIGKILLs the child by its PID (a stopped one too) and waits for it to exit. */
  async stop() {
    this.signal('SIGKILL');
    await this.exited;
  }
}

/** A cluster CA and node certificates for `ids`, written as `<dir>/ca.pem`, `<dir>/<id>.pem`, `<dir>/<id>.key`. */
export async function writeCertificates(dir, cluster, ids) {
  const { createClusterCa, issueNodeCertificate } = await dist('net/ca.js');
  const ca = await createClusterCa(cluster);
  writeFileSync(join(dir, 'ca.pem'), ca.cert);
  for (const id of ids) {
    const c = await issueNodeCertificate(ca, id);
    writeFileSync(join(dir, `${id}.pem`), c.cert);
    writeFileSync(join(dir, `${id}.key`), c.key, { mode: 0o600 });
  }
}

export function median(xs) {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The `p`th percentile (0..100) by nearest rank. */
export function percentile(xs, p) {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A seeded generator of floats in [0, 1) (mulberry32), for schedules that a seed reproduces. */
export function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Writes one JSON result line to stdout (what a test or bench/run.mjs reads) when `json` is set. */
export function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}
