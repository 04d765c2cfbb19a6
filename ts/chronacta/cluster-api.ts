/**
 * Cluster mode: what a member's gRPC server adds to the EventStore and ClusterService methods
 * (docs/chronacta-ha.md):
 *
 * - `ClusterService.AddMember` / `RemoveMember` / `PromoteMember` / `TransferLeader` on the
 *   leader, one at a time, with a stable code for each refusal (a follower refuses with
 *   PLX_CHRONACTA_HA_NOT_LEADER and the leader's address, FAILED_PRECONDITION, as appends do);
 * - the read consistency of `ReadStream`, `ReadAll` and `Subscribe`, asked for in the request header
 *   `plexus-read-consistency` (`leader` or `follower`) and answered in the trailers
 *   `plexus-read` (who served it) and `plexus-applied-position` (the position this member had
 *   applied when it admitted the read); a follower serves a `follower` read only within the
 *   staleness bound of `FollowerReadBounds`, and refuses otherwise with PLX_CHRONACTA_STALE_READ
 *   and the leader's address; a `leader` read passes the replicated log's read barrier
 *   (ReadIndex) first, so a deposed leader that has not noticed yet refuses it;
 * - the member's `cluster.json`, rewritten (atomically) whenever the membership this member
 *   has applied differs from the file: on start, after every change it makes, and on a timer.
 *
 * `attachClusterApi(port, store)` installs all of it on a server started by `startServer`.
 */
import { grpcFrame } from '../codec/grpc-frame.js';
import { type ClockTimers, monotonicClock, type TimerHandle, type Timers } from '../core/clock.js';
import { type PlexusCode, PlexusError } from '../core/errors.js';
import { ChronactaClient } from './client.js';
import type { PeerCredentials } from './client-auth.js';
import { checkAddress, type FollowerReadBounds, followerReadBounds, type HaMember } from './cluster-config.js';
import type { ReplicatedLog, ReplicatedLogStatus } from './cluster-log.js';
import { badInput, ChronactaCode, chronactaError } from './errors.js';
import {
  type CallContext,
  CallFailure,
  type CallStatus,
  type GrpcMethod,
  type GrpcRoutes,
  GrpcStatus,
} from './grpc-server.js';
import { HaErrorCode, haError } from './ha-errors.js';
import { type ClusterFile, membershipFile, writeClusterFile } from './layout.js';
import { methodDefinition, toBig, type WireLong } from './proto.js';
import { LEADER_ADDRESS_KEY, toCallStatus } from './status.js';
import type { EventStore } from './store.js';

/** The refusals of the membership API and of follower reads; docs/errors.md lists them. */
export const ClusterApiCode = {
  /** AddMember with an id that is, or was, a member's (ids are never reused). */
  DUPLICATE_ID: 'PLX_CHRONACTA_CLUSTER_DUPLICATE_ID',
  /** RemoveMember with an id that is not a member. */
  UNKNOWN_ID: 'PLX_CHRONACTA_CLUSTER_UNKNOWN_ID',
  /** RemoveMember of the only voter. */
  LAST_VOTER: 'PLX_CHRONACTA_CLUSTER_LAST_VOTER',
  /** A membership change while another one is still running or not yet committed. */
  CHANGE_PENDING: 'PLX_CHRONACTA_CLUSTER_CHANGE_PENDING',
  /** An address that is not host:port with a port from 1, or one another member already uses. */
  BAD_ADDRESS: 'PLX_CHRONACTA_CLUSTER_BAD_ADDRESS',
  /** A follower read outside the staleness bound; `details.leaderAddress` names where to read. */
  STALE_READ: 'PLX_CHRONACTA_STALE_READ',
  /** TransferLeader to a learner. */
  NOT_VOTER: 'PLX_CHRONACTA_CLUSTER_NOT_VOTER',
  /** TransferLeader without a target in a cluster whose only voter is the leader. */
  NO_TRANSFER_TARGET: 'PLX_CHRONACTA_CLUSTER_NO_TRANSFER_TARGET',
  /** TransferLeader whose target did not lead within the wait. */
  TRANSFER_TIMEOUT: 'PLX_CHRONACTA_CLUSTER_TRANSFER_TIMEOUT',
  /** PromoteMember of a member that is already a voter. */
  NOT_LEARNER: 'PLX_CHRONACTA_CLUSTER_NOT_LEARNER',
  /** PromoteMember of a learner that did not have every committed entry within the wait. */
  LEARNER_BEHIND: 'PLX_CHRONACTA_CLUSTER_LEARNER_BEHIND',
} as const;

