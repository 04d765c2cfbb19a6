/**
 * The ACK stream of one server connection of the cluster wire (docs/cluster.md, "ACK runs").
 */
import type { ServerHttp2Stream } from 'node:http2';
import { ACK_RUN_SIZE, type AckStatusCode, encodeAckRun, MAX_ACK_RUN } from '../codec/cluster-frame.js';
import type { Spinner } from '../core/spinner.js';

/** ACK runs a connection's ACK stream gathers before it writes them at once (4 KiB). */
const SINK_RUNS = 512;
/**
 * ACKs of a turn of the event loop that go out before the turn ends: the first write after
 * this many frames, each next one after twice as many as the one before, up to `ACK_EARLY_MAX`.
 * The sender can then send its next frames while this side still stores the rest of the turn's.
 */
const ACK_EARLY = 8;
const ACK_EARLY_MAX = 64;

/**
 * The ACK stream of one server connection: the ACKs of all its frame streams produced within
 * one turn of the event loop go out in one write, as ACK runs (consecutive ACKs of one
 * stream with one status make one 8-byte run).
 */
export class AckSink {
  private buf: Buffer | undefined;
  private at = 0;
  private lastSid = -1;
  private lastStatus = -1;
  private lastCount = 0;
  /** Frames acknowledged since the last write. */
  private frames = 0;
  private scheduled = false;
  private early = ACK_EARLY;
  private readonly flushLater = () => {
    this.scheduled = false;
    this.early = ACK_EARLY;
    this.flush();
  };

  /** Whether this sink holds the wire's spinner: it sent ACKs and no frame came since. */
  private holding = false;

  constructor(
    readonly stream: ServerHttp2Stream,
    private readonly spinner: Spinner,
    /** Whether to poll for the sender's next frames after ACKs go out. */
    private readonly pollAfterAcks: () => boolean,
  ) {}

  /** Frames came on one of the connection's streams: the wait that the last ACKs began is over. */
  arrived(): void {
    if (!this.holding) return;
    this.holding = false;
    this.spinner.release();
  }

  /** The ACK stream closed: nothing waits on it any more. */
  closed(): void {
    this.arrived();
  }

  get open(): boolean {
    return !this.stream.destroyed && !this.stream.closed && this.stream.writable;
  }

  push(sid: number, status: AckStatusCode): void {
    const early = ++this.frames >= this.early;
    this.pushRun(sid, status);
    if (early) {
      this.flush();
      this.early = Math.min(this.early * 2, ACK_EARLY_MAX);
    }
  }

  private pushRun(sid: number, status: AckStatusCode): void {
    if (sid === this.lastSid && status === this.lastStatus && this.lastCount < MAX_ACK_RUN) {
      const c = ++this.lastCount;
      const b = this.buf!;
      b[this.at - 4] = c & 0xff;
      b[this.at - 3] = c >>> 8;
      return;
    }
    if (this.buf === undefined) this.buf = Buffer.allocUnsafe(SINK_RUNS * ACK_RUN_SIZE);
    encodeAckRun(this.buf, this.at, sid, 1, status);
    this.at += ACK_RUN_SIZE;
    this.lastSid = sid;
    this.lastStatus = status;
    this.lastCount = 1;
    if (this.at === SINK_RUNS * ACK_RUN_SIZE) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushLater);
    }
  }

  flush(): void {
    this.frames = 0;
    if (this.at === 0 || this.buf === undefined) return;
    const out = this.buf.subarray(0, this.at);
    this.buf = undefined;
    this.at = 0;
    this.lastSid = -1;
    if (!this.open) return;
    this.stream.write(out);
    // The sender's next frames usually follow its ACKs closely: poll for them for a while.
    if (!this.holding && this.pollAfterAcks()) {
      this.holding = true;
      this.spinner.hold();
    }
  }
}
