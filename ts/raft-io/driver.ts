/**
 * Runs one RaftNode on real time and a real transport: ticks it every `tickMs`, feeds it
 * the messages the transport receives, and handles each Ready in the order the core asks
 * (docs/raft.md): persist the snapshot, entries and hard state (and wait until they are
 * durable), send the messages, apply the snapshot and committed entries, serve read
 * states, then `advance()`. A leader applies the committed entries it wrote in earlier
 * Readies before it writes the current one's. Readies are handled one at a time, never overlapping.
 *
 * `propose` resolves once the entry is committed and applied, with its index; it fails
 * with PLX_RAFT_NOT_LEADER on a follower, and with PLX_RAFT_PROPOSAL_LOST when another
 * entry takes its index (leadership changed before it was committed) or when the driver
 * stops, and with PLX_RAFT_TIMEOUT (outcome unknown) after `timeoutMs`. `read` resolves
 * once a linearizable read at the returned index is safe.
 *
 * A message from the network whose term is more than `maxTermStep` above this node's, or
 * above MAX_TERM, is dropped (PLX_RAFT_TERM_OUT_OF_RANGE in the log): no correct member
 * sends one, since terms grow by one per election, and adopting it would bring the term
 * near 2^53, where the next election can no longer be persisted. When persisting fails
 * the driver stops and tells `onStop`.
 *
 * Everything it needs from outside is injected (docs/raft.md, "Three folders"): the clock and
 * timers (`clock`, default `systemClock`), the transport (`transport`, or the `send` and
 * `flushSends` functions), the storage writer and the randomness of read contexts
 * (`randomBytes`, default node:crypto's). A step that returns no promise (a synchronous
 * writer or applier) is followed at once, so on a `ManualClock` with a simulated writer the
 * whole order above runs on simulated time: the simulator (ts/sim/raft/) runs this driver.
 */
import { randomBytes as cryptoRandomBytes } from 'node:crypto';
import { type ClockTimers, systemClock, type TimerHandle } from '../core/clock.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { RaftNode } from '../raft/node.js';
import type { RaftStorageWriter } from '../raft/storage.js';
import type { Entry, Message, ReadState, Ready, Snapshot, SoftState } from '../raft/types.js';
import type { RaftTransport } from './transport.js';

/** What a step may return: nothing when it is done at once, a thenable when it finishes later. */
type Step = void | PromiseLike<void>;

export interface RaftApplier {
  /** Applies committed entries in order (both kinds; conf changes are already in effect in the core). */
  apply(entries: readonly Entry[]): void | Promise<void>;
  /** Replaces the application state by a snapshot's. */
  restore?(snapshot: Snapshot): void | Promise<void>;
}

export interface RaftDriverOptions {
  readonly node: RaftNode;
  /** Writes persisted state; `sync` (when present) resolves once the writes are durable. */
  readonly storage: RaftStorageWriter & { sync?(): PromiseLike<void> | void };
  /**
   * Carries the messages: the driver sends through it and takes what it receives (`start`
   * sets its handler to `receive`). Without it, `send` (and `flushSends`) carry them and
   * the caller feeds `receive`.
   */
  readonly transport?: RaftTransport;
  readonly send?: (messages: readonly Message[]) => void;
  /**
   * Makes the messages handed to `send` leave now rather than at the end of the tick (a
   * transport that gathers a tick's messages into one write per peer). The driver calls it
   * after sending a leader's appends ahead of its own journal write, so that followers write
   * theirs meanwhile even when the journal write holds the thread (`inlineSyncWrites`).
   */
  readonly flushSends?: () => void;
  readonly applier: RaftApplier;
  /** Milliseconds per Raft tick. Default 100. */
  readonly tickMs?: number;
  readonly onSoftState?: (s: SoftState) => void;
  /**
   * Called each time the driver is about to look for its next Ready (and so after every
   * Ready it handled): the moment to propose what was gathered while the last one was
   * written, as one entry (group commit). It must not throw.
   */
  readonly beforeReady?: () => void;
  /**
   * How long a proposal or read may wait before it fails with PLX_RAFT_TIMEOUT (its outcome
   * is then unknown: retry with the same idempotency key). Default 10,000 ms.
   */
  readonly timeoutMs?: number;
  readonly logger?: { warn(message: string, details?: Record<string, unknown>): void };
  /** How far above this node's term a received message's term may be. Default MAX_TERM_STEP. */
  readonly maxTermStep?: number;
  /** Called once when the driver stops because persisting failed (the node can go no further). */
  readonly onStop?: (err: unknown) => void;
  /** Time and timers. Default `systemClock`. */
  readonly clock?: ClockTimers;
  /** Where a read's random context comes from. Default node:crypto's randomBytes. */
  readonly randomBytes?: (n: number) => Uint8Array;
  /**
   * Read states of reads this driver did not issue (a caller that called `node.readIndex`
   * itself), handed over after the Ready's committed entries are applied.
   */
  readonly onReadStates?: (states: readonly ReadState[]) => void;
}