const STATUS_OF: Record<string, number> = {
  [ClusterApiCode.DUPLICATE_ID]: GrpcStatus.ALREADY_EXISTS,
  [ClusterApiCode.UNKNOWN_ID]: GrpcStatus.NOT_FOUND,
  [ClusterApiCode.LAST_VOTER]: GrpcStatus.FAILED_PRECONDITION,
  [ClusterApiCode.CHANGE_PENDING]: GrpcStatus.ABORTED,
  [ClusterApiCode.BAD_ADDRESS]: GrpcStatus.INVALID_ARGUMENT,
  [ClusterApiCode.STALE_READ]: GrpcStatus.FAILED_PRECONDITION,
  [ClusterApiCode.NOT_VOTER]: GrpcStatus.FAILED_PRECONDITION,
  [ClusterApiCode.NO_TRANSFER_TARGET]: GrpcStatus.FAILED_PRECONDITION,
  [ClusterApiCode.TRANSFER_TIMEOUT]: GrpcStatus.UNAVAILABLE,
  [ClusterApiCode.NOT_LEARNER]: GrpcStatus.FAILED_PRECONDITION,
  [ClusterApiCode.LEARNER_BEHIND]: GrpcStatus.FAILED_PRECONDITION,
};

/** Request header naming the consistency a read asks for: `leader` or `follower`. */
export const READ_CONSISTENCY_HEADER = 'plexus-read-consistency';
/** Trailer: who served a read: `leader`, `follower`, or `local` (a request without the header). */
export const READ_SERVED_BY_TRAILER = 'plexus-read';
/** Trailer: the position the serving member had applied when it admitted the read. */
export const APPLIED_POSITION_TRAILER = 'plexus-applied-position';

export interface ClusterApiOptions {
  /** Follower-read bounds (defaults: followerReadBounds with the Raft timing below). */
  readonly maxReadLag?: number;
  readonly maxReadStalenessMs?: number;
  /** The Raft timing the member runs with (for the default staleness bound). */
  readonly tickMs?: number;
  readonly electionTick?: number;
  /** How often cluster.json is compared with the applied membership (default 200 ms). */
  readonly reconcileMs?: number;
  /** How long a `leader` read waits for a new leader to apply earlier terms' entries (default 10,000 ms). */
  readonly leaderReadyMs?: number;
  readonly logger?: { warn(message: string, details?: Record<string, unknown>): void };
  /**
   * Time and timers of the read admission's deadlines (a follower's staleness, a new leader's
   * readiness, a deposed leader learning who leads) and of the reconcile interval (default
   * `monotonicClock`).
   */
  readonly clock?: ClockTimers;
  /**
   * What this member presents when it calls the leader's client port (TLS, token:
   * client-auth.ts); asked at each call, so reloaded files are used.
   */
  readonly peer?: () => PeerCredentials;
}

export interface ClusterApi {
  readonly bounds: FollowerReadBounds;
  /** Brings cluster.json up to date with the applied membership now; resolves once written. */
  reconcile(): Promise<void>;
  close(): void;
}

function apiError(code: PlexusCode, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(code, message, details);
}

/** A refusal of this module as a call status: its own gRPC code, the leader's address in a trailer. */
function failure(e: unknown): unknown {
  if (!(e instanceof PlexusError)) return e;
  const code = STATUS_OF[e.code];
  if (code === undefined) return e;
  const st = toCallStatus(e);
  const addr = e.details.leaderAddress;
  return new CallFailure({
    code,
    details: st.details,
    metadata: { ...st.metadata, ...(typeof addr === 'string' && addr !== '' ? { [LEADER_ADDRESS_KEY]: addr } : {}) },
  });
}

/**
 * Waits for `wait` (which settles on its own or rejects when its signal aborts) at most `ms` on
 * `timers`: `true` or `false` as `wait` resolves, `false` once the timers reach `ms` first.
 */
function waitAtMost(timers: Timers, ms: number, wait: (signal: AbortSignal) => Promise<boolean>): Promise<boolean> {
  const ac = new AbortController();
  return new Promise<boolean>((resolve, reject) => {
    const timer = timers.setTimeout(
      () => {
        resolve(false);
        ac.abort();
      },
      Math.max(0, ms),
    );
    wait(ac.signal).then(
      (v) => {
        timers.clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        timers.clearTimeout(timer);
        if (ac.signal.aborted) resolve(false);
        else reject(e);
      },
    );
  });
}

