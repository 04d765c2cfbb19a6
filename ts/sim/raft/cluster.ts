/**
 * A Raft cluster on the deterministic simulator: nodes with in-memory storage whose durable
 * part survives crashes (volatile state and writes not yet synced do not), a faulty network,
 * clients appending and reading, and a fault schedule, all driven by one seed.
 * `runSimulation(seed)` returns the history and what the checkers found; the same seed always
 * gives the same run.
 *
 * Each node runs the same `RaftDriver` as a real member (ts/raft-io/driver.ts), on a
 * `ManualClock` shared by the whole cluster, with a simulated transport (transport.ts) and a
 * simulated disk whose syncs take a seeded latency (disk.ts). So the driver's own ordering
 * (a leader's appends sent before its write, replies after it, the leader applying what it
 * holds durably before writing the next Ready) runs on simulated time under every fault.
 * The clock, network, disks, history, invariants, trace and fingerprint are the shared
 * `SimHarness` (ts/sim/raft/harness.ts), as in the replicated-log cluster.
 */
import { isPlexusError, PlexusError } from '../../core/errors.js';
import { RaftNode } from '../../raft/node.js';
import { MemoryRaftStorage } from '../../raft/storage.js';
import type { Entry, Message, RaftOptions, ReadState, Snapshot } from '../../raft/types.js';
import { RaftDriver } from '../../raft-io/driver.js';
import { SimErrorCode } from '../errors.js';
import type { History } from '../history.js';
import type { Violation } from '../invariants.js';
import type { LinearizabilityResult } from '../linearizability.js';
import type { LogInput, LogOutput } from '../log-model.js';
import type { SimRandom } from '../rng.js';
import type { SimDisk } from './disk.js';
import { describeFailure, SimHarness } from './harness.js';
import { SIM_DEFAULTS, type SimRunOptions } from './options.js';
import { encodeValue, LogStateMachine } from './state-machine.js';

interface PendingAppend {
  readonly op: number;
  readonly term: number;
  readonly client: number;
}

interface PendingRead {
  readonly op: number;
  readonly client: number;
  index?: number;
}

interface SimNode {
  readonly id: number;
  /** What survives a crash. */
  readonly durable: MemoryRaftStorage;
  readonly rng: SimRandom;
  raft: RaftNode | undefined;
  driver: RaftDriver | undefined;
  disk: SimDisk | undefined;
  sm: LogStateMachine;
  appends: Map<number, PendingAppend>;
  reads: Map<string, PendingRead>;
  /** Removed from the cluster: never restarted. */
  retired: boolean;
  restartAt: number;
}

interface SimClient {
  readonly id: number;
  target: number;
  seq: number;
  busy: { op: number; node: number; kind: 'append' | 'read'; key: string | number; deadline: number } | undefined;
  nextAt: number;
}

export interface SimRunResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly violations: readonly Violation[];
  readonly linearizability: LinearizabilityResult<LogInput, LogOutput>;
  readonly history: History<LogInput, LogOutput>;
  readonly stats: {
    appendsOk: number;
    readsOk: number;
    unknown: number;
    elections: number;
    crashes: number;
    partitions: number;
    snapshotsSent: number;
    messages: number;
    transfers: number;
    confChanges: number;
  };
  /** A hash of every event of the run: equal for two runs of one seed. */
  readonly fingerprint: string;
  readonly trace: readonly string[];
}

const dec = new TextDecoder();

export function runSimulation(opts: SimRunOptions): SimRunResult {
  return new SimCluster(opts).run();
}

/** The line to print when a run fails: how to replay it exactly. */
export function replayHint(r: SimRunResult, nodes: number): string {
  return `simulation seed ${r.seed} (${nodes} nodes) failed: ${describeFailure(r)}. Replay: SIM_SEED=${r.seed} SIM_NODES=${nodes} npx vitest run test/sim/replay.test.ts`;
}

/** Throws PLX_SIM_VIOLATION, naming the seed and the replay command, when a run failed. */
export function assertSimulationOk(r: SimRunResult, nodes: number): void {
  if (r.ok) return;
  throw new PlexusError(SimErrorCode.VIOLATION, replayHint(r, nodes), {
    seed: r.seed,
    nodes,
    violations: r.violations,
    linearizable: r.linearizability.result,
  });
}

