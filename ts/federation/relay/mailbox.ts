/**
 * The receiving relay mailbox of one provisioned actor: it picks messages up from the actor's
 * mediator (Message Pickup 3.0), runs each through the admission pipeline, and acknowledges it to
 * the mediator only once its outcome is durable: the turn that processed it is journaled, or it
 * was dropped as a duplicate, or its refusal is recorded in the inbound log. A crash anywhere
 * before the acknowledgement makes the mediator deliver the message again, and the second
 * delivery is deduplicated: redelivery, never loss.
 *
 * Two ways in, one lane: batches fetched over HTTP (`pump`, `drain`, and polling) and messages
 * pushed live over a WebSocket (`start()` in live mode). Every message, whichever way it came,
 * is admitted on one serial lane, in arrival order, so a message delivered both ways is never
 * admitted twice at once; the mediator ids whose outcome is already durable are remembered
 * (bounded) and only acknowledged again when they come back.
 */

import { PlexusError } from '../../core/errors.js';
import type { Admission, AdmissionOutcome, AdmittingActor } from '../admission.js';
import type { LiveSession, PickedUp, PickupClient } from '../pickup/client.js';
import { probeWebSocket } from './ws-probe.js';

export interface PumpResult {
  /** Messages picked up. */
  readonly picked: number;
  readonly admitted: number;
  readonly refused: number;
  /** Messages whose outcome was already durable here (delivered again): acknowledged, not admitted again. */
  readonly redelivered: number;
  /** Mediator ids acknowledged. */
  readonly acknowledged: readonly string[];
}

export interface RelayMailboxOptions {
  /** Messages per delivery-request (default 50). */
  readonly batch?: number;
  /** Called with the ids about to be acknowledged, after their outcomes are durable (tests, metrics). */
  readonly beforeAcknowledge?: (ids: readonly string[]) => void | Promise<void>;
  /** Observes each outcome. */
  readonly onOutcome?: (o: AdmissionOutcome, picked: PickedUp) => void;
  /** Mediator ids remembered as durable, to acknowledge a redelivery without admitting it again (default 8192). */
  readonly rememberIds?: number;
}

/**
 * How `start()` picks messages up:
 * - `auto` (default): live when the mediator accepts a WebSocket, else polling;
 * - `live`: live over a WebSocket, polling in batches only while the socket is down;
 * - `poll`: batches over HTTP every `intervalMs`.
 */
export type MailboxMode = 'auto' | 'live' | 'poll';

/** What a started mailbox is doing: taking live deliveries, or polling (also while reconnecting). */
export type MailboxState = 'stopped' | 'live' | 'polling';

export interface MailboxStartOptions {
  readonly mode?: MailboxMode;
  /** Pause between polls that found nothing, or after a failed poll (default 1000 ms). */
  readonly intervalMs?: number;
  /** First live reconnect delay (default 100 ms), doubled up to `maxBackoffMs` (default 5 s). */
  readonly backoffMs?: number;
  readonly maxBackoffMs?: number;
  /** Failures (a lost connection, a failed poll, a failed append); the mailbox keeps going. */
  readonly onError?: (e: unknown) => void;
  /** Each change of state. */
  readonly onState?: (state: MailboxState) => void;
}

/** Counters since construction. */
export interface MailboxStats {
  /** Messages that came pushed over the WebSocket. */
  liveDelivered: number;
  /** Messages that came in HTTP batches. */
  polled: number;
  admitted: number;
  refused: number;
  /** Deliveries of a message whose outcome was already durable: acknowledged again, not admitted. */
  redelivered: number;
  /** Live deliveries left unacknowledged while the mailbox caught up over HTTP. */
  deferred: number;
  /** Mediator ids acknowledged (an id acknowledged twice counts twice). */
  acknowledged: number;
  /** Live connections opened, and lost. */
  liveConnects: number;
  liveDrops: number;
  /** Failures while started: polls (a failed admission in one included), live admissions, acknowledgements. */
  failures: number;
}

const MAX_ACK_IDS = 1000;
/** Live acknowledgements wait for the lane to run dry, or for this many ids. */
const ACK_BATCH = 50;
/** How long `start()` waits for the first live connection before it polls. */
const FIRST_CONNECT_MS = 2000;

function badOption(message: string): never {
  throw new PlexusError('PLX_RELAY_MAILBOX_OPTIONS', message, {});
}

function positiveMs(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isFinite(v) || v < 1 || v > 3_600_000) badOption(`${name} must be 1..3600000 ms, got ${v}`);
  return v;
}

/** A bounded set that forgets the oldest member first. */
class RecentIds {
  private readonly ids = new Set<string>();
  constructor(private readonly capacity: number) {}
  has(id: string): boolean {
    return this.ids.has(id);
  }
  add(id: string): void {
    this.ids.delete(id);
    this.ids.add(id);
    if (this.ids.size > this.capacity) this.ids.delete(this.ids.values().next().value as string);
  }
}