function notLeader(s: ReplicatedLogStatus, what: string): PlexusError {
  const addr = s.leader === 0 ? undefined : s.leaderAddress;
  return haError(
    HaErrorCode.NOT_LEADER,
    `member ${s.id} is a ${s.role} and does not ${what}: ${
      s.leader === 0 ? 'no leader is known yet; retry shortly' : `ask the leader, member ${s.leader} at ${addr}`
    }`,
    { leader: s.leader, leaderAddress: addr, term: s.term },
  );
}

/** A member's id and addresses from an AddMember request; bad ones are refused before anything changes. */
export function memberFromRequest(req: { id?: WireLong; raftAddress?: string; advertise?: string }): HaMember {
  const id = toBig(req.id ?? '0', 'id');
  if (id < 1n || id > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw badInput(`member id ${id} must be a whole number from 1 to 2^53 - 1`, { id: String(id) });
  }
  const address = (what: string, a: string | undefined): string => {
    try {
      checkAddress(what, a);
    } catch (e) {
      throw apiError(ClusterApiCode.BAD_ADDRESS, `${(e as Error).message}; give host:port`, { address: a });
    }
    const port = Number((a as string).slice((a as string).lastIndexOf(':') + 1));
    if (port === 0) throw apiError(ClusterApiCode.BAD_ADDRESS, `${what} "${a}" needs a port from 1`, { address: a });
    return a as string;
  };
  return {
    id: Number(id),
    raftAddress: address('raftAddress', req.raftAddress),
    advertise: address('advertise', req.advertise),
  };
}

/** A membership request message; bytes that do not decode are PLX_CHRONACTA_BAD_INPUT. */
export function decodeMembershipRequest(
  method: 'AddMember' | 'RemoveMember' | 'PromoteMember' | 'TransferLeader',
  request: Uint8Array,
): Record<string, unknown> {
  try {
    return methodDefinition('ClusterService', method).requestDeserialize(Buffer.from(request)) as Record<
      string,
      unknown
    >;
  } catch (e) {
    throw badInput(`the ${method} request is not a well-formed protobuf message: ${(e as Error).message}`);
  }
}

/**
 * An AddMember request checked before anything changes: the member, whether it stays a
 * learner, and the catch-up wait (0: the default).
 */
export function parseAddMember(request: Uint8Array): { member: HaMember; learner: boolean; catchUpMs: number } {
  const req = decodeMembershipRequest('AddMember', request);
  const member = memberFromRequest(req as { id?: WireLong; raftAddress?: string; advertise?: string });
  const catchUpMs = Number(req.catchUpMs ?? 0);
  if (!Number.isSafeInteger(catchUpMs) || catchUpMs < 0 || catchUpMs > 3_600_000) {
    throw badInput(`catchUpMs must be 0 to 3600000, got ${String(req.catchUpMs)}`);
  }
  return { member, learner: req.learner === true, catchUpMs };
}

/** A RemoveMember request's member id, checked. */
export function parseRemoveMember(request: Uint8Array): number {
  const req = decodeMembershipRequest('RemoveMember', request);
  const id = toBig((req.id as WireLong | undefined) ?? '0', 'id');
  if (id < 1n || id > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw badInput(`member id ${id} must be a whole number from 1 to 2^53 - 1`, { id: String(id) });
  }
  return Number(id);
}

/** A wait in milliseconds from a request (0: `fallback`), refused outside 0..3,600,000. */
function waitMs(v: unknown, what: string, fallback: number): number {
  const ms = Number(v ?? 0);
  if (!Number.isSafeInteger(ms) || ms < 0 || ms > 3_600_000) {
    throw badInput(`${what} must be 0 to 3600000, got ${String(v)}`);
  }
  return ms === 0 ? fallback : ms;
}

/** A member id from a request, checked (0 allowed only when `optional`: none given). */
function memberIdOf(v: unknown, optional = false): number {
  const id = toBig((v as WireLong | undefined) ?? '0', 'id');
  if ((optional && id === 0n) || (id >= 1n && id <= BigInt(Number.MAX_SAFE_INTEGER))) return Number(id);
  throw badInput(`member id ${id} must be a whole number from 1 to 2^53 - 1`, { id: String(id) });
}

/** A TransferLeader request: the target (0: the most caught-up other voter) and the wait. */
export function parseTransferLeader(request: Uint8Array): { to: number; timeoutMs: number } {
  const req = decodeMembershipRequest('TransferLeader', request);
  return { to: memberIdOf(req.to, true), timeoutMs: waitMs(req.timeoutMs, 'timeoutMs', 10_000) };
}

