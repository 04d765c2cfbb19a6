/**
 * Polling while a rank waits for a frame (docs/sperli.md, "Waiting for frames").
 *
 * A rank that sleeps in the event loop's poll until a frame arrives pays the machine's
 * wake-up latency on every message: on an idle virtual machine that is most of an 8-byte
 * allreduce. While something waits for a frame, a `Spinner` keeps the loop turning with
 * `setImmediate`, so libuv polls its sockets without sleeping, for at most `windowMs`
 * after the last wait began; then the rank sleeps as before. Open MPI polls the same way.
 * Polling pays only when every rank on the machine has a core of its own: `spinWindowMs`
 * turns it off when the machine's ranks outnumber its cores, and a spinner whose window
 * runs out while something still waits (a slow peer, or other work holding the cores) sits
 * out the next wait starts: 1 after a window that ran out, 2 after a second in a row, then 4
 * ... up to MAX_SIT_OUT; a frame that comes while polling starts the count at 1 again. A
 * spinner that got less than MIN_CPU_SHARE of the wall time over SAMPLE_MS of polling (the
 * machine's cores are busy with other work) stops and sits out in the same way.
 */
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { HostEntry } from '../codec/sperli-jobdesc.js';
import { PlexusError } from '../core/errors.js';
import { isLocalHost } from './hosts.js';

/** The default polling window in ms, when the ranks here fit the cores. */
export const DEFAULT_SPIN_MS = 1;
/** The environment variable that sets the window for every rank (ms; 0 turns polling off). */
export const SPIN_VARIABLE = 'SPERLI_SPIN_MS';
/** The largest window accepted (ms). */
export const MAX_SPIN_MS = 1000;

/** The longest run of wait starts a spinner sits out after windows that ran out. */
export const MAX_SIT_OUT = 256;
/** How often (ms of polling) a spinner checks that it got the CPU it polled for. */
export const SAMPLE_MS = 4;
/** Below this share of the wall time on a CPU, polling is losing to other work for the cores. */
export const MIN_CPU_SHARE = 0.5;

function cpuMicros(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

export class Spinner {
  private holds = 0;
  private deadline = 0;
  private running = false;
  /** Wait starts still to sit out (no polling) after a window ran out. */
  private sitOut = 0;
  /** How many to sit out after the next window that runs out (1 after a frame came while polling). */
  private backoff = 1;
  private readonly windowMs: number;
  private sampleAt = 0;
  private sampleCpu = 0;

  /** A spinner that polls for up to `windowMs` after each wait begins (0: never). */
  constructor(windowMs: number) {
    this.windowMs = windowMs;
  }

  /** Something began to wait for a frame. */
  hold(): void {
    if (this.windowMs <= 0) return;
    this.holds++;
    if (this.running) {
      this.deadline = performance.now() + this.windowMs;
      return;
    }
    if (this.sitOut > 0) {
      this.sitOut--;
      return;
    }
    const now = performance.now();
    this.deadline = now + this.windowMs;
    this.sampleAt = now;
    this.sampleCpu = cpuMicros();
    this.running = true;
    setImmediate(this.tick);
  }

  /** A wait begun with `hold` has ended (its frame came, or it failed). */
  release(): void {
    if (this.holds === 0) return;
    this.holds--;
    // A frame came while polling: polling pays here.
    if (this.running) this.backoff = 1;
  }

  /** Waits not yet released. */
  get waiting(): number {
    return this.holds;
  }

  /** Whether the loop is being kept turning. */
  get polling(): boolean {
    return this.running;
  }

  /** Wait starts that will not poll, after windows that ran out. */
  get sittingOut(): number {
    return this.sitOut;
  }

  private readonly tick = (): void => {
    if (this.holds === 0) {
      this.running = false;
      return;
    }
    const now = performance.now();
    if (now - this.sampleAt >= SAMPLE_MS) {
      const cpu = cpuMicros();
      if (cpu - this.sampleCpu < MIN_CPU_SHARE * (now - this.sampleAt) * 1000) {
        // Polled without getting the CPU for it: other work wants these cores, and the
        // peer this rank waits for may be queued behind it.
        this.stop();
        return;
      }
      this.sampleAt = now;
      this.sampleCpu = cpu;
    }
    if (now < this.deadline) {
      setImmediate(this.tick);
      return;
    }
    // The window ran out with something still waiting: the peer is slow, or busy cores keep
    // it from running while this rank polls.
    this.stop();
  };

  /** Stops polling and sits out the next wait starts, twice as many as last time in a row. */
  private stop(): void {
    this.running = false;
    this.sitOut = this.backoff;
    this.backoff = Math.min(MAX_SIT_OUT, this.backoff * 2);
  }
}

/** How many ranks of the job run on the machine of `rank` (loopback names are all this machine). */
export function ranksOnMachine(hosts: readonly HostEntry[], rank: number): number {
  const mine = (hosts[rank] as HostEntry).name;
  const local = isLocalHost(mine);
  let n = 0;
  for (const h of hosts) if (local ? isLocalHost(h.name) : h.name === mine) n++;
  return n;
}

/**
 * The polling window of a rank: `requested` (an option or SPERLI_SPIN_MS) when given,
 * else DEFAULT_SPIN_MS when the job's ranks on this machine fit its cores, else 0.
 */
export function spinWindowMs(
  requested: number | string | undefined,
  ranksHere: number,
  cores: number = availableParallelism(),
): number {
  if (requested === undefined || requested === '') return ranksHere <= cores ? DEFAULT_SPIN_MS : 0;
  const ms = typeof requested === 'number' ? requested : Number(requested);
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_SPIN_MS) {
    throw new PlexusError(
      'PLX_SPERLI_BAD_ARGUMENT',
      `the polling window (spinMs or ${SPIN_VARIABLE}) must be a number of ms from 0 to ${MAX_SPIN_MS}, got ${typeof requested === 'string' ? `"${requested}"` : String(requested)}`,
      { reason: 'spin' },
    );
  }
  return ms;
}
