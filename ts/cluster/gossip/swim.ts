/**
 * SWIM membership with Lifeguard as a pure state machine. It never reads a clock, a socket or
 * a global timer: time comes in through `tick(now)` and `step(message, now)`, randomness from
 * the random source it is given, and messages leave through the `send` callback. A driver
 * calls `tick` at `nextDeadline()` and `step` for every message that arrives (`driveSwim` does
 * both on a `ClockTimers`; the simulator calls them on simulated time).
 *
 * The protocol (Das, Gupta, Motivala, "SWIM", DSN 2002, and hashicorp/memberlist): each probe
 * interval one member, in a shuffled round-robin order, gets a ping; without an ack within
 * the probe timeout, `indirectChecks` random members are asked to ping it (ping-req) and answer
 * with its ack or, when they hear nothing, a nack; without any ack by the end of the interval
 * the member is suspect. A suspect member that hears of it raises its incarnation and says it
 * is alive (refutation); a suspicion that nobody refutes within the suspicion timeout becomes
 * dead. Updates (alive, suspect, dead, left) ride on pings, acks and nacks and go out every
 * gossip interval, each on a bounded number of messages; a push-pull exchanges the whole table
 * with one random member now and then, and joins a new member through a seed.
 *
 * Lifeguard (Dadgar, Phillips, Currey, "Lifeguard: Local Health Awareness for More Accurate
 * Failure Detection", 2018): a local health score raised by failed probes, missed nacks and
 * refutations and lowered by successful probes stretches this member's own probe interval and
 * timeout; a suspicion timeout that starts at its maximum and shrinks as independent members
 * confirm (suspicion.ts); and a ping to a suspect member carries the suspicion, so that it
 * refutes at once.
 */
import {
  type GossipMemberState,
  type GossipMessage,
  type GossipState,
  type GossipUpdate,
  MAX_GOSSIP_NAME,
} from '../../codec/gossip.js';
import { PlexusError } from '../../core/errors.js';
import { type GossipConfig, gossipConfig } from './config.js';
import { retransmitLimit, suspicionConfirmations, suspicionMinMs, suspicionTimeoutMs } from './suspicion.js';

/** A source of uniform integers in [0, n) (ts/sim/rng.ts `SimRandom`, or a seeded one of the driver). */
export interface GossipRandom {
  int(n: number): number;
}

/** A member as this member sees it. */
export interface MemberView {
  readonly name: string;
  readonly state: GossipState;
  readonly incarnation: number;
}

/** A change of a member's state in this member's table. */
export interface MemberChange {
  readonly member: string;
  readonly from: GossipState | undefined;
  readonly to: GossipState;
  readonly incarnation: number;
  readonly at: number;
}

export interface SwimOptions {
  /** This member's name (1 to 255 UTF-8 bytes). */
  readonly name: string;
  readonly config?: Partial<GossipConfig>;
  readonly random: GossipRandom;
  /** Hands a message to the transport; never called re-entrantly into this member. */
  readonly send: (to: string, message: GossipMessage) => void;
  /** The time of creation (the clock's origin is the driver's). */
  readonly now: number;
  readonly onChange?: (change: MemberChange) => void;
}

interface Suspicion {
  readonly k: number;
  readonly minMs: number;
  readonly maxMs: number;
  readonly start: number;
  readonly confirmers: Set<string>;
  /** The first suspecter: a ping to the suspect carries its suspicion under this name. */
  readonly origin: string;
  confirmations: number;
  deadline: number;
}

interface Entry {
  readonly name: string;
  incarnation: number;
  state: GossipState;
  suspicion?: Suspicion;
}

interface Probe {
  readonly target: string;
  readonly seq: number;
  readonly timeoutAt: number;
  readonly endAt: number;
  indirect: boolean;
  acked: boolean;
  expectedNacks: number;
  nacks: number;
}

interface HelperProbe {
  readonly requester: string;
  readonly requesterSeq: number;
  readonly deadline: number;
}

interface Queued {
  readonly update: GossipUpdate;
  transmits: number;
  readonly order: number;
}

const gone = (s: GossipState) => s === 'dead' || s === 'left';

export class Swim {
  readonly name: string;
  readonly config: GossipConfig;
  private readonly random: GossipRandom;
  private readonly send: (to: string, message: GossipMessage) => void;
  private readonly onChange: ((change: MemberChange) => void) | undefined;
  private readonly table = new Map<string, Entry>();
  private incarnationNo = 0;
  private leaving = false;
  private score = 0;
  private seqNo = 0;
  private now: number;
  private probeList: string[] = [];
  private probeAt = 0;
  private probe: Probe | undefined;
  private nextProbeAt: number;
  private nextGossipAt: number;
  private nextPushPullAt: number;
  private seeds: string[] = [];
  private nextJoinAt = Number.POSITIVE_INFINITY;
  private readonly helping = new Map<number, HelperProbe>();
  private readonly queue = new Map<string, Queued>();
  private queueOrder = 0;
  private heardAboutMe = false;

