/**
 * The typed gRPC client of Chronacta. Every refused call rejects with the PlexusError the
 * server raised (same code and details), rebuilt from the status (status.ts).
 *
 *   const client = new ChronactaClient('127.0.0.1:2113');
 *   await client.append('orders-1', [{ type: 'placed', data: '{"total":3}' }], { expectedVersion: 'no_stream' });
 *   for await (const m of client.subscribe({ all: true })) if (m.kind === 'event') ...
 */
import * as grpc from '@grpc/grpc-js';
import { delay, RetryPolicy } from '../core/retry.js';
import { type ClientTls, channelSecurity, checkToken } from './client-credentials.js';
import { badInput, ChronactaCode, chronactaError } from './errors.js';
import { MAX_TIMER_MS } from './limits.js';
import {
  CHANNEL_OPTIONS,
  clusterFromWire,
  compactionFromWire,
  definitions,
  expectedToWire,
  messageFromWire,
  recordedFromWire,
  targetToWire,
  toBig,
  type WireLong,
  type WireRecorded,
  type WireSubscribeResponse,
} from './proto.js';
import { fromServiceError } from './status.js';
import type {
  AppendOptions,
  AppendResult,
  ClusterStatus,
  CompactionReport,
  DeleteOptions,
  DeleteResult,
  EventData,
  ReadAllOptions,
  ReadAllResult,
  ReadStreamOptions,
  ReadStreamResult,
  SubscriptionMessage,
  SubscriptionTarget,
  TruncateOptions,
  TruncateResult,
} from './types.js';

export interface ClientOptions {
  /**
   * Deadline of each unary call in milliseconds (default 30000; 0: none). One beyond about
   * 24.8 days (2^31 - 1 ms, the longest timer) is sent as that: servers' timers take no more.
   */
  readonly deadlineMs?: number;
  /**
   * Cluster mode: attempts of an append that carries an idempotency key (default 1). Each
   * attempt follows one NOT_LEADER redirect to the leader's address; a further attempt is
   * made after an unavailable or unknown outcome (a failover), with the same key, so the
   * append lands at most once. Later keyed appends go to the leader a redirect named
   * first, until a call there fails (unavailable, not leading, timed out): then the next
   * attempt, or the next call, starts again at this client's address. Appends without a key
   * are never retried or redirected: they reject with PLX_CHRONACTA_HA_NOT_LEADER and
   * `details.leaderAddress`.
   */
  readonly appendAttempts?: number;
  /** Pause between append attempts in milliseconds (default 100). */
  readonly retryDelayMs?: number;
  /**
   * Cluster mode: the consistency of reads (`readStream`, `readAll`, `subscribe`), unless a
   * call says otherwise. `leader` (the default): linearizable, served by the leader after a
   * ReadIndex round confirmed its leadership and it applied every acknowledged append; a
   * follower answers with the leader's address and the client reads there. `follower`: a follower may serve it from what it applied, within its staleness
   * bound (docs/chronacta-ha.md#follower-reads); never linearizable. Outside the bound it
   * refuses with PLX_CHRONACTA_STALE_READ and the client reads at the leader.
   */
  readonly readConsistency?: ReadConsistency;
  /** Follow a read refusal that names the leader by reading there (default true). */
  readonly followReadRedirects?: boolean;
  /**
   * Dial with TLS (absent: plaintext): `ca` the server's certificate must chain to (default
   * Node's CA list), `cert` and `key` for a server that asks for client certificates. The
   * leaders that redirects name are dialled with the same settings.
   */
  readonly tls?: ClientTls;
  /** A bearer token sent with every call (`authorization: Bearer <token>`), for a server with a tokens file. */
  readonly token?: string;
}

export type ReadConsistency = 'leader' | 'follower';

/** Per-call read options in cluster mode. */
export interface ReadConsistencyOptions {
  readonly readConsistency?: ReadConsistency;
}

/** Who served a read and at which applied position (from the reply's trailers). */
export interface ReadInfo {
  /** `leader`, `follower`, or `local` (a server that was not asked for a consistency, or standalone: absent). */
  readonly servedBy: 'leader' | 'follower' | 'local';
  /** The position the member had applied when it admitted the read: the read saw at least this. */
  readonly appliedPosition: bigint;
  /** The address that served it (the one asked, or the leader a refusal named). */
  readonly address: string;
}