class SimCluster extends SimHarness {
  private readonly nodes = new Map<number, SimNode>();
  private readonly clients: SimClient[] = [];
  private readonly n: number;
  private readonly duration: number;
  private readonly tickMs: number;
  private readonly opTimeout: number;
  private readonly compactEvery: number;
  private readonly faults: boolean;
  private readonly raftOpts: NonNullable<SimRunOptions['raft']>;
  private readonly diskOpts: { readonly minLatency: number; readonly maxLatency: number };
  private nextFault = 0;
  private heals: { at: number; what: 'net' }[] = [];
  private membershipStep = 0;
  private readonly spare: number | undefined;
  private crashed = false;
  private readonly stats = {
    appendsOk: 0,
    readsOk: 0,
    unknown: 0,
    elections: 0,
    crashes: 0,
    partitions: 0,
    snapshotsSent: 0,
    messages: 0,
    transfers: 0,
    confChanges: 0,
  };

  constructor(private readonly opts: SimRunOptions) {
    super(opts.seed, { ...SIM_DEFAULTS.network, ...opts.network }, opts.trace ?? false);
    this.n = opts.nodes ?? SIM_DEFAULTS.nodes;
    this.duration = opts.durationMs ?? SIM_DEFAULTS.durationMs;
    this.tickMs = opts.tickMs ?? SIM_DEFAULTS.tickMs;
    this.opTimeout = opts.opTimeoutMs ?? SIM_DEFAULTS.opTimeoutMs;
    this.compactEvery = opts.compactEvery ?? SIM_DEFAULTS.compactEvery;
    this.faults = opts.faults ?? true;
    this.raftOpts = { ...SIM_DEFAULTS.raft, ...opts.raft };
    this.diskOpts = { ...SIM_DEFAULTS.disk, ...opts.disk };
    const voters = Array.from({ length: this.n }, (_, i) => i + 1);
    for (const id of voters) {
      this.addNode(id, MemoryRaftStorage.bootstrap({ voters, learners: [] }, new LogStateMachine().snapshotData()));
    }
    if (this.n >= 5 && (opts.membership ?? true) && this.faults) {
      this.spare = this.n + 1;
      this.addNode(this.spare, new MemoryRaftStorage());
    }
    const clients = opts.clients ?? SIM_DEFAULTS.clients;
    for (let c = 1; c <= clients; c++) {
      this.clients.push({
        id: c,
        target: this.rng.between(1, this.n),
        seq: 0,
        busy: undefined,
        nextAt: this.rng.int(50),
      });
    }
    this.nextFault = 100 + this.rng.int(150);
  }

  protected observe(m: Message): void {
    if (m.type === 'MsgSnap') this.stats.snapshotsSent++;
    this.stats.messages++;
  }

  private addNode(id: number, durable: MemoryRaftStorage): void {
    const node: SimNode = {
      id,
      durable,
      rng: this.rng.fork(),
      raft: undefined,
      driver: undefined,
      disk: undefined,
      sm: new LogStateMachine(),
      appends: new Map(),
      reads: new Map(),
      retired: false,
      restartAt: Number.POSITIVE_INFINITY,
    };
    this.nodes.set(id, node);
    this.start(node, this.rng.int(this.tickMs));
  }

  /** Milliseconds the next disk sync takes. */
  private diskLatency(): number {
    const d = this.diskOpts;
    return this.diskRng.between(d.minLatency, d.maxLatency);
  }

