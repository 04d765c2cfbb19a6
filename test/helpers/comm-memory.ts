/**
 * A minimal in-memory RankTransport for the communicator tests: `size` ranks in one
 * process, frames delivered in send order per pair on the microtask queue, payloads
 * copied on send as a connection would. An ABORT reaches every other rank as H1612 after
 * the frames sent before it. Tests can watch every frame (`job.sent`), rewrite or drop
 * frames in flight (`job.tap`) and deliver frames no communicator sent (`inject`).
 *
 * `runOn` runs the same bodies on this transport or on ts/sperli/memory-transport.ts,
 * which passes real frame bytes through the checks of the TLS mesh.
 */
import { SperliCode, sperliError } from '../../ts/codec/sperli-errors.js';
import { FrameType, MAX_PAYLOAD, MAX_USER_TAG } from '../../ts/codec/sperli-frame.js';
import type { PlexusError } from '../../ts/core/errors.js';
import { Comm } from '../../ts/sperli/comm.js';
import { createMemoryTransports } from '../../ts/sperli/memory-transport.js';
import type { RankTransport, TransportFrame } from '../../ts/sperli/transport.js';

export interface SentFrame {
  readonly from: number;
  readonly to: number;
  readonly type: number;
  readonly tag: number;
  /** The payload as sent (before any tap). */
  readonly payload: Uint8Array;
}

/** Rewrites a frame in flight: the frames to deliver instead (none drops it). */
export type Tap = (from: number, to: number, frame: TransportFrame) => TransportFrame | readonly TransportFrame[];

export interface AbortRecord {
  readonly rank: number;
  readonly reason: number;
  readonly code: string;
}

export class MemoryJob {
  readonly transports: MemoryTransport[] = [];
  readonly aborts: AbortRecord[] = [];
  /** Every frame sent, in send order, when `record` is on. */
  readonly sent: SentFrame[] = [];
  /** Ranks in the order they closed (sent BYE). */
  readonly closed: number[] = [];
  record = true;
  tap: Tap | undefined;

  constructor(readonly size: number) {
    for (let r = 0; r < size; r++) this.transports.push(new MemoryTransport(this, r));
  }

  route(from: number, to: number, frame: TransportFrame): void {
    if (this.record) this.sent.push({ from, to, type: frame.type, tag: frame.tag, payload: frame.payload });
    const out = this.tap === undefined ? frame : this.tap(from, to, frame);
    const frames: readonly TransportFrame[] = Array.isArray(out) ? out : [out as TransportFrame];
    const target = this.transports[to] as MemoryTransport;
    for (const f of frames) queueMicrotask(() => target.receive(from, f));
  }

  /** Frames sent from `from` to `to` of `type`. */
  frames(from: number, to: number, type: number): SentFrame[] {
    return this.sent.filter((f) => f.from === from && f.to === to && f.type === type);
  }
}

export class MemoryTransport implements RankTransport {
  readonly size: number;
  failure: PlexusError | undefined;
  closed = false;
  private frameHandler: ((peer: number, frame: TransportFrame) => void) | undefined;
  private failureHandler: ((error: PlexusError) => void) | undefined;
  private readonly early: [number, TransportFrame][] = [];

  constructor(
    private readonly job: MemoryJob,
    readonly rank: number,
  ) {
    this.size = job.size;
  }

