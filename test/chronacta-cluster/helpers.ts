/** What the `serve --cluster` process tests share: free ports, polling, and running the CLI. */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { freePort } from '../helpers/ports.js';
import { runPlexus, startPlexus } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

export const ROOT = resolve(import.meta.dirname, '../..');
export const MAIN = join(ROOT, 'dist/cli/main.js');

/** A loopback port free at the moment of asking, below the ephemeral range (test/helpers/ports.ts). */
export { freePort };

/** Runs `plexus chronacta ...args`; resolves with its exit code and output (never rejects). */
export async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await runPlexus(['chronacta', ...args]);
  // A process ended by a signal has no exit code: null, as the caller has always been given.
  return { code: r.code as number, stdout: r.stdout, stderr: r.stderr };
}

/**
 * A new root directory and `plexus chronacta cluster init` of three members in it (node-1..3):
 * `ports` holds 6 + `extraPorts` distinct free ports, the first three the members' gRPC
 * (advertise) ports, the next three their Raft ports, the rest for the test.
 */
export async function initCluster(
  prefix: string,
  extraPorts = 0,
): Promise<{ root: string; ports: number[]; init: Awaited<ReturnType<typeof cli>> }> {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const ports: number[] = [];
  while (ports.length < 6 + extraPorts) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const adv = ports.slice(0, 3).map((p) => `127.0.0.1:${p}`);
  const raft = ports.slice(3, 6).map((p) => `127.0.0.1:${p}`);
  const init = await cli(
    'cluster',
    'init',
    '--members',
    '3',
    '--root',
    root,
    '--advertise',
    adv.join(','),
    '--raft',
    raft.join(','),
  );
  return { root, ports, init };
}

/**
 * `plexus chronacta cluster init` of one member in `root` (node-1) on two distinct free ports:
 * its gRPC (advertise) port and its Raft port.
 */
export async function initOneMember(
  root: string,
): Promise<{ data: string; grpcPort: number; raftPort: number; init: Awaited<ReturnType<typeof cli>> }> {
  const grpcPort = await freePort();
  let raftPort = await freePort();
  while (raftPort === grpcPort) raftPort = await freePort();
  const init = await cli(
    'cluster',
    'init',
    '--members',
    '1',
    '--root',
    root,
    '--advertise',
    `127.0.0.1:${grpcPort}`,
    '--raft',
    `127.0.0.1:${raftPort}`,
  );
  return { data: join(root, 'node-1'), grpcPort, raftPort, init };
}

/** The process has not exited (nor been ended by a signal). */
export function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/**
 * Starts `node dist/cli/main.js chronacta serve --cluster --data DIR --metrics-port 0 ...flags`
 * through the shared `startPlexus` (tracked by PID; `stopStarted()` stops whatever is left) and
 * resolves once it prints its "serving" line. The child is added to `spawned` (so the caller can
 * stop it by PID); one that does not start is SIGKILLed by its PID and the error carries its
 * output.
 */
export async function spawnServe(
  id: number,
  dataDir: string,
  flags: readonly string[] = [],
  spawned?: { add(child: ChildProcess): unknown },
): Promise<{ child: ChildProcess; address: string; metrics: string; output(): string }> {
  const started = startPlexus(['chronacta', 'serve', '--cluster', '--data', dataDir, '--metrics-port', '0', ...flags]);
  const { child } = started;
  spawned?.add(child);
  const output = () => `${started.stdout()}${started.stderr()}`;
  try {
    const line = await started.line((x) => x.includes('"serving"'), {
      timeoutMs: 20_000,
      what: `member ${id} serving`,
    });
    const { address, metrics } = JSON.parse(line) as { address: string; metrics: string };
    return { child, address, metrics, output };
  } catch (e) {
    if (started.running()) process.kill(started.pid, 'SIGKILL');
    throw new Error(`member ${id} did not start: ${(e as Error).message}: ${output()}`);
  }
}