/**
 * The default bound on how far a received term may lead this node's: 2^20 elections, far
 * beyond what any cluster holds (each election takes at least an election timeout).
 */
export const MAX_TERM_STEP = 2 ** 20;
/** No term above this is taken from the network (2^48: 2^5 times below 2^53, so the core's term + 1 stays exact). */
export const MAX_TERM = 2 ** 48;

/** Leader-to-follower messages that claim nothing about this node's own durable state. */
const SENT_BEFORE_WRITE: ReadonlySet<Message['type']> = new Set(['MsgApp', 'MsgHeartbeat', 'MsgSnap', 'MsgTimeoutNow']);

interface Waiter {
  readonly term: number;
  /** When it fails with PLX_RAFT_TIMEOUT (the clock's milliseconds). */
  readonly deadline: number;
  resolve(index: number): void;
  reject(err: unknown): void;
}

interface ReadWaiter {
  readonly deadline: number;
  resolve(index: number): void;
  reject(err: unknown): void;
}

function lost(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_RAFT_PROPOSAL_LOST', message, details);
}

/** Runs `k` once `x` is done: at once when `x` is no thenable, else when it fulfils; a rejection goes to `fail`. */
function after(x: Step, k: () => void, fail: (err: unknown) => void): void {
  if (x === undefined || x === null || typeof (x as PromiseLike<void>).then !== 'function') {
    k();
    return;
  }
  (x as PromiseLike<void>).then(k, fail);
}

/** Runs the steps in order, each after the one before is done; `done` after the last. */
function sequence(steps: readonly (() => Step)[], done: () => void, fail: (err: unknown) => void): void {
  let i = 0;
  const next = (): void => {
    while (i < steps.length) {
      const step = steps[i++] as () => Step;
      let x: Step;
      try {
        x = step();
      } catch (err) {
        fail(err);
        return;
      }
      if (x !== undefined && x !== null && typeof (x as PromiseLike<void>).then === 'function') {
        after(
          x,
          () => {
            try {
              next();
            } catch (err) {
              fail(err);
            }
          },
          fail,
        );
        return;
      }
    }
    done();
  };
  next();
}

export class RaftDriver {
  private readonly node: RaftNode;
  private readonly clock: ClockTimers;
  private readonly send: (messages: readonly Message[]) => void;
  private readonly flushSends: (() => void) | undefined;
  private timer: TimerHandle | undefined;
  private running = false;
  private scheduled = false;
  private stopped = false;
  private readonly waiters = new Map<number, Waiter>();
  private readonly reads = new Map<string, ReadWaiter>();
  /** Reads whose index is known, waiting for it to be applied, in the order their states came. */
  private readonly appliedWaiters: { index: number; resolve(): void; reject(err: unknown): void }[] = [];
  /** Settled each time a drain ends (`stop` waits for the one running). */
  private idle: (() => void)[] = [];
  /**
   * One timer for every deadline: armed for the oldest waiter's (waiters are kept in the
   * order they were made, all with the same timeout, so the oldest expires first).
   */
  private deadlineTimer: TimerHandle | undefined;
  private applied = 0;
  private failure: unknown;

  private persisted: { term: number; vote: number };
  /** The last log index written durably by the Readies this driver handled (0 before the first). */
  private durableLast = 0;

  constructor(private readonly opts: RaftDriverOptions) {
    this.node = opts.node;
    this.clock = opts.clock ?? systemClock;
    const transport = opts.transport;
    if (transport) {
      this.send = (ms) => transport.send(ms);
      this.flushSends = () => transport.flush();
    } else {
      if (!opts.send) {
        throw new PlexusError('PLX_RAFT_BAD_CONFIG', 'a Raft driver needs a transport or a send function');
      }
      this.send = opts.send;
      this.flushSends = opts.flushSends;
    }
    const st = opts.node.status();
    this.persisted = { term: st.term, vote: st.vote };
  }

