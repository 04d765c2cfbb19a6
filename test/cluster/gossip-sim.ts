/**
 * Gossip members (ts/cluster/gossip/swim.ts) on simulated time: every member is a `Swim` whose
 * messages are encoded (ts/codec/gossip.ts), carried by the seeded SimNetwork with random
 * delays, and decoded at the receiver. A run is a pure function of its seed. Faults: a member
 * killed (it stops, its messages in flight are lost), a lossy link (messages to and from one
 * member lost at a rate), a starved member (paused in bursts; on resume its overdue timers run
 * before the messages that queued up, as in a process that got no CPU).
 */
import type { GossipConfig } from '../../ts/cluster/gossip/config.js';
import { type MemberChange, Swim } from '../../ts/cluster/gossip/swim.js';
import { decodeGossip, encodeGossip, type GossipState } from '../../ts/codec/gossip.js';
import { SimNetwork } from '../../ts/sim/network.js';
import { SimRandom } from '../../ts/sim/rng.js';

export interface ObservedChange extends MemberChange {
  readonly observer: string;
}

interface SimMember {
  readonly id: number;
  readonly name: string;
  readonly swim: Swim;
  killed: boolean;
  /** Paused until this time (a starved member); 0 when running. */
  pausedUntil: number;
  inbox: Uint8Array[];
  /** Starved members: when the next pause starts. */
  nextPauseAt: number;
}

export interface GossipSimOptions {
  readonly seed: number;
  readonly size: number;
  readonly config?: Partial<GossipConfig>;
  /** Network delay range, ms (default 1..5). */
  readonly minDelay?: number;
  readonly maxDelay?: number;
}

export const memberName = (i: number) => `m${String(i).padStart(2, '0')}`;

export class GossipSim {
  now = 0;
  readonly rng: SimRandom;
  readonly net: SimNetwork<Uint8Array>;
  readonly members: SimMember[] = [];
  readonly changes: ObservedChange[] = [];
  /** Per-member loss rate of every message to or from it. */
  readonly lossy = new Map<number, number>();
  /** Starved members: pause lengths (ms, inclusive range) and run lengths between pauses. */
  readonly starved = new Map<number, { pause: [number, number]; run: [number, number] }>();
  private readonly faults: SimRandom;
  private readonly byName = new Map<string, number>();

  constructor(readonly opts: GossipSimOptions) {
    this.rng = new SimRandom(opts.seed);
    this.net = new SimNetwork(this.rng.fork(), {
      minDelay: opts.minDelay ?? 1,
      maxDelay: opts.maxDelay ?? 5,
      dropRate: 0,
      duplicateRate: 0,
    });
    this.faults = this.rng.fork();
    for (let i = 0; i < opts.size; i++) {
      const name = memberName(i);
      this.byName.set(name, i);
      const swim = new Swim({
        name,
        config: opts.config,
        random: this.rng.fork(),
        now: 0,
        send: (to, m) => this.send(i, to, encodeGossip(m)),
        onChange: (c) => this.changes.push({ ...c, observer: name }),
      });
      this.members.push({ id: i, name, swim, killed: false, pausedUntil: 0, inbox: [], nextPauseAt: 0 });
    }
  }

  /** Members 1.. join through member 0, each at a random time in the first `spreadMs`. */
  joinAll(spreadMs = 2_000): void {
    const at = this.members.map(() => this.rng.int(spreadMs + 1));
    const order = this.members.map((_, i) => i).sort((a, b) => (at[a] as number) - (at[b] as number));
    for (const i of order) {
      if (i === 0) continue;
      this.runUntil(at[i] as number);
      this.members[i]?.swim.join([memberName(0)], this.now);
    }
  }

  kill(i: number): void {
    const m = this.members[i] as SimMember;
    m.killed = true;
    this.net.dropNode(i);
  }

  starve(i: number, pause: [number, number], run: [number, number]): void {
    this.starved.set(i, { pause, run });
    (this.members[i] as SimMember).nextPauseAt = this.now + this.faults.between(run[0], run[1]);
  }

  /** How `observer` sees `member` now. */
  view(observer: number, member: number): GossipState | undefined {
    return this.members[observer]?.swim.member(memberName(member))?.state;
  }

  /** Runs every event due up to `t`, then sets the time to `t`. */
  runUntil(t: number): void {
    for (let guard = 0; guard < 5_000_000; guard++) {
      const next = this.nextEvent();
      if (next > t) break;
      this.now = Math.max(this.now, next);
      this.stepAt(this.now);
    }
    this.now = Math.max(this.now, t);
  }

  private nextEvent(): number {
    let t = this.net.nextAt() ?? Number.POSITIVE_INFINITY;
    for (const m of this.members) {
      if (m.killed) continue;
      if (m.pausedUntil > 0) {
        t = Math.min(t, m.pausedUntil);
        continue;
      }
      t = Math.min(t, m.swim.nextDeadline());
      if (this.starved.has(m.id)) t = Math.min(t, m.nextPauseAt);
    }
    return t;
  }

  private stepAt(now: number): void {
    for (const d of this.net.takeDue(now)) {
      const m = this.members[d.to] as SimMember;
      if (m.killed) continue;
      if (m.pausedUntil > 0) m.inbox.push(d.msg);
      else m.swim.step(decodeGossip(d.msg), now);
    }
    for (const m of this.members) {
      if (m.killed) continue;
      const s = this.starved.get(m.id);
      if (m.pausedUntil > 0 && now >= m.pausedUntil) {
        m.pausedUntil = 0;
        // A starved process runs its overdue timers first, then reads what queued up.
        m.swim.tick(now);
        const inbox = m.inbox;
        m.inbox = [];
        for (const b of inbox) m.swim.step(decodeGossip(b), now);
        if (s !== undefined) m.nextPauseAt = now + this.faults.between(s.run[0], s.run[1]);
        continue;
      }
      if (m.pausedUntil > 0) continue;
      if (s !== undefined && now >= m.nextPauseAt) {
        m.pausedUntil = now + this.faults.between(s.pause[0], s.pause[1]);
        continue;
      }
      if (m.swim.nextDeadline() <= now) m.swim.tick(now);
    }
  }

  private send(from: number, to: string, bytes: Uint8Array): void {
    const t = this.byName.get(to);
    if (t === undefined) return;
    if ((this.members[from] as SimMember).killed) return;
    const loss = Math.max(this.lossy.get(from) ?? 0, this.lossy.get(t) ?? 0);
    if (loss > 0 && this.faults.chance(loss)) return;
    this.net.send(from, t, bytes, this.now);
  }
}
