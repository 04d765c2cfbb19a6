/**
 * The SPERLI launcher: makes a job (ts/sperli/job.ts), starts one process per rank
 * (locally, or through a remote-start command such as `ssh {host}`), hands each rank its
 * job description on standard input as one hex line (never a file), forwards every
 * rank's output with a `[rank n]` prefix, and returns the job's exit status. When a rank
 * fails (an ABORT, a lost peer, a non-zero exit, a signal, or an exit with status 0 after
 * joining the mesh without `finalize()`, which its peers see as a close without BYE) it
 * gives the others time to stop by themselves (they detect it within the silence limit),
 * then stops the rest.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { HostEntry } from '../codec/sperli-jobdesc.js';
import { encodeJobLine } from '../codec/sperli-jobdesc.js';
import { heldMonotonicClock, type TimerHandle, type Timers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { jobIdHex } from '../crypto/x509.js';
import { freePort } from '../net/ports.js';
import { isLocalHost, refusedHosts } from './hosts.js';
import { makeJob } from './job.js';
import { DEFAULT_SILENCE_MS } from './mesh.js';
import { SPIN_VARIABLE, spinWindowMs } from './spin.js';

export { freePort } from '../net/ports.js';
export { isLocalHost } from './hosts.js';

export { DEFAULT_SILENCE_MS };

/** A rank that fails prints this prefix and a JSON object on standard error. */
export const FAILURE_PREFIX = 'sperli-failure ';
/** A rank whose mesh is open prints this prefix and `{"rank":n}` on standard error. */
export const JOINED_PREFIX = 'sperli-joined ';
/** A rank that has left the job with `finalize()` (BYE to every peer) prints this prefix and `{"rank":n}`. */
export const FINALIZED_PREFIX = 'sperli-finalized ';
/** Environment passed to local ranks. */
export const SILENCE_VARIABLE = 'SPERLI_SILENCE_MS';
export const DENY_FILE_VARIABLE = 'SPERLI_DENY_HOSTS';
export const CHECKPOINT_DIR_VARIABLE = 'SPERLI_CHECKPOINT_DIR';

export interface LaunchOptions {
  /** Number of ranks; with a hosts file, defaults to its number of entries. */
  readonly size?: number;
  /** The rank program and its arguments. */
  readonly command: readonly string[];
  /** Text of a hosts file: one `host[:port]` per rank. */
  readonly hostsText?: string;
  /** Path of a deny file: more refused hosts, one per line. */
  readonly denyFile?: string;
  readonly silenceMs?: number;
  /** Remote-start command for hosts that are not this machine, with `{host}`. */
  readonly remote?: string;
  /** The incarnation (1 for a first run). */
  readonly incarnation?: number;
  /** Where forwarded output goes (default process.stdout / process.stderr). */
  readonly stdout?: (text: string) => void;
  readonly stderr?: (text: string) => void;
  /** Environment of the ranks (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** Checkpoint directory handed to every rank (SPERLI_CHECKPOINT_DIR). */
  readonly checkpointDir?: string;
  /** How often a failed job is started again (incarnation + 1, same job id and keys). */
  readonly restartMax?: number;
  /**
   * The polling window of every rank in ms (SPERLI_SPIN_MS, 0..1000; see spin.ts); by
   * default each rank picks its own.
   */
  readonly spinMs?: number;
  /**
   * Runs the stop timer that kills the ranks still running after a failure (default
   * `heldMonotonicClock`: it keeps the launcher alive until it fires).
   */
  readonly timers?: Timers;
}

export interface RankFailure {
  readonly rank: number;
  /** The signal that ended the rank, when one did. */
  readonly signal?: string;
  readonly code?: string;
  readonly reason?: string;
  readonly message: string;
  readonly details?: Record<string, unknown>;
}

export interface LaunchResult {
  readonly jobId: string;
  /** The incarnation of the last run (1 + the number of restarts). */
  readonly incarnation: number;
  /** Failures that led to a restart, oldest first. */
  readonly restarts: readonly RankFailure[];
  /** 0 when every rank exited 0. */
  readonly exitCode: number;
  /** The first failure seen, if any. */
  readonly failure?: RankFailure;
  /** Per rank: exit code, or the signal that ended it, and when (ms since 1970). */
  readonly ranks: readonly {
    readonly rank: number;
    readonly code: number | null;
    readonly signal: string | null;
    readonly endedAt: number;
  }[];
}

