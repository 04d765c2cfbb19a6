/**
 * Whole replicated logs on the deterministic simulator: N members, each the real `Replica`
 * behind the `ReplicatedLog` facade (ts/replication/), on one `ManualClock`, with the
 * simulated Raft transport (ts/sim/raft/transport.ts) over a faulty `SimNetwork`, simulated
 * Raft disks whose syncs take a seeded latency and whose unsynced writes a crash loses
 * (ts/sim/raft/disk.ts), and an in-memory local log of committed records. Clients append
 * (some with compare-and-set, `expectedLast`) and read linearizably (`readBarrier`, then the
 * local log up to the barrier); faults partition, isolate, change the network, crash and
 * restart members (the leader more often than not) and transfer leadership. The history goes
 * to the linearizability checker with the log model, and the members' applied records to the
 * invariants (one value per position everywhere; every acknowledged append present at its
 * position; positions contiguous from 1).
 *
 * The clock, network, disks, history, invariants, trace and fingerprint are the shared
 * `SimHarness` (ts/sim/raft/harness.ts), as in the Raft cluster.
 *
 * Determinism: the run is one async loop. Each step moves the clock to the next event (a
 * timer, a message due, a client's or the fault schedule's next move), fires what is due,
 * then waits for one `setImmediate`, by which time every promise continuation the step caused
 * has run (nothing in a member does real I/O here). So one seed always gives the same run.
 *
 * Catch-up streams (a member installing a snapshot pulls the records below it from the others;
 * the leader asks the others what they hold before agreeing a compaction cutoff) run over the
 * simulated network too (streams.ts): delayed, stalled by partitions, cut at random or by a
 * fault, and crashed mid-stream, with the member's real `CatchUpServer` and `fetchRecords`.
 * With snapshots on, the fault schedule also agrees compaction cutoffs and compacts the
 * members' local logs below them, cuts the open streams, and crashes members while they
 * install a snapshot; at the end every member must hold the same log (`members-converge`).
 *
 * With `membership`, a spare member starts empty with `join` and the leader adds it (a learner,
 * then a voter once caught up, through a snapshot and catch-up when the log was compacted) and
 * later removes it; a removed spare is stopped and wiped, to join again.
 *
 * What is not simulated (docs/replication.md, "Simulation"): a power loss of the local log (a crash keeps what the local log holds, as a process crash does; the
 * Raft disk loses its unsynced writes).
 */
import { CatchUpStream, encodeRecords } from '../../codec/catch-up.js';
import { isPlexusError, PlexusError } from '../../core/errors.js';
import { MemoryRaftStorage } from '../../raft/storage.js';
import type { Message } from '../../raft/types.js';
import { RaftDriver } from '../../raft-io/driver.js';
import { catchUpRefusal } from '../../replication/errors.js';
import type {
  ReplicaDeps,
  ReplicaLocalLog,
  ReplicaLocalStore,
  ReplicaRaft,
  ReplicaRaftStorage,
  ReplicaTransport,
} from '../../replication/raft-edge.js';
import { ReplicatedLog } from '../../replication/replicated-log.js';
import type { AppendOptions, AppendResult } from '../../storage/log-storage.js';
import { MemoryLog, MemoryLogState } from '../../storage/memory-log.js';
import { SimErrorCode } from '../errors.js';
import type { History } from '../history.js';
import type { Violation } from '../invariants.js';
import type { LinearizabilityResult } from '../linearizability.js';
import type { LogInput, LogOutput } from '../log-model.js';
import type { NetworkOptions } from '../network.js';
import type { SimDisk } from '../raft/disk.js';
import { describeFailure, SimHarness } from '../raft/harness.js';
import { SimRandom } from '../rng.js';
import { SimStreamNetwork, type SimStreamOptions, type SimStreamTamper } from './streams.js';