  send(peer: number, type: number, tag: number, payload: Uint8Array, epoch = 0n): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.closed) return Promise.reject(new Error(`rank ${this.rank} has closed its transport`));
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      return Promise.reject(new RangeError(`send to rank ${peer} from rank ${this.rank}`));
    }
    const known = type === FrameType.DATA || type === FrameType.COLLECTIVE;
    if (!known && (type < FrameType.CKPT_BEGIN || type > FrameType.RESUME)) {
      return Promise.reject(new RangeError(`frame type ${type} is the transport's own`));
    }
    if (!(payload instanceof Uint8Array) || payload.length > MAX_PAYLOAD) {
      return Promise.reject(new RangeError(`a payload of ${payload.length} bytes is above one frame`));
    }
    if (type === FrameType.DATA ? tag < 0 || tag > MAX_USER_TAG : tag !== 0) {
      return Promise.reject(new RangeError(`tag ${tag} on frame type ${type}`));
    }
    if (type === FrameType.COLLECTIVE && payload.length < 16) {
      return Promise.reject(new RangeError('a COLLECTIVE payload without its header'));
    }
    this.job.route(this.rank, peer, { type, tag, epoch, payload: payload.slice() });
    return Promise.resolve();
  }

  /** Delivers a frame as if `from` had sent it (bypassing every check). */
  inject(from: number, frame: TransportFrame): void {
    queueMicrotask(() => this.receive(from, frame));
  }

  receive(from: number, frame: TransportFrame): void {
    if (this.failure !== undefined || this.closed) return;
    if (this.frameHandler === undefined) this.early.push([from, frame]);
    else this.frameHandler(from, frame);
  }

  onFrame(handler: (peer: number, frame: TransportFrame) => void): void {
    this.frameHandler = handler;
    for (const [from, frame] of this.early.splice(0)) handler(from, frame);
  }

  onFailure(handler: (error: PlexusError) => void): void {
    this.failureHandler = handler;
  }

  fail(error: PlexusError): void {
    if (this.failure !== undefined || this.closed) return;
    this.failure = error;
    this.failureHandler?.(error);
  }

  async abort(reason: number, error: PlexusError): Promise<void> {
    if (this.failure !== undefined) return;
    this.job.aborts.push({ rank: this.rank, reason, code: error.code });
    this.fail(error);
    for (const t of this.job.transports) {
      if (t === this) continue;
      const aborted = sperliError(
        SperliCode.aborted,
        'aborted',
        `rank ${this.rank} aborted the job (reason ${reason}, ${error.code}): ${error.message}`,
        { rank: this.rank, abortReason: reason, abortCode: error.code },
      );
      queueMicrotask(() => t.fail(aborted));
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.job.closed.push(this.rank);
  }
}

/** A job of `size` in-memory ranks and a communicator on each. */
export function memoryJob(size: number): { job: MemoryJob; comms: Comm[] } {
  const job = new MemoryJob(size);
  return { job, comms: job.transports.map((t) => new Comm(t)) };
}

/** Runs `body` on every rank at once and then finalizes them; any rank's error fails the run. */
export async function runJob<T>(
  size: number,
  body: (comm: Comm) => Promise<T>,
  setup?: (job: MemoryJob) => void,
): Promise<{ job: MemoryJob; results: T[] }> {
  const { job, comms } = memoryJob(size);
  setup?.(job);
  const results = await Promise.all(comms.map((c) => body(c)));
  await Promise.all(comms.map((c) => c.finalize()));
  return { job, results };
}

/** Runs `body` on every rank at once and gives back how each rank's call settled. */
export async function settleJob<T>(
  size: number,
  body: (comm: Comm) => Promise<T>,
  setup?: (job: MemoryJob) => void,
): Promise<{ job: MemoryJob; comms: Comm[]; settled: PromiseSettledResult<T>[] }> {
  const { job, comms } = memoryJob(size);
  setup?.(job);
  const settled = await Promise.allSettled(comms.map((c) => body(c)));
  return { job, comms, settled };
}

/** The transports the communicator tests run on. */
export const TRANSPORTS = ['test transport', 'memory-transport'] as const;
export type TransportKind = (typeof TRANSPORTS)[number];

/** Runs `body` on every rank of a job on transport `kind`, then finalizes every rank. */
export async function runOn<T>(kind: TransportKind, size: number, body: (comm: Comm) => Promise<T>): Promise<T[]> {
  if (kind === 'test transport') return (await runJob(size, body)).results;
  const comms = createMemoryTransports(size).map((t) => new Comm(t));
  const results = await Promise.all(comms.map((c) => body(c)));
  await Promise.all(comms.map((c) => c.finalize()));
  return results;
}
