/**
 * What the two sides of the cluster wire (ts/net/http2-wire.ts) share: its options, the
 * HTTP/2 paths and windows, and the polling state (docs/cluster.md, "Polling").
 */
import type { ClockTimers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { Spinner } from '../core/spinner.js';
import type { WireTuning } from './types.js';

export const FRAMES_PATH = '/plexus/frames';
export const CALL_PATH = '/plexus/call';
/**
 * One stream per connection on which the server sends the ACK runs of every frame stream
 * (docs/cluster.md, "ACK runs").
 */
export const ACKS_PATH = '/plexus/ack-runs';
/** HTTP/2 flow-control windows: per stream, and per connection (all its streams). */
export const STREAM_WINDOW = 256 * 1024;
export const SESSION_WINDOW = 16 * 1024 * 1024;

export interface Http2WireOptions extends WireTuning {
  readonly self: string;
  readonly cluster: string;
  /** This node's certificate and key and the cluster CA certificate, PEM. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** Listening host (default 127.0.0.1) and port (default 0: any free port). */
  readonly host?: string;
  readonly port?: number;
  /** Where a peer listens (`host:port`), or undefined when unknown. */
  readonly resolve: (node: string) => string | undefined;
  /** Whether a node is a current member; asked on every new connection. */
  readonly isMember: (node: string) => boolean;
  /**
   * Whether programs outside the cluster may connect with a client certificate of the cluster
   * CA (ts/net/ca.ts, `clientName`; default false). A client is admitted for calls only, as
   * peer `client:<client>`: it never opens frame or ACK streams and is never asked `isMember`.
   */
  readonly admitsClients?: boolean;
  /**
   * TCP connections per peer (default 1). More connections confine a lost packet's stall to
   * the pairs of one connection (HTTP/2's head-of-line blocking), at the price of a write,
   * a read and an ACK write per connection per round: on a lossless link one is fastest.
   */
  readonly poolSize?: number;
  /**
   * How long (ms) the event loop keeps polling its sockets instead of sleeping while frames
   * wait for their ACKs, and after ACKs went out while the sender's next frames are due
   * (docs/cluster.md, "Polling"). Pays for frames answered at once (in-memory mailboxes),
   * costs CPU with durable actor messages. Default 0 (off); a process's edge (the node main,
   * the CLI) passes PLEXUS_WIRE_SPIN_MS here through `wireSpinMs`.
   */
  readonly spinMs?: number;
  /**
   * Time of the delivery deadlines and timers of the resend pauses, the deadline sweep and the
   * call timeouts (default `heldClock`, ts/core/retry.ts: a pending resend or call keeps the
   * process alive; the deadline sweep never does).
   */
  readonly clock?: ClockTimers;
}

/** The environment variable that sets every wire's polling window (ms; 0 turns polling off). */
export const WIRE_SPIN_VARIABLE = 'PLEXUS_WIRE_SPIN_MS';
/** The polling window when neither the option nor the variable sets one (ms): off. */
export const DEFAULT_WIRE_SPIN_MS = 0;
/** The longest polling window accepted (ms). */
export const MAX_WIRE_SPIN_MS = 1000;

/**
 * The wire's polling window: the option, else `env` (the value of PLEXUS_WIRE_SPIN_MS, read by
 * the caller at its edge), else 0 (off); a bad value is refused.
 */
export function wireSpinMs(option: number | undefined, env?: string): number {
  const given = option !== undefined ? option : env !== undefined && env !== '' ? Number(env) : DEFAULT_WIRE_SPIN_MS;
  if (typeof given !== 'number' || !Number.isFinite(given) || given < 0 || given > MAX_WIRE_SPIN_MS) {
    const shown = option !== undefined ? String(option) : `${WIRE_SPIN_VARIABLE}="${env}"`;
    throw new PlexusError(
      'PLX_WIRE_BAD_OPTION',
      `the wire's polling window (spinMs or ${WIRE_SPIN_VARIABLE}) must be a number of ms from 0 to ${MAX_WIRE_SPIN_MS}, got ${shown}`,
      { reason: 'spinMs' },
    );
  }
  return given;
}

/**
 * The wire's polling state, shared by its inbound and outbound sides: the spinner that keeps
 * the event loop polling, and the recent ACK and answer times it goes by.
 */
export class WirePolling {
  /** Keeps the event loop polling while frames wait for ACKs, or frames for the ACKs sent. */
  readonly spinner: Spinner;
  /** Half the polling window (ms): frames poll for their ACKs while `ackMs` is below it. */
  readonly halfMs: number;
  /** Whether polling is on (`spinMs` > 0): only then are ACK and answer times taken. */
  readonly on: boolean;
  /** The recent time from queueing a frame to its ACK (ms), a moving average. */
  ackMs = 0;
  /** The recent time from taking a received frame to answering it (ms), a moving average. */
  answerMs = 0;
  /**
   * A receiver polls for the sender's next frames after its ACKs only while it answers
   * frames within half the window: frames answered after an fsync (durable actor messages)
   * come back slowly, and polling for them would only take CPU from the work they wait for.
   */
  readonly pollAfterAcks = (): boolean => this.answerMs < this.halfMs;

  constructor(spinMs: number) {
    this.spinner = new Spinner(spinMs);
    this.halfMs = spinMs / 2;
    this.on = spinMs > 0;
  }
}