export interface ReplicationSimOptions {
  readonly seed: number;
  /** Members (ids 1..nodes). Default 3. */
  readonly nodes?: number;
  /** Virtual milliseconds of clients and faults; a quiet period of 1200 ms to converge follows. Default 600. */
  readonly durationMs?: number;
  readonly clients?: number;
  /** Crashes, partitions, network changes, leadership transfers. Default true. */
  readonly faults?: boolean;
  readonly network?: Partial<NetworkOptions>;
  /** `snapshotEvery` of every member (0: off, the default). */
  readonly snapshotEvery?: number;
  /**
   * Faults of the catch-up path: agreeing compaction cutoffs and compacting local logs below
   * them, cutting open catch-up streams, crashing a member while it installs a snapshot.
   * Default: on when snapshots are.
   */
  readonly catchUpFaults?: boolean;
  /**
   * Membership changes while clients append: a spare member (id nodes + 1) starts empty with
   * `join`, and the fault schedule has the leader add it (as a learner, then a voter once it has
   * caught up) and later remove it; a removed spare is stopped and wiped, to be added again.
   * Default false.
   */
  readonly membership?: boolean;
  /** The catch-up streams' network (delay 1..15 ms; cutRate 0.04 per write while faults run). */
  readonly streams?: Partial<SimStreamOptions>;
  /**
   * A planted bug, to show the checkers catch it: `early-ack` answers an append with the
   * position the leader projects for it at once, before its entry is committed;
   * `catch-up-wrong-record` makes every catch-up source send, in each chunk it serves, another
   * payload for the chunk's last record (batch id, epoch and checksum as they should be);
   * `no-catch-up` has every member's transport refuse to open catch-up streams (a member that
   * must pull the records below a snapshot stays behind, silent).
   */
  readonly plant?: 'early-ack' | 'catch-up-wrong-record' | 'no-catch-up';
  /** Keep a readable trace of the run's events (`trace` of the result). Default false. */
  readonly trace?: boolean;
}

export interface ReplicationSimResult {
  readonly seed: number;
  readonly nodes: number;
  readonly ok: boolean;
  readonly violations: readonly Violation[];
  readonly linearizability: LinearizabilityResult<LogInput, LogOutput>;
  readonly history: History<LogInput, LogOutput>;
  readonly stats: {
    appendsOk: number;
    casRefused: number;
    readsOk: number;
    unknown: number;
    crashes: number;
    partitions: number;
    transfers: number;
    leaderChanges: number;
    messages: number;
    snapshotsTaken: number;
    snapshotsInstalled: number;
    /** Catch-up streams opened, cut by the network, records pulled over them. */
    streamsOpened: number;
    streamsCut: number;
    recordsCaughtUp: number;
    /** Crashes of a member while it pulled the records of a snapshot. */
    installCrashes: number;
    /** Compaction cutoffs agreed (above the last one), and local logs compacted below one. */
    compactionsAgreed: number;
    localCompactions: number;
    /** Members added (as voters) and removed. */
    membersAdded: number;
    membersRemoved: number;
  };
  /** A hash of every event of the run: equal for two runs of one seed. */
  readonly fingerprint: string;
  readonly trace: readonly string[];
}

/** The counters of a run, all zero (a run's start; the sum over runs). */
export function emptyReplicationStats(): ReplicationSimResult['stats'] {
  return {
    appendsOk: 0,
    casRefused: 0,
    readsOk: 0,
    unknown: 0,
    crashes: 0,
    partitions: 0,
    transfers: 0,
    leaderChanges: 0,
    messages: 0,
    snapshotsTaken: 0,
    snapshotsInstalled: 0,
    streamsOpened: 0,
    streamsCut: 0,
    recordsCaughtUp: 0,
    installCrashes: 0,
    compactionsAgreed: 0,
    localCompactions: 0,
    membersAdded: 0,
    membersRemoved: 0,
  };
}

const DEFAULTS = {
  nodes: 3,
  durationMs: 600,
  clients: 3,
  tickMs: 10,
  opTimeoutMs: 250,
  network: { minDelay: 1, maxDelay: 15, dropRate: 0.03, duplicateRate: 0.03 },
  streams: { minDelay: 1, maxDelay: 15, cutRate: 0.04 },
  catchUpTimeoutMs: 200,
  catchUpChunkBytes: 96,
} as const;

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The line to print when a run fails: how to replay it exactly. */
export function replicationReplayHint(r: ReplicationSimResult): string {
  return (
    `replicated-log simulation seed ${r.seed} (${r.nodes} members) failed: ${describeFailure(r)}. ` +
    `Replay: PLEXUS_SIM_FIRST_SEED=${r.seed} PLEXUS_SIM_SEEDS=1 PLEXUS_SIM_NODES=${r.nodes} ` +
    'npx vitest run test/sim/replicated-log-simulation.test.ts'
  );
}

/** Throws PLX_SIM_VIOLATION, naming the seed and the replay command, when a run failed. */
export function assertReplicationSimOk(r: ReplicationSimResult): void {
  if (r.ok) return;
  throw new PlexusError(SimErrorCode.VIOLATION, replicationReplayHint(r), {
    seed: r.seed,
    nodes: r.nodes,
    violations: r.violations,
    linearizable: r.linearizability.result,
  });
}

export function runReplicationSimulation(opts: ReplicationSimOptions): Promise<ReplicationSimResult> {
  return new ReplicationSim(opts).run();
}

/** The local log of one incarnation of a member: its records outlive the incarnation (a crash keeps them). */
class SimLocalLog extends MemoryLog {
  readonly segmentFiles: readonly string[] = [];
  dead = false;