/** A PromoteMember request: the learner and the catch-up wait. */
export function parsePromoteMember(request: Uint8Array): { id: number; catchUpMs: number } {
  const req = decodeMembershipRequest('PromoteMember', request);
  return { id: memberIdOf(req.id), catchUpMs: waitMs(req.catchUpMs, 'catchUpMs', 10_000) };
}

/**
 * The voter a transfer without a target goes to: the other voter with the highest match
 * index on the leader (the most caught up), the lowest id among equals; undefined: none.
 */
export function transferTarget(s: ReplicatedLogStatus): number | undefined {
  const voters = new Set(s.voters);
  const candidates = (s.followers ?? []).filter((f) => f.id !== s.id && voters.has(f.id) && !f.learner);
  candidates.sort((a, b) => b.match - a.match || a.id - b.id);
  return candidates[0]?.id;
}

/** The replicated log under a cluster-mode store (the store keeps it as its log). */
function replicatedLogOf(store: EventStore): ReplicatedLog {
  const log = store.replicatedLog;
  if (!log) throw haError(HaErrorCode.BAD_CONFIG, 'the store is not in cluster mode');
  return log;
}

/** The call status a refusal of this module ends a call with. */
function statusFor(e: unknown): CallStatus {
  const f = failure(e);
  return f instanceof CallFailure ? f.status : toCallStatus(f);
}

/**
 * Admits `follower` reads on a follower: it asks its leader (ClusterService.GetStatus) for
 * the leader's last committed position when what it heard is older than half the bound,
 * and serves a read only if it heard within `maxReadStalenessMs` and has applied up to that
 * position minus `maxReadLag` (waiting for its own apply while the news stays fresh).
 */
class FollowerReadGate {
  /** What the follower last heard from its leader; `at` on the gate's clock. */
  private heard: { at: number; leader: number; lastPosition: bigint } | undefined;
  private probing: Promise<void> | undefined;
  private client: ChronactaClient | undefined;
  /** The credentials `client` was made with (it is made again when they change). */
  private peerKey = '';

  constructor(
    private readonly store: EventStore,
    private readonly bounds: FollowerReadBounds,
    private readonly peer: () => PeerCredentials,
    private readonly clock: ClockTimers,
  ) {}

  private clientFor(address: string): ChronactaClient {
    const peer = this.peer();
    const key = `${peer.tls ? `${peer.tls.ca ?? ''}|${peer.tls.cert ?? ''}|${peer.tls.key ?? ''}` : 'plain'}|${peer.token ?? ''}`;
    if (this.client?.address !== address || this.peerKey !== key) {
      this.client?.close();
      this.peerKey = key;
      this.client = new ChronactaClient(address, {
        ...peer,
        deadlineMs: Math.max(50, Math.min(this.bounds.maxReadStalenessMs, 2000)),
      });
    }
    return this.client;
  }

  private probe(s: ReplicatedLogStatus): Promise<void> {
    if (this.probing) return this.probing;
    const address = s.leaderAddress as string;
    const sentAt = this.clock.now();
    const p = this.clientFor(address)
      .clusterStatus()
      .then(
        (l) => {
          // Only the member this follower follows, still leading in (at least) its term, counts.
          if (l.mode !== 'cluster' || l.role !== 'leader' || l.nodeId !== String(s.leader)) return;
          if ((l.term ?? 0n) < BigInt(s.term)) return;
          if (!this.heard || this.heard.at < sentAt || this.heard.leader !== s.leader) {
            this.heard = { at: sentAt, leader: s.leader, lastPosition: l.lastPosition ?? 0n };
          }
        },
        () => undefined,
      )
      .finally(() => {
        this.probing = undefined;
      });
    this.probing = p;
    return p;
  }

  private refuse(s: ReplicatedLogStatus, why: string, extra: Record<string, unknown> = {}): PlexusError {
    const addr = s.leader === 0 ? undefined : s.leaderAddress;
    return apiError(
      ClusterApiCode.STALE_READ,
      `member ${s.id} does not serve this follower read: ${why} (bound: ${this.bounds.maxReadLag} positions, ${this.bounds.maxReadStalenessMs} ms); ${
        addr ? `read at the leader, ${addr}` : 'no leader is known; retry shortly'
      }`,
      { leader: s.leader, leaderAddress: addr, ...extra },
    );
  }