  start(): void {
    if (this.timer !== undefined || this.stopped) return;
    this.opts.transport?.onMessage((m) => this.receive(m));
    const tickMs = this.opts.tickMs ?? 100;
    const tick = (): void => {
      if (this.stopped) return;
      this.timer = this.clock.setTimeout(tick, tickMs);
      this.node.tick();
      this.kick();
    };
    this.timer = this.clock.setTimeout(tick, tickMs);
    this.kick();
  }

  /** Stops ticking and fails every pending proposal and read. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    if (this.running) await new Promise<void>((r) => this.idle.push(r));
    this.opts.beforeReady?.(); // what was gathered fails as a proposal on a stopped node
    this.failAll(lost('the node stopped before the entry was committed'));
  }

  /** Messages dropped because their term was out of range (see `receive`). */
  termRefusals = 0;

  /** The highest entry index applied so far. */
  get appliedIndex(): number {
    return this.applied;
  }

  /** A message from the transport. Messages the core refuses are logged and dropped. */
  receive(m: Message): void {
    if (this.stopped) return;
    // Never below this node's own term: a member already past MAX_TERM still hears its peers.
    const own = this.node.term;
    const bound = Math.max(own, Math.min(own + (this.opts.maxTermStep ?? MAX_TERM_STEP), MAX_TERM));
    if (m.term > bound) {
      this.termRefusals++;
      this.opts.logger?.warn('raft: dropped a message whose term no member reaches', {
        code: 'PLX_RAFT_TERM_OUT_OF_RANGE',
        term: m.term,
        ownTerm: this.node.term,
        type: m.type,
        from: m.from,
      });
      return;
    }
    try {
      this.node.step(m);
    } catch (err) {
      const code = isPlexusError(err) ? err.code : undefined;
      this.opts.logger?.warn('raft: dropped a message', { error: String(err), code, type: m.type, from: m.from });
      return;
    }
    this.kick();
  }

  /** Proposes a payload; resolves with its index once committed and applied. */
  propose(data: Uint8Array): Promise<number> {
    if (this.stopped) return Promise.reject(lost('the node is stopped'));
    let proposed: { index: number; term: number };
    try {
      proposed = this.node.propose(data);
    } catch (err) {
      return Promise.reject(err);
    }
    const { index, term } = proposed;
    const deadline = this.clock.now() + this.timeoutMs;
    const p = new Promise<number>((resolve, reject) => this.waiters.set(index, { term, deadline, resolve, reject }));
    this.armDeadline(deadline);
    this.kick();
    return p;
  }

  /**
   * Makes the driver look for a Ready soon (calling `beforeReady` first), unless it is
   * handling one now: it calls `beforeReady` again once that one is done. False once stopped.
   */
  wake(): boolean {
    this.kick();
    return !this.stopped;
  }

  /** Resolves with an index at or below which a read is linearizable, once it is applied here. */
  read(): Promise<number> {
    if (this.stopped) return Promise.reject(lost('the node is stopped'));
    const ctx = (this.opts.randomBytes ?? cryptoRandomBytes)(8);
    const key = Buffer.from(ctx.buffer, ctx.byteOffset, ctx.byteLength).toString('hex');
    const deadline = this.clock.now() + this.timeoutMs;
    const p = new Promise<number>((resolve, reject) => this.reads.set(key, { deadline, resolve, reject }));
    try {
      this.node.readIndex(ctx);
    } catch (err) {
      this.reads.delete(key);
      return Promise.reject(err);
    }
    this.armDeadline(deadline);
    this.kick();
    return p;
  }

  private kick(): void {
    if (this.scheduled || this.running || this.stopped) return;
    this.scheduled = true;
    const run = (): void => {
      this.scheduled = false;
      this.drain();
    };
    // On wall time, the next turn of the event loop; on another clock, a timer due now.
    if (this.clock === systemClock) setImmediate(run);
    else this.clock.setTimeout(run, 0);
  }