  override append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult> {
    if (this.dead) return new Promise(() => undefined); // a crashed process: nothing more happens
    return super.append(payloads, opts);
  }
}

interface Member {
  readonly id: number;
  durable: MemoryRaftStorage | undefined;
  localState: MemoryLogState;
  /** Opens with `join` (the spare of `membership` runs): an empty member the leader adds. */
  readonly joins: boolean;
  readonly rng: SimRandom;
  log: ReplicatedLog | undefined;
  disk: SimDisk | undefined;
  driver: RaftDriver | undefined;
  local: SimLocalLog | undefined;
  opening: boolean;
  restartAt: number;
  /** The snapshot install this member is in (its catch-up target), as last seen by the loop. */
  installing: bigint | undefined;
  /** When the fault schedule crashes this member in the middle of that install. */
  crashAt: number;
  /** When the fault schedule cuts this member's catch-up streams in the middle of that install. */
  cutAt: number;
}

interface Client {
  readonly id: number;
  target: number;
  seq: number;
  busy: boolean;
  nextAt: number;
  /** The log length this client last saw (its compare-and-set guess). */
  seen: number;
}

/** The planted `catch-up-wrong-record` source: another payload for the last record of each chunk it sends. */
const wrongLastRecord: SimStreamTamper = (bytes) => {
  let frames: ReturnType<CatchUpStream['push']>;
  try {
    frames = new CatchUpStream(catchUpRefusal).push(bytes);
  } catch {
    return bytes;
  }
  const f = frames[0];
  if (frames.length !== 1 || f?.type !== 'records' || f.records.length === 0) return bytes;
  const records = f.records.map((r, i) =>
    i === f.records.length - 1 ? { ...r, payload: enc.encode(`${dec.decode(r.payload)}~`) } : r,
  );
  return encodeRecords(BigInt(f.sourceFirst), BigInt(f.sourceLast), records, catchUpRefusal);
};

class ReplicationSim extends SimHarness {
  private readonly streams: SimStreamNetwork;
  private readonly streamOpts: SimStreamOptions;
  private readonly catchUpFaults: boolean;
  private readonly members = new Map<number, Member>();
  private readonly clients: Client[] = [];
  private readonly n: number;
  private readonly duration: number;
  private readonly faults: boolean;
  private nextFault: number;
  private healAt = Number.POSITIVE_INFINITY;
  private lastLeader = 0;
  /** Acknowledged appends: value -> position. */
  private readonly acked = new Map<string, number>();
  private readonly stats: ReplicationSimResult['stats'] = emptyReplicationStats();

  /** The spare of `membership` runs, and where it stands. */
  private readonly spare: number | undefined;
  private spareState: 'out' | 'adding' | 'in' | 'removing' = 'out';

  constructor(private readonly opts: ReplicationSimOptions) {
    super(opts.seed, { ...DEFAULTS.network, ...opts.network }, opts.trace ?? false);
    this.n = opts.nodes ?? DEFAULTS.nodes;
    this.duration = opts.durationMs ?? DEFAULTS.durationMs;
    this.faults = opts.faults ?? true;
    // The streams draw from their own generator: runs that open none take the draws they always did.
    this.streamOpts = { ...DEFAULTS.streams, ...opts.streams };
    this.streams = new SimStreamNetwork(
      this.clock,
      new SimRandom((opts.seed ^ 0x5bd1e995) >>> 0),
      (a, b) => this.net.connected(a, b),
      this.streamOpts,
      opts.plant === 'catch-up-wrong-record' ? wrongLastRecord : undefined,
    );
    this.catchUpFaults = opts.catchUpFaults ?? (opts.snapshotEvery ?? 0) > 0;
    for (let id = 1; id <= this.n; id++) {
      this.members.set(id, {
        id,
        durable: undefined,
        localState: new MemoryLogState(),
        joins: false,
        rng: this.rng.fork(),
        log: undefined,
        disk: undefined,
        driver: undefined,
        local: undefined,
        opening: false,
        restartAt: 0,
        installing: undefined,
        crashAt: Number.POSITIVE_INFINITY,
        cutAt: Number.POSITIVE_INFINITY,
      });
    }
    for (let c = 1; c <= (opts.clients ?? DEFAULTS.clients); c++) {
      this.clients.push({ id: c, target: this.rng.between(1, this.n), seq: 0, busy: false, nextAt: 0, seen: 0 });
    }
    this.nextFault = 150 + this.rng.int(100);
    if (opts.membership) {
      this.spare = this.n + 1;
      this.members.set(this.spare, {
        id: this.spare,
        durable: undefined,
        localState: new MemoryLogState(),
        joins: true,
        rng: this.rng.fork(),
        log: undefined,
        disk: undefined,
        driver: undefined,
        local: undefined,
        opening: false,
        restartAt: Number.POSITIVE_INFINITY, // started when the leader is about to add it
        installing: undefined,
        crashAt: Number.POSITIVE_INFINITY,
        cutAt: Number.POSITIVE_INFINITY,
      });
    } else this.spare = undefined;
  }

