// Child processes of the benchmark suites: each runs in its own process group, which is
// killed when it ends (nothing it started stays behind), when it runs past its time limit,
// and when the bench exits or is interrupted (the suites call killGroups from their
// SIGINT/SIGTERM handlers).
import { spawn } from 'node:child_process';

/** Process groups still running. */
export const groups = new Set();
let exitHook = false;

export function killGroup(pid, signal = 'SIGKILL') {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group has ended already
  }
}

export function killGroups() {
  for (const pid of groups) killGroup(pid);
  groups.clear();
}

/** Registers a child's process group (and, once, the exit hook that kills what is left). */
export function track(pid) {
  if (!exitHook) {
    exitHook = true;
    process.once('exit', killGroups);
  }
  if (pid !== undefined) groups.add(pid);
}

/**
 * Runs a command in its own process group; resolves with its exit code and output (and
 * whether it timed out). The whole group is killed once the command ends or after
 * `timeoutMs`.
 */
export function run(cmd, args, { cwd, timeoutMs = 120_000, env } = {}) {
  return new Promise((resolvePromise) => {
    const child = spawn(cmd, args, { cwd, env: env ?? process.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (c) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c) => {
      stderr += c;
    });
    track(child.pid);
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) killGroup(child.pid);
    }, timeoutMs);
    const finish = (code, error) => {
      clearTimeout(timer);
      if (child.pid !== undefined) {
        killGroup(child.pid);
        groups.delete(child.pid);
      }
      resolvePromise({ code, stdout, stderr: error ? `${stderr}${error.message}\n` : stderr, timedOut });
    };
    child.on('error', (e) => finish(-1, e));
    child.on('close', (code) => finish(code ?? -1));
  });
}

export function median(xs) {
  const s = Float64Array.from(xs).sort();
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * Starts a long-running command in its own process group; `started` resolves once `ready`
 * matches its output (with the match) and rejects when it exits or `timeoutMs` passes
 * first. `stop()` ends the group: SIGTERM, then SIGKILL.
 */
export function startDaemon(cmd, args, ready, { cwd, timeoutMs = 30_000 } = {}) {
  const child = spawn(cmd, args, { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  track(child.pid);
  let out = '';
  let exited = false;
  const closed = new Promise((r) => child.on('close', r));
  child.on('close', () => {
    exited = true;
  });
  const stop = async () => {
    if (child.pid === undefined) return;
    if (!exited) {
      killGroup(child.pid, 'SIGTERM');
      await Promise.race([closed, new Promise((r) => setTimeout(r, 5000))]);
    }
    killGroup(child.pid);
    groups.delete(child.pid);
  };
  const started = new Promise((resolvePromise, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`not ready after ${timeoutMs} ms: ${out.slice(-1500)}`)),
      timeoutMs,
    );
    let seen = false;
    const onData = (c) => {
      out = (out + c).slice(-65536);
      if (seen) return;
      const m = ready.exec(out);
      if (m) {
        seen = true;
        clearTimeout(timer);
        resolvePromise(m);
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', onData);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (!seen) reject(new Error(`exited (${code}) before it was ready: ${out.slice(-1500)}`));
    });
  });
  // A member killed later must not leave an unhandled rejection behind.
  started.catch(() => undefined);
  return { pid: child.pid, started, stop, output: () => out };
}