  /** Starts a node from its durable storage; its driver's first tick is `phase` ms later. */
  private start(node: SimNode, phase: number): void {
    const disk = this.disk(
      node.durable,
      () => this.diskLatency(),
      (hs) => this.inv.commit(node.id, hs.commit, this.clock.now()),
    );
    const storage = disk.storage;
    const o: RaftOptions = { id: node.id, storage, random: (k) => node.rng.int(k), ...this.raftOpts };
    const raft = new RaftNode(o);
    node.raft = raft;
    node.disk = disk;
    const snap = storage.snapshot();
    node.sm = new LogStateMachine();
    node.sm.restore(snap.metadata.index, snap.data);
    for (const [i, v] of node.sm.values.entries()) this.inv.position(node.id, i + 1, v, this.clock.now());
    this.inv.commit(node.id, storage.initialState().hardState.commit, this.clock.now());
    const transport = this.wire.join(node.id);
    const alive = () => node.raft === raft;
    const driver = new RaftDriver({
      node: raft,
      storage: disk,
      transport,
      clock: this.clock,
      tickMs: this.tickMs,
      // Client operations are timed by the simulated clients, not by the driver.
      timeoutMs: Number.MAX_SAFE_INTEGER / 4,
      randomBytes: (n) => {
        const b = new Uint8Array(n);
        for (let i = 0; i < n; i++) b[i] = node.rng.int(256);
        return b;
      },
      applier: {
        apply: (entries) => {
          if (alive()) this.applyEntries(node, entries);
        },
        restore: (s) => {
          if (alive()) this.restoreSnapshot(node, s);
        },
      },
      onSoftState: (ss) => {
        if (alive() && ss.role === 'leader') this.becameLeader(node, storage);
      },
      onReadStates: (states) => {
        if (alive()) this.readStates(node, states);
      },
      beforeReady: () => {
        if (!alive()) return;
        this.serveReads(node);
        this.maybeCompact(node);
      },
      logger: {
        warn: (message, details) => {
          // The core refusing a message with a PlexusError is its contract; anything else is a bug in it.
          if (!alive() || message !== 'raft: dropped a message' || details?.code !== undefined) return;
          this.inv.violations.push({
            rule: 'core-invariant',
            message: `node ${node.id}: ${String(details?.error)}`,
            time: this.clock.now(),
          });
          this.crashed = true;
        },
      },
      onStop: (err) => {
        if (!alive()) return;
        this.inv.violations.push({
          rule: 'core-invariant',
          message: `node ${node.id}: the driver stopped: ${String(err)}`,
          time: this.clock.now(),
        });
        this.crashed = true;
      },
    });
    node.driver = driver;
    transport.onMessage((m) => driver.receive(m));
    this.clock.setTimeout(() => {
      if (alive()) driver.start();
    }, phase);
    driver.wake();
  }

  private crash(node: SimNode, why: string): void {
    if (!node.raft) return;
    this.note(`crash ${node.id} (${why})`);
    node.raft = undefined;
    node.disk?.crash();
    node.disk = undefined;
    node.driver?.stop().catch(() => undefined);
    node.driver = undefined;
    this.wire.join(node.id).closeNow();
    this.net.dropNode(node.id);
    node.appends.clear();
    node.reads.clear();
    for (const c of this.clients) if (c.busy?.node === node.id) this.abandon(c);
  }

  /** Runs a call into the core; a thrown error that is not a PlexusError is a broken invariant of the core. */
  private guard<T>(node: SimNode, f: (r: RaftNode) => T): T | undefined {
    if (!node.raft) return undefined;
    try {
      return f(node.raft);
    } catch (e) {
      if (isPlexusError(e)) throw e;
      this.inv.violations.push({
        rule: 'core-invariant',
        message: `node ${node.id}: ${(e as Error).message}`,
        time: this.clock.now(),
      });
      this.crashed = true;
      node.raft = undefined;
      return undefined;
    }
  }

  // ---- what the driver hands the application ----

  private becameLeader(node: SimNode, st: MemoryRaftStorage): void {
    const now = this.clock.now();
    const term = node.raft!.status().term;
    this.stats.elections++;
    this.note(`leader ${node.id} term ${term}`);
    this.inv.leader(term, node.id, now);
    this.inv.leaderLog(
      node.id,
      st.firstIndex(),
      (i) => {
        try {
          return st.term(i);
        } catch {
          return undefined;
        }
      },
      now,
    );
  }

  private restoreSnapshot(node: SimNode, s: Snapshot): void {
    const now = this.clock.now();
    node.sm.restore(s.metadata.index, s.data);
    for (const [i, v] of node.sm.values.entries()) this.inv.position(node.id, i + 1, v, now);
    this.note(`node ${node.id} installs snapshot at ${s.metadata.index}`);
  }

  private applyEntries(node: SimNode, entries: readonly Entry[]): void {
    const now = this.clock.now();
    for (const e of entries) {
      this.inv.appliedEntry(node.id, e.index, e.term, `${e.type}/${dec.decode(e.data)}`, now);
      const pos = node.sm.apply(e);
      if (pos !== undefined) this.inv.position(node.id, pos, node.sm.values[pos - 1]!, now);
      const p = node.appends.get(e.index);
      if (p !== undefined) {
        node.appends.delete(e.index);
        const c = this.clients[p.client - 1]!;
        if (e.term === p.term && pos !== undefined) {
          this.history.ok(p.op, { position: pos }, now);
          this.stats.appendsOk++;
          this.note(`append ok op ${p.op} at ${pos}`);
        } else {
          this.history.fail(p.op);
        }
        if (c.busy?.op === p.op) {
          c.busy = undefined;
          c.nextAt = now + 1 + this.rng.int(30);
        }
      }
    }
  }