  protected observe(): void {
    this.stats.messages++;
  }

  // ---- the seams: Raft storage, transport, driver and local log of one member ----

  private raftOf(m: Member): ReplicaRaft {
    const storageOver = (durable: MemoryRaftStorage): ReplicaRaftStorage => {
      const disk = this.disk(durable, () => this.diskRng.between(0, 3));
      m.disk = disk;
      const s = disk.storage;
      return {
        initialState: () => s.initialState(),
        entries: (lo, hi, maxSize) => s.entries(lo, hi, maxSize),
        term: (i) => s.term(i),
        firstIndex: () => s.firstIndex(),
        lastIndex: () => s.lastIndex(),
        snapshot: () => s.snapshot(),
        append: (es) => disk.append(es),
        setHardState: (hs) => disk.setHardState(hs),
        applySnapshot: (sn) => disk.applySnapshot(sn),
        compact: (sn) => disk.compact(sn),
        sync: () => new Promise<void>((resolve) => void disk.sync().then(resolve)),
        setInlineSyncWrites: () => undefined,
        close: () => Promise.resolve(),
      } as ReplicaRaftStorage;
    };
    return {
      openStorage: async () => {
        m.durable ??= new MemoryRaftStorage();
        return storageOver(m.durable);
      },
      bootstrapStorage: async (_dir, confState, data) => {
        m.durable = MemoryRaftStorage.bootstrap(confState, data);
        return storageOver(m.durable);
      },
      startTransport: async (o) => {
        const t = this.wire.join(m.id);
        t.onMessage((msg) => o.onMessage?.(msg));
        const streams = this.streams.join(m.id, o.onStream);
        const transport: ReplicaTransport = {
          port: 0,
          send: (ms: readonly Message[]) => t.send(ms),
          flush: () => undefined,
          openStream: (id: number, timeoutMs = 5000) =>
            this.opts.plant === 'no-catch-up'
              ? Promise.reject(new PlexusError('PLX_RAFT_TRANSPORT_UNREACHABLE', 'no catch-up streams here'))
              : this.streams.open(streams, id, timeoutMs),
          setPeer: () => undefined,
          removePeer: () => undefined,
          close: () => {
            streams.alive = false;
            return t.close();
          },
        };
        return transport;
      },
      startDriver: (o) => {
        const d = new RaftDriver({ ...o, clock: this.clock });
        m.driver = d;
        return d;
      },
    };
  }

  private localOf(m: Member): ReplicaLocalStore {
    return {
      open: async () => {
        const l = new SimLocalLog(m.localState);
        m.local = l;
        return l as unknown as ReplicaLocalLog;
      },
      sync: async () => undefined,
      markClean: async () => undefined,
    };
  }

  private depsOf(m: Member): ReplicaDeps {
    return {
      clock: this.clock,
      random: (k) => m.rng.int(k),
      randomBytes: (k) => {
        const b = new Uint8Array(k);
        for (let i = 0; i < k; i++) b[i] = m.rng.int(256);
        return b;
      },
      raft: this.raftOf(m),
      local: this.localOf(m),
    };
  }

  private start(m: Member): void {
    m.opening = true;
    const members = [...this.members.keys()].filter((id) => m.joins || id !== this.spare).map((id) => this.address(id));
    ReplicatedLog.open(
      {
        id: m.id,
        dir: `/sim/${m.id}`,
        members,
        ...(m.joins ? { join: true } : {}),
        tickMs: DEFAULTS.tickMs,
        electionTick: 10,
        heartbeatTick: 2,
        timeoutMs: DEFAULTS.opTimeoutMs,
        localWritebackMs: 0,
        snapshotEvery: this.opts.snapshotEvery ?? 0,
        snapshotRetain: 4,
        catchUpTimeoutMs: DEFAULTS.catchUpTimeoutMs,
        catchUpChunkBytes: DEFAULTS.catchUpChunkBytes,
        onFatal: (e) => {
          this.inv.violations.push({
            rule: 'member-failed',
            message: `member ${m.id}: ${e.code} ${e.message}`,
            time: this.clock.now(),
          });
        },
      },
      this.depsOf(m),
    ).then(
      (log) => {
        m.opening = false;
        m.log = log;
        this.note(`open ${m.id}`);
        log.onApply((b) => {
          b.payloads.forEach((p, i) => {
            this.inv.position(m.id, Number(b.first) + i, dec.decode(p), this.clock.now());
          });
        });
      },
      (e: unknown) => {
        m.opening = false;
        this.inv.violations.push({
          rule: 'open-failed',
          message: `member ${m.id}: ${String(e)}`,
          time: this.clock.now(),
        });
      },
    );
  }

