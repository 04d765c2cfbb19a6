/**
 * Polling while a rank waits for a frame (docs/sperli.md, "Waiting for frames"): the window
 * a rank polls for. The `Spinner` itself (ts/core/spinner.ts) is shared with the cluster
 * wire. Polling pays only when every rank on the machine has a core of its own:
 * `spinWindowMs` turns it off when the machine's ranks outnumber its cores.
 */
import { availableParallelism } from 'node:os';
import type { HostEntry } from '../codec/sperli-jobdesc.js';
import { PlexusError } from '../core/errors.js';
import { Spinner } from '../core/spinner.js';
import { isLocalHost } from './hosts.js';

export { MAX_SIT_OUT, MIN_CPU_SHARE, SAMPLE_MS, Spinner } from '../core/spinner.js';

/** The default polling window in ms, when the ranks here fit the cores. */
export const DEFAULT_SPIN_MS = 1;
/** The environment variable that sets the window for every rank (ms; 0 turns polling off). */
export const SPIN_VARIABLE = 'SPERLI_SPIN_MS';
/** The largest window accepted (ms). */
export const MAX_SPIN_MS = 1000;

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

function noop(): void {}

/**
 * Keeps the process alive while a call of the rank may wait for a peer (docs/sperli.md,
 * "When a peer is lost or leaves"). The mesh's connections do not keep a rank's process
 * alive by themselves: a rank whose program has nothing left to do ends, even without
 * `finalize()`. While a receive, a collective, a checkpoint or resume, a queued send or
 * `finalize()` is pending, one ref'd timer (made once, never firing in practice) holds the
 * event loop open, so that the loss of the peer is detected and the call settles with its
 * coded error instead of the process ending with a promise that never settles.
 */
export class KeepAlive {
  private count = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** Something began to wait. */
  hold(): void {
    if (this.count++ === 0 && !this.stopped) {
      this.timer ??= setInterval(noop, 2 ** 31 - 1);
      this.timer.ref();
    }
  }

  /** A wait begun with `hold` has ended. */
  release(): void {
    if (this.count === 0) return;
    if (--this.count === 0) this.timer?.unref();
  }

  /** Waits not yet released. */
  get waiting(): number {
    return this.count;
  }

  /** Whether the process is held open now. */
  get holding(): boolean {
    return this.count > 0 && !this.stopped;
  }

  /** Holds nothing any more (the rank has left the job or it failed). */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** A Spinner whose waits also hold the process open through a KeepAlive. */
export class RankSpinner extends Spinner {
  constructor(
    windowMs: number,
    private readonly keepAlive: KeepAlive,
  ) {
    super(windowMs);
  }

  override hold(): void {
    this.keepAlive.hold();
    super.hold();
  }

  override release(): void {
    this.keepAlive.release();
    super.release();
  }
}