  private readStates(node: SimNode, states: readonly ReadState[]): void {
    for (const rs of states) {
      const r = node.reads.get(dec.decode(rs.context));
      if (r) r.index = rs.index;
    }
    this.serveReads(node);
  }

  /** Runs the timers due now: the drivers' turns (a Ready handled at once, without I/O, is done within). */
  private settle(): void {
    this.timers(() => this.clock.advanceTo(this.clock.now()));
  }

  /**
   * Runs `f` (which fires the drivers' timers and so calls into the cores), then the timers it
   * made due. An error thrown out of a core that is not a PlexusError is a broken invariant.
   */
  private timers(f: () => void): void {
    try {
      f();
      this.clock.advanceTo(this.clock.now());
    } catch (e) {
      if (isPlexusError(e)) throw e;
      this.inv.violations.push({ rule: 'core-invariant', message: (e as Error).message, time: this.clock.now() });
      this.crashed = true;
    }
  }

  private serveReads(node: SimNode): void {
    for (const [key, r] of node.reads) {
      if (r.index === undefined || node.sm.applied < r.index) continue;
      node.reads.delete(key);
      this.history.ok(r.op, { values: [...node.sm.values] }, this.clock.now());
      this.stats.readsOk++;
      this.note(`read ok op ${r.op} len ${node.sm.values.length}`);
      const c = this.clients[r.client - 1]!;
      if (c.busy?.op === r.op) {
        c.busy = undefined;
        c.nextAt = this.clock.now() + 1 + this.rng.int(30);
      }
    }
  }

  private maybeCompact(node: SimNode): void {
    const raft = node.raft;
    if (!raft) return;
    const applied = node.sm.applied;
    if (applied - node.disk!.storage.firstIndex() + 1 < this.compactEvery) return;
    const snap = raft.compact(applied, node.sm.snapshotData());
    node.disk!.compact(snap);
  }

  // ---- clients ----

  private abandon(c: SimClient): void {
    if (!c.busy) return;
    // The outcome is unknown: an append may still commit; a read has no effect, so it is dropped.
    if (c.busy.kind === 'read') this.history.fail(c.busy.op);
    else this.stats.unknown++;
    const node = this.nodes.get(c.busy.node);
    if (node) {
      if (c.busy.kind === 'append') node.appends.delete(c.busy.key as number);
      else node.reads.delete(c.busy.key as string);
    }
    c.busy = undefined;
  }

  private redirect(c: SimClient, e: unknown): void {
    const leader = isPlexusError(e) ? Number(e.details.leader ?? 0) : 0;
    c.target = leader > 0 && this.nodes.has(leader) ? leader : this.rng.pick([...this.nodes.keys()]);
    c.nextAt = this.clock.now() + 5 + this.rng.int(20);
  }

  private clientStep(c: SimClient): void {
    const now = this.clock.now();
    if (c.busy) {
      if (now >= c.busy.deadline) {
        this.note(`client ${c.id} gives up op ${c.busy.op}`);
        this.abandon(c);
        c.target = this.rng.pick([...this.nodes.keys()]);
        c.nextAt = now + this.rng.int(20);
      } else {
        c.nextAt = c.busy.deadline;
      }
      return;
    }
    if (now >= this.duration - Math.min(400, Math.floor(this.duration / 5))) {
      c.nextAt = Number.POSITIVE_INFINITY;
      return;
    }
    const node = this.nodes.get(c.target);
    if (!node?.raft) {
      this.redirect(c, undefined);
      return;
    }
    if (this.rng.chance(0.7)) {
      const value = `c${c.id}-${c.seq++}`;
      const op = this.history.invoke(c.id, { kind: 'append', value }, now);
      let p: { index: number; term: number } | undefined;
      try {
        p = this.guard(node, (r) => r.propose(encodeValue(value)));
      } catch (e) {
        this.history.fail(op);
        this.redirect(c, e);
        return;
      }
      if (p === undefined) {
        this.history.fail(op);
        return;
      }
      this.note(`client ${c.id} append ${value} op ${op} at node ${node.id} index ${p.index}`);
      node.appends.set(p.index, { op, term: p.term, client: c.id });
      c.busy = { op, node: node.id, kind: 'append', key: p.index, deadline: now + this.opTimeout };
    } else {
      const op = this.history.invoke(c.id, { kind: 'read' }, now);
      const key = `r${op}`;
      node.reads.set(key, { op, client: c.id });
      c.busy = { op, node: node.id, kind: 'read', key, deadline: now + this.opTimeout };
      try {
        this.guard(node, (r) => r.readIndex(encodeValue(key)));
      } catch (e) {
        node.reads.delete(key);
        c.busy = undefined;
        this.history.fail(op);
        this.redirect(c, e);
        return;
      }
      this.note(`client ${c.id} read op ${op} at node ${node.id}`);
    }
    c.nextAt = now;
    node.driver?.wake();
    this.settle();
  }