  private address(id: number): { id: number; raftAddress: string; advertise: string } {
    return { id, raftAddress: `127.0.0.1:${7000 + id}`, advertise: `127.0.0.1:${8000 + id}` };
  }

  /**
   * `membership` runs: the leader adds the spare (started empty with `join` just before) or
   * removes it; once removed it is stopped and its disks wiped, to join again later.
   */
  private membershipFault(leader: Member | undefined): void {
    const spare = this.spare === undefined ? undefined : this.members.get(this.spare);
    const log = leader?.log;
    if (!spare || !leader || !log) return;
    if (this.spareState === 'out') {
      this.spareState = 'adding';
      if (!spare.log && !spare.opening) {
        spare.restartAt = Number.POSITIVE_INFINITY;
        this.note(`start spare ${spare.id}`);
        this.start(spare);
      }
      this.note(`add ${spare.id} at ${leader.id}`);
      log.addMember(this.address(spare.id), { catchUpMs: 300 }).then(
        () => {
          this.note(`added ${spare.id}`);
          this.stats.membersAdded++;
          this.spareState = 'in';
        },
        (e: unknown) => {
          // Refused or undecided (leadership moved, it did not catch up in time): whether it
          // is in the configuration now is what the members' status says.
          this.note(`add ${spare.id} refused ${isPlexusError(e) ? e.code : String(e)}`);
          this.spareState = 'in';
        },
      );
    } else if (this.spareState === 'in' && leader.id !== spare.id) {
      this.spareState = 'removing';
      this.note(`remove ${spare.id} at ${leader.id}`);
      log.removeMember(spare.id).then(
        () => {
          this.note(`removed ${spare.id}`);
          this.stats.membersRemoved++;
          this.retire(spare);
        },
        (e: unknown) => {
          this.note(`remove ${spare.id} refused ${isPlexusError(e) ? e.code : String(e)}`);
          this.spareState = 'in';
        },
      );
    }
  }

  /** A removed spare: stopped for good, its disks wiped (it joins again as a new, empty member). */
  private retire(m: Member): void {
    if (m.log) this.crash(m);
    m.restartAt = Number.POSITIVE_INFINITY;
    m.durable = undefined;
    m.localState = new MemoryLogState();
    this.spareState = 'out';
  }

  private crash(m: Member): void {
    if (!m.log) return;
    this.stats.crashes++;
    const installing = m.log.status().catchUpTarget;
    if (installing !== undefined) this.stats.installCrashes++;
    this.note(`crash ${m.id}${installing !== undefined ? ` installing to ${installing}` : ''}`);
    this.stats.recordsCaughtUp += m.log.status().recordsCaughtUp;
    m.disk?.crash();
    this.streams.crash(m.id);
    m.installing = undefined;
    m.crashAt = Number.POSITIVE_INFINITY;
    m.cutAt = Number.POSITIVE_INFINITY;
    if (m.local) m.local.dead = true;
    void m.driver?.stop().catch(() => undefined);
    this.wire.join(m.id).closeNow(); // closes the old endpoint; the next open joins again
    this.net.dropNode(m.id);
    m.log = undefined;
    m.restartAt = this.clock.now() + 50 + this.rng.int(150);
  }

  // ---- clients ----

  private leaderNow(): Member | undefined {
    for (const m of this.members.values()) if (m.log?.role === 'leader' && m.log.acceptingWrites) return m;
    return undefined;
  }