/** A rank that joined the job and exited with status 0 without `finalize()`: H1612 lost-peer, cause close. */
export function exitedWithoutBye(rank: number): RankFailure {
  return {
    rank,
    code: 'H1612',
    reason: 'lost-peer',
    message: `rank ${rank} exited with status 0 without finalize(): it said no BYE to its peers, so it is a lost peer and the job failed`,
    details: { peer: rank, cause: 'close', exitStatus: 0 },
  };
}

function usage(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_SPERLI_LAUNCH', message, details);
}

/** Parses a hosts file: `host[:port]` per line; blank lines and `#` comments are skipped. */
export function parseHostsFile(text: string): { name: string; port?: number }[] {
  const out: { name: string; port?: number }[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const m = /^([^:\s]+)(?::(\d+))?$/.exec(line);
    if (!m) throw usage(`hosts file line ${i + 1}: "${line}" is not host[:port]`, { line: i + 1 });
    const port = m[2] === undefined ? undefined : Number(m[2]);
    if (port !== undefined && (port < 1 || port > 65535)) {
      throw usage(`hosts file line ${i + 1}: port ${port} is outside 1..65535`, { line: i + 1 });
    }
    out.push(port === undefined ? { name: m[1] as string } : { name: m[1] as string, port });
  });
  return out;
}

/** The first port tried on remote hosts without one: 7470 + rank. */
export const REMOTE_BASE_PORT = 7470;

async function resolveHosts(opts: LaunchOptions): Promise<{ hosts: HostEntry[]; spares: string[] }> {
  const listed = opts.hostsText === undefined ? undefined : parseHostsFile(opts.hostsText);
  const size = opts.size ?? listed?.length;
  if (size === undefined) throw usage('give the number of ranks (-n N) or a hosts file');
  if (!Number.isInteger(size) || size < 1 || size > 4096) {
    throw usage(`the number of ranks must be 1..4096, got ${size}`, { size });
  }
  if (listed && listed.length < size) {
    throw usage(`the hosts file lists ${listed.length} hosts for ${size} ranks: list one host per rank`, {
      listed: listed.length,
      size,
    });
  }
  const refused = refusedHosts({ env: opts.env?.SPERLI_REFUSED_HOSTS, denyFile: opts.denyFile });
  const hosts: HostEntry[] = [];
  const taken = new Set<string>();
  for (let rank = 0; rank < size; rank++) {
    const entry = listed ? (listed[rank] as { name: string; port?: number }) : { name: '127.0.0.1' };
    refused.assertAllowed(entry.name, `the host of rank ${rank}`);
    if (!isLocalHost(entry.name) && opts.remote === undefined) {
      throw usage(
        `rank ${rank} is on ${entry.name}, not this machine: give a remote-start command (--remote 'ssh {host}')`,
        {
          host: entry.name,
        },
      );
    }
    let port = entry.port;
    if (port === undefined) {
      if (isLocalHost(entry.name)) {
        do port = await freePort(entry.name);
        while (taken.has(`${entry.name}:${port}`));
      } else port = REMOTE_BASE_PORT + rank;
    }
    const key = `${entry.name}:${port}`;
    if (taken.has(key)) throw usage(`two ranks would listen on ${key}`, { host: entry.name, port });
    taken.add(key);
    hosts.push({ name: entry.name, port });
  }
  // Hosts listed beyond the number of ranks take over the ranks of lost hosts on a restart.
  const spares = (listed ?? []).slice(size).map((e) => {
    refused.assertAllowed(e.name, 'a spare host');
    return e.name;
  });
  return { hosts, spares };
}

/** New ports for local hosts (a restarted rank must not wait for an old socket to go). */
async function freshPorts(hosts: readonly HostEntry[], listed: boolean): Promise<HostEntry[]> {
  const out: HostEntry[] = [];
  const taken = new Set<string>();
  for (const h of hosts) {
    let port = h.port;
    if (!listed && isLocalHost(h.name)) {
      do port = await freePort(h.name);
      while (taken.has(`${h.name}:${port}`));
    }
    taken.add(`${h.name}:${port}`);
    out.push({ name: h.name, port });
  }
  return out;
}