  // ---- faults ----

  private live(): SimNode[] {
    return [...this.nodes.values()].filter((n) => n.raft !== undefined);
  }

  private leaderNode(): SimNode | undefined {
    let best: SimNode | undefined;
    let bestTerm = -1;
    for (const n of this.live()) {
      const s = n.raft!.status();
      if (s.role === 'leader' && s.term > bestTerm) {
        best = n;
        bestTerm = s.term;
      }
    }
    return best;
  }

  private fault(): void {
    const now = this.clock.now();
    this.nextFault = now + 60 + this.rng.int(200);
    const kind = this.rng.int(10);
    const ids = [...this.nodes.values()].filter((n) => !n.retired).map((n) => n.id);
    if (kind <= 2) {
      const node = (this.rng.chance(0.5) ? this.leaderNode() : undefined) ?? this.nodes.get(this.rng.pick(ids));
      if (node?.raft) {
        this.stats.crashes++;
        this.crash(node, 'fault');
        node.restartAt = now + 50 + this.rng.int(400);
      }
    } else if (kind <= 5) {
      this.stats.partitions++;
      if (this.rng.chance(0.5)) {
        const who = this.rng.chance(0.5) ? (this.leaderNode()?.id ?? this.rng.pick(ids)) : this.rng.pick(ids);
        this.net.isolate(who);
        this.note(`isolate ${who}`);
      } else {
        const a: number[] = [];
        const b: number[] = [];
        for (const id of ids) (this.rng.chance(0.5) ? a : b).push(id);
        this.net.partition([a, b]);
        this.note(`partition ${a.join(',')} | ${b.join(',')}`);
      }
      this.heals.push({ at: now + 100 + this.rng.int(500), what: 'net' });
    } else if (kind === 6) {
      const dropRate = this.rng.pick([0, 0.02, 0.1, 0.3]);
      const duplicateRate = this.rng.pick([0, 0.05, 0.2]);
      const maxDelay = Math.max(this.net.opts.minDelay, this.rng.pick([5, 25, 60]));
      this.net.setOptions({ ...this.net.opts, dropRate, duplicateRate, maxDelay });
      this.note(`network drop ${dropRate} dup ${duplicateRate} delay ${maxDelay}`);
    } else if (kind === 7) {
      const l = this.leaderNode();
      if (l) {
        const to = this.rng.pick(l.raft!.status().confState.voters);
        this.note(`transfer leadership ${l.id} -> ${to}`);
        this.stats.transfers++;
        this.guard(l, (r) => r.transferLeader(to));
        l.driver?.wake();
        this.settle();
      }
    } else if (kind >= 8 && this.spare !== undefined) {
      this.membership();
    }
  }

  private membership(): void {
    const l = this.leaderNode();
    if (!l) return;
    const spare = this.spare!;
    const status = l.raft!.status();
    let cc: { type: 'add-learner' | 'add-voter' | 'remove-node'; nodeId: number } | undefined;
    if (this.membershipStep === 0) cc = { type: 'add-learner', nodeId: spare };
    else if (this.membershipStep === 1) {
      if (!status.confState.learners.includes(spare)) return;
      cc = { type: 'add-voter', nodeId: spare };
    } else if (this.membershipStep === 2) {
      if (!status.confState.voters.includes(spare)) return;
      const victims = status.confState.voters.filter((v) => v !== spare && v !== l.id);
      cc = { type: 'remove-node', nodeId: this.rng.pick(victims) };
    } else return;
    try {
      this.guard(l, (r) => r.proposeConfChange(cc));
    } catch {
      return;
    }
    this.note(`propose ${cc.type} ${cc.nodeId}`);
    this.stats.confChanges++;
    this.membershipStep++;
    l.driver?.wake();
    this.settle();
  }