export class RelayMailbox {
  /** Counters since construction. */
  readonly stats: MailboxStats = {
    liveDelivered: 0,
    polled: 0,
    admitted: 0,
    refused: 0,
    redelivered: 0,
    deferred: 0,
    acknowledged: 0,
    liveConnects: 0,
    liveDrops: 0,
    failures: 0,
  };
  private readonly durable: RecentIds;
  private lane: Promise<unknown> = Promise.resolve();
  private running?: Promise<void>;
  private stopRequested = false;
  private session?: LiveSession;
  private current: MailboxState = 'stopped';
  private startOpts: MailboxStartOptions = {};
  /**
   * Set when a live delivery could not be made durable or acknowledged: live deliveries are then
   * left unacknowledged until a poll over HTTP has caught up with everything queued.
   */
  private catchingUp = false;
  private toAck: string[] = [];
  /** Live deliveries on the lane, not yet through admission. */
  private liveQueued = 0;
  private flushing?: Promise<void>;
  private wake?: () => void;

  constructor(
    readonly actor: AdmittingActor,
    readonly client: PickupClient,
    private readonly admission: Admission,
    private readonly opts: RelayMailboxOptions = {},
  ) {
    const remember = opts.rememberIds ?? 8192;
    if (!Number.isSafeInteger(remember) || remember < 1 || remember > 1_000_000) {
      badOption(`rememberIds must be 1..1000000, got ${remember}`);
    }
    this.durable = new RecentIds(remember);
  }

  /** What the started mailbox is doing now. */
  get state(): MailboxState {
    return this.current;
  }

  /** Asks the mediator for mediation and registers the actor's DID with it. */
  async connect(): Promise<void> {
    await this.client.requestMediation();
    await this.client.addRecipients([this.actor.did]);
  }

  /** Runs `fn` on the lane, after everything queued before it. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lane.then(fn, fn);
    this.lane = run.catch(() => {});
    return run;
  }

  /**
   * Admits one message (on the lane); resolves once its outcome is durable. A message already
   * durable is not admitted again. Throws when the outcome could not be made durable.
   */
  private async admit(m: PickedUp): Promise<AdmissionOutcome | 'again'> {
    if (this.durable.has(m.id)) {
      this.stats.redelivered++;
      return 'again';
    }
    const o = await this.admission.receive(this.actor, m.envelope);
    this.durable.add(m.id);
    if (o.kind === 'admitted') this.stats.admitted++;
    else this.stats.refused++;
    this.opts.onOutcome?.(o, m);
    return o;
  }

  /**
   * One round: fetch a batch, admit each message in order, acknowledge those whose outcome is
   * durable. A message whose outcome could not be made durable (the node stopping, a failed
   * journal append) is not acknowledged, and the round stops there with that error.
   */
  async pump(): Promise<PumpResult> {
    const limit = this.opts.batch ?? 50;
    const r = await this.serial(async () => {
      const batch = await this.client.fetch(limit);
      this.stats.polled += batch.length;
      const done: string[] = [];
      let admitted = 0;
      let refused = 0;
      let redelivered = 0;
      let failure: unknown;
      for (const m of batch) {
        try {
          const o = await this.admit(m);
          if (o === 'again') redelivered++;
          else if (o.kind === 'admitted') admitted++;
          else refused++;
          done.push(m.id);
        } catch (e) {
          failure = e;
          break;
        }
      }
      // Everything queued before this fetch is now durable here: live deliveries may resume.
      if (failure === undefined && batch.length < limit) this.catchingUp = false;
      return { picked: batch.length, admitted, refused, redelivered, done, failure };
    });
    if (r.done.length > 0) {
      await this.opts.beforeAcknowledge?.(r.done);
      await this.client.acknowledge(r.done);
      this.stats.acknowledged += r.done.length;
    }
    if (r.failure !== undefined) throw r.failure;
    return {
      picked: r.picked,
      admitted: r.admitted,
      refused: r.refused,
      redelivered: r.redelivered,
      acknowledged: r.done,
    };
  }

  /** Pumps until the mediator holds nothing for the actor; returns the rounds' totals. */
  async drain(): Promise<PumpResult> {
    let picked = 0;
    let admitted = 0;
    let refused = 0;
    let redelivered = 0;
    const acknowledged: string[] = [];
    for (;;) {
      const r = await this.pump();
      picked += r.picked;
      admitted += r.admitted;
      refused += r.refused;
      redelivered += r.redelivered;
      acknowledged.push(...r.acknowledged);
      if (r.picked === 0) return { picked, admitted, refused, redelivered, acknowledged };
    }
  }

  /**
   * Picks messages up until `stop()`. Live mode (the default when the mediator accepts a
   * WebSocket) takes each pushed message through admission and acknowledges it once durable;
   * while the socket is down it polls in batches, and it reconnects with doubling backoff. A
   * number is taken as `{ intervalMs }`.
   */
  start(options: MailboxStartOptions | number = {}, onError?: (e: unknown) => void): void {
    if (this.running !== undefined) return;
    const o: MailboxStartOptions =
      typeof options === 'number'
        ? { intervalMs: options, ...(onError ? { onError } : {}) }
        : { ...options, ...(onError ? { onError } : {}) };
    const mode = o.mode ?? 'auto';
    if (mode !== 'auto' && mode !== 'live' && mode !== 'poll')
      badOption(`mode must be auto, live or poll, got ${mode}`);
    const intervalMs = positiveMs('intervalMs', o.intervalMs, 1000);
    positiveMs('backoffMs', o.backoffMs, 100);
    positiveMs('maxBackoffMs', o.maxBackoffMs, 5000);
    this.startOpts = o;
    this.stopRequested = false;
    this.catchingUp = false;
    this.setState('polling');
    this.running = this.run(mode, intervalMs);
  }