  /** Handles Readies one after another until there is none; a failed write stops the driver. */
  private drain(): void {
    if (this.running || this.failure || this.stopped) return;
    this.running = true;
    const fail = (err: unknown): void => {
      // A failed write leaves the node unable to go on safely: stop, and say why.
      this.failure = err;
      this.opts.logger?.warn('raft: persisting failed; the node stops', { error: String(err) });
      this.stopped = true;
      if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
      this.timer = undefined;
      try {
        this.opts.beforeReady?.();
      } finally {
        this.failAll(err);
        this.opts.onStop?.(err);
        finish();
      }
    };
    const finish = (): void => {
      this.running = false;
      const idle = this.idle;
      this.idle = [];
      for (const r of idle) r();
      if (!this.stopped && this.node.hasReady()) this.kick();
    };
    const loop = (): void => {
      // Readies handled at once (synchronous steps) loop here; one that waits resumes here.
      for (;;) {
        let ready: Ready;
        try {
          this.opts.beforeReady?.();
          if (!this.node.hasReady()) {
            finish();
            return;
          }
          ready = this.node.ready();
        } catch (err) {
          fail(err);
          return;
        }
        let sync = true;
        let done = false;
        this.handle(
          ready,
          () => {
            done = true;
            if (!sync) loop();
          },
          fail,
        );
        sync = false;
        if (!done) return;
        if (this.failure) return;
      }
    };
    loop();
  }

  private handle(rd: Ready, done: () => void, fail: (err: unknown) => void): void {
    const st = this.opts.storage;
    // A change of term or vote must be durable before any message leaves. Otherwise a
    // leader's appends, heartbeats, snapshots and TimeoutNow go out while its own entries of
    // this Ready are written (Raft thesis §10.2.1): nothing in them claims this node's
    // durability, and every commit index they carry covers only entries of earlier Readies,
    // which were durable before this one was taken. Replies that do claim durability (append
    // and vote responses) wait for the write.
    const hs = rd.hardState;
    const termOrVote = hs !== undefined && (hs.term !== this.persisted.term || hs.vote !== this.persisted.vote);
    const early = termOrVote ? [] : rd.messages.filter((m) => SENT_BEFORE_WRITE.has(m.type));
    const late = early.length === 0 ? rd.messages : rd.messages.filter((m) => !SENT_BEFORE_WRITE.has(m.type));
    let committed = rd.committedEntries;
    sequence(
      [
        () => {
          if (early.length > 0) {
            this.send(early);
            this.flushSends?.();
          }
          // A leader applies the committed entries it already holds durably (written by earlier
          // Readies) before it writes this Ready's: their clients need not wait for that write too.
          // Followers write first, so that their acknowledgements leave as early as they can.
          if (committed.length > 0 && !rd.snapshot && !termOrVote && !rd.softState && this.node.role === 'leader') {
            const first = rd.entries[0];
            const bound = first === undefined ? this.durableLast : Math.min(this.durableLast, first.index - 1);
            let k = 0;
            while (k < committed.length && (committed[k] as Entry).index <= bound) k++;
            if (k > 0) {
              const now = k === committed.length ? committed : committed.slice(0, k);
              committed = committed.slice(k);
              return this.applyCommitted(now);
            }
          }
        },
        () => {
          if (rd.snapshot) st.applySnapshot(rd.snapshot);
          if (rd.entries.length > 0) st.append(rd.entries);
          if (hs) st.setHardState(hs);
          // A hard state whose term and vote are unchanged only moved the commit index: it is written
          // (in order, durable with the next sync) but not waited for, as etcd does. Nothing relies on
          // a durable commit index: after a restart the node learns it again from the leader, and an
          // application that applied further than the commit it finds (ReplicatedLog) only re-applies
          // entries it skips as duplicates.
          if ((rd.snapshot || rd.entries.length > 0 || termOrVote) && st.sync) return st.sync();
        },
        () => {
          if (hs) this.persisted = { term: hs.term, vote: hs.vote };
          const last = rd.entries[rd.entries.length - 1];
          if (last !== undefined) this.durableLast = last.index;
          else if (rd.snapshot) this.durableLast = rd.snapshot.metadata.index;
          if (late.length > 0) this.send(late);
          if (rd.softState) this.opts.onSoftState?.(rd.softState);
          if (rd.snapshot) return this.opts.applier.restore?.(rd.snapshot);
        },
        () => {
          if (rd.snapshot) {
            this.applied = Math.max(this.applied, rd.snapshot.metadata.index);
            for (const [i, w] of this.waiters) {
              if (i <= this.applied) {
                this.waiters.delete(i);
                w.reject(lost(`entry ${i} was replaced by a snapshot before it was confirmed here`, { index: i }));
              }
            }
            this.releaseApplied();
          }
          if (committed.length > 0) return this.applyCommitted(committed);
        },
        () => {
          let others: ReadState[] | undefined;
          for (const rs of rd.readStates) {
            const key = Buffer.from(rs.context).toString('hex');
            const r = this.reads.get(key);
            if (!r) {
              if (this.opts.onReadStates) (others ??= []).push(rs);
              continue;
            }
            this.reads.delete(key);
            if (rs.index <= this.applied) r.resolve(rs.index);
            else this.waitApplied(rs.index).then(() => r.resolve(rs.index), r.reject);
          }
          if (others) this.opts.onReadStates?.(others);
          this.node.advance();
        },
      ],
      done,
      fail,
    );
  }

