/**
 * ReplicatedLog: the LogStorage seam of Chronacta's cluster mode (docs/chronacta-ha.md).
 *
 * Each member runs a Raft node (ts/raft) whose log is a FileRaftStorage under `<dir>/raft/`
 * (durable: fsynced before any message of the same Ready leaves), and keeps the committed
 * records in a local FileLog under `<dir>/log/` at their global positions: the state
 * machine. Appends are accepted only on the leader: it checks compare-and-set against its
 * projected last position (applied + its own pending proposals), wraps the batch in an EVFR
 * frame (first position, the Raft term as epoch, the batch id), proposes it, and answers once
 * the entry is committed by a majority of voters and applied to its own local log. Every
 * member applies committed entries in Raft order: decode the frame (checksums), check that it
 * continues the local log, append it with the same batch id and the frame's epoch as fencing
 * epoch. A frame already in the local log (same batch id at the same positions: a replay
 * after a restart) is skipped; anything else stops the member with PLX_CHRONACTA_HA_DIVERGED.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { join } from 'node:path';
import { decodeEvfr, type EvfrFrame, encodeEvfr } from '../../codec/evfr.js';
import { isPlexusError, PlexusError } from '../../core/errors.js';
import { decodeConfChange } from '../../raft/confchange.js';
import { FileRaftStorage } from '../../raft/file-storage.js';
import { RaftDriver } from '../../raft/net/driver.js';
import { RaftTcpTransport, type RaftTlsOptions } from '../../raft/net/tcp-transport.js';
import { RaftNode } from '../../raft/node.js';
import type { Entry, Role, Snapshot, SoftState } from '../../raft/types.js';
import { conflictError, fencedError } from '../../storage/errors.js';
import { type FileLog, openLog } from '../../storage/file-log.js';
import type {
  AppendOptions,
  AppendResult,
  LogRecord,
  LogStorage,
  ReadOptions,
  StorageLogger,
} from '../../storage/types.js';
import { checkAddress, checkMember, type HaMember } from './config.js';
import { HaErrorCode, haError } from './errors.js';

export interface ReplicatedLogOptions {
  /** This member's Raft id. */
  readonly id: number;
  /** Data directory: `raft/` (the Raft log) and `log/` (the committed records) go under it. */
  readonly dir: string;
  /**
   * Every member known at start (this one included): the founding voters of a new cluster,
   * or, with `join`, the members of the cluster being joined.
   */
  readonly members: readonly HaMember[];
  /** Start as a new, empty member that the leader adds with `addMember` (no bootstrap). */
  readonly join?: boolean;
  /** Where the Raft transport listens. Default: host and port of this member's raftAddress. */
  readonly listen?: { readonly host?: string; readonly port?: number };
  /**
   * Addresses to dial peers at, when they differ from their raftAddress (a proxy, a
   * NAT). Default: each member's raftAddress.
   */
  readonly dial?: ReadonlyMap<number, string>;
  /**
   * Mutual TLS 1.3 between members (PEM key and certificate of this member, and the CA that
   * signs every member's certificate); plain TCP when absent (docs/raft-wire.md).
   */
  readonly tls?: RaftTlsOptions;
  /** Milliseconds per Raft tick. Default 100. */
  readonly tickMs?: number;
  /** Ticks before a follower campaigns (randomised up to twice this). Default 10. */
  readonly electionTick?: number;
  /** Ticks between heartbeats. Default 1. */
  readonly heartbeatTick?: number;
  /** How long an append waits for commitment before PLX_RAFT_TIMEOUT (outcome unknown). Default 10,000 ms. */
  readonly timeoutMs?: number;
  /**
   * fsync mode of the local log of committed records. Default `batch`. `never` is safe
   * against a process crash (the bytes are in the page cache and re-applying the durable
   * Raft log restores anything missing) but a power loss can damage the local log; see
   * docs/chronacta-ha.md.
   */
  readonly localFsync?: 'batch' | 'never';
  /** Segment size of both logs (tests use small ones). */
  readonly segmentBytes?: number;
  /** Source of uniform integers in [0, n) for election timeouts. Default: node:crypto randomInt. */
  readonly random?: (n: number) => number;
  readonly logger?: StorageLogger & { error?(message: string, details?: Record<string, unknown>): void };
}

