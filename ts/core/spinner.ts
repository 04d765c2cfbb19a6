/**
 * Polling while something waits for bytes from a peer on this machine or nearby.
 *
 * A process that sleeps in the event loop's poll until a frame arrives pays the machine's
 * wake-up latency on every message: on an idle virtual machine that can be most of a small
 * round trip. While something waits, a `Spinner` keeps the loop turning with `setImmediate`,
 * so libuv polls its sockets without sleeping, for at most `windowMs` after the last wait
 * began; then the process sleeps as before. Open MPI polls the same way, and .NET spins
 * briefly before it blocks. A spinner whose window runs out while something still waits (a
 * slow peer, or other work holding the cores) sits out the next wait starts: 1 after a
 * window that ran out, 2 after a second in a row, then 4 ... up to MAX_SIT_OUT; a frame that
 * comes while polling starts the count at 1 again. A spinner that got less than
 * MIN_CPU_SHARE of the wall time over SAMPLE_MS of polling (the machine's cores are busy with
 * other work) stops and sits out in the same way. SPERLI ranks (docs/sperli.md, "Waiting for
 * frames") and the cluster wire (docs/cluster.md, "Polling") use it.
 */
import { performance } from 'node:perf_hooks';

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