  /** Applies committed entries, then settles the proposals waiting for them. */
  private applyCommitted(entries: readonly Entry[]): Step {
    const settle = (): void => {
      for (const e of entries) {
        this.applied = e.index;
        const w = this.waiters.get(e.index);
        if (!w) continue;
        this.waiters.delete(e.index);
        if (e.term === w.term) w.resolve(e.index);
        else w.reject(lost(`entry ${e.index} was taken by term ${e.term}: leadership changed`, { index: e.index }));
      }
      this.releaseApplied();
    };
    const x = this.opts.applier.apply(entries);
    if (x === undefined || x === null || typeof (x as PromiseLike<void>).then !== 'function') {
      settle();
      return;
    }
    return (x as PromiseLike<void>).then(settle);
  }

  private get timeoutMs(): number {
    return this.opts.timeoutMs ?? 10_000;
  }

  private armDeadline(deadline: number): void {
    if (this.deadlineTimer !== undefined || this.stopped) return;
    this.deadlineTimer = this.clock.setTimeout(this.expire, Math.max(0, deadline - this.clock.now()));
  }

  /** Fails every proposal and read past its deadline (outcome unknown), then re-arms for the oldest left. */
  private readonly expire = (): void => {
    this.deadlineTimer = undefined;
    const now = this.clock.now();
    const ms = this.timeoutMs;
    const timeout = (what: string) =>
      new PlexusError(
        'PLX_RAFT_TIMEOUT',
        `${what} was not confirmed within ${ms} ms; its outcome is unknown: retry with the same idempotency key`,
        { timeoutMs: ms },
      );
    let next = Number.POSITIVE_INFINITY;
    for (const [i, w] of this.waiters) {
      if (w.deadline > now) {
        next = w.deadline;
        break;
      }
      this.waiters.delete(i);
      w.reject(timeout(`entry ${i}`));
    }
    for (const [k, r] of this.reads) {
      if (r.deadline > now) {
        next = Math.min(next, r.deadline);
        break;
      }
      this.reads.delete(k);
      r.reject(timeout('a read'));
    }
    if (Number.isFinite(next)) this.armDeadline(next);
  };

  /** Resolves once the entry at `index` is applied here (rejects when the driver stops first). */
  private waitApplied(index: number): Promise<void> {
    if (this.applied >= index) return Promise.resolve();
    if (this.stopped) return Promise.reject(lost('the node stopped before the read was safe'));
    return new Promise((resolve, reject) => this.appliedWaiters.push({ index, resolve, reject }));
  }

  private releaseApplied(): void {
    if (this.appliedWaiters.length === 0) return;
    const left = this.appliedWaiters.filter((w) => {
      if (w.index > this.applied) return true;
      w.resolve();
      return false;
    });
    this.appliedWaiters.length = 0;
    this.appliedWaiters.push(...left);
  }

  private failAll(err: unknown): void {
    if (this.deadlineTimer !== undefined) this.clock.clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
    for (const w of this.waiters.values()) w.reject(err);
    this.waiters.clear();
    for (const r of this.reads.values()) r.reject(err);
    this.reads.clear();
    const stalled = lost('the node stopped before the read was safe');
    for (const w of this.appliedWaiters) w.reject(stalled);
    this.appliedWaiters.length = 0;
  }
}