  private client(c: Client): void {
    const m = this.members.get(c.target);
    const log = m?.log;
    if (m === undefined || log?.role !== 'leader') {
      const hint = log?.status().leader ?? 0;
      c.target = hint > 0 && this.rng.chance(0.8) ? hint : this.rng.between(1, this.n);
      c.nextAt = this.clock.now() + 5 + this.rng.int(10);
      return;
    }
    if (!log.acceptingWrites) {
      c.nextAt = this.clock.now() + 5 + this.rng.int(10);
      return;
    }
    c.busy = true;
    const now = this.clock.now();
    const done = () => {
      c.busy = false;
      c.nextAt = this.clock.now() + this.rng.int(20);
    };
    if (this.rng.chance(0.7)) {
      const value = `c${c.id}-${++c.seq}`;
      const cas = this.rng.chance(0.3) ? c.seen : undefined;
      const op = this.history.invoke(
        c.id,
        { kind: 'append', value, ...(cas !== undefined ? { expectedLast: cas } : {}) },
        now,
      );
      this.note(`append ${c.id} ${value} ${cas ?? '-'} at ${m.id}`);
      const projected = Number(log.status().lastPosition) + 1;
      const p = log.append([enc.encode(value)], cas !== undefined ? { expectedLast: BigInt(cas) } : {});
      if (this.opts.plant === 'early-ack' && cas === undefined) {
        p.catch(() => undefined);
        this.history.ok(op, { position: projected }, this.clock.now());
        this.acked.set(value, projected);
        this.stats.appendsOk++;
        done();
        return;
      }
      p.then(
        (r) => {
          const position = Number(r.first);
          this.note(`ack ${value} ${position}`);
          this.history.ok(op, { position }, this.clock.now());
          this.acked.set(value, position);
          c.seen = position;
          this.stats.appendsOk++;
          done();
        },
        (e: unknown) => {
          const code = isPlexusError(e) ? e.code : String(e);
          this.note(`refused ${value} ${code}${isPlexusError(e) ? ` ${e.message}` : ''}`);
          if (cas !== undefined && code.endsWith('_CONFLICT')) {
            this.history.ok(op, { conflict: true }, this.clock.now());
            this.stats.casRefused++;
          } else this.stats.unknown++; // outcome unknown: the checker may place it or not
          c.target = this.rng.between(1, this.n);
          done();
        },
      );
    } else {
      const op = this.history.invoke(c.id, { kind: 'read' }, now);
      this.note(`read ${c.id} at ${m.id}`);
      log
        .readBarrier()
        .then(async (upTo) => {
          // A log compacted below `first` is read from there: the model checks the values from it on.
          const from = log.first > 1n ? Number(log.first) : 1;
          const count = Number(upTo) - from + 1;
          const recs = count > 0 ? await log.read(BigInt(from), { maxCount: count, maxBytes: 1 << 30 }) : [];
          recs.forEach((r, i) => {
            if (r.position !== BigInt(from + i)) {
              this.inv.violations.push({
                rule: 'positions-contiguous',
                message: `member ${m.id} returned position ${r.position} as the record number ${from + i}`,
                time: this.clock.now(),
              });
            }
          });
          const values = recs.map((r) => dec.decode(r.payload));
          this.note(`read ${c.id} ${values.length}${from > 1 ? ` from ${from}` : ''}`);
          this.history.ok(op, from > 1 ? { values, from } : { values }, this.clock.now());
          c.seen = from - 1 + values.length;
          this.stats.readsOk++;
          done();
        })
        .catch(() => {
          this.history.fail(op); // a read changes nothing: a refused one is as if never made
          c.target = this.rng.between(1, this.n);
          done();
        });
    }
  }

  // ---- faults ----

  private fault(): void {
    const now = this.clock.now();
    this.nextFault = now + 100 + this.rng.int(150);
    const ids = [...this.members.keys()];
    const up = [...this.members.values()].filter((m) => m.log);
    const leader = this.leaderNow();
    if (this.spare !== undefined && this.rng.chance(0.3)) {
      this.membershipFault(leader);
      return;
    }
    const k = this.rng.int(this.catchUpFaults ? 9 : 6);
    if (k >= 6) {
      this.catchUpFault(k, leader, up);
      return;
    }
    if (k === 0 || k === 1) {
      this.stats.partitions++;
      if (k === 0 && leader) {
        this.net.isolate(leader.id);
        this.note(`isolate ${leader.id}`);
      } else {
        const shuffled = [...ids];
        for (let i = shuffled.length - 1; i > 0; i--) {
          const j = this.rng.int(i + 1);
          [shuffled[i], shuffled[j]] = [shuffled[j] as number, shuffled[i] as number];
        }
        const cut = this.rng.between(1, shuffled.length - 1);
        this.net.partition([shuffled.slice(0, cut), shuffled.slice(cut)]);
        this.note(`partition ${shuffled.join(',')} at ${cut}`);
      }
      this.healAt = now + 80 + this.rng.int(150);
    } else if (k === 2 || k === 3) {
      const down = this.n - up.length;
      if (down < Math.floor((this.n - 1) / 2) || (down === 0 && this.n >= 3)) {
        const victim =
          leader && this.rng.chance(0.6) ? leader : this.rng.pick(up.length > 0 ? up : [...this.members.values()]);
        this.crash(victim);
      }
    } else if (k === 4 && leader) {
      const others = up.filter((m) => m.id !== leader.id);
      if (others.length > 0) {
        const to = this.rng.pick(others).id;
        this.stats.transfers++;
        this.note(`transfer ${leader.id} -> ${to}`);
        leader.log?.transferLeadership(to, 200).catch(() => undefined);
      }
    } else {
      const maxDelay = this.rng.between(2, 40);
      this.net.setOptions({
        minDelay: 1,
        maxDelay,
        dropRate: this.rng.float() * 0.1,
        duplicateRate: this.rng.float() * 0.1,
      });
      this.note(`network ${maxDelay}`);
    }
  }