function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Splits a stream into lines and hands each complete line (without newline) to `each`. */
function lines(stream: NodeJS.ReadableStream, each: (line: string) => void): Promise<void> {
  return new Promise((resolve) => {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      rest += chunk;
      let i = rest.indexOf('\n');
      while (i >= 0) {
        each(rest.slice(0, i));
        rest = rest.slice(i + 1);
        i = rest.indexOf('\n');
      }
    });
    stream.on('end', () => {
      if (rest !== '') each(rest);
      resolve();
    });
    stream.on('error', () => resolve());
  });
}

export async function launch(opts: LaunchOptions): Promise<LaunchResult> {
  if (opts.command.length === 0) throw usage('give the rank program after --, e.g. -- node job.js');
  const silenceMs = opts.silenceMs ?? DEFAULT_SILENCE_MS;
  if (!Number.isInteger(silenceMs) || silenceMs < 100) {
    throw usage(`the silence limit must be a whole number of milliseconds >= 100, got ${silenceMs}`);
  }
  const restartMax = opts.restartMax ?? 0;
  if (!Number.isInteger(restartMax) || restartMax < 0) {
    throw usage(`the restart limit must be a whole number >= 0, got ${restartMax}`);
  }
  if (opts.spinMs !== undefined) {
    try {
      spinWindowMs(opts.spinMs, 1);
    } catch (e) {
      throw usage(`--spin-ms: ${(e as Error).message}`, { reason: 'spin' });
    }
  }
  const err = opts.stderr ?? ((t: string) => process.stderr.write(t));
  let { hosts, spares } = await resolveHosts(opts);
  const first = await makeJob({ hosts, incarnation: opts.incarnation ?? 1 });
  const keys = { publicKey: first.publicKey, secretKey: first.secretKey };
  let job = first;
  const restarts: RankFailure[] = [];
  for (;;) {
    const result = await runOnce(opts, job, silenceMs);
    if (result.exitCode === 0 || restarts.length >= restartMax) return { ...result, restarts };
    const f = result.failure as RankFailure;
    restarts.push(f);
    // The rank that was lost (ended by a signal, or named as the lost peer) moves to a
    // spare host when the hosts file lists one.
    const lost = typeof f.details?.peer === 'number' ? f.details.peer : f.signal ? f.rank : undefined;
    if (lost !== undefined && spares.length > 0) {
      const to = spares.shift() as string;
      hosts = hosts.map((h, i) => (i === lost ? { name: to, port: h.port } : h));
      err(`[launcher] rank ${lost} moves to ${to}\n`);
    }
    hosts = await freshPorts(hosts, opts.hostsText !== undefined);
    const incarnation = job.descriptions[0]!.incarnation + 1;
    err(
      `[launcher] job ${result.jobId} failed (${f.code ? `${f.code} ` : ''}${f.message}); restart ${restarts.length} of ${restartMax} as incarnation ${incarnation}\n`,
    );
    job = await makeJob({ hosts, incarnation, jobId: first.jobId, keys });
  }
}