/** A member to add to a cluster: its Raft id, Raft transport address and gRPC (advertise) address. */
export interface NewMember {
  readonly id: number;
  readonly raftAddress: string;
  readonly advertise: string;
}

/** The membership after a change, as the leader sees it. */
export interface MembershipResult {
  readonly members: readonly { readonly id: string; readonly address: string; readonly raftAddress: string }[];
  readonly voters: readonly string[];
  readonly learners: readonly string[];
  readonly term: bigint;
  /** The leader that made the change. */
  readonly leaderAddress: string;
}

const NOT_LEADER = 'PLX_CHRONACTA_HA_NOT_LEADER';
const STALE_READ = 'PLX_CHRONACTA_STALE_READ';
const CONSISTENCY_HEADER = 'plexus-read-consistency';
const RETRYABLE = new Set([
  NOT_LEADER,
  'PLX_CHRONACTA_HA_NOT_READY',
  'PLX_CHRONACTA_HA_STOPPED',
  ChronactaCode.UNAVAILABLE,
]);

export interface SubscribeOptions {
  /** Messages the client holds before it stops reading from the server (default 256). */
  readonly bufferSize?: number;
  /**
   * Cluster mode: where the catch-up starts from (default: the client's `readConsistency`,
   * else `leader`). `leader`: the leader confirms its leadership (ReadIndex) before the
   * subscription reads, and a follower refuses it naming the leader, where the client
   * subscribes instead (before any message arrived). `follower`: a follower within its
   * staleness bound serves it from what it applied.
   */
  readonly readConsistency?: ReadConsistency;
}

/** The outcome of a leadership transfer. */
export interface TransferResult {
  /** The member that leads now, and its advertise address. */
  readonly leaderId: string;
  readonly leaderAddress: string;
  /** Its term. */
  readonly term: bigint;
  /** The member that led when the request arrived. */
  readonly previousLeaderId: string;
}

/** A running subscription: iterate it for its messages; `close()` ends it. */
export interface ClientSubscription extends AsyncIterable<SubscriptionMessage> {
  close(): void;
}

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type UnaryMethod = (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback) => grpc.ClientUnaryCall;

const utf8 = new TextEncoder();
const MAX_WIRE = 2n ** 53n - 1n;

function bytes(v: Uint8Array | string | undefined, what: string): Uint8Array {
  if (v === undefined || v === null) return new Uint8Array(0);
  if (typeof v === 'string') return utf8.encode(v);
  if (v instanceof Uint8Array) return v;
  throw badInput(`${what} must be a Uint8Array or a string`);
}

/**
 * The longest deadline sent: grpc-js writes a grpc-timeout this long as whole seconds rounded
 * up, which must stay within the longest timer (2^31 - 1 ms) of any server.
 */
const MAX_DEADLINE_MS = MAX_TIMER_MS - 2000;

/** The call options of a deadline `ms` from now (0: none), never beyond `MAX_DEADLINE_MS`. */
function callOptions(ms: number): grpc.CallOptions {
  return ms > 0 ? { deadline: Date.now() + Math.min(ms, MAX_DEADLINE_MS) } : {};
}

/** Options that do not fit their wire type are refused here, as the server would refuse them. */
function wireBig(v: unknown, what: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'bigint' || v < 0n || v > MAX_WIRE) throw badInput(`${what} must be a bigint from 0 to 2^53 - 1`);
  return v.toString();
}

function wireCount(v: unknown, what: string, min: number): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > 2 ** 31) {
    throw badInput(`${what} must be a whole number from ${min}`);
  }
  return v;
}

function wireExpected(v: AppendOptions['expectedVersion']) {
  if (typeof v === 'bigint') wireBig(v, 'expectedVersion');
  else if (v !== undefined && v !== 'any' && v !== 'no_stream' && v !== 'exists') {
    throw badInput(`expectedVersion must be 'any', 'no_stream', 'exists' or a version (a bigint from 0)`);
  }
  return expectedToWire(v);
}

export class ChronactaClient {
  private readonly store: grpc.Client;
  private readonly cluster: grpc.Client;
  private readonly deadlineMs: number;
  private readonly appendAttempts: number;
  private readonly retryDelayMs: number;
  private readonly appendRetry: RetryPolicy;
  /** Cluster mode: clients of leaders that redirects named, by address. */
  private readonly peers = new Map<string, ChronactaClient>();
  /** The last leader a redirect named: keyed appends go there first. */
  private leaderHint: string | undefined;
  /** `Bearer <token>`, sent with every call (absent: no token). */
  private readonly authorization: string | undefined;