  /** Resolves with the applied position the read is served at, or rejects with STALE_READ. */
  async admit(s: ReplicatedLogStatus): Promise<bigint> {
    if (s.role !== 'follower' || s.leader === 0 || !s.leaderAddress) {
      throw this.refuse(s, `it is a ${s.role} without a known leader`);
    }
    const bound = this.bounds.maxReadStalenessMs;
    const age = () =>
      this.heard && this.heard.leader === s.leader ? this.clock.now() - this.heard.at : Number.POSITIVE_INFINITY;
    if (age() > bound / 2) {
      const p = this.probe(s);
      if (age() > bound) await p;
    }
    const heard = this.heard;
    if (!heard || heard.leader !== s.leader || this.clock.now() - heard.at > bound) {
      throw this.refuse(s, `it has not heard from its leader (member ${s.leader}) within ${bound} ms`);
    }
    const need = heard.lastPosition - BigInt(this.bounds.maxReadLag);
    while (this.store.lastPosition < need) {
      if (this.clock.now() - heard.at > bound) {
        throw this.refuse(
          s,
          `it has applied ${this.store.lastPosition}, the leader had committed ${heard.lastPosition}`,
          {
            applied: this.store.lastPosition,
            leaderCommitted: heard.lastPosition,
          },
        );
      }
      // Released as soon as the store applies `need`; wakes at the staleness bound otherwise.
      await waitAtMost(this.clock, bound - (this.clock.now() - heard.at) + 1, (signal) =>
        this.store.whenApplied(need, undefined, signal),
      );
    }
    return this.store.lastPosition;
  }

  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}

/** Keeps cluster.json up to date with the membership this member applied. */
class ClusterFileKeeper {
  /** The file as last written (or as the store opened it). */
  current: ClusterFile;
  private writing: Promise<void> = Promise.resolve();
  private timer: TimerHandle | undefined;
  private closed = false;

  constructor(
    private readonly store: EventStore,
    private readonly logger: ClusterApiOptions['logger'],
    private readonly reconcileMs: number,
    private readonly timers: Timers,
  ) {
    this.current = store.prepared.cluster;
    this.timer = timers.setTimeout(this.round, reconcileMs);
    void this.reconcile();
  }

  /** One reconcile every `reconcileMs` until closed. */
  private readonly round = (): void => {
    if (this.closed) return;
    void this.reconcile();
    this.timer = this.timers.setTimeout(this.round, this.reconcileMs);
  };

  /** Rewrites cluster.json when the applied membership differs from it; resolves once written. */
  reconcile(): Promise<void> {
    const store = this.store;
    this.writing = this.writing.then(async () => {
      const s = store.clusterStatus();
      if (!s) return;
      const next = membershipFile(this.current, s);
      if (!next) return;
      await writeClusterFile(store.dataDir, next);
      this.current = next;
    });
    this.writing = this.writing.catch((e: unknown) =>
      this.logger?.warn('chronacta: cannot rewrite cluster.json', { error: String(e) }),
    );
    return this.writing;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
  }
}

/** What the cluster API's parts use of the member. */
interface ClusterApiDeps {
  readonly routes: GrpcRoutes;
  readonly store: EventStore;
  readonly log: ReplicatedLog;
  readonly file: ClusterFileKeeper;
}

/** The membership methods (ClusterService): one change at a time, on the leader only. */
class MembershipApi {
  private changing = false;
  private readonly routes: GrpcRoutes;
  private readonly store: EventStore;
  private readonly log: ReplicatedLog;
  private readonly file: ClusterFileKeeper;

  constructor(deps: ClusterApiDeps) {
    this.routes = deps.routes;
    this.store = deps.store;
    this.log = deps.log;
    this.file = deps.file;
  }

  private status(): ReplicatedLogStatus {
    return this.store.clusterStatus() as ReplicatedLogStatus;
  }

  private async membership<T>(
    what: string,
    fn: (s: ReplicatedLogStatus) => Promise<T>,
    refusal = 'change the membership',
  ): Promise<T> {
    const s = this.status();
    if (s.role !== 'leader') throw notLeader(s, refusal);
    if (this.changing) {
      throw apiError(ClusterApiCode.CHANGE_PENDING, `another membership change is running; retry ${what} after it`);
    }
    this.changing = true;
    try {
      return await fn(s);
    } catch (e) {
      if (e instanceof PlexusError && e.code === 'PLX_RAFT_CONF_CHANGE_PENDING') {
        throw apiError(
          ClusterApiCode.CHANGE_PENDING,
          `a membership change is not committed yet; retry ${what} after it`,
          {
            ...e.details,
          },
        );
      }
      throw e;
    } finally {
      this.changing = false;
    }
  }