/** What an `onApply` listener receives: one committed batch, now in the local log. */
export interface AppliedBatch {
  readonly raftIndex: number;
  readonly first: bigint;
  readonly last: bigint;
  readonly batchId: Uint8Array;
  readonly epoch: bigint;
  readonly records: readonly LogRecord[];
}

export interface FollowerStatus {
  readonly id: number;
  readonly match: number;
  readonly next: number;
  readonly state: string;
  readonly learner: boolean;
  /** Raft entries the follower lacks. */
  readonly lagEntries: number;
  /** Global positions the follower lacks (estimated from recent entries; exact in steady state). */
  readonly lagPositions: number;
}

export interface ReplicatedLogStatus {
  readonly id: number;
  readonly role: Role;
  /** The leader this member knows (0: none). */
  readonly leader: number;
  readonly leaderAddress: string | undefined;
  readonly term: number;
  /** Raft commit and applied indexes. */
  readonly commit: number;
  readonly applied: number;
  /** The local log's last position (every committed batch applied here). */
  readonly lastPosition: bigint;
  readonly highestEpoch: bigint;
  /** The leader accepts appends (it has applied every entry of earlier terms). */
  readonly acceptingWrites: boolean;
  readonly voters: readonly number[];
  readonly learners: readonly number[];
  readonly members: readonly HaMember[];
  /** Frames applied to the local log, and frames skipped as already present. */
  readonly appendEntriesApplied: number;
  readonly duplicatesSkipped: number;
  /** Set once the member stopped (divergence, failed local write). */
  readonly failure: string | undefined;
  /** Only on the leader: every other member's replication progress. */
  readonly followers?: readonly FollowerStatus[];
}

/** A membership record carried in a Raft entry: magic `PXHM`, then JSON. */
const META_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x4d);
const META_MAX = 4096;
const POSITION_WINDOW = 65_536;

function isMeta(data: Uint8Array): boolean {
  return data.length >= 4 && data[0] === 0x50 && data[1] === 0x58 && data[2] === 0x48 && data[3] === 0x4d;
}

function encodeMeta(member: HaMember): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify({ op: 'member', member }));
  const out = new Uint8Array(4 + json.length);
  out.set(META_MAGIC);
  out.set(json, 4);
  return out;
}

function decodeMeta(data: Uint8Array): HaMember {
  if (data.length > META_MAX) throw new Error(`membership record of ${data.length} bytes is above ${META_MAX}`);
  const v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(4))) as Record<string, unknown>;
  if (v.op !== 'member') throw new Error(`unknown membership record op ${String(v.op)}`);
  return checkMember(v.member);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function hex(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}