  /**
   * A member that starts installing a snapshot is crashed in the middle of it one time in
   * three (the install resumes from the Raft log on restart), and has its catch-up streams
   * cut halfway one time in three (it pulls the rest on a new stream).
   */
  private watchInstalls(): void {
    const now = this.clock.now();
    for (const m of this.members.values()) {
      const log = m.log;
      if (!log) continue;
      if (m.crashAt <= now) {
        this.crash(m);
        continue;
      }
      if (m.cutAt <= now) {
        m.cutAt = Number.POSITIVE_INFINITY;
        this.note(`cut ${this.streams.cutOf(m.id)} streams of ${m.id}`);
      }
      const target = log.status().catchUpTarget;
      if (target !== undefined && target !== m.installing) {
        const k = this.rng.int(3);
        if (k === 0) m.crashAt = now + 1 + this.rng.int(20);
        else if (k === 1) m.cutAt = now + 2 + this.rng.int(20);
      }
      m.installing = target;
    }
  }

  /** Faults of the catch-up path (`catchUpFaults`). */
  private catchUpFault(k: number, leader: Member | undefined, up: Member[]): void {
    if (k === 6) {
      // Cut every open catch-up stream halfway through whatever it carries.
      const n = this.streams.cutAll();
      this.note(`cut ${n} streams`);
      return;
    }
    if (k === 7) {
      // A follower cut off long enough to fall behind the leader's snapshot: it installs one
      // (and pulls the records below it) when the partition heals.
      const followers = up.filter((m) => m.id !== leader?.id);
      if (followers.length === 0) return;
      const lag = this.rng.pick(followers);
      this.stats.partitions++;
      this.net.isolate(lag.id);
      this.note(`lag ${lag.id}`);
      this.healAt = this.clock.now() + 250 + this.rng.int(200);
      return;
    }
    const log = leader?.log;
    if (!leader || !log) return;
    // Agree a compaction cutoff at the leader's last position (the leader bounds it by what
    // every member holds), then compact the members' local logs below it.
    const wanted = log.last;
    this.note(`compact ${leader.id} ${wanted}`);
    const before = log.compactionLimit;
    log.agreeCompaction(wanted).then(
      (below) => {
        this.note(`agreed ${below}`);
        if (below > before) this.stats.compactionsAgreed++;
        for (const m of this.members.values()) {
          const l = m.log;
          if (!l || l.compactionLimit <= 1n) continue;
          l.compactBefore(l.compactionLimit).then(
            () => {
              this.stats.localCompactions++;
              this.note(`compacted ${m.id} ${l.first}`);
            },
            () => undefined,
          );
        }
      },
      () => undefined,
    );
  }

  // ---- the loop ----

  private async drain(): Promise<void> {
    await new Promise<void>((r) => setImmediate(r));
  }

  async run(): Promise<ReplicationSimResult> {
    for (const m of this.members.values()) this.start(m);
    await this.drain();
    const faultsEnd = this.duration;
    const end = this.duration + 1200; // a quiet period: healed, everyone up, clients stopped
    let healed = false;
    while (this.clock.now() < end) {
      const now = this.clock.now();
      const active = now < faultsEnd;
      if (!active && !healed) {
        healed = true;
        this.net.heal();
        this.net.setOptions(DEFAULTS.network);
        this.streams.opts = { ...this.streamOpts, cutRate: 0 };
        this.note('quiet');
      }
      let t = end;
      const timer = this.clock.nextDue();
      if (timer !== undefined && timer < t) t = timer;
      const msg = this.net.nextAt();
      if (msg !== undefined && msg < t) t = msg;
      for (const m of this.members.values()) {
        if (!m.log && !m.opening && m.restartAt < t) t = Math.max(now, m.restartAt);
        if (m.log && m.crashAt < t && active) t = Math.max(now, m.crashAt);
        if (m.log && m.cutAt < t && active) t = Math.max(now, m.cutAt);
      }
      if (active) {
        for (const c of this.clients) if (!c.busy && c.nextAt < t) t = Math.max(now, c.nextAt);
        if (this.faults && this.nextFault < t) t = Math.max(now, this.nextFault);
        if (this.healAt < t) t = Math.max(now, this.healAt);
        if (faultsEnd < t) t = faultsEnd;
      }
      this.clock.advanceTo(t);
      this.wire.deliver(t);
      for (const m of this.members.values()) {
        if (!m.log && !m.opening && m.restartAt <= t) {
          this.note(`restart ${m.id}`);
          this.start(m);
        }
      }
      if (active) {
        if (this.healAt <= t) {
          this.healAt = Number.POSITIVE_INFINITY;
          this.net.heal();
          this.note('heal');
        }
        if (this.faults && this.nextFault <= t) this.fault();
        for (const c of this.clients) if (!c.busy && c.nextAt <= t) this.client(c);
      }
      await this.drain();
      if (this.catchUpFaults && active) this.watchInstalls();
      const leader = this.leaderNow();
      if (leader && leader.id !== this.lastLeader) {
        this.lastLeader = leader.id;
        this.stats.leaderChanges++;
        this.note(`leader ${leader.id}`);
      }
    }
    return this.finish();
  }