  private reply(s: ReplicatedLogStatus) {
    return {
      members: s.members.map((m) => ({ id: String(m.id), address: m.advertise, raftAddress: m.raftAddress })),
      voters: s.voters.map(String),
      learners: s.learners.map(String),
      term: String(s.term),
    };
  }

  private unary(
    name: 'AddMember' | 'RemoveMember' | 'PromoteMember' | 'TransferLeader',
    fn: (request: Buffer) => Promise<object>,
  ): void {
    const def = methodDefinition('ClusterService', name);
    this.routes.set(def.path, {
      kind: 'unary',
      handle: async (request: Buffer) => {
        try {
          return grpcFrame(def.responseSerialize(await fn(request)));
        } catch (e) {
          throw failure(e);
        }
      },
    });
  }

  /** Installs the four methods on the server's routes. */
  install(): void {
    this.unary('AddMember', async (request) => {
      const { member: m, learner, catchUpMs: catchUp } = parseAddMember(request);
      return this.membership(`adding member ${m.id}`, async (s) => {
        if (s.voters.includes(m.id) || s.learners.includes(m.id)) {
          throw apiError(ClusterApiCode.DUPLICATE_ID, `member ${m.id} is already in the cluster; pick another id`, {
            id: m.id,
          });
        }
        await this.file.reconcile();
        if ((this.file.current.removed ?? []).includes(String(m.id))) {
          throw apiError(
            ClusterApiCode.DUPLICATE_ID,
            `member ${m.id} was removed from this cluster and ids are never reused; pick another id`,
            { id: m.id },
          );
        }
        for (const o of s.members) {
          for (const a of [m.raftAddress, m.advertise]) {
            if (o.raftAddress === a || o.advertise === a) {
              throw apiError(ClusterApiCode.BAD_ADDRESS, `address ${a} is already used by member ${o.id}`, {
                address: a,
                id: o.id,
              });
            }
          }
        }
        await this.store.addClusterMember(m, {
          learner,
          ...(catchUp > 0 ? { catchUpMs: catchUp } : {}),
        });
        await this.file.reconcile();
        return this.reply(this.status());
      });
    });
    this.unary('RemoveMember', async (request) => {
      const id = parseRemoveMember(request);
      return this.membership(`removing member ${id}`, async (s) => {
        if (!s.voters.includes(id) && !s.learners.includes(id)) {
          throw apiError(
            ClusterApiCode.UNKNOWN_ID,
            `member ${id} is not in the cluster (members: ${[...s.voters, ...s.learners].join(', ')})`,
            {
              id,
            },
          );
        }
        if (s.voters.length === 1 && s.voters[0] === id) {
          throw apiError(
            ClusterApiCode.LAST_VOTER,
            `member ${id} is the last voter; add another voter before removing it`,
            {
              id,
            },
          );
        }
        await this.store.removeClusterMember(id);
        await this.file.reconcile();
        return this.reply(this.status());
      });
    });

    this.unary('PromoteMember', async (request) => {
      const { id, catchUpMs } = parsePromoteMember(request);
      return this.membership(`promoting member ${id}`, async (s) => {
        if (s.voters.includes(id)) {
          throw apiError(ClusterApiCode.NOT_LEARNER, `member ${id} is already a voter; only a learner is promoted`, {
            id,
          });
        }
        if (!s.learners.includes(id)) {
          throw apiError(
            ClusterApiCode.UNKNOWN_ID,
            `member ${id} is not in the cluster (members: ${[...s.voters, ...s.learners].join(', ')}); add it first`,
            { id },
          );
        }
        try {
          await this.log.promoteMember(id, { catchUpMs });
        } catch (e) {
          if (e instanceof PlexusError && e.code === HaErrorCode.MEMBERSHIP && e.details.reason === 'behind') {
            throw apiError(ClusterApiCode.LEARNER_BEHIND, `${e.message} (waited ${catchUpMs} ms)`, {
              ...e.details,
              catchUpMs,
            });
          }
          throw e;
        }
        await this.file.reconcile();
        return this.reply(this.status());
      });
    });
    this.unary('TransferLeader', async (request) => {
      const { to, timeoutMs } = parseTransferLeader(request);
      return this.membership(
        'the leadership transfer',
        async (s) => {
          const members = [...s.voters, ...s.learners];
          if (to !== 0 && !members.includes(to)) {
            throw apiError(
              ClusterApiCode.UNKNOWN_ID,
              `member ${to} is not in the cluster (voters: ${s.voters.join(', ')})`,
              { id: to },
            );
          }
          if (to !== 0 && !s.voters.includes(to)) {
            throw apiError(
              ClusterApiCode.NOT_VOTER,
              `member ${to} is a learner and cannot lead; promote it first (voters: ${s.voters.join(', ')})`,
              { id: to },
            );
          }
          const target = to === 0 ? transferTarget(s) : to;
          if (target === undefined) {
            throw apiError(
              ClusterApiCode.NO_TRANSFER_TARGET,
              `member ${s.id} is the only voter: there is no one to hand leadership to; add a voter first`,
              { id: s.id },
            );
          }
          if (target !== s.id) {
            try {
              await this.log.transferLeadership(target, timeoutMs);
            } catch (e) {
              if (e instanceof PlexusError && e.code === 'PLX_RAFT_TIMEOUT') {
                throw apiError(
                  ClusterApiCode.TRANSFER_TIMEOUT,
                  `member ${target} did not take over leadership within ${timeoutMs} ms (is it up and reachable?); member ${this.status().leader || 'none'} leads now; retry, or pick another voter`,
                  { id: target, timeoutMs, leader: this.status().leader },
                );
              }
              throw e;
            }
          }
          const now = this.status();
          const address = now.members.find((m) => m.id === target)?.advertise ?? '';
          return {
            leaderId: String(target),
            leaderAddress: address,
            term: String(now.term),
            previousLeaderId: String(s.id),
          };
        },
        'hand over leadership',
      );
    });
  }
}

