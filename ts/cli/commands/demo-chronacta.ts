/**
 * Step 8 of `plexus demo`: a Chronacta cluster fails over. Three `plexus chronacta serve
 * --cluster` processes run on loopback from cluster files in a temporary directory; a client
 * appends keyed events through a follower (which redirects them to the leader) while the
 * leader's process is killed with SIGKILL; the step reports the time from the kill to the
 * first append acknowledged by the new leader and reads everything back from both survivors:
 * every acknowledged event must be there exactly once, at the position it was acknowledged
 * with, and nothing else.
 *
 * The members' output is kept and shown only when the step fails. The members are stopped
 * by their PIDs (SIGTERM, then SIGKILL after a grace period) and the directory is removed on
 * every path: success, failure, and SIGINT/SIGTERM to the demo (which then exits with 130).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChronactaClient } from '../../chronacta/client.js';
import type { HaMember } from '../../chronacta/cluster-config.js';
import { clusterFiles, writeClusterFiles } from '../../chronacta/layout.js';
import { createMemberCa, issueMemberFiles } from '../../chronacta/member-tls.js';
import type { AppendResult, ClusterStatus } from '../../chronacta/types.js';
import { freePorts } from '../../net/ports.js';

type Out = (s?: string) => void;

/** The Raft tick `serve` uses unless told (docs/chronacta-ha.md); an election waits 10 to 20 ticks. */
const DEFAULT_TICK_MS = 100;
const ELECTION_TICKS_MIN = 10;
const ELECTION_TICKS_MAX = 20;
/** The members' bound on follower reads: a loaded machine may take longer than 10 short ticks to answer. */
const READ_STALENESS_MS = 1000;
/** Bytes of each member's output kept for a failure report. */
const OUTPUT_KEPT = 4096;
/** How long a member may take to stop after SIGTERM before it gets SIGKILL. */
const STOP_GRACE_MS = 3000;
/** Codes after which a keyed append is sent again with the same key (the outcome is unknown or nothing was written). */
const RETRY_CODES = new Set([
  'PLX_CHRONACTA_TIMEOUT',
  'PLX_CHRONACTA_UNAVAILABLE',
  'PLX_CHRONACTA_HA_NOT_LEADER',
  'PLX_CHRONACTA_HA_NOT_READY',
  'PLX_CHRONACTA_HA_STOPPED',
]);

export interface FailoverStepOptions {
  /** The `plexus` entry point the members run (default: `main.js` of this build). */
  readonly main?: string;
  /** Where the temporary cluster directory is made (default: the OS temporary directory). */
  readonly tmpRoot?: string;
  /** The members' Raft tick in ms (default 20, so that the demo stays quick). */
  readonly tickMs?: number;
  /** Appends acknowledged before the kill, and appends issued after it (default 20 each). */
  readonly appends?: number;
  /** How long one phase (start, election, failover, replication) may take, in ms (default 20000). */
  readonly phaseTimeoutMs?: number;
  /** Told each member's PID as it is spawned. */
  readonly onSpawn?: (pid: number) => void;
}

/** An append the cluster acknowledged: its idempotency key (also its data) and its global position. */
export interface AckedAppend {
  readonly key: string;
  readonly position: bigint;
}

/** An event as read back: its global position and its data. */
export interface ReadBackEvent {
  readonly position: bigint;
  readonly data: string;
}

/**
 * Why `events` (a member's whole log, read back) does not hold every acknowledged append
 * exactly once at its acknowledged position and nothing else; undefined when it does.
 */
export function exactlyOnceProblem(
  acked: readonly AckedAppend[],
  events: readonly ReadBackEvent[],
): string | undefined {
  const seen = new Map<string, bigint[]>();
  for (const e of events) {
    const at = seen.get(e.data);
    if (at) at.push(e.position);
    else seen.set(e.data, [e.position]);
  }
  const keys = new Set<string>();
  for (const a of acked) {
    keys.add(a.key);
    const at = seen.get(a.key) ?? [];
    if (at.length === 0) return `acknowledged event ${a.key} (position ${a.position}) is missing`;
    if (at.length > 1) return `acknowledged event ${a.key} is there ${at.length} times (positions ${at.join(', ')})`;
    if (at[0] !== a.position) return `event ${a.key} is at position ${at[0]}, but was acknowledged at ${a.position}`;
  }
  const extra = events.find((e) => !keys.has(e.data));
  if (extra) return `event ${JSON.stringify(extra.data)} at position ${extra.position} was never acknowledged`;
  return undefined;
}

interface Member {
  readonly id: number;
  readonly dir: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly exited: Promise<void>;
  output: string;
  address: string;
  status?: ChronactaClient;
}