  /** `address` is `host:port` of a Chronacta server. */
  constructor(
    readonly address: string,
    private readonly opts: ClientOptions = {},
  ) {
    if (typeof address !== 'string' || address === '') {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'the client needs an address host:port');
    }
    const defs = definitions();
    const { credentials: creds, options: secureOptions } = channelSecurity(opts.tls);
    if (opts.token !== undefined) this.authorization = `Bearer ${checkToken(opts.token)}`;
    this.store = new defs.EventStore(address, creds, { ...CHANNEL_OPTIONS, ...secureOptions });
    this.cluster = new defs.ClusterService(address, creds, {
      ...CHANNEL_OPTIONS,
      ...secureOptions,
      // One connection for both services.
      channelOverride: this.store.getChannel(),
    });
    this.deadlineMs = opts.deadlineMs ?? 30_000;
    const consistency = opts.readConsistency;
    if (consistency !== undefined && consistency !== 'leader' && consistency !== 'follower') {
      throw badInput(`readConsistency is 'leader' or 'follower', got ${String(consistency)}`);
    }
    const attempts = opts.appendAttempts ?? 1;
    if (!Number.isSafeInteger(attempts) || attempts < 1 || attempts > 100) {
      throw badInput('appendAttempts must be a whole number from 1 to 100');
    }
    this.appendAttempts = attempts;
    this.retryDelayMs = opts.retryDelayMs ?? 100;
    // The pause between append attempts, jittered over its upper half (ts/core/retry.ts).
    const pause = Math.max(0, this.retryDelayMs);
    this.appendRetry = new RetryPolicy({ baseMs: pause, capMs: pause, factor: 1, jitter: 'equal' });
  }

  private peer(address: string): ChronactaClient {
    if (address === this.address) return this;
    let c = this.peers.get(address);
    if (!c) {
      c = new ChronactaClient(address, { ...this.opts, appendAttempts: 1 });
      this.peers.set(address, c);
    }
    return c;
  }

  /** A call's request metadata: the bearer token, when there is one. */
  private metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.authorization !== undefined) md.set('authorization', this.authorization);
    return md;
  }

  private call<T>(client: grpc.Client, method: string, req: unknown): Promise<T> {
    const fn = (client as unknown as Record<string, UnaryMethod>)[method] as UnaryMethod;
    const opts = callOptions(this.deadlineMs);
    return new Promise<T>((resolve, reject) => {
      fn.call(client, req, this.metadata(), opts, (err, res) => {
        if (err) reject(fromServiceError(err));
        else resolve(res as T);
      });
    });
  }

  /** A unary call with request metadata that resolves with the reply and its trailing metadata. */
  private callWithTrailers<T>(
    client: grpc.Client,
    method: string,
    req: unknown,
    headers: Record<string, string>,
    deadlineMs = this.deadlineMs,
  ): Promise<{ res: T; trailers: grpc.Metadata | undefined }> {
    const fn = (client as unknown as Record<string, UnaryMethod>)[method] as UnaryMethod;
    const opts = callOptions(deadlineMs);
    const md = this.metadata();
    for (const [k, v] of Object.entries(headers)) md.set(k, v);
    return new Promise((resolve, reject) => {
      let res: T | undefined;
      let got = false;
      const call = fn.call(client, req, md, opts, (err, r) => {
        if (err) reject(fromServiceError(err));
        else {
          res = r as T;
          got = true;
        }
      });
      // grpc-js reports the status (with the trailers) after the callback.
      call.on('status', (st: grpc.StatusObject) => {
        if (got) resolve({ res: res as T, trailers: st.metadata });
      });
    });
  }

  /** A read with its consistency: redirected once to the leader a refusal names (unless turned off). */
  private async read<T>(
    method: string,
    req: unknown,
    consistency: ReadConsistency | undefined,
  ): Promise<T & { read?: ReadInfo }> {
    const mode = consistency ?? this.opts.readConsistency ?? 'leader';
    if (mode !== 'leader' && mode !== 'follower')
      throw badInput(`readConsistency is 'leader' or 'follower', got ${String(mode)}`);
    const once = async (target: ChronactaClient, m: ReadConsistency): Promise<T & { read?: ReadInfo }> => {
      const { res, trailers } = await target.callWithTrailers<T>(target.store, method, req, {
        [CONSISTENCY_HEADER]: m,
      });
      const by = trailers?.get('plexus-read')[0];
      const at = trailers?.get('plexus-applied-position')[0];
      if ((by === 'leader' || by === 'follower' || by === 'local') && typeof at === 'string' && /^\d+$/.test(at)) {
        return { ...res, read: { servedBy: by, appliedPosition: BigInt(at), address: target.address } };
      }
      return res as T & { read?: ReadInfo };
    };
    try {
      return await once(this, mode);
    } catch (e) {
      const err = e as { code?: string; details?: { leaderAddress?: unknown } };
      const leader = err.details?.leaderAddress;
      if (
        this.opts.followReadRedirects === false ||
        (err.code !== NOT_LEADER && err.code !== STALE_READ) ||
        typeof leader !== 'string' ||
        leader === '' ||
        leader === this.address
      ) {
        throw e;
      }
      return once(this.peer(leader), 'leader');
    }
  }

  /** A ClusterService call for the leader: sent here, and once more to the leader a NOT_LEADER refusal names. */
  private async leaderCall<R>(
    method: string,
    req: unknown,
    deadlineMs: number,
  ): Promise<{ r: R; target: ChronactaClient }> {
    try {
      return { r: (await this.callWithTrailers<R>(this.cluster, method, req, {}, deadlineMs)).res, target: this };
    } catch (e) {
      const leader = (e as { details?: { leaderAddress?: unknown } }).details?.leaderAddress;
      if ((e as { code?: string }).code !== NOT_LEADER || typeof leader !== 'string' || leader === '') throw e;
      const target = this.peer(leader);
      return { r: (await target.callWithTrailers<R>(target.cluster, method, req, {}, deadlineMs)).res, target };
    }
  }

  /** A membership call: sent here, and once more to the leader a NOT_LEADER refusal names. */
  private async membership(method: string, req: unknown, deadlineMs: number): Promise<MembershipResult> {
    type Reply = {
      members: { id: string; address: string; raftAddress: string }[];
      voters: string[];
      learners: string[];
      term: WireLong;
    };
    const { r, target } = await this.leaderCall<Reply>(method, req, deadlineMs);
    return {
      members: r.members.map((m) => ({ id: m.id, address: m.address, raftAddress: m.raftAddress })),
      voters: r.voters,
      learners: r.learners,
      term: toBig(r.term, 'term'),
      leaderAddress: target.address,
    };
  }

  /**
   * Cluster mode: adds a member (sent to the leader, following a redirect). The leader
   * replicates its addresses, adds it as a learner, waits up to `catchUpMs` (default 10 s)
   * for it to catch up and makes it a voter, unless `learner`. Start the new member first
   * (`plexus chronacta cluster join-files`, then `serve --cluster`).
   */
  addMember(
    member: NewMember,
    opts: { readonly learner?: boolean; readonly catchUpMs?: number; readonly deadlineMs?: number } = {},
  ): Promise<MembershipResult> {
    if (typeof member !== 'object' || member === null) throw badInput('addMember needs { id, raftAddress, advertise }');
    if (!Number.isSafeInteger(member.id) || member.id < 1) throw badInput('member id must be a whole number from 1');
    const catchUpMs = wireCount(opts.catchUpMs, 'catchUpMs', 1) ?? 0;
    return this.membership(
      'AddMember',
      {
        id: String(member.id),
        raftAddress: member.raftAddress,
        advertise: member.advertise,
        learner: opts.learner === true,
        catchUpMs,
      },
      opts.deadlineMs ?? Math.max(this.deadlineMs, (catchUpMs || 10_000) + 20_000),
    );
  }

  /** Cluster mode: removes a member (sent to the leader, following a redirect); never the last voter. */
  removeMember(id: number, opts: { readonly deadlineMs?: number } = {}): Promise<MembershipResult> {
    if (!Number.isSafeInteger(id) || id < 1) throw badInput('member id must be a whole number from 1');
    return this.membership('RemoveMember', { id: String(id) }, opts.deadlineMs ?? Math.max(this.deadlineMs, 30_000));
  }

  /**
   * Cluster mode: makes learner `id` a voter (sent to the leader, following a redirect), once
   * it has every committed entry: the leader waits up to `catchUpMs` (default 10 s), then
   * refuses with PLX_CHRONACTA_CLUSTER_LEARNER_BEHIND. For a learner whose catch-up wait in
   * `addMember` timed out (etcd's `member promote`).
   */
  promoteMember(
    id: number,
    opts: { readonly catchUpMs?: number; readonly deadlineMs?: number } = {},
  ): Promise<MembershipResult> {
    if (!Number.isSafeInteger(id) || id < 1) throw badInput('member id must be a whole number from 1');
    const catchUpMs = wireCount(opts.catchUpMs, 'catchUpMs', 1) ?? 0;
    return this.membership(
      'PromoteMember',
      { id: String(id), catchUpMs },
      opts.deadlineMs ?? Math.max(this.deadlineMs, (catchUpMs || 10_000) + 20_000),
    );
  }

  /**
   * Cluster mode: hands leadership to voter `to` (sent to the leader, following a redirect);
   * without `to`, to the most caught-up other voter. Resolves once that voter leads; refuses
   * with PLX_CHRONACTA_CLUSTER_UNKNOWN_ID, `_NOT_VOTER`, `_NO_TRANSFER_TARGET` or
   * `_TRANSFER_TIMEOUT` (after `timeoutMs`, default 10 s).
   */
  async transferLeader(
    opts: { readonly to?: number; readonly timeoutMs?: number; readonly deadlineMs?: number } = {},
  ): Promise<TransferResult> {
    if (opts.to !== undefined && (!Number.isSafeInteger(opts.to) || opts.to < 1)) {
      throw badInput('the member to hand leadership to must be a whole number from 1');
    }
    const timeoutMs = wireCount(opts.timeoutMs, 'timeoutMs', 1) ?? 0;
    const { r } = await this.leaderCall<{
      leaderId: string;
      leaderAddress: string;
      term: WireLong;
      previousLeaderId: string;
    }>(
      'TransferLeader',
      { to: String(opts.to ?? 0), timeoutMs },
      opts.deadlineMs ?? Math.max(this.deadlineMs, (timeoutMs || 10_000) + 10_000),
    );
    return {
      leaderId: r.leaderId,
      leaderAddress: r.leaderAddress,
      term: toBig(r.term, 'term'),
      previousLeaderId: r.previousLeaderId,
    };
  }

  async append(stream: string, events: readonly EventData[], opts: AppendOptions = {}): Promise<AppendResult> {
    if (!Array.isArray(events)) throw chronactaError(ChronactaCode.BAD_INPUT, 'events must be an array');
    const expected = wireExpected(opts.expectedVersion);
    const wireEvents = events.map((e, i) => {
      if (typeof e !== 'object' || e === null) throw badInput(`event ${i} must be an object`);
      return {
        id: e.id ?? '',
        type: e.type,
        data: bytes(e.data, `event ${i}: data`),
        metadata: bytes(e.metadata, `event ${i}: metadata`),
      };
    });
    const req = {
      stream,
      events: wireEvents,
      ...(expected ? { expectedVersion: expected } : {}),
      idempotencyKey: opts.idempotencyKey ?? '',
    };
    type Reply = {
      firstVersion: WireLong;
      lastVersion: WireLong;
      firstPosition: WireLong;
      lastPosition: WireLong;
      batchId: string;
      duplicate: boolean;
    };
    let r: Reply | undefined;
    if (!opts.idempotencyKey) r = await this.call<Reply>(this.store, 'Append', req);
    else {
      const pauses = this.appendRetry.start();
      for (let attempt = 1; r === undefined; attempt++) {
        let target = this.peer(this.leaderHint ?? this.address);
        try {
          try {
            r = await target.call<Reply>(target.store, 'Append', req);
          } catch (e) {
            const leader = (e as { code?: string; details?: { leaderAddress?: unknown } }).details?.leaderAddress;
            if ((e as { code?: string }).code !== NOT_LEADER || typeof leader !== 'string' || leader === '') throw e;
            // One redirect per attempt, to the leader the refusal names.
            this.leaderHint = leader;
            target = this.peer(leader);
            r = await target.call<Reply>(target.store, 'Append', req);
          }
        } catch (e) {
          const code = (e as { code?: string }).code ?? '';
          // The remembered leader failed (down, deposed, unreachable): the next attempt, or the
          // next call, starts again from the address this client was made with.
          if (RETRYABLE.has(code) || code === ChronactaCode.TIMEOUT) this.leaderHint = undefined;
          if (attempt >= this.appendAttempts || !RETRYABLE.has(code)) throw e;
          await delay(pauses.next() ?? this.retryDelayMs);
        }
      }
    }
    return {
      stream,
      firstVersion: toBig(r.firstVersion, 'firstVersion'),
      lastVersion: toBig(r.lastVersion, 'lastVersion'),
      firstPosition: toBig(r.firstPosition, 'firstPosition'),
      lastPosition: toBig(r.lastPosition, 'lastPosition'),
      batchId: r.batchId,
      duplicate: r.duplicate,
    };
  }

  async readStream(
    stream: string,
    opts: ReadStreamOptions & ReadConsistencyOptions = {},
  ): Promise<ReadStreamResult & { readonly read?: ReadInfo }> {
    const fromVersion = wireBig(opts.fromVersion, 'fromVersion');
    const maxCount = wireCount(opts.maxCount, 'maxCount', 1);
    const r = await this.read<{
      events: WireRecorded[];
      lastVersion: WireLong;
      next?: string;
      nextVersion?: WireLong;
      end: boolean;
      deleted: boolean;
    }>(
      'ReadStream',
      {
        stream,
        direction: opts.direction === 'backwards' ? 'BACKWARDS' : 'FORWARDS',
        ...(fromVersion !== undefined ? { fromVersion } : {}),
        maxCount: maxCount ?? 0,
        types: [...(opts.types ?? [])],
      },
      opts.readConsistency,
    );
    return {
      stream,
      events: r.events.map(recordedFromWire),
      lastVersion: toBig(r.lastVersion, 'lastVersion'),
      nextVersion: r.next === 'nextVersion' ? toBig(r.nextVersion, 'nextVersion') : undefined,
      end: r.end,
      deleted: r.deleted,
      ...(r.read ? { read: r.read } : {}),
    };
  }

  async readAll(
    opts: ReadAllOptions & ReadConsistencyOptions = {},
  ): Promise<ReadAllResult & { readonly read?: ReadInfo }> {
    const fromPosition = wireBig(opts.fromPosition, 'fromPosition');
    const maxCount = wireCount(opts.maxCount, 'maxCount', 1);
    const r = await this.read<{ events: WireRecorded[]; nextPosition: WireLong; end: boolean; lastPosition: WireLong }>(
      'ReadAll',
      {
        direction: opts.direction === 'backwards' ? 'BACKWARDS' : 'FORWARDS',
        ...(fromPosition !== undefined ? { fromPosition } : {}),
        maxCount: maxCount ?? 0,
        streamPrefix: opts.streamPrefix ?? '',
        types: [...(opts.types ?? [])],
      },
      opts.readConsistency,
    );
    return {
      events: r.events.map(recordedFromWire),
      nextPosition: toBig(r.nextPosition, 'nextPosition'),
      end: r.end,
      lastPosition: toBig(r.lastPosition, 'lastPosition'),
      ...(r.read ? { read: r.read } : {}),
    };
  }

  async deleteStream(stream: string, opts: DeleteOptions = {}): Promise<DeleteResult> {
    const expected = wireExpected(opts.expectedVersion);
    const r = await this.call<{ position: WireLong; lastVersion: WireLong }>(this.store, 'Delete', {
      stream,
      ...(expected ? { expectedVersion: expected } : {}),
      hard: opts.hard === true,
    });
    return { position: toBig(r.position, 'position'), lastVersion: toBig(r.lastVersion, 'lastVersion') };
  }

  async truncateStream(stream: string, opts: TruncateOptions): Promise<TruncateResult> {
    const expected = wireExpected(opts.expectedVersion);
    const maxCount = wireCount(opts.maxCount, 'maxCount', 0);
    const maxAgeMs = wireCount(opts.maxAgeMs, 'maxAgeMs', 0);
    const beforeVersion = wireBig(opts.beforeVersion, 'beforeVersion');
    const r = await this.call<{ position: WireLong; truncateBefore: WireLong }>(this.store, 'Truncate', {
      stream,
      ...(maxCount !== undefined ? { maxCount: String(maxCount) } : {}),
      ...(maxAgeMs !== undefined ? { maxAgeMs: String(maxAgeMs) } : {}),
      ...(beforeVersion !== undefined ? { beforeVersion } : {}),
      ...(expected ? { expectedVersion: expected } : {}),
    });
    return { position: toBig(r.position, 'position'), truncateBefore: toBig(r.truncateBefore, 'truncateBefore') };
  }

  async compact(): Promise<CompactionReport> {
    return compactionFromWire(await this.call<Record<string, WireLong>>(this.store, 'Compact', {}));
  }

  async clusterStatus(): Promise<ClusterStatus> {
    return clusterFromWire(await this.call(this.cluster, 'GetStatus', {}));
  }

  /**
   * Subscribes to a stream or to `$all`. The client reads from the server only while it
   * holds fewer than `bufferSize` messages, so a slow consumer slows the server's sending
   * (which then falls back to reading from disk) instead of filling memory here.
   */
  subscribe(target: SubscriptionTarget, opts: SubscribeOptions = {}): ClientSubscription {
    const limit = opts.bufferSize ?? 256;
    const mode = opts.readConsistency ?? this.opts.readConsistency ?? 'leader';
    if (mode !== 'leader' && mode !== 'follower') {
      throw badInput(`readConsistency is 'leader' or 'follower', got ${String(mode)}`);
    }
    const request = targetToWire(target);
    const buffer: SubscriptionMessage[] = [];
    let failure: unknown;
    let ended = false;
    let closedByUs = false;
    let received = false;
    let redirected = false;
    let wake: (() => void) | undefined;
    const notify = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const start = (at: ChronactaClient, m: ReadConsistency): grpc.ClientReadableStream<WireSubscribeResponse> => {
      const fn = (at.store as unknown as Record<string, unknown>).Subscribe as (
        req: unknown,
        md: grpc.Metadata,
      ) => grpc.ClientReadableStream<WireSubscribeResponse>;
      const md = at.metadata();
      md.set(CONSISTENCY_HEADER, m);
      const c = fn.call(at.store, request, md);
      c.on('data', (w: WireSubscribeResponse) => {
        if (c !== call) return;
        received = true;
        let msg: SubscriptionMessage | undefined;
        try {
          msg = messageFromWire(w);
        } catch (e) {
          failure = e;
        }
        if (msg) buffer.push(msg);
        if (buffer.length >= limit) c.pause();
        notify();
      });
      c.on('error', (e: grpc.ServiceError) => {
        if (c !== call) return;
        const err = closedByUs && e.code === grpc.status.CANCELLED ? undefined : fromServiceError(e);
        const leader = (err as { details?: { leaderAddress?: unknown } } | undefined)?.details?.leaderAddress;
        if (
          err &&
          !received &&
          !redirected &&
          this.opts.followReadRedirects !== false &&
          (err.code === NOT_LEADER || err.code === STALE_READ) &&
          typeof leader === 'string' &&
          leader !== '' &&
          leader !== at.address
        ) {
          // Refused before anything arrived: subscribe at the leader the refusal names.
          redirected = true;
          call = start(this.peer(leader), 'leader');
          return;
        }
        if (err) failure = err;
        ended = true;
        notify();
      });
      c.on('end', () => {
        if (c !== call) return;
        ended = true;
        notify();
      });
      return c;
    };
    let call: grpc.ClientReadableStream<WireSubscribeResponse> = start(this, mode);
    const close = () => {
      if (ended) return;
      closedByUs = true;
      ended = true;
      call.cancel();
      notify();
    };
    return {
      close,
      [Symbol.asyncIterator](): AsyncIterator<SubscriptionMessage> {
        return {
          async next(): Promise<IteratorResult<SubscriptionMessage>> {
            for (;;) {
              const m = buffer.shift();
              if (m) {
                if (buffer.length < limit / 2 && call.isPaused()) call.resume();
                return { value: m, done: false };
              }
              if (failure) {
                const f = failure;
                failure = undefined;
                throw f;
              }
              if (ended) return { value: undefined, done: true };
              await new Promise<void>((resolve) => {
                wake = resolve;
              });
            }
          },
          async return(): Promise<IteratorResult<SubscriptionMessage>> {
            close();
            return { value: undefined, done: true };
          },
        };
      },
    };
  }

  /** Closes the connection; calls still running fail. */
  close(): void {
    for (const p of this.peers.values()) p.close();
    this.peers.clear();
    this.store.close();
    this.cluster.close();
  }
}