function splitAddress(a: string): { host: string; port: number } {
  const i = a.lastIndexOf(':');
  return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class ReplicatedLog implements LogStorage {
  private readonly members = new Map<number, HaMember>();
  private readonly dialOverride = new Map<number, string>();
  private readonly listeners = new Set<(b: AppliedBatch) => void>();
  /** (raft index, last position) of recent frames, ascending: follower lag in positions. */
  private readonly positions: [number, number][] = [];
  private raftApplied = 0;
  private projectedLast = 0;
  /** The local log's last position counting appends issued by the apply path and not yet acknowledged. */
  private localTail = 0;
  private admission: Promise<void> = Promise.resolve();
  /** The term in which this leader has applied every earlier entry, and the index it waits for. */
  private readyTerm = 0;
  private barrierTerm = 0;
  private barrierIndex = 0;
  private appliedFrames = 0;
  private duplicates = 0;
  private failure: PlexusError | undefined;
  private closed = false;
  private readonly confWaiters = new Map<number, { term: number; resolve(): void; reject(e: unknown): void }>();

  private constructor(
    private readonly opts: ReplicatedLogOptions,
    private readonly node: RaftNode,
    private readonly raftStorage: FileRaftStorage,
    private readonly local: FileLog,
    private readonly transport: RaftTcpTransport,
    private readonly driver: RaftDriver,
    members: readonly HaMember[],
  ) {
    for (const m of members) this.members.set(m.id, m);
    this.projectedLast = Number(local.last);
    this.localTail = Number(local.last);
  }

  /** Opens (or creates) the member's data directory, starts its transport and Raft driver. */
  static async open(opts: ReplicatedLogOptions): Promise<ReplicatedLog> {
    const id = opts.id;
    if (!Number.isSafeInteger(id) || id < 1) {
      throw haError(HaErrorCode.BAD_CONFIG, `member id ${String(id)} must be a positive whole number`);
    }
    const members = (opts.members ?? []).map(checkMember);
    const self = members.find((m) => m.id === id);
    if (!self) throw haError(HaErrorCode.BAD_CONFIG, `the member list does not include this member (${id})`, { id });
    if (new Set(members.map((m) => m.id)).size !== members.length) {
      throw haError(HaErrorCode.BAD_CONFIG, 'member ids must be distinct');
    }
    for (const [, a] of opts.dial ?? []) checkAddress('dial address', a);
    const logOpts = opts.segmentBytes ? { segmentBytes: opts.segmentBytes } : {};
    const quiet = opts.logger ? { logger: opts.logger } : {};
    const raftDir = join(opts.dir, 'raft');
    let raftStorage = await FileRaftStorage.open(raftDir, { ...logOpts, ...quiet });
    if (raftStorage.lastIndex() === 0 && !opts.join) {
      // Nothing durable yet (a first start, or a crash before the bootstrap was synced).
      await raftStorage.close();
      raftStorage = await FileRaftStorage.bootstrap(
        raftDir,
        { voters: members.map((m) => m.id).sort((a, b) => a - b), learners: [] },
        new Uint8Array(0),
        { ...logOpts, ...quiet },
      );
    }
    let local: FileLog | undefined;
    let transport: RaftTcpTransport | undefined;
    try {
      local = await openLog(join(opts.dir, 'log'), { ...logOpts, ...quiet, fsync: opts.localFsync ?? 'batch' });
      const random = opts.random ?? ((n: number) => randomInt(n));
      const node = new RaftNode({
        id,
        storage: raftStorage,
        random,
        preVote: true,
        checkQuorum: true,
        electionTick: opts.electionTick ?? 10,
        heartbeatTick: opts.heartbeatTick ?? 1,
      });
      const listen = opts.listen ?? splitAddress(self.raftAddress);
      const holder: { log?: ReplicatedLog } = {};
      transport = await RaftTcpTransport.start({
        id,
        host: listen.host ?? '127.0.0.1',
        port: listen.port ?? 0,
        onMessage: (m) => holder.log?.receive(m),
        retryMs: 20,
        maxRetryMs: 200,
        ...(opts.tls ? { tls: opts.tls } : {}),
        ...(opts.logger ? { logger: opts.logger } : {}),
      });
      const t = transport;
      const rs = raftStorage;
      const driver = new RaftDriver({
        node,
        // The driver stops when persisting fails; the wrapper records why, for status().
        storage: {
          append: (es) => rs.append(es),
          setHardState: (h) => rs.setHardState(h),
          applySnapshot: (sn) => rs.applySnapshot(sn),
          compact: (sn) => rs.compact(sn),
          sync: () =>
            rs.sync().catch((err: unknown) => {
              const code = isPlexusError(err) ? err.code : String(err);
              throw (holder.log as ReplicatedLog).fail(
                haError(
                  HaErrorCode.STOPPED,
                  `persisting the Raft log failed (${code}); remove the cause and restart the member`,
                  { cause: code },
                  err,
                ),
              );
            }),
        },
        send: (ms) => t.send(ms),
        applier: {
          apply: (es) => (holder.log as ReplicatedLog).applyEntries(es),
          restore: (s) => (holder.log as ReplicatedLog).restore(s),
        },
        tickMs: opts.tickMs ?? 100,
        timeoutMs: opts.timeoutMs ?? 10_000,
        onSoftState: (s) => holder.log?.softState(s),
        ...(opts.logger ? { logger: opts.logger } : {}),
      });
      const log = new ReplicatedLog(opts, node, raftStorage, local, transport, driver, members);
      holder.log = log;
      for (const m of members) if (m.id !== id) log.dialPeer(m);
      driver.start();
      return log;
    } catch (e) {
      await transport?.close();
      await local?.close();
      await raftStorage.close();
      throw e;
    }
  }

  // ---- LogStorage ----

  get first(): bigint {
    return this.local.first;
  }
  get last(): bigint {
    return this.local.last;
  }
  get highestEpoch(): bigint {
    return this.local.highestEpoch;
  }

  /** The Raft transport's port (tests put proxies in front of it). */
  get raftPort(): number {
    return this.transport.port;
  }

  async append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    this.checkOpen();
    if (!Array.isArray(payloads) || payloads.length === 0) {
      throw new PlexusError('PLX_STORAGE_BAD_INPUT', 'append needs at least one payload');
    }
    const batchId = opts.batchId ?? new Uint8Array(randomBytes(16));
    if (!(batchId instanceof Uint8Array) || batchId.length !== 16) {
      throw new PlexusError('PLX_STORAGE_BAD_INPUT', 'batchId must be 16 bytes');
    }
    // Appends pass the leadership check one at a time, in call order, so positions follow call order.
    const deadline = Date.now() + (this.opts.timeoutMs ?? 10_000);
    const turn = this.admission.then(() => this.whenAcceptingWrites(deadline));
    this.admission = turn.catch(() => undefined);
    await turn;
    // From here to the proposal nothing awaits: the compare-and-set and the positions hold.
    const term = this.node.status().term;
    if (opts.epoch !== undefined) {
      if (opts.epoch < this.local.highestEpoch) throw fencedError(opts.epoch, this.local.highestEpoch);
      if (opts.epoch > BigInt(term)) {
        throw this.notLeader(`this leader's term ${term} is older than the caller's epoch ${opts.epoch}`);
      }
    }
    const expected = BigInt(this.projectedLast);
    if (opts.expectedLast !== undefined && opts.expectedLast !== expected) {
      throw conflictError(opts.expectedLast, expected);
    }
    const first = this.projectedLast + 1;
    const frame = encodeEvfr({ batchId, first, epoch: BigInt(term), records: payloads });
    const before = this.node.status().lastIndex;
    const done = this.driver.propose(frame);
    const index = this.node.status().lastIndex;
    if (index > before) {
      // The entry is in this leader's log: its positions are taken until leadership changes.
      this.projectedLast += payloads.length;
      this.remember(index, this.projectedLast);
    }
    await done;
    return { first: BigInt(first), last: BigInt(first + payloads.length - 1), batchId };
  }

  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.local.read(from, opts);
  }

  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.local.readBackward(from, opts);
  }

  /** Only a no-op is possible: committed records are never removed from a replicated log. */
  async truncateAfter(position: bigint): Promise<void> {
    if (position >= this.local.last) return;
    throw haError(
      HaErrorCode.UNSUPPORTED,
      `cannot remove committed records after ${position}: the replicated log holds ${this.local.last} committed positions`,
      { position, last: this.local.last },
    );
  }

  /** Compacts this member's local log only (each member decides for itself). */
  compactBefore(position: bigint): Promise<void> {
    return this.local.compactBefore(position);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.driver.stop();
    for (const w of this.confWaiters.values()) w.reject(haError(HaErrorCode.STOPPED, 'the member closed'));
    this.confWaiters.clear();
    await this.transport.close();
    await this.raftStorage.close().catch(() => undefined);
    await this.local.close();
  }

  // ---- cluster API ----

  /** Called on every replica after a committed batch is in its local log. Returns an unsubscribe function. */
  onApply(listener: (batch: AppliedBatch) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  status(): ReplicatedLogStatus {
    const s = this.node.status();
    const leader = s.lead;
    let followers: FollowerStatus[] | undefined;
    if (s.role === 'leader' && s.progress) {
      followers = [];
      const top = this.positionAt(s.lastIndex);
      for (const [id, p] of s.progress) {
        if (id === s.id) continue;
        followers.push({
          id,
          match: p.match,
          next: p.next,
          state: p.state,
          learner: p.learner,
          lagEntries: Math.max(0, s.lastIndex - p.match),
          lagPositions: Math.max(0, top - this.positionAt(p.match)),
        });
      }
    }
    return {
      id: s.id,
      role: s.role,
      leader,
      leaderAddress: this.members.get(leader)?.advertise,
      term: s.term,
      commit: s.commit,
      applied: this.raftApplied,
      lastPosition: this.local.last,
      highestEpoch: this.local.highestEpoch,
      acceptingWrites: s.role === 'leader' && this.readyTerm === s.term && !this.failure && !this.closed,
      voters: s.confState.voters,
      learners: s.confState.learners,
      members: [...this.members.values()],
      appendEntriesApplied: this.appliedFrames,
      duplicatesSkipped: this.duplicates,
      failure: this.failure?.message,
      ...(followers ? { followers } : {}),
    };
  }

  /**
   * Adds a member (leader only): replicates its addresses, adds it as a learner, waits until
   * it has caught up, then makes it a voter. Start the new member with `join: true` first.
   */
  async addMember(member: HaMember, opts: { voter?: boolean; catchUpMs?: number } = {}): Promise<void> {
    const m = checkMember(member);
    await this.whenAcceptingWrites();
    const conf = this.node.status().confState;
    if (conf.voters.includes(m.id) || conf.learners.includes(m.id)) {
      throw haError(HaErrorCode.MEMBERSHIP, `member ${m.id} is already in the cluster`, { id: m.id });
    }
    await this.driver.propose(encodeMeta(m));
    await this.confChange({ type: 'add-learner', nodeId: m.id });
    if (opts.voter === false) return;
    const end = Date.now() + (opts.catchUpMs ?? 10_000);
    for (;;) {
      const s = this.node.status();
      const p = s.progress?.get(m.id);
      if (s.role !== 'leader') throw this.notLeader('leadership changed while adding a member');
      if (p && p.match >= s.commit) break;
      if (Date.now() > end) {
        throw haError(HaErrorCode.MEMBERSHIP, `member ${m.id} did not catch up; it stays a learner`, {
          id: m.id,
          match: p?.match ?? 0,
          commit: s.commit,
        });
      }
      await sleep(10);
    }
    await this.confChange({ type: 'add-voter', nodeId: m.id });
  }

  /** Removes a member (leader only); a leader removing itself steps down once the change commits. */
  async removeMember(id: number): Promise<void> {
    await this.whenAcceptingWrites();
    const conf = this.node.status().confState;
    if (!conf.voters.includes(id) && !conf.learners.includes(id)) {
      throw haError(HaErrorCode.MEMBERSHIP, `member ${id} is not in the cluster`, { id });
    }
    if (conf.voters.length === 1 && conf.voters[0] === id) {
      throw haError(HaErrorCode.MEMBERSHIP, `member ${id} is the last voter and cannot be removed`, { id });
    }
    await this.confChange({ type: 'remove-node', nodeId: id });
  }

  /** Hands leadership to `to` (rolling upgrades: move it off a member before stopping it). Resolves once `to` leads. */
  async transferLeadership(to: number, waitMs = 10_000): Promise<void> {
    this.checkOpen();
    const s = this.node.status();
    if (s.role !== 'leader') throw this.notLeader('only the leader can hand over leadership');
    if (!s.confState.voters.includes(to)) {
      throw haError(HaErrorCode.MEMBERSHIP, `member ${to} is not a voter`, { id: to });
    }
    if (to === s.id) return;
    this.node.transferLeader(to);
    const end = Date.now() + waitMs;
    while (this.node.status().lead !== to || this.node.status().term === s.term) {
      if (Date.now() > end) {
        throw new PlexusError('PLX_RAFT_TIMEOUT', `leadership did not move to ${to} within ${waitMs} ms`, { to });
      }
      await sleep(10);
    }
  }

  /** Changes the address peers are dialled at (tests put proxies in front of members). */
  setDialAddress(id: number, address: string): void {
    checkAddress('dial address', address);
    this.dialOverride.set(id, address);
    this.transport.setPeer(id, address);
  }

  // ---- internals ----

  private receive(m: Parameters<RaftDriver['receive']>[0]): void {
    this.driver.receive(m);
  }

  private dialPeer(m: HaMember): void {
    if (m.id === this.opts.id) return;
    const address = this.dialOverride.get(m.id) ?? this.opts.dial?.get(m.id) ?? m.raftAddress;
    // Port 0: the address is not known yet (set later with setDialAddress).
    if (splitAddress(address).port === 0) return;
    this.transport.setPeer(m.id, address);
  }

  private checkOpen(): void {
    if (this.failure) {
      throw haError(HaErrorCode.STOPPED, `member ${this.opts.id} stopped: ${this.failure.message}`, {}, this.failure);
    }
    if (this.closed) throw haError(HaErrorCode.STOPPED, `member ${this.opts.id} is closed`);
  }

  private notLeader(why: string): PlexusError {
    const s = this.node.status();
    const leader = s.role === 'leader' ? 0 : s.lead;
    const addr = this.members.get(leader)?.advertise;
    const where =
      leader === 0 ? 'no leader is known yet; retry shortly' : `send it to the leader, member ${leader} at ${addr}`;
    return haError(HaErrorCode.NOT_LEADER, `member ${this.opts.id} does not take writes (${why}): ${where}`, {
      leader,
      leaderAddress: addr,
      term: s.term,
    });
  }

  /** Resolves once this member is a leader that has applied every entry of earlier terms. */
  private async whenAcceptingWrites(end = Date.now() + (this.opts.timeoutMs ?? 10_000)): Promise<void> {
    for (;;) {
      this.checkOpen();
      const s = this.node.status();
      if (s.role !== 'leader') throw this.notLeader(`it is a ${s.role}`);
      if (this.readyTerm === s.term) return;
      this.observeLeadership();
      if (this.readyTerm === s.term) return;
      if (Date.now() > end) {
        throw haError(
          HaErrorCode.NOT_READY,
          `leader ${s.id} has not applied the entries of earlier terms yet (applied ${this.raftApplied}, needs ${this.barrierIndex}); retry`,
          { applied: this.raftApplied, needs: this.barrierIndex },
        );
      }
      await sleep(5);
    }
  }

  /** A leader of a new term waits until it has applied its whole log as of winning the election. */
  private observeLeadership(): void {
    const s = this.node.status();
    if (s.role !== 'leader') return;
    if (this.barrierTerm !== s.term) {
      this.barrierTerm = s.term;
      this.barrierIndex = s.lastIndex;
    }
    if (this.readyTerm !== s.term && this.raftApplied >= this.barrierIndex) {
      this.readyTerm = s.term;
      this.projectedLast = Number(this.local.last);
    }
  }

  private softState(s: SoftState): void {
    if (s.role === 'leader') this.observeLeadership();
    else this.readyTerm = 0;
  }

  private remember(index: number, lastPosition: number): void {
    const p = this.positions;
    while (p.length > 0 && (p[p.length - 1] as [number, number])[0] >= index) p.pop();
    p.push([index, lastPosition]);
    if (p.length > POSITION_WINDOW) p.splice(0, p.length - POSITION_WINDOW);
  }

  /** The last position of the frames up to Raft index `index` (as far as the window knows). */
  private positionAt(index: number): number {
    const p = this.positions;
    let lo = 0;
    let hi = p.length - 1;
    let best = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if ((p[mid] as [number, number])[0] <= index) {
        best = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (best >= 0) return (p[best] as [number, number])[1];
    const oldest = p[0];
    return oldest ? oldest[1] - 1 : 0;
  }

  private async restore(s: Snapshot): Promise<void> {
    // The only snapshot a member receives is the founding one (index 1, no data): the Raft
    // log is never compacted yet, so a joining member gets every entry after it.
    if (s.metadata.index <= 1 && s.data.length === 0) {
      this.raftApplied = Math.max(this.raftApplied, s.metadata.index);
      return;
    }
    throw this.fail(
      haError(HaErrorCode.UNSUPPORTED, `a data snapshot at Raft index ${s.metadata.index} cannot be installed yet`, {
        index: s.metadata.index,
      }),
    );
  }

  /**
   * Applies committed entries in order. The local appends of one call are issued without
   * waiting for each other (the log keeps call order and shares one fsync among them) and
   * awaited together before the driver acknowledges anything of this batch.
   */
  private async applyEntries(entries: readonly Entry[]): Promise<void> {
    const pending: Promise<AppliedBatch>[] = [];
    const settle = async () => {
      const done = await Promise.all(pending.splice(0));
      for (const b of done) this.notify(b);
    };
    try {
      for (const e of entries) {
        if (e.type === 'conf-change') this.applyConfChange(e);
        else if (e.data.length === 0) {
          // a new leader's first entry
        } else if (isMeta(e.data)) {
          let m: HaMember;
          try {
            m = decodeMeta(e.data);
          } catch (err) {
            throw this.fail(
              haError(HaErrorCode.DIVERGED, `committed entry ${e.index} is a membership record that does not decode`, {
                index: e.index,
                reason: String(err),
              }),
            );
          }
          this.members.set(m.id, m);
          this.dialPeer(m);
        } else {
          const frame = this.decodeFrame(e);
          if (frame.first === this.localTail + 1) pending.push(this.appendLocal(e, frame));
          else {
            await settle();
            await this.skipDuplicate(e, frame);
          }
        }
      }
      await settle();
    } catch (err) {
      // Let every issued append finish (or fail) before the driver stops the member.
      await Promise.allSettled(pending);
      throw err;
    }
    const lastEntry = entries[entries.length - 1];
    if (lastEntry) this.raftApplied = lastEntry.index;
    this.observeLeadership();
  }

  private applyConfChange(e: Entry): void {
    const cc = decodeConfChange(e.data);
    if (cc.type === 'remove-node') {
      if (cc.nodeId !== this.opts.id) this.transport.removePeer(cc.nodeId);
      this.members.delete(cc.nodeId);
    } else {
      const m = this.members.get(cc.nodeId);
      if (m) this.dialPeer(m);
    }
    const w = this.confWaiters.get(e.index);
    if (w) {
      this.confWaiters.delete(e.index);
      if (w.term === e.term) w.resolve();
      else
        w.reject(
          new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'leadership changed before the membership change committed'),
        );
    }
  }

  private confChange(cc: Parameters<RaftNode['proposeConfChange']>[0]): Promise<void> {
    const { index, term } = this.node.proposeConfChange(cc);
    const ms = this.opts.timeoutMs ?? 10_000;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.confWaiters.delete(index);
        reject(
          new PlexusError(
            'PLX_RAFT_TIMEOUT',
            `membership change ${cc.type} ${cc.nodeId} not committed within ${ms} ms`,
          ),
        );
      }, ms);
      this.confWaiters.set(index, {
        term,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
    });
  }

  private decodeFrame(e: Entry): EvfrFrame {
    try {
      const d = decodeEvfr(e.data);
      if (d.kind !== 'frame' || d.consumed !== e.data.length) {
        throw new Error(d.kind === 'frame' ? 'bytes follow the frame' : 'the frame is incomplete');
      }
      return d.frame;
    } catch (err) {
      throw this.fail(
        haError(HaErrorCode.DIVERGED, `committed entry ${e.index} is not a valid EVFR frame: ${String(err)}`, {
          index: e.index,
        }),
      );
    }
  }

  /** Appends a frame that continues the local log, with its batch id and its epoch as fencing epoch. */
  private appendLocal(e: Entry, frame: EvfrFrame): Promise<AppliedBatch> {
    const expectedLast = BigInt(this.localTail);
    this.localTail = frame.last;
    const p = this.local.append(frame.records, { batchId: frame.batchId, expectedLast, epoch: frame.epoch }).then(
      (r): AppliedBatch => {
        this.appliedFrames++;
        this.remember(e.index, frame.last);
        const records = frame.records.map((payload, i) => ({
          position: r.first + BigInt(i),
          batchId: frame.batchId,
          epoch: frame.epoch,
          payload,
        }));
        return {
          raftIndex: e.index,
          first: r.first,
          last: r.last,
          batchId: frame.batchId,
          epoch: frame.epoch,
          records,
        };
      },
      (err: unknown) => {
        // A failed local write (disk full, I/O error, fencing): stop replicating here.
        const code = isPlexusError(err) ? err.code : String(err);
        throw this.fail(
          haError(
            HaErrorCode.STOPPED,
            `applying entry ${e.index} (positions ${frame.first}..${frame.last}) to the local log failed: ${code}; remove the cause and restart the member`,
            { index: e.index, cause: code },
            err,
          ),
        );
      },
    );
    p.catch(() => undefined); // observed by applyEntries; never unhandled
    return p;
  }

  private notify(batch: AppliedBatch): void {
    for (const l of this.listeners) {
      try {
        l(batch);
      } catch (err) {
        this.opts.logger?.warn('replicated log: an onApply listener threw', { error: String(err) });
      }
    }
  }

  /** A frame that does not continue the local log: a replay of a batch already there, or a divergence. */
  private async skipDuplicate(e: Entry, frame: EvfrFrame): Promise<void> {
    const last = this.localTail;
    if (frame.last <= last && (await this.isDuplicate(frame))) {
      this.duplicates++;
      this.remember(e.index, frame.last);
      return;
    }
    throw this.fail(
      haError(
        HaErrorCode.DIVERGED,
        `committed entry ${e.index} carries positions ${frame.first}..${frame.last} (batch ${hex(frame.batchId)}) but the local log ends at ${last}${frame.first > last + 1 ? ' (a gap)' : ' with other records there'}: the replicas diverged; the member stops`,
        { index: e.index, first: frame.first, last: frame.last, localLast: last, batchId: hex(frame.batchId) },
      ),
    );
  }

  /** The frame's batch is already in the local log at its positions (or compacted away below it). */
  private async isDuplicate(frame: EvfrFrame): Promise<boolean> {
    const localFirst = Number(this.local.first);
    if (localFirst === 0 || frame.last < localFirst) return true; // compacted: applied long ago
    for (const p of [frame.first, frame.last]) {
      if (p < localFirst) continue;
      const [rec] = await this.local.read(BigInt(p), { maxCount: 1, maxBytes: 1 });
      if (!rec || rec.position !== BigInt(p) || !sameBytes(rec.batchId, frame.batchId)) return false;
    }
    return true;
  }

  private fail(err: PlexusError): PlexusError {
    if (!this.failure) {
      this.failure = err;
      const log = this.opts.logger;
      const details = { id: this.opts.id, code: err.code, ...err.details };
      if (log?.error) log.error(`replicated log: member stops: ${err.message}`, details);
      else if (log) log.warn(`replicated log: member stops: ${err.message}`, details);
      else process.stderr.write(`plexus chronacta-ha: member ${this.opts.id} stops: ${err.message}\n`);
    }
    return err;
  }
}