async function runOnce(
  opts: LaunchOptions,
  job: Awaited<ReturnType<typeof makeJob>>,
  silenceMs: number,
): Promise<Omit<LaunchResult, 'restarts'>> {
  const out = opts.stdout ?? ((t: string) => process.stdout.write(t));
  const err = opts.stderr ?? ((t: string) => process.stderr.write(t));
  const env = opts.env ?? process.env;
  const hosts = job.descriptions[0]!.hosts;
  const jobHex = jobIdHex(job.jobId);
  const size = hosts.length;
  const incarnation = job.descriptions[0]!.incarnation;

  const children: ChildProcess[] = [];
  const exits: { rank: number; code: number | null; signal: string | null; endedAt: number }[] = [];
  let failure: RankFailure | undefined;
  let stopTimer: TimerHandle | undefined;
  const timers = opts.timers ?? heldMonotonicClock;
  let alive = size;
  const note = (f: RankFailure) => {
    if (failure) return;
    failure = f;
    // The others detect a lost or aborting peer within the silence limit; after that
    // (and a margin) whatever still runs is stopped.
    stopTimer = timers.setTimeout(() => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }, silenceMs + 2000);
  };

  const done = new Promise<void>((resolve) => {
    for (let rank = 0; rank < size; rank++) {
      const host = hosts[rank] as HostEntry;
      const rankEnv: NodeJS.ProcessEnv = { ...env, [SILENCE_VARIABLE]: String(silenceMs) };
      if (opts.denyFile) rankEnv[DENY_FILE_VARIABLE] = opts.denyFile;
      if (opts.checkpointDir) rankEnv[CHECKPOINT_DIR_VARIABLE] = opts.checkpointDir;
      if (opts.spinMs !== undefined) rankEnv[SPIN_VARIABLE] = String(opts.spinMs);
      let child: ChildProcess;
      if (isLocalHost(host.name) || opts.remote === undefined) {
        child = spawn(opts.command[0] as string, opts.command.slice(1), { env: rankEnv, stdio: 'pipe' });
      } else {
        const ckpt = opts.checkpointDir ? ` ${CHECKPOINT_DIR_VARIABLE}=${shellQuote(opts.checkpointDir)}` : '';
        const spin = opts.spinMs === undefined ? '' : ` ${SPIN_VARIABLE}=${opts.spinMs}`;
        const prefix = `env ${SILENCE_VARIABLE}=${silenceMs}${ckpt}${spin}`;
        const cmd = `${opts.remote.replaceAll('{host}', host.name)} ${prefix} ${opts.command.map(shellQuote).join(' ')}`;
        child = spawn('sh', ['-c', cmd], { env, stdio: 'pipe' });
      }
      children.push(child);
      child.on('error', (e) => note({ rank, message: `rank ${rank} could not start: ${e.message}` }));
      child.stdin?.on('error', () => {});
      child.stdin?.end(`${encodeJobLine(job.descriptions[rank] as (typeof job.descriptions)[number])}`);
      const pOut = lines(child.stdout as NodeJS.ReadableStream, (l) => out(`[rank ${rank}] ${l}\n`));
      let joined = false;
      let finalized = false;
      let reported = false;
      const pErr = lines(child.stderr as NodeJS.ReadableStream, (l) => {
        // The rank's own reports to the launcher (init.ts), not forwarded.
        if (l.startsWith(JOINED_PREFIX)) {
          joined = true;
          return;
        }
        if (l.startsWith(FINALIZED_PREFIX)) {
          finalized = true;
          return;
        }
        if (l.startsWith(FAILURE_PREFIX)) {
          try {
            const f = JSON.parse(l.slice(FAILURE_PREFIX.length)) as Omit<RankFailure, 'rank'>;
            reported = true;
            note({ ...f, rank });
            err(`[rank ${rank}] failed: ${f.code ?? ''} ${f.message}\n`);
            return;
          } catch {
            // not ours: forward as it is
          }
        }
        err(`[rank ${rank}] ${l}\n`);
      });
      child.on('close', async (code, signal) => {
        const endedAt = Date.now();
        await Promise.all([pOut, pErr]);
        exits.push({ rank, code, signal, endedAt });
        if (code !== 0) {
          note({
            rank,
            message: signal ? `rank ${rank} was ended by ${signal}` : `rank ${rank} exited with status ${code}`,
            ...(signal ? { signal } : {}),
          });
        } else if (joined && !finalized && !reported) {
          // The protocol: a close without BYE is a lost peer, whatever the exit status (a
          // rank that reported its job's failure cannot finalize, and is named already).
          const f = exitedWithoutBye(rank);
          err(`[rank ${rank}] failed: ${f.code} ${f.message}\n`);
          note(f);
        }
        if (--alive === 0) resolve();
      });
    }
  });

  const forward = (sig: NodeJS.Signals) => {
    for (const c of children) c.kill(sig);
  };
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  try {
    await done;
  } finally {
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
    if (stopTimer) timers.clearTimeout(stopTimer);
  }
  exits.sort((a, b) => a.rank - b.rank);
  const result = { jobId: jobHex, incarnation, exitCode: failure ? 1 : 0, ranks: exits };
  return failure ? { ...result, failure } : result;
}

/** Reads a hosts file for `launch`, with a clear error. */
export function readHostsFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (cause) {
    throw new PlexusError('PLX_SPERLI_LAUNCH', `cannot read the hosts file ${path}`, { path }, { cause });
  }
}