  constructor(opts: SwimOptions) {
    const bytes = new TextEncoder().encode(opts.name).length;
    if (bytes === 0 || bytes > MAX_GOSSIP_NAME) {
      throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', `a member name must be 1 to ${MAX_GOSSIP_NAME} UTF-8 bytes`, {
        field: 'name',
        bytes,
      });
    }
    this.name = opts.name;
    this.config = gossipConfig(opts.config);
    this.random = opts.random;
    this.send = opts.send;
    this.onChange = opts.onChange;
    this.now = opts.now;
    this.nextProbeAt = opts.now + this.config.probeIntervalMs;
    this.nextGossipAt = opts.now + this.config.gossipIntervalMs;
    this.nextPushPullAt = opts.now + this.config.pushPullIntervalMs;
  }

  /** This member's incarnation: raised by each refutation and by leaving. */
  get incarnation(): number {
    return this.incarnationNo;
  }

  /** The local health score (0 is healthy); always 0 with Lifeguard off. */
  get awareness(): number {
    return this.score;
  }

  /** Every member this one knows, itself included, sorted by name. */
  members(): MemberView[] {
    const out: MemberView[] = [
      { name: this.name, state: this.leaving ? 'left' : 'alive', incarnation: this.incarnationNo },
    ];
    for (const e of this.table.values()) out.push({ name: e.name, state: e.state, incarnation: e.incarnation });
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** How this member sees `name`, or undefined when it does not know it. */
  member(name: string): MemberView | undefined {
    if (name === this.name) return this.members().find((m) => m.name === name);
    const e = this.table.get(name);
    return e === undefined ? undefined : { name: e.name, state: e.state, incarnation: e.incarnation };
  }

  /** Joins through `seeds` (push-pull with each), again every probe interval until a member is known. */
  join(seeds: readonly string[], now: number): void {
    this.advanceTime(now);
    this.seeds = seeds.filter((s) => s !== this.name);
    this.nextJoinAt = this.now;
    // The member announces itself: its own alive rides on its first messages.
    this.enqueue({ state: 'alive', member: this.name, incarnation: this.incarnationNo, from: this.name });
    this.tick(now);
  }

  /** Leaves: a `left` update at a raised incarnation goes out at once; probing stops. */
  leave(now: number): void {
    this.advanceTime(now);
    if (this.leaving) return;
    this.leaving = true;
    this.incarnationNo++;
    this.probe = undefined;
    this.enqueue({ state: 'left', member: this.name, incarnation: this.incarnationNo, from: this.name });
    const live = this.liveOthers();
    const fanout = Math.max(this.config.gossipNodes, this.limit());
    for (const to of this.pickRandom(live, fanout)) this.sendTo(to, { kind: 'gossip', from: this.name });
  }

  /** The earliest time `tick` has work to do. */
  nextDeadline(): number {
    let t = Math.min(this.nextGossipAt, this.nextPushPullAt, this.nextJoinAt);
    if (!this.leaving) t = Math.min(t, this.nextProbeAt);
    const p = this.probe;
    if (p !== undefined) t = Math.min(t, p.indirect || p.acked ? p.endAt : p.timeoutAt);
    for (const h of this.helping.values()) t = Math.min(t, h.deadline);
    for (const e of this.table.values()) if (e.suspicion !== undefined) t = Math.min(t, e.suspicion.deadline);
    return t;
  }

  /** Moves time to `now` and does what fell due, in order of due time. */
  tick(now: number): void {
    this.advanceTime(now);
    for (let guard = 0; guard < 10_000; guard++) {
      const due = this.nextDeadline();
      if (due > this.now) return;
      this.fire(due);
    }
  }

  /** Handles one message that arrived at `now`. */
  step(m: GossipMessage, now: number): void {
    this.advanceTime(now);
    this.heardAboutMe = false;
    for (const u of m.updates) this.apply(u);
    // Whoever told this member that it is suspect or dead hears the answer at once.
    if (this.heardAboutMe && m.kind !== 'ping' && m.from !== this.name) {
      this.sendTo(m.from, { kind: 'gossip', from: this.name });
    }
    const sender = this.table.get(m.from);
    if (sender?.state === 'dead') {
      // A member held dead that still talks missed its death notice: it gets it (on the ack of a
      // ping, else at once), and refutes it if it is alive.
      this.enqueue({ state: 'dead', member: sender.name, incarnation: sender.incarnation, from: this.name });
      if (m.kind !== 'ping') this.sendTo(m.from, { kind: 'gossip', from: this.name });
    }
    switch (m.kind) {
      case 'ping':
        if (m.target !== this.name) return;
        this.sendTo(m.from, { kind: 'ack', from: this.name, seq: m.seq });
        return;
      case 'ping-req': {
        const seq = this.nextSeq();
        this.helping.set(seq, {
          requester: m.from,
          requesterSeq: m.seq,
          deadline: this.now + this.scaled(this.config.probeTimeoutMs),
        });
        this.sendTo(m.target, { kind: 'ping', from: this.name, seq, target: m.target });
        return;
      }
      case 'ack': {
        const p = this.probe;
        if (p !== undefined && p.seq === m.seq && !p.acked) {
          p.acked = true;
          if (!p.indirect) this.adjustAwareness(-1);
          return;
        }
        const h = this.helping.get(m.seq);
        if (h !== undefined) {
          this.helping.delete(m.seq);
          this.sendTo(h.requester, { kind: 'ack', from: this.name, seq: h.requesterSeq });
        }
        return;
      }
      case 'nack': {
        const p = this.probe;
        if (p !== undefined && p.seq === m.seq) p.nacks++;
        return;
      }
      case 'gossip':
        return;
      case 'push-pull':
        for (const s of m.states) this.merge(s, m.from);
        if (!m.reply) {
          this.sendTo(m.from, { kind: 'push-pull', from: this.name, join: false, reply: true, states: this.states() });
        }
        return;
    }
  }

  // --- time -------------------------------------------------------------------------------

  private advanceTime(now: number): void {
    if (now > this.now) this.now = now;
  }

  private fire(due: number): void {
    const p = this.probe;
    if (p !== undefined && !p.indirect && p.timeoutAt <= due && !p.acked) {
      this.sendIndirect(p);
      return;
    }
    if (p !== undefined && (p.indirect || p.acked) && p.endAt <= due) {
      this.probe = undefined;
      this.concludeProbe(p);
      return;
    }
    for (const [seq, h] of this.helping) {
      if (h.deadline <= due) {
        this.helping.delete(seq);
        this.sendTo(h.requester, { kind: 'nack', from: this.name, seq: h.requesterSeq });
        return;
      }
    }
    for (const e of this.table.values()) {
      if (e.suspicion !== undefined && e.suspicion.deadline <= due) {
        this.apply({ state: 'dead', member: e.name, incarnation: e.incarnation, from: this.name });
        return;
      }
    }
    if (!this.leaving && this.nextProbeAt <= due) {
      this.startProbe();
      return;
    }
    if (this.nextGossipAt <= due) {
      this.nextGossipAt = due + this.config.gossipIntervalMs;
      this.gossipRound();
      return;
    }
    if (this.nextPushPullAt <= due) {
      this.nextPushPullAt = due + this.config.pushPullIntervalMs;
      const live = this.liveOthers();
      if (live.length > 0) this.pushPull(live[this.random.int(live.length)]!, false);
      // And one member held dead, if any: after a partition heals, the two sides find each other
      // again (each refutes the other's death notice about it).
      const dead = [...this.table.values()].filter((e) => e.state === 'dead').map((e) => e.name);
      if (dead.length > 0) this.pushPull(dead[this.random.int(dead.length)]!, false);
      return;
    }
    if (this.nextJoinAt <= due) {
      if (this.liveOthers().length > 0 || this.seeds.length === 0) {
        this.nextJoinAt = Number.POSITIVE_INFINITY;
      } else {
        this.nextJoinAt = due + this.config.probeIntervalMs;
        for (const s of this.seeds) this.pushPull(s, true);
      }
    }
  }

  // --- probing ----------------------------------------------------------------------------

  private startProbe(): void {
    const start = this.nextProbeAt;
    const interval = this.scaled(this.config.probeIntervalMs);
    this.nextProbeAt = start + interval;
    const target = this.nextTarget();
    if (target === undefined) return;
    const seq = this.nextSeq();
    this.probe = {
      target,
      seq,
      timeoutAt: start + this.scaled(this.config.probeTimeoutMs),
      endAt: start + interval,
      indirect: false,
      acked: false,
      expectedNacks: 0,
      nacks: 0,
    };
    this.sendTo(target, { kind: 'ping', from: this.name, seq, target }, target);
  }

  private sendIndirect(p: Probe): void {
    p.indirect = true;
    const helpers = this.pickRandom(
      this.liveOthers().filter((n) => n !== p.target && this.table.get(n)?.state === 'alive'),
      this.config.indirectChecks,
    );
    p.expectedNacks = helpers.length;
    for (const h of helpers) this.sendTo(h, { kind: 'ping-req', from: this.name, seq: p.seq, target: p.target });
  }

  private concludeProbe(p: Probe): void {
    if (p.acked) return;
    // Lifeguard: a failed probe, and every helper's missing nack, counts against this member.
    this.adjustAwareness(p.expectedNacks > 0 ? Math.max(0, p.expectedNacks - p.nacks) : 1);
    const e = this.table.get(p.target);
    if (e === undefined || gone(e.state)) return;
    this.apply({ state: 'suspect', member: p.target, incarnation: e.incarnation, from: this.name });
  }

  /** The next member in the shuffled round-robin order; reshuffled after each pass. */
  private nextTarget(): string | undefined {
    for (let pass = 0; pass < 2; pass++) {
      while (this.probeAt < this.probeList.length) {
        const name = this.probeList[this.probeAt++]!;
        const e = this.table.get(name);
        if (e !== undefined && !gone(e.state)) return name;
      }
      this.probeList = [...this.table.values()].filter((e) => !gone(e.state)).map((e) => e.name);
      this.shuffle(this.probeList);
      this.probeAt = 0;
    }
    return undefined;
  }

  private scaled(ms: number): number {
    return ms * (this.score + 1);
  }

  private adjustAwareness(delta: number): void {
    if (!this.config.lifeguard) return;
    this.score = Math.min(this.config.awarenessMaxMultiplier - 1, Math.max(0, this.score + delta));
  }

  // --- membership updates -----------------------------------------------------------------

  private apply(u: GossipUpdate): void {
    if (u.member === this.name) {
      this.aboutMe(u);
      return;
    }
    const e = this.table.get(u.member);
    switch (u.state) {
      case 'alive': {
        if (e === undefined) {
          this.table.set(u.member, { name: u.member, incarnation: u.incarnation, state: 'alive' });
          // A new member goes to a random place of the probe order.
          this.probeList.splice(this.random.int(this.probeList.length + 1), 0, u.member);
          this.changed(u.member, undefined, 'alive', u.incarnation);
          this.enqueue(u);
          return;
        }
        if (u.incarnation <= e.incarnation) return;
        this.set(e, 'alive', u.incarnation);
        this.enqueue(u);
        return;
      }
      case 'suspect': {
        if (e === undefined || u.incarnation < e.incarnation || gone(e.state)) return;
        if (e.state === 'suspect' && e.suspicion !== undefined) {
          if (u.incarnation > e.incarnation) e.incarnation = u.incarnation;
          if (this.confirm(e.suspicion, u.from)) this.enqueue(u);
          return;
        }
        this.set(e, 'suspect', u.incarnation);
        e.suspicion = this.newSuspicion(u.from);
        this.enqueue(u);
        return;
      }
      case 'dead':
      case 'left': {
        if (e === undefined) return;
        if (u.incarnation < e.incarnation) return;
        if (gone(e.state) && u.incarnation <= e.incarnation) return;
        this.set(e, u.state, u.incarnation);
        this.enqueue(u);
        return;
      }
    }
  }

  private aboutMe(u: GossipUpdate): void {
    if (u.state === 'alive') return;
    if (this.leaving) return;
    this.heardAboutMe = true;
    if (u.incarnation < this.incarnationNo) {
      // A stale suspicion: its sender missed the refutation, which goes out again as it was.
      this.enqueue({ state: 'alive', member: this.name, incarnation: this.incarnationNo, from: this.name });
      return;
    }
    // Refutation: a suspicion or a death notice about this member at its incarnation or above.
    this.incarnationNo = u.incarnation + 1;
    this.adjustAwareness(1);
    this.enqueue({ state: 'alive', member: this.name, incarnation: this.incarnationNo, from: this.name });
  }

  /** A push-pull entry: a remote `dead` is taken as a suspicion, so the member may refute it. */
  private merge(s: GossipMemberState, from: string): void {
    const state = s.state === 'dead' ? 'suspect' : s.state;
    this.apply({ state, member: s.name, incarnation: s.incarnation, from });
  }

  private set(e: Entry, to: GossipState, incarnation: number): void {
    const from = e.state;
    e.state = to;
    e.incarnation = incarnation;
    if (to !== 'suspect') e.suspicion = undefined;
    if (from !== to) this.changed(e.name, from, to, incarnation);
  }

  private changed(member: string, from: GossipState | undefined, to: GossipState, incarnation: number): void {
    this.onChange?.({ member, from, to, incarnation, at: this.now });
  }

  private newSuspicion(origin: string): Suspicion {
    const n = this.liveCount();
    const c = this.config;
    const minMs = suspicionMinMs(c.suspicionMult, n, c.probeIntervalMs);
    const k = c.lifeguard ? suspicionConfirmations(c.suspicionMult, n) : 0;
    const maxMs = c.lifeguard ? c.suspicionMaxTimeoutMult * minMs : minMs;
    const timeout = suspicionTimeoutMs(0, k, minMs, maxMs);
    return {
      k,
      minMs,
      maxMs,
      start: this.now,
      confirmers: new Set([origin]),
      origin,
      confirmations: 0,
      deadline: this.now + timeout,
    };
  }

  /** Counts an independent confirmation; true when it was new. */
  private confirm(s: Suspicion, from: string): boolean {
    if (s.confirmations >= s.k || s.confirmers.has(from)) return false;
    s.confirmers.add(from);
    s.confirmations++;
    s.deadline = s.start + suspicionTimeoutMs(s.confirmations, s.k, s.minMs, s.maxMs);
    return true;
  }

  // --- dissemination ----------------------------------------------------------------------

  private enqueue(u: GossipUpdate): void {
    this.queue.set(u.member, { update: u, transmits: 0, order: this.queueOrder++ });
  }

  private limit(): number {
    return retransmitLimit(this.config.retransmitMult, this.liveCount());
  }

  /** Updates for one message: the least sent first; each counts a transmission. */
  private piggyback(about?: string): GossipUpdate[] {
    const out: GossipUpdate[] = [];
    let buddy = false;
    if (about !== undefined && this.config.lifeguard) {
      // Lifeguard's buddy system: a ping to a suspect member tells it so.
      const e = this.table.get(about);
      if (e?.state === 'suspect' && e.suspicion !== undefined) {
        out.push({ state: 'suspect', member: about, incarnation: e.incarnation, from: e.suspicion.origin });
        buddy = true;
      }
    }
    if (this.queue.size === 0) return out;
    const limit = this.limit();
    const items = [...this.queue.values()].sort((a, b) => a.transmits - b.transmits || a.order - b.order);
    for (const q of items) {
      if (out.length >= this.config.maxPiggyback) break;
      if (buddy && q.update.member === about && q.update.state === 'suspect') continue;
      out.push(q.update);
      q.transmits++;
      if (q.transmits >= limit) this.queue.delete(q.update.member);
    }
    return out;
  }

  private gossipRound(): void {
    if (this.queue.size === 0) return;
    for (const to of this.pickRandom(this.liveOthers(), this.config.gossipNodes)) {
      this.sendTo(to, { kind: 'gossip', from: this.name });
      if (this.queue.size === 0) return;
    }
  }

  private pushPull(to: string, join: boolean): void {
    this.sendTo(to, { kind: 'push-pull', from: this.name, join, reply: false, states: this.states() });
  }

  private states(): GossipMemberState[] {
    return this.members().map((m) => ({ name: m.name, incarnation: m.incarnation, state: m.state }));
  }

  /** Sends `m` with piggybacked updates (Omit keeps the union's variants). */
  private sendTo(to: string, m: DistributiveOmit<GossipMessage, 'updates'>, about?: string): void {
    this.send(to, { ...m, updates: this.piggyback(about) } as GossipMessage);
  }

  // --- helpers ----------------------------------------------------------------------------

  private liveOthers(): string[] {
    const out: string[] = [];
    for (const e of this.table.values()) if (!gone(e.state)) out.push(e.name);
    return out;
  }

  /** Members not dead or left, this one included. */
  private liveCount(): number {
    return this.liveOthers().length + 1;
  }

  private nextSeq(): number {
    this.seqNo = (this.seqNo + 1) >>> 0;
    return this.seqNo;
  }

  private shuffle(a: string[]): void {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.random.int(i + 1);
      [a[i], a[j]] = [a[j]!, a[i]!];
    }
  }

  private pickRandom(from: readonly string[], k: number): string[] {
    const a = [...from];
    const out: string[] = [];
    while (out.length < k && a.length > 0) out.push(a.splice(this.random.int(a.length), 1)[0]!);
    return out;
  }
}

type DistributiveOmit<T, K extends keyof T> = T extends unknown ? Omit<T, K> : never;