class StepFailure extends Error {}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const gone = (m: Member) => m.pid === 0 || m.child.exitCode !== null || m.child.signalCode !== null;

async function within<T>(ms: number, what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new StepFailure(`no ${what} within ${ms} ms`);
    await sleep(20);
  }
}

function keep(m: Member, text: string): void {
  m.output += text;
  if (m.output.length > OUTPUT_KEPT) m.output = m.output.slice(-OUTPUT_KEPT);
}

function spawnMember(main: string, id: number, dir: string, tickMs: number): Member {
  const child = spawn(
    process.execPath,
    [
      main,
      'chronacta',
      'serve',
      '--cluster',
      '--data',
      dir,
      '--metrics-port',
      '0',
      '--tick-ms',
      String(tickMs),
      '--max-read-staleness-ms',
      String(READ_STALENESS_MS),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<void>((res) => {
    child.once('exit', () => res());
    child.once('error', () => res());
  });
  const m: Member = { id, dir, child, pid: child.pid ?? 0, exited, output: '', address: '' };
  child.stdout?.setEncoding('utf8').on('data', (d: string) => keep(m, d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => keep(m, d));
  return m;
}

/** The `{"event":"serving"}` line's gRPC address, once the member prints it. */
function servingAddress(m: Member): string | undefined {
  for (const line of m.output.split('\n')) {
    if (!line.includes('"serving"')) continue;
    try {
      const j = JSON.parse(line) as { event?: string; address?: unknown };
      if (j.event === 'serving' && typeof j.address === 'string') return j.address;
    } catch {
      // a line cut at the buffer's start: the next one will do
    }
  }
  return undefined;
}

async function statusOf(m: Member): Promise<ClusterStatus | undefined> {
  if (gone(m) || !m.status) return undefined;
  return m.status.clusterStatus().catch(() => undefined);
}

/** The member that leads and accepts writes, as its own ClusterService status says. */
async function leaderOf(members: readonly Member[]): Promise<{ m: Member; s: ClusterStatus } | undefined> {
  for (const m of members) {
    const s = await statusOf(m);
    if (s?.role === 'leader' && s.acceptingWrites) return { m, s };
  }
  return undefined;
}

/** Stops members by PID: SIGTERM, then SIGKILL for those still running after the grace period. */
async function stopMembers(members: readonly Member[]): Promise<void> {
  for (const m of members) m.status?.close();
  const running = members.filter((m) => !gone(m) && m.pid > 0);
  for (const m of running) signal(m, 'SIGTERM');
  await Promise.race([Promise.all(running.map((m) => m.exited)), sleep(STOP_GRACE_MS)]);
  const stuck = running.filter((m) => !gone(m));
  for (const m of stuck) signal(m, 'SIGKILL');
  await Promise.race([Promise.all(stuck.map((m) => m.exited)), sleep(STOP_GRACE_MS)]);
}

function signal(m: Member, sig: NodeJS.Signals): void {
  try {
    process.kill(m.pid, sig);
  } catch {
    // already gone
  }
}

/** Reads a member's whole log (pages of 500), asking for the given consistency and nowhere else. */
async function readBack(
  address: string,
  consistency: 'leader' | 'follower',
  limit: number,
): Promise<{ events: ReadBackEvent[]; servedBy: string }> {
  const c = new ChronactaClient(address, {
    deadlineMs: 5000,
    readConsistency: consistency,
    followReadRedirects: false,
  });
  try {
    const events: ReadBackEvent[] = [];
    let from = 0n;
    let servedBy = '';
    for (;;) {
      const r = await c.readAll({ fromPosition: from, maxCount: 500 });
      servedBy = r.read?.servedBy ?? 'unknown';
      for (const e of r.events) events.push({ position: e.position, data: Buffer.from(e.data).toString('utf8') });
      if (events.length > limit) throw new StepFailure(`${address} holds more than ${limit} events`);
      if (r.end || r.events.length === 0) return { events, servedBy };
      from = r.nextPosition;
    }
  } finally {
    c.close();
  }
}

/**
 * Runs the step and prints its lines with `out`; resolves true when the failover happened and
 * every acknowledged event is on both survivors exactly once, false (with the reason printed)
 * otherwise. Never leaves a member running or the temporary directory behind.
 */
export async function chronactaFailoverStep(out: Out, opts: FailoverStepOptions = {}): Promise<boolean> {
  const main = opts.main ?? fileURLToPath(new URL('../main.js', import.meta.url));
  const tickMs = opts.tickMs ?? 20;
  const appends = opts.appends ?? 20;
  const phaseMs = opts.phaseTimeoutMs ?? 20_000;
  if (!existsSync(main)) {
    out(`      failed: ${main} is missing; build it with npx tsc -p tsconfig.build.json`);
    return false;
  }
  const started = performance.now();
  const root = mkdtempSync(join(opts.tmpRoot ?? tmpdir(), 'plexus-demo-chronacta-'));
  const members: Member[] = [];
  let removed = false;
  const removeRoot = () => {
    if (removed) return;
    removed = true;
    rmSync(root, { recursive: true, force: true });
  };
  // The demo's own exit (an unexpected throw elsewhere): no member outlives it.
  const onExit = () => {
    for (const m of members) if (!gone(m)) signal(m, 'SIGKILL');
    removeRoot();
  };
  // Ctrl-C or SIGTERM to the demo: stop the members, remove the directory, exit 130.
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) return;
    interrupted = true;
    out('      interrupted: stopping the members and removing the cluster directory');
    for (const m of members) if (!gone(m)) signal(m, 'SIGKILL');
    void Promise.race([Promise.all(members.map((m) => m.exited)), sleep(STOP_GRACE_MS)]).then(() => {
      removeRoot();
      process.exit(130);
    });
  };
  process.on('exit', onExit);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const writers: ChronactaClient[] = [];
  const acked: (AckedAppend & { issuedAt: number; ackedAt: number })[] = [];
  let stopWriting = false;
  try {
    const ports = await freePorts(6);
    const config: HaMember[] = [1, 2, 3].map((id) => ({
      id,
      advertise: `127.0.0.1:${ports[id - 1]}`,
      raftAddress: `127.0.0.1:${ports[id + 2]}`,
    }));
    const clusterId = `demo-${randomUUID().slice(0, 8)}`;
    // Members speak mutual TLS from a cluster CA made here, as `cluster init` makes it.
    const ca = await createMemberCa(clusterId);
    for (const m of config) {
      await writeClusterFiles(join(root, `node-${m.id}`), clusterFiles(clusterId, config, m.id));
      await issueMemberFiles(join(root, `node-${m.id}`), ca, m.id);
    }
    for (const m of config) {
      const member = spawnMember(main, m.id, join(root, `node-${m.id}`), tickMs);
      members.push(member);
      if (member.pid > 0) opts.onSpawn?.(member.pid);
    }
    out(
      `      cluster files for 3 members on loopback; started 3 × plexus chronacta serve --cluster --tick-ms ${tickMs} --max-read-staleness-ms ${READ_STALENESS_MS} (pids ${members.map((m) => m.pid).join(', ')})`,
    );

    await within(phaseMs, 'member serving', async () => {
      for (const m of members) {
        if (gone(m)) throw new StepFailure(`node ${m.id} exited (code ${m.child.exitCode ?? m.child.signalCode})`);
        if (!m.address) {
          const a = servingAddress(m);
          if (a === undefined) return undefined;
          m.address = a;
          m.status = new ChronactaClient(a, { deadlineMs: 1000 });
        }
      }
      return true;
    });
    const first = await within(phaseMs, 'leader', () => leaderOf(members));
    const old = first.m;
    out(
      `      node ${old.id} leads term ${first.s.term} (ClusterService status); nodes serve on ${config.map((m) => m.advertise).join(', ')}`,
    );

    // The writer starts at a follower: keyed appends are redirected to whoever leads. After a
    // failure it tries the next member, always with the same key, so nothing lands twice.
    const via = members.find((m) => m !== old) as Member;
    for (const m of members)
      writers.push(new ChronactaClient(m.address, { deadlineMs: 2000, appendAttempts: 5, retryDelayMs: 20 }));
    let cur = members.indexOf(via);
    const append = async (i: number, key: string): Promise<AppendResult> => {
      const end = Date.now() + phaseMs;
      for (;;) {
        try {
          const c = writers[cur] as ChronactaClient;
          return await c.append(`order-${i % 4}`, [{ type: 'DemoEvent', data: key }], { idempotencyKey: key });
        } catch (e) {
          const code = (e as { code?: string }).code ?? '';
          if (!RETRY_CODES.has(code) || Date.now() > end) throw e;
          cur = (cur + 1) % writers.length;
          await sleep(20);
        }
      }
    };
    const writing = (async () => {
      for (let i = 1; !stopWriting; i++) {
        const key = `demo-${i}`;
        const issuedAt = performance.now();
        const r = await append(i, key);
        acked.push({ key, position: r.lastPosition, issuedAt, ackedAt: performance.now() });
      }
    })();
    const writerFailed = writing.then(
      () => undefined,
      (e: unknown) => {
        throw new StepFailure(`an append failed: ${(e as { code?: string }).code ?? ''} ${(e as Error).message}`);
      },
    );
    writerFailed.catch(() => undefined);
    const waitAcks = (what: string, ok: () => boolean) =>
      Promise.race([writerFailed, within(phaseMs, what, async () => (ok() ? true : undefined))]);

    await waitAcks(`${appends} acknowledged appends`, () => acked.length >= appends);
    // The leader may have changed meanwhile: kill whoever leads now.
    const now = await within(phaseMs, 'leader', () => leaderOf(members));
    const victim = now.m;
    const before = acked.length;
    const killedAt = performance.now();
    signal(victim, 'SIGKILL');
    victim.status?.close();
    out(
      `      ${before} keyed appends acknowledged (sent to node ${via.id}, a follower, which redirects them); killed the leader, node ${victim.id} (pid ${victim.pid}, term ${now.s.term}), with SIGKILL while appending`,
    );
    const afterKill = () => acked.filter((a) => a.issuedAt > killedAt);
    await waitAcks(`${appends} appends after the kill`, () => afterKill().length >= appends);
    stopWriting = true;
    await Promise.race([writing, writerFailed]);
    await Promise.race([victim.exited, sleep(STOP_GRACE_MS)]);
    if (!gone(victim)) throw new StepFailure(`node ${victim.id} (pid ${victim.pid}) is still running after SIGKILL`);
    const firstAfter = afterKill()[0] as (typeof acked)[number];
    const failoverMs = firstAfter.ackedAt - killedAt;
    const survivors = members.filter((m) => m !== victim);
    const next = await within(phaseMs, 'new leader', () => leaderOf(survivors));
    out(
      `      node ${next.m.id} leads term ${next.s.term}; the first append issued after the kill was acknowledged ${failoverMs.toFixed(0)} ms after it`,
    );

    // Read everything back from both survivors: the leader, and the follower from what it applied.
    let last = 0n;
    for (const a of acked) if (a.position > last) last = a.position;
    const follower = survivors.find((m) => m !== next.m) as Member;
    await within(phaseMs, `node ${follower.id} applying position ${last}`, async () => {
      const s = await statusOf(follower);
      return s?.lastPosition !== undefined && s.lastPosition >= last ? true : undefined;
    });
    const limit = acked.length + 1000;
    for (const [m, consistency] of [
      [next.m, 'leader'],
      [follower, 'follower'],
    ] as const) {
      // A follower serves a follower read once it has heard from the new leader within its
      // staleness bound; right after a failover it may first refuse (STALE_READ): ask again.
      const r = await within(phaseMs, `${consistency} read from node ${m.id}`, () =>
        readBack(m.address, consistency, limit).catch((e: unknown) => {
          if ((e as { code?: string }).code === 'PLX_CHRONACTA_STALE_READ') return undefined;
          throw e;
        }),
      );
      if (r.servedBy !== consistency) throw new StepFailure(`node ${m.id} served the read as ${r.servedBy}`);
      const problem = exactlyOnceProblem(acked, r.events);
      if (problem) throw new StepFailure(`read back from node ${m.id}: ${problem}`);
    }
    out(
      `      read back all events from node ${next.m.id} (leader) and node ${follower.id} (follower): ${acked.length} acknowledged, each present exactly once at its position, nothing else`,
    );
    const lo = ((ELECTION_TICKS_MIN * DEFAULT_TICK_MS) / 1000).toFixed(1);
    const hi = ((ELECTION_TICKS_MAX * DEFAULT_TICK_MS) / 1000).toFixed(1);
    out(
      `      (this run used --tick-ms ${tickMs}; with the default ${DEFAULT_TICK_MS} ms tick an election waits ${lo} to ${hi} s, and this failover takes about 1 to 2 s)`,
    );
    return true;
  } catch (e) {
    if (interrupted) return false;
    out(`      failed: ${e instanceof Error ? e.message : String(e)}`);
    for (const m of members) {
      const tail = m.output.trim().split('\n').slice(-5);
      for (const line of tail) if (line) out(`      node ${m.id}> ${line.slice(0, 200)}`);
    }
    return false;
  } finally {
    stopWriting = true;
    for (const c of writers) c.close();
    await stopMembers(members);
    removeRoot();
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const left = members.filter((m) => !gone(m));
    out(
      left.length === 0
        ? `      stopped the members by PID and removed the cluster directory (${((performance.now() - started) / 1000).toFixed(1)} s in all)`
        : `      members still running: pids ${left.map((m) => m.pid).join(', ')}`,
    );
  }
}