/**
 * Read consistency: a `leader` read passes a barrier (ReadIndex) on the leader, a `follower`
 * read the follower-read gate; the read methods and subscriptions are wrapped to admit them.
 */
class ReadConsistency {
  private readonly routes: GrpcRoutes;
  private readonly store: EventStore;
  private readonly log: ReplicatedLog;

  constructor(
    deps: ClusterApiDeps,
    private readonly gate: FollowerReadGate,
    /** One election timeout and a half: how long a deposed leader may take to learn who leads. */
    private readonly electionMs: number,
    /** How long a new leader may take to apply the entries of earlier terms before it serves reads. */
    private readonly readyMs: number,
    private readonly clock: ClockTimers,
  ) {
    this.routes = deps.routes;
    this.store = deps.store;
    this.log = deps.log;
  }

  private status(): ReplicatedLogStatus {
    return this.store.clusterStatus() as ReplicatedLogStatus;
  }

  /** Resolves when this member's leadership or readiness changes, or after `ms` of the clock. */
  private readinessChanged(ms: number): Promise<unknown> {
    return waitAtMost(this.clock, ms, (signal) => this.log.readinessChanged({ signal }));
  }

  /**
   * A `leader` read's barrier: ReadIndex on the replicated log. A member that steps down
   * meanwhile refuses with NOT_LEADER, naming the new leader once it has heard from it (within
   * about an election timeout), so the client reads there.
   */
  private async barrier(): Promise<bigint> {
    try {
      return await this.log.readBarrier();
    } catch (e) {
      if (e instanceof PlexusError && (e.code === 'PLX_RAFT_TIMEOUT' || e.code === 'PLX_RAFT_PROPOSAL_LOST')) {
        throw chronactaError(
          ChronactaCode.UNAVAILABLE,
          `the leader could not confirm its leadership for this read (${e.message}); retry`,
          { cause: e.code },
        );
      }
      if (!(e instanceof PlexusError && e.code === HaErrorCode.NOT_LEADER)) throw e;
      throw await this.knownLeader(e);
    }
  }

  /**
   * A NOT_LEADER refusal that names no leader (this member just stepped down, or has not heard
   * from the new leader yet): waits up to about an election timeout to learn who leads, and
   * then names it, so the client goes there; otherwise the refusal as it is.
   */
  private async knownLeader(e: PlexusError): Promise<PlexusError> {
    if (typeof e.details.leaderAddress === 'string' && e.details.leaderAddress !== '') return e;
    const end = this.clock.now() + this.electionMs;
    let s = this.status();
    while ((s.leader === 0 || s.role === 'leader') && this.clock.now() < end && !s.failure) {
      // Woken when the log learns its leader (or its role changes, or it fails).
      await this.readinessChanged(end - this.clock.now());
      s = this.status();
    }
    if (s.role === 'leader' || s.leader === 0 || !s.leaderAddress) return e;
    return notLeader(s, 'serve leader reads');
  }