  private setState(s: MailboxState): void {
    if (s === this.current) return;
    this.current = s;
    this.startOpts.onState?.(s);
  }

  private report(e: unknown): void {
    this.startOpts.onError?.(e);
  }

  private nudge(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** Waits up to `ms` on the client's timers, or until nudged (a state change, a catch-up, stop). */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timers = this.client.timers;
      const wake = (): void => {
        timers.clearTimeout(t);
        if (this.wake === wake) this.wake = undefined;
        resolve();
      };
      const t = timers.setTimeout(wake, ms);
      this.wake = wake;
    });
  }

  private async run(mode: MailboxMode, intervalMs: number): Promise<void> {
    let live = mode === 'live';
    if (mode === 'auto') {
      // Only a definite refusal of the upgrade means no WebSocket; an unreachable mediator may
      // still offer one once it is back.
      live = (await probeWebSocket(this.client.wsUrl, this.client.timeoutMs, this.client.timers)) !== 'no';
    }
    if (live && !this.stopRequested) {
      const session = this.openLive();
      // Give the first connection a moment before polling, so queued messages come live.
      await Promise.race([session.ready, this.pause(Math.max(intervalMs, FIRST_CONNECT_MS))]);
      this.nudge();
    }
    while (!this.stopRequested) {
      if (this.session?.connected && !this.catchingUp) {
        this.setState('live');
        await this.pause(intervalMs);
        continue;
      }
      this.setState('polling');
      let picked = 0;
      try {
        picked = (await this.pump()).picked;
      } catch (e) {
        this.stats.failures++;
        this.report(e);
      }
      if (picked === 0 && !this.stopRequested) await this.pause(intervalMs);
    }
  }

  private openLive(): LiveSession {
    const o = this.startOpts;
    const session = this.client.live((m) => this.onLive(m), {
      onError: (e) => this.report(e),
      onState: (s) => {
        if (s === 'open') this.stats.liveConnects++;
        else this.stats.liveDrops++;
        this.nudge();
      },
      backoffMs: o.backoffMs ?? 100,
      maxBackoffMs: o.maxBackoffMs ?? 5000,
    });
    this.session = session;
    return session;
  }

  /**
   * A live delivery: queued on the lane (in order) and acknowledged once durable. It returns at
   * once, so a delivery's messages queue up together and their acknowledgements go as one
   * messages-received when the lane runs dry (or every ACK_BATCH ids); the mediator's live
   * window bounds how many wait.
   */
  private onLive(m: PickedUp): void {
    if (this.stopRequested) return;
    this.stats.liveDelivered++;
    this.liveQueued++;
    void this.serial(async () => {
      // While catching up, the HTTP poll takes this message (it is still queued): leave it.
      if (this.catchingUp) {
        this.stats.deferred++;
        return false;
      }
      await this.admit(m);
      return true;
    })
      .then(
        (ok) => {
          if (ok) this.toAck.push(m.id);
        },
        (e: unknown) => {
          this.stats.failures++;
          this.report(e);
          this.catchUp();
        },
      )
      .finally(() => {
        this.liveQueued--;
        if (this.toAck.length >= ACK_BATCH || (this.liveQueued === 0 && this.toAck.length > 0)) void this.flushAcks();
      });
  }

  /** Stops taking live deliveries until a poll over HTTP has caught up. */
  private catchUp(): void {
    this.catchingUp = true;
    this.nudge();
  }

  /** Acknowledges the ids waiting, one request at a time (what gathers meanwhile goes next). */
  private flushAcks(): Promise<void> {
    if (this.flushing !== undefined) return this.flushing;
    this.flushing = (async () => {
      try {
        while (this.toAck.length > 0) {
          const ids = this.toAck.splice(0, MAX_ACK_IDS);
          try {
            await this.opts.beforeAcknowledge?.(ids);
            const s = this.session;
            if (s !== undefined) await s.acknowledge(ids);
            else await this.client.acknowledge(ids);
            this.stats.acknowledged += ids.length;
          } catch (e) {
            // Not acknowledged: the mediator delivers these again (after a reconnect, or to the
            // catch-up poll) and, being remembered as durable, they are only acknowledged then.
            this.stats.failures++;
            this.report(e);
            this.catchUp();
          }
        }
      } finally {
        this.flushing = undefined;
      }
    })();
    return this.flushing;
  }

  async stop(): Promise<void> {
    this.stopRequested = true;
    this.nudge();
    await this.running;
    await this.session?.close();
    await this.lane;
    await this.flushAcks();
    this.session = undefined;
    this.running = undefined;
    this.setState('stopped');
  }
}
