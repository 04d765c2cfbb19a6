/**
 * Child processes in tests: what a user runs, built in `dist/` (`npm test` builds first), or a
 * test fixture script that imports from `dist/`. Every process started here is tracked by its
 * PID and stopped by `stopStarted()` (call it in `afterEach`/`afterAll`), so that a failing
 * test leaves nothing running.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { ROOT } from './paths.js';
import { StopWaiting, until } from './until.js';

/** The build output the child processes run. */
export const DIST = join(ROOT, 'dist');

/** The `plexus` command as installed (package.json "bin"). */
export const PLEXUS_BIN = join(DIST, 'cli/main.js');

/** Whether `npm run build` has produced `dist/` (suites that start processes skip without it). */
export const built = existsSync(PLEXUS_BIN);

/** A file under `dist/` (as `cli/commands/chronacta.js`); fails naming the build when it is missing. */
export function distFile(rel: string): string {
  const p = join(DIST, rel);
  if (!existsSync(p)) throw new Error(`${p} not found: build plexus first (npm run build)`);
  return p;
}

export interface StartOptions {
  /** Arguments for node itself, before the script (`--max-old-space-size=64`). */
  readonly nodeArgs?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** Text written to stdin, which is then closed; without it stdin stays open as a pipe. */
  readonly input?: string;
  /**
   * A command that node runs under, given as its first words, node and its arguments
   * following: `['/bin/sh', '-c', 'ulimit -n 64 && exec "$0" "$@"']`. It must `exec` node, so
   * that the PID tracked (and stopped) is node's.
   */
  readonly under?: readonly string[];
}

export interface RunOptions extends StartOptions {
  /** `runNode` only: SIGKILL the process (by PID) if it has not ended by then; `signal` then says so. */
  readonly timeoutMs?: number;
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A started process, its output so far, and the ways to wait for it and to stop it. */
export interface Started {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly exited: Promise<Exit>;
  /** Resolves once it has exited and its stdout and stderr are closed: all it wrote is in. */
  readonly ended: Promise<Exit>;
  stdout(): string;
  stderr(): string;
  /** Whether it still runs (neither exited nor ended by a signal). */
  running(): boolean;
  /** Resolves with the first stdout line that `match` accepts (a regexp or a predicate). */
  line(match: RegExp | ((line: string) => boolean), opts?: { timeoutMs?: number; what?: string }): Promise<string>;
  /** Sends `signal` (default SIGTERM) to its PID, then SIGKILL after `graceMs`; resolves on exit. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<Exit>;
}

const started = new Set<Started>();

/**
 * Starts `node <script> ...args`: `script` is a path under `dist/` (as `cli/main.js`) or an
 * absolute path (a fixture under `test/` that imports `dist/`). The process is tracked until it
 * exits.
 */
export function startNode(script: string, args: readonly string[] = [], opts: StartOptions = {}): Started {
  const file = isAbsolute(script) ? script : distFile(script);
  const argv = [...(opts.nodeArgs ?? []), file, ...args];
  const [cmd, ...pre] = opts.under !== undefined && opts.under.length > 0 ? opts.under : [process.execPath];
  const words = opts.under !== undefined && opts.under.length > 0 ? [...pre, process.execPath, ...argv] : argv;
  const child = spawn(cmd as string, words, {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
    cwd: opts.cwd,
  });
  if (child.pid === undefined) throw new Error(`could not start node ${file}`);
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  child.stdin?.on('error', () => undefined);
  if (opts.input !== undefined) child.stdin?.end(opts.input);
  const exited = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  // 'exit' can come before the last 'data' of the pipes: `ended` waits for them to close.
  const ended = exited.then(async (e) => {
    await Promise.all(
      [child.stdout, child.stderr].map(
        (st) => new Promise<void>((r) => (st === null || st.closed ? r() : st.once('close', () => r()))),
      ),
    );
    return e;
  });
  const pid = child.pid;
  const running = () => child.exitCode === null && child.signalCode === null;
  const p: Started = {
    child,
    pid,
    exited,
    ended,
    stdout: () => out,
    stderr: () => err,
    running,
    async line(match, o = {}) {
      const test = typeof match === 'function' ? match : (l: string) => match.test(l);
      return until(
        () => {
          const found = out.split('\n').slice(0, -1).find(test);
          if (found !== undefined) return found;
          if (!running()) throw new StopWaiting(`exited (${child.exitCode ?? child.signalCode}): ${out}${err}`);
          return undefined;
        },
        { timeoutMs: o.timeoutMs ?? 20_000, what: o.what ?? `a line matching ${String(match)} from pid ${pid}` },
      );
    },
    async stop(signal = 'SIGTERM', graceMs = 5_000) {
      if (running()) {
        try {
          process.kill(pid, signal);
        } catch {
          // already gone
        }
        const t = setTimeout(() => {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }, graceMs);
        await exited;
        clearTimeout(t);
      }
      return exited;
    },
  };
  started.add(p);
  void exited.then(() => started.delete(p));
  return p;
}

/** `node dist/cli/main.js ...args`: the plexus command as a user runs it. */
export function startPlexus(args: readonly string[], opts: StartOptions = {}): Started {
  return startNode('cli/main.js', args, opts);
}

/** How a process run to its end ended, and all it wrote. */
export type Ran = Exit & { readonly stdout: string; readonly stderr: string };

/** Runs a script to its end (see `startNode`); resolves with its exit and output, never rejects. */
export async function runNode(script: string, args: readonly string[] = [], opts: RunOptions = {}): Promise<Ran> {
  const p = startNode(script, args, { ...opts, input: opts.input ?? '' });
  const t =
    opts.timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          if (p.running()) process.kill(p.pid, 'SIGKILL');
        }, opts.timeoutMs);
  const e = await p.ended;
  clearTimeout(t);
  return { ...e, stdout: p.stdout(), stderr: p.stderr() };
}

/** `plexus ...args` to its end. */
export function runPlexus(args: readonly string[], opts: RunOptions = {}): Promise<Ran> {
  return runNode('cli/main.js', args, opts);
}

/** The processes started here that still run. */
export function stillRunning(): readonly Started[] {
  return [...started].filter((p) => p.running());
}

/** Stops every process started here that still runs, by PID (SIGKILL: teardown does not wait). */
export async function stopStarted(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  await Promise.all([...started].map((p) => p.stop(signal)));
}