  private async admit(ctx: CallContext): Promise<void> {
    const mode = ctx.header(READ_CONSISTENCY_HEADER);
    let s = this.status();
    if (mode === undefined) {
      ctx.setTrailer(READ_SERVED_BY_TRAILER, s.role === 'leader' ? 'leader' : 'local');
      ctx.setTrailer(APPLIED_POSITION_TRAILER, String(this.store.lastPosition));
      return;
    }
    if (mode !== 'leader' && mode !== 'follower') {
      throw badInput(`${READ_CONSISTENCY_HEADER} is leader or follower, got "${mode}"`);
    }
    if (s.failure) {
      throw haError(HaErrorCode.STOPPED, `member ${s.id} stopped (${s.failure}); read at another member`);
    }
    if (s.role === 'leader') {
      // A new leader serves reads once it has applied every entry of earlier terms.
      const end = this.clock.now() + this.readyMs;
      while (!s.acceptingWrites && s.role === 'leader' && this.clock.now() < end) {
        await this.readinessChanged(end - this.clock.now());
        s = this.status();
      }
      if (s.role === 'leader' && s.acceptingWrites) {
        // A leader read is linearizable: confirmed by a majority (ReadIndex) and applied here first.
        if (mode === 'leader') await this.barrier();
        ctx.setTrailer(READ_SERVED_BY_TRAILER, 'leader');
        ctx.setTrailer(APPLIED_POSITION_TRAILER, String(this.store.lastPosition));
        return;
      }
      if (s.role === 'leader') {
        throw haError(HaErrorCode.NOT_READY, `leader ${s.id} has not applied the entries of earlier terms yet; retry`);
      }
    }
    if (mode === 'leader') throw await this.knownLeader(notLeader(s, 'serve leader reads'));
    const applied = await this.gate.admit(s);
    ctx.setTrailer(READ_SERVED_BY_TRAILER, 'follower');
    ctx.setTrailer(APPLIED_POSITION_TRAILER, String(applied));
  }

  /** Wraps the read methods and Subscribe of the server's routes with the admission. */
  install(): void {
    for (const name of ['ReadStream', 'ReadAll']) {
      const path = methodDefinition('EventStore', name).path;
      const inner = this.routes.get(path);
      if (inner?.kind !== 'unary') continue;
      const gated: GrpcMethod = {
        kind: 'unary',
        handle: async (request, ctx) => {
          try {
            await this.admit(ctx);
          } catch (e) {
            throw failure(e);
          }
          return inner.handle(request, ctx);
        },
      };
      this.routes.set(path, gated);
    }
    // A subscription with a consistency header starts its catch-up only once admitted the same way.
    const subscribePath = methodDefinition('EventStore', 'Subscribe').path;
    const subscribe = this.routes.get(subscribePath);
    if (subscribe?.kind === 'stream') {
      this.routes.set(subscribePath, {
        kind: 'stream',
        handle: (request, call) => {
          if (call.header(READ_CONSISTENCY_HEADER) === undefined) {
            subscribe.handle(request, call);
            return;
          }
          this.admit(call).then(
            () => {
              if (call.cancelled) return;
              try {
                subscribe.handle(request, call);
              } catch (e) {
                call.end(statusFor(e));
              }
            },
            (e: unknown) => call.end(statusFor(e)),
          );
        },
      });
    }
  }
}

/**
 * Installs the membership methods, the read-consistency gate and the cluster.json
 * reconciliation on the gRPC server whose `routes` are given, for `store` (cluster mode).
 */
export function attachClusterApi(routes: GrpcRoutes, store: EventStore, opts: ClusterApiOptions = {}): ClusterApi {
  if (!store.clusterStatus()) throw haError(HaErrorCode.BAD_CONFIG, 'the store is not in cluster mode');
  const bounds = followerReadBounds(opts);
  const clock = opts.clock ?? monotonicClock;
  const gate = new FollowerReadGate(store, bounds, opts.peer ?? (() => ({})), clock);
  const log = replicatedLogOf(store);
  const file = new ClusterFileKeeper(store, opts.logger, opts.reconcileMs ?? 200, clock);
  const deps: ClusterApiDeps = { routes, store, log, file };
  new MembershipApi(deps).install();
  /** One election timeout and a half: how long a deposed leader may take to learn who leads. */
  const electionMs = (opts.tickMs ?? 100) * (opts.electionTick ?? 10) * 1.5;
  new ReadConsistency(deps, gate, electionMs, opts.leaderReadyMs ?? 10_000, clock).install();
  return {
    bounds,
    reconcile: () => file.reconcile(),
    close() {
      file.close();
      gate.close();
    },
  };
}