  private retireRemoved(): void {
    const l = this.leaderNode();
    if (!l) return;
    const cs = l.raft!.status().confState;
    for (const n of this.nodes.values()) {
      if (n.retired || n.id === this.spare) continue;
      if (this.membershipStep >= 3 && !cs.voters.includes(n.id) && !cs.learners.includes(n.id)) {
        // Removed and committed: stop it for good.
        if (l.raft!.status().commit > 0) {
          this.crash(n, 'removed');
          n.retired = true;
        }
      }
    }
  }

  /**
   * Appends whose client never heard back: if any replica ever applied the value, it took
   * effect at the position the replicas gave it (replicas never diverge, which is checked);
   * if none did, no client could have observed it, and it is left out. This keeps the
   * linearizability search small without trusting any acknowledgement.
   */
  private resolveUnknown(): void {
    for (const op of this.history.unknown()) {
      if (op.input.kind !== 'append') continue;
      const p = this.inv.positionOf(op.input.value);
      if (p === undefined) this.history.fail(op.id);
      else this.history.resolve(op.id, { position: p });
    }
  }

  // ---- the main loop ----

  private nextEventAt(): number {
    let t = Number.POSITIVE_INFINITY;
    for (const n of this.nodes.values()) if (!n.raft && !n.retired) t = Math.min(t, n.restartAt);
    t = Math.min(t, this.clock.nextDue() ?? Number.POSITIVE_INFINITY);
    t = Math.min(t, this.net.nextAt() ?? Number.POSITIVE_INFINITY);
    for (const c of this.clients) t = Math.min(t, c.nextAt);
    if (this.faults) t = Math.min(t, this.nextFault);
    for (const h of this.heals) t = Math.min(t, h.at);
    return t;
  }

  run(): SimRunResult {
    const quietFrom = this.duration - Math.min(1000, Math.floor(this.duration / 3));
    let settled = false;
    // A run stops at its first violation: what follows a broken invariant proves nothing more.
    while (!this.crashed && (this.inv.violations.length === 0 || this.opts.stopOnViolation === false)) {
      if (this.net.inFlight > 20_000) {
        this.inv.violations.push({
          rule: 'message-storm',
          message: `${this.net.inFlight} messages in flight: the nodes answer each other without end`,
          time: this.clock.now(),
        });
        break;
      }
      const t = Math.max(this.nextEventAt(), this.clock.now());
      if (t > this.duration) break;
      this.timers(() => this.clock.advanceTo(t));
      const now = t;
      if (this.faults && !settled && now >= quietFrom) {
        settled = true;
        this.net.heal();
        this.heals = [];
        this.net.setOptions({ ...this.net.opts, dropRate: 0, duplicateRate: 0 });
        for (const n of this.nodes.values()) if (!n.raft && !n.retired) n.restartAt = now;
        this.nextFault = Number.POSITIVE_INFINITY;
        this.note('quiet: heal all, restart all');
      }
      this.timers(() => this.wire.deliver(now));
      for (const node of this.nodes.values()) {
        if (!node.raft && !node.retired && node.restartAt <= now) {
          node.restartAt = Number.POSITIVE_INFINITY;
          this.note(`restart ${node.id}`);
          this.start(node, this.rng.int(this.tickMs));
          this.settle();
        }
      }
      const heals = this.heals.filter((h) => h.at <= now);
      if (heals.length > 0) {
        this.heals = this.heals.filter((h) => h.at > now);
        this.net.heal();
        this.note('heal');
      }
      if (this.faults && now >= this.nextFault) this.fault();
      if (this.membershipStep >= 3) this.retireRemoved();
      for (const c of this.clients) if (c.nextAt <= now) this.clientStep(c);
    }
    for (const c of this.clients) if (c.busy) this.abandon(c);
    this.resolveUnknown();
    return { seed: this.opts.seed, ...this.outcome(), stats: this.stats };
  }
}