/** Sends `signal` to the child by its PID and waits for it to exit; SIGKILL after `killAfterMs`. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', killAfterMs = 5000) {
  if (!isRunning(child) || child.pid === undefined) return;
  const pid = child.pid;
  const gone = new Promise<void>((res) => child.once('exit', () => res()));
  process.kill(pid, signal);
  const t = setTimeout(() => {
    if (isRunning(child)) process.kill(pid, 'SIGKILL');
  }, killAfterMs);
  await gone;
  clearTimeout(t);
}

/** A running `serve --cluster` member with a gRPC client to it. */
export interface ServeMember {
  id: number;
  dataDir: string;
  address: string;
  metrics: string;
  child: ChildProcess;
  client: ChronactaClient;
  /** False once `stopMember` was called. */
  alive: boolean;
}

/** `spawnServe`, plus a client (5 s deadline) to the member. */
export async function spawnMember(
  id: number,
  dataDir: string,
  flags: readonly string[] = [],
  spawned?: { add(child: ChildProcess): unknown },
): Promise<ServeMember> {
  const s = await spawnServe(id, dataDir, flags, spawned);
  return {
    id,
    dataDir,
    address: s.address,
    metrics: s.metrics,
    child: s.child,
    client: new ChronactaClient(s.address, { deadlineMs: 5000 }),
    alive: true,
  };
}

/** Closes the member's client and stops its process by PID (`stopChild`). */
export function stopMember(m: ServeMember, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  m.alive = false;
  m.client.close();
  return stopChild(m.child, signal);
}

/** Stops every child still running, by PID (SIGCONT first, for ones a test SIGSTOPped). */
export async function stopAll(children: Iterable<ChildProcess>): Promise<void> {
  for (const c of children) {
    if (!isRunning(c) || c.pid === undefined) continue;
    process.kill(c.pid, 'SIGCONT');
    await stopChild(c, 'SIGKILL');
  }
}

/** Three `serve --cluster` members (node-1..3) under a new root, with the extra ports `initCluster` gave. */
export interface ThreeMembers {
  readonly root: string;
  readonly ports: number[];
  readonly members: ServeMember[];
  /** Every child started for this cluster (stopped by `close`, by PID). */
  readonly children: Set<ChildProcess>;
  /** The alive member (among `among`) that accepts writes, polling up to `ms`. */
  leader(ms?: number, among?: readonly ServeMember[]): Promise<ServeMember>;
  /** Stops every child still running (SIGCONT, then SIGKILL, by PID) and removes the root. */
  close(): Promise<void>;
}

export async function startThree(prefix: string, flags: readonly string[], extraPorts = 0): Promise<ThreeMembers> {
  const { root, ports, init } = await initCluster(prefix, extraPorts);
  const children = new Set<ChildProcess>();
  const members: ServeMember[] = [];
  const close = async () => {
    for (const m of members) m.client.close();
    await stopAll(children);
    rmSync(root, { recursive: true, force: true });
  };
  try {
    if (init.code !== 0) throw new Error(`cluster init failed: ${init.stderr}`);
    const started = await Promise.allSettled(
      [1, 2, 3].map((id) => spawnMember(id, join(root, `node-${id}`), flags, children)),
    );
    for (const s of started) if (s.status === 'fulfilled') members.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  } catch (e) {
    await close();
    throw e;
  }
  return {
    root,
    ports,
    members,
    children,
    leader: (ms = 15_000, among = members) =>
      until(
        async () => {
          for (const m of among.filter((x) => x.alive)) {
            const s = await m.client.clusterStatus().catch(() => undefined);
            if (s?.acceptingWrites) return m;
          }
          return undefined;
        },
        { timeoutMs: ms, what: 'a leader accepting writes', intervalMs: 25 },
      ),
    close,
  };
}

/** SIGSTOP or SIGCONT to a member's process, by its PID. */
export function signalMember(m: ServeMember, signal: 'SIGSTOP' | 'SIGCONT'): void {
  if (m.child.pid !== undefined && isRunning(m.child)) process.kill(m.child.pid, signal);
}