  private async finish(): Promise<ReplicationSimResult> {
    const now = this.clock.now();
    // Every member's local log, read whole: contiguous from 1, one value per position.
    // Every member's local log, read whole from its first position (below it: compacted away).
    const logs = new Map<number, { first: number; values: string[] }>();
    for (const m of this.members.values()) {
      const log = m.log;
      if (!log) continue;
      const first = log.first > 1n ? Number(log.first) : 1;
      const count = Number(log.last) - first + 1;
      const recs = count > 0 ? await log.read(BigInt(first), { maxCount: count, maxBytes: 1 << 30 }) : [];
      const values: string[] = [];
      recs.forEach((r, i) => {
        if (r.position !== BigInt(first + i)) {
          this.inv.violations.push({
            rule: 'positions-contiguous',
            message: `member ${m.id} holds position ${r.position} as its record number ${first + i}`,
            time: now,
          });
        }
        const v = dec.decode(r.payload);
        values.push(v);
        this.inv.position(m.id, first + i, v, now);
      });
      logs.set(m.id, { first, values });
      const st = log.status();
      this.stats.snapshotsTaken += st.snapshotsTaken;
      this.stats.snapshotsInstalled += st.snapshotsInstalled;
      this.stats.recordsCaughtUp += st.recordsCaughtUp;
    }
    this.stats.streamsOpened = this.streams.stats.opened;
    this.stats.streamsCut = this.streams.stats.cut;
    let longest = { first: 1, values: [] as string[] };
    const lastOf = (l: { first: number; values: string[] }) => l.first - 1 + l.values.length;
    for (const l of logs.values()) if (lastOf(l) > lastOf(longest)) longest = l;
    // After the quiet period every member holds the whole log: none is left behind (a
    // snapshot it could not install, a catch-up that stopped short).
    // (Members of the configuration: a spare that was never added, or is being, holds nothing.)
    const st = this.leaderNow()?.log?.status();
    const inConf = st ? new Set([...st.voters, ...st.learners]) : undefined;
    for (const [id, l] of logs) {
      if (inConf && !inConf.has(id)) continue;
      if (lastOf(l) !== lastOf(longest)) {
        this.inv.violations.push({
          rule: 'members-converge',
          message: `member ${id} holds positions up to ${lastOf(l)}; member logs reach ${lastOf(longest)}`,
          time: now,
        });
      }
    }
    /** The value at `position`: in the longest log, or, compacted there, the one every member applied. */
    const valueAt = (position: number, value: string): string | undefined =>
      position >= longest.first
        ? longest.values[position - longest.first]
        : this.inv.positionOf(value) === position
          ? value
          : undefined;
    // Acknowledged appends are never lost: each is in the longest log, at the position acknowledged.
    for (const [value, position] of this.acked) {
      const held = valueAt(position, value);
      if (held !== value) {
        this.inv.violations.push({
          rule: 'acknowledged-lost',
          message: `${value} was acknowledged at position ${position}; the log holds ${held ?? 'nothing'} there`,
          time: now,
        });
      }
    }
    // Appends whose outcome the client never learnt: placed where the log holds them, or not made.
    const at = new Map(longest.values.map((v, i) => [v, longest.first + i] as const));
    if (longest.first > 1) {
      for (const op of this.history.unknown()) {
        if (op.input.kind !== 'append') continue;
        const p = this.inv.positionOf(op.input.value);
        if (p !== undefined && p < longest.first) at.set(op.input.value, p);
      }
    }
    for (const op of this.history.unknown()) {
      if (op.input.kind !== 'append') continue;
      const p = at.get(op.input.value);
      if (p === undefined) this.history.fail(op.id);
      else this.history.resolve(op.id, { position: p });
    }
    // Closing may wait for a Raft write that only simulated time would finish: not awaited.
    for (const m of this.members.values()) void m.log?.close().catch(() => undefined);
    await this.drain();
    for (const v of this.inv.violations) this.note(`violation ${v.rule}`);
    this.note(`logs ${[...logs.values()].map((l) => `${l.first}..${lastOf(l)}`).join(',')}`);
    return { seed: this.opts.seed, nodes: this.n, ...this.outcome(), stats: this.stats };
  }
}
