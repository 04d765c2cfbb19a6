/**
 * ClusterNode: joins one runtime Node to the cluster. It is the node's placement
 * (`ClusterPlacement`), its journal (`ClusterJournal`, appends through `ClusterStorage` with
 * the lease epoch) and its `cluster` Event I/O Processor (`ClusterProcessor`, which also
 * takes the wire's inbound frames). `assembleClusterNode` wires given parts (any Membership
 * and Wire: MemoryWire in tests); `launchClusterNode` builds everything from a node config
 * file: static membership (hosting the MemoryAuthority on the authority node; or, with
 * `membership.kind` `etcd`, an EtcdAuthority in every node, with `kubernetes` a KubeAuthority
 * in every node, each module loaded only then; or, with `gossip`, a GossipMembership whose
 * SWIM messages ride the wire's calls), the HTTP/2
 * mutual-TLS wire, the shared store host when configured, and the runtime node.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { type Clock, type ClockTimers, monotonicClock, systemClock, type TimerHandle } from '../core/clock.js';
import { delay, heldClock } from '../core/retry.js';
import { isClientPeer } from '../net/ca.js';
import { Http2Wire } from '../net/http2-wire.js';
import type { Wire } from '../net/types.js';
import { DEFAULT_NODE_LOG_LANES, journalStoreMode, NODE_LOG_DIR } from '../runtime/journal-dir.js';
import { openJournal, shardDir } from '../runtime/log-journal.js';
import { Node } from '../runtime/node.js';
import type { Chart, MacrostepEntry, RuntimeConfig } from '../runtime/types.js';
import { openLog } from '../storage/index.js';
import { MultiplexedLog } from '../storage/multiplexed-log.js';
import type { LogStorage } from '../storage/types.js';
import { rankedOwner } from './authority.js';
import { BUILTIN_CHARTS } from './charts.js';
import { CLIENT_TAG, serveClients } from './client.js';
import { decodeReply, encodeRequest, serveAuthority } from './codec.js';
import { type ClusterConfig, clusterConfig, type DetectorConfig, type LeaseConfig } from './config.js';
import { CONTROL_TAG, serveControl } from './control.js';
import { ensureDir } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { DEAD_LETTER_LOG, DeadLetters, EpochGate } from './fencing.js';
import { defaultGossipLeader, GossipMembership } from './gossip/membership.js';
import { loadGossipRemoved, saveGossipRemoved } from './gossip/removed-file.js';
import { GOSSIP_TAG, gossipName, type WireGossipTransport, wireGossipTransport } from './gossip/transport.js';
import { AuthorityHost } from './host.js';
import { ClusterJournal } from './journal.js';
import type { AuthorityCall, LeaseAuthority } from './lease-authority.js';
import { type LeaveOptions, leaveCluster, perNodeHandOver, type ShardHandOver, sharedStoreHandOver } from './leave.js';
import { type ClusterMeta, clusterMeta, metaDifference, readClusterMeta, writeClusterMeta } from './meta.js';
import { checkNodeConfig, gossipSeeds, type MembershipConfig, nodeGossipConfig } from './node-config.js';
import { NodeMetrics, startNodeMetrics } from './node-metrics.js';
import { readNodeTls } from './node-tls.js';
import { ClusterPlacement } from './placement.js';
import { ClusterProcessor } from './processor.js';
import { StaticMembership } from './static.js';
import { RemoteLog, STORE_TAG, StoreHost } from './store-host.js';
import type { MemberInfo, Membership } from './types.js';
import { chartsForNode } from './user-charts.js';

/** A node's configuration file (`plexus cluster init` writes one per node). */
export interface ClusterNodeConfig {
  readonly meta: ClusterMeta;
  /** The cluster's `cluster.meta` file (`init` writes `../../cluster.meta`): `meta` must equal it. */
  readonly clusterMeta?: string;
  readonly self: string;
  /** Every member with its `host:port`; this node listens on its own entry's port. */
  readonly members: readonly MemberInfo[];
  /** The member hosting the lease authority (static membership only; etcd, Kubernetes and gossip have none). */
  readonly authority?: string;
  /** Where leases are granted: `static` (default, the `authority` member), `etcd`, `kubernetes` or `gossip`. */
  readonly membership?: MembershipConfig;
  /** This node's data directory (its journal with `per-node`, its dead-letter log). */
  readonly dataDir: string;
  /** PEM file paths, relative to the config file. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** `per-node` (default): this node's own shard stores. `shared`: the store host's. */
  readonly journal?: 'per-node' | 'shared';
  /** `shared`: the directory of the shard stores, served by `storeHost` (default the authority). */
  readonly sharedDir?: string;
  readonly storeHost?: string;
  readonly cluster?: Partial<ClusterConfig>;
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  readonly heartbeatEveryMs?: number;
  readonly runtime?: Partial<RuntimeConfig>;
  /**
   * When journal appends are acknowledged: `batch` (default: group-commit fsync), `always`, or
   * `never` (no fsync: survives a process crash, not a machine crash; for measurements).
   */
  readonly fsync?: 'batch' | 'always' | 'never';
  /**
   * Wire tuning: HTTP/2 streams per peer (pairs beyond share streams by hash, in order per
   * pair; default 64) and TCP connections per peer (default 2).
   */
  readonly wire?: { readonly streamCap?: number; readonly poolSize?: number };
  /**
   * `per-node`, new data directory: lanes of the node-wide journal log (default 1). Shard n
   * is in lane n % lanes; each lane groups its shards' appends into one write and fsync, and
   * the lanes write at the same time. An existing directory keeps its own.
   */
  readonly journalLanes?: number;
  /** A chart module (docs/cluster.md, "Your own actors"), relative to the config file. */
  readonly charts?: string;
  /**
   * The node's metrics port (`/metrics`, `/healthz`, `/readyz`; default none). `host` defaults
   * to 127.0.0.1; beyond loopback it serves HTTPS and takes only the cluster's client certificates.
   */
  readonly metrics?: { readonly host?: string; readonly port: number };
  /** Fault injection for tests: the lease clock runs at this rate of real time (default 1). */
  readonly leaseClockRate?: number;
}

export interface ClusterNodeParts {
  readonly self: string;
  readonly meta: ClusterMeta;
  readonly membership: Membership;
  readonly wire: Wire;
  readonly layout: 'per-node' | 'shared';
  /** Opens a shard's store. */
  readonly open: (shard: number) => Promise<LogStorage>;
  readonly deadLetters: DeadLetters;
  readonly config?: Partial<ClusterConfig>;
  readonly runtime?: Partial<RuntimeConfig>;
  // biome-ignore lint/suspicious/noExplicitAny: charts of any state type
  readonly charts?: Readonly<Record<string, Chart<any, any>>>;
  readonly onMacrostep?: (iri: string, entry: MacrostepEntry) => void;
  /** Time of the runtime's timers and of the processor's delivery deadlines (default: system time). */
  readonly clock?: ClockTimers;
  /** Called by `stop()` after the runtime drained (leave the cluster, close the wire...). */
  readonly onStop?: () => Promise<void>;
  /**
   * How `leave()` hands shards over (ts/cluster/leave.ts): default nothing to ship with a
   * shared store; with per-node stores a leave is refused while this node holds leases.
   */
  readonly handOver?: ShardHandOver;
}

export class ClusterNode {
  constructor(
    readonly self: string,
    readonly membership: Membership,
    readonly wire: Wire,
    readonly placement: ClusterPlacement,
    readonly processor: ClusterProcessor,
    readonly journal: ClusterJournal,
    readonly node: Node,
    readonly gate: EpochGate,
    readonly deadLetters: DeadLetters,
    private readonly onStop: () => Promise<void>,
    /** How `leave()` hands this node's shards over. */
    readonly handOver: ShardHandOver = sharedStoreHandOver,
  ) {}

  private stopped?: Promise<void>;
  private leaving?: Promise<boolean>;
  /** Whether `leave()` completed: this node left the cluster. */
  left = false;
  /** `host:port` of the node's metrics port, when its config has one (`launchClusterNode`). */
  metricsAddress: string | undefined;

  /**
   * Leaves the cluster with a drain (ts/cluster/leave.ts): the authority is told, the runtime
   * refuses new activations, finishes its macrosteps, flushes its outboxes, each shard is
   * handed over and released, the messages held for them go to their next owners, and the
   * membership leaves. Refused (PLX_CLUSTER_REPLICATION_UNSUPPORTED) before anything changes
   * when the shards cannot be handed over. Resolves whether it left within the bound; call
   * `stop()` afterwards either way.
   */
  leave(opts: Omit<LeaveOptions, 'clock'> & { readonly clock?: LeaveOptions['clock'] } = {}): Promise<boolean> {
    this.leaving ??= leaveCluster(this.membership, this.node, this.handOver, {
      ...opts,
      clock: opts.clock ?? this.node.clock,
    }).then(
      (left) => {
        this.left = left;
        return left;
      },
      (e) => {
        this.leaving = undefined;
        throw e;
      },
    );
    return this.leaving;
  }
  /** Shards this node does not claim until the given time of `claimClock`: hand-overs in tests. */
  readonly claimPausedUntil = new Map<number, number>();
  /** The clock claim pauses are measured on: the node's clock (`launchClusterNode` sets it). */
  claimClock: Clock = heldClock;

  /** This node claims `shard` again only after `ms` of its clock (a hand-over in tests). */
  pauseClaims(shard: number, ms: number): void {
    this.claimPausedUntil.set(shard, this.claimClock.now() + ms);
  }

  /** Drains the runtime (running macrosteps finish, outboxes flush), then leaves and closes. */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      await this.node.stop({ timeoutMs: 10_000 });
      await this.onStop();
      this.placement.close();
      await this.journal.close();
    })();
    return this.stopped;
  }
}

/** Wires a runtime Node to the cluster from given parts (the membership must have joined or join later). */
export function assembleClusterNode(parts: ClusterNodeParts): ClusterNode {
  const meta = clusterMeta(parts.meta);
  const config = clusterConfig(parts.config);
  const placement = new ClusterPlacement(parts.membership, meta.shardCount);
  const gate = new EpochGate();
  gate.observe(parts.membership.view());
  parts.membership.subscribe((v) => gate.observe(v));
  const journal = new ClusterJournal({
    shardCount: meta.shardCount,
    layout: parts.layout,
    open: parts.open,
    epochOf: (s) => placement.leaseEpoch(s),
  });
  const processor = new ClusterProcessor(
    parts.self,
    parts.wire,
    placement,
    gate,
    parts.deadLetters,
    config,
    parts.clock ?? heldClock,
  );
  const b = Node.builder(journal)
    .id(parts.self)
    .placement(placement)
    .transport(processor)
    .config({ mailboxBound: config.mailboxBound, ...(parts.runtime ?? {}) });
  for (const [prefix, chart] of Object.entries(parts.charts ?? BUILTIN_CHARTS)) b.chart(prefix, chart);
  if (parts.onMacrostep) b.onMacrostep(parts.onMacrostep);
  if (parts.clock) b.clock(parts.clock);
  const node = b.build();
  return new ClusterNode(
    parts.self,
    parts.membership,
    parts.wire,
    placement,
    processor,
    journal,
    node,
    gate,
    parts.deadLetters,
    parts.onStop ?? (async () => {}),
    parts.handOver ?? (parts.layout === 'shared' ? sharedStoreHandOver : perNodeHandOver(() => false, meta.shardCount)),
  );
}

/**
 * Claims free shards for this node: once every configured member has joined (or after
 * `graceMs`), every free shard whose first-ranked alive member (rendezvous hashing, as the
 * authority ranks) is this node is asked for. Run with an authority that does not assign
 * on its own (`autoAssign: false`), so that shards spread over the members that start
 * together instead of going to the first one; a failed member's shards are claimed by the
 * next-ranked alive member once its leases expire (with per-node stores the authority
 * refuses that, and the shard stays held until its owner returns).
 */
export function startClaiming(
  membership: Membership,
  shardCount: number,
  expected: readonly string[],
  opts: {
    readonly everyMs?: number;
    readonly graceMs?: number;
    /**
     * With per-node stores: whether this node's store holds shard s's journal. Such a shard
     * is claimed whatever its rank (the authority grants it to no other member), at once.
     */
    readonly holds?: (shard: number) => boolean;
    /** Shards not to claim for now (e.g. just handed over). */
    readonly skip?: (shard: number) => boolean;
    /** Time of the grace period and of the rounds (default: system time, unreferenced timers). */
    readonly clock?: ClockTimers;
  } = {},
): () => void {
  const clock = opts.clock ?? systemClock;
  const started = clock.now();
  const asked = new Map<number, number>();
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try {
      const v = membership.view();
      const alive = v.members.filter((m) => m.status === 'alive').map((m) => m.id);
      const everyone = expected.every((id) => v.members.some((m) => m.id === id));
      const now = clock.now();
      const waiting = !everyone && now - started < (opts.graceMs ?? 3000);
      const leased = new Set(v.leases.map((l) => l.shard));
      for (let s = 0; s < shardCount; s++) {
        if (leased.has(s) || opts.skip?.(s) === true) continue;
        const mine = opts.holds?.(s) === true;
        if (!mine && (waiting || rankedOwner(alive, s) !== membership.self)) continue;
        if ((asked.get(s) ?? 0) > now - 200) continue;
        asked.set(s, now);
        await membership.grant(s).catch(() => {});
      }
    } finally {
      busy = false;
    }
  };
  const every = opts.everyMs ?? 50;
  let stopped = false;
  let timer: unknown;
  const round = () => {
    if (stopped) return;
    timer = clock.setTimeout(round, every);
    void tick();
  };
  round();
  return () => {
    stopped = true;
    clock.clearTimeout(timer);
  };
}

/** The largest node config file read. */
const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/**
 * Reads and checks a node config file (the schema of ts/cluster/node-config.ts, unknown keys
 * refused; `clusterMeta`, when given, must hold the same ClusterMeta); paths are made
 * absolute, relative to the file.
 */
export async function readNodeConfig(file: string): Promise<ClusterNodeConfig> {
  let text: string;
  try {
    const st = await stat(file);
    if (!st.isFile()) throw new Error('not a file');
    if (st.size > MAX_CONFIG_BYTES) throw new Error(`larger than ${MAX_CONFIG_BYTES} bytes`);
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw clusterError(
      ClusterCode.BAD_PATH,
      `cannot read the node config ${file}: ${(e as Error).message}`,
      { field: 'file', file },
      e,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      `node config ${file} is not JSON: ${(e as Error).message}`,
      { field: 'file', path: '', file },
      e,
    );
  }
  checkNodeConfig(parsed, file);
  const cfg = parsed as ClusterNodeConfig & { clusterMeta?: string };
  const base = dirname(resolve(file));
  if (cfg.clusterMeta !== undefined) {
    const metaFile = resolve(base, cfg.clusterMeta);
    const theirs = await readClusterMeta(dirname(metaFile), basename(metaFile));
    const field = metaDifference(theirs, clusterMeta(cfg.meta));
    if (field !== undefined) {
      throw clusterError(
        ClusterCode.META_MISMATCH,
        `node config ${file}: meta.${field} is ${JSON.stringify(cfg.meta[field])} but ${metaFile} has ${JSON.stringify(theirs[field])}`,
        { field, path: `meta.${field}`, file, cluster: theirs[field], node: cfg.meta[field] },
      );
    }
  }
  return {
    ...cfg,
    dataDir: resolve(base, cfg.dataDir),
    ...(cfg.clusterMeta === undefined ? {} : { clusterMeta: resolve(base, cfg.clusterMeta) }),
    ...(cfg.sharedDir === undefined ? {} : { sharedDir: resolve(base, cfg.sharedDir) }),
    ...(cfg.membership?.kind === 'kubernetes' && cfg.membership.kubeconfig !== undefined
      ? { membership: { ...cfg.membership, kubeconfig: resolve(base, cfg.membership.kubeconfig) } }
      : {}),
    ...(cfg.charts === undefined ? {} : { charts: resolve(base, cfg.charts) }),
    tls: { cert: resolve(base, cfg.tls.cert), key: resolve(base, cfg.tls.key), ca: resolve(base, cfg.tls.ca) },
  };
}

/**
 * Starts a node from its configuration: checks its data directory (`cluster.meta` there must
 * equal the config's meta), opens its journal, restores the lease authority's state when it
 * hosts the authority, then listens on its member address, joins, and returns the running
 * ClusterNode (`stop()` drains it; with a shared store it hands its shards over). When any
 * step fails, what was opened is closed again before the error is thrown, so a process that
 * cannot start ends instead of listening on.
 */
export async function launchClusterNode(
  cfg: ClusterNodeConfig,
  opts: {
    // biome-ignore lint/suspicious/noExplicitAny: charts of any state type
    readonly charts?: Readonly<Record<string, Chart<any, any>>>;
    /** Built-in prefixes `charts` redefines on purpose (any other clash: PLX_CLUSTER_CHARTS_BUILTIN). */
    readonly replaces?: readonly string[];
    /** `false`: run without the built-in charts (default: kept next to `charts`). */
    readonly builtins?: boolean;
    readonly onMacrostep?: (iri: string, entry: MacrostepEntry) => void;
    readonly onError?: (e: unknown) => void;
    /** The wire's polling window (ms; `Http2Wire` `spinMs`, default 0: off). */
    readonly wireSpinMs?: number;
    /**
     * Wall time of the node (the base of new lease epochs, claim pauses) and the timers of its
     * join retries, of the bound on the shard hand-over when it stops and of its wire (delivery
     * deadlines, resend pauses, call timeouts) (default `heldClock`: a pending one keeps the
     * process alive).
     */
    readonly clock?: ClockTimers;
    /**
     * Runs an operator's leave (`plexus cluster leave`, over the node's own mutual-TLS wire):
     * resolves with the reply once the node left; the caller stops the node after. Default:
     * `leave()`, then `stop()` once the reply is out.
     */
    readonly onLeaveRequest?: (cn: ClusterNode) => Promise<Record<string, unknown>>;
  } = {},
): Promise<ClusterNode> {
  const meta = clusterMeta(cfg.meta);
  const me = cfg.members.find((m) => m.id === cfg.self);
  if (me === undefined) {
    throw clusterError(ClusterCode.UNKNOWN_NODE, `node ${cfg.self} is not in the members list`, { field: 'self' });
  }
  const tls = readNodeTls(cfg);
  const cleanups: (() => Promise<void> | void)[] = [];
  const undo = async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  };
  try {
    return await launch(cfg, opts, meta, me, tls, cleanups);
  } catch (e) {
    await undo();
    throw e;
  }
}

async function launch(
  cfg: ClusterNodeConfig,
  opts: Parameters<typeof launchClusterNode>[1] & object,
  meta: ClusterMeta,
  me: MemberInfo,
  tls: { cert: string; key: string; ca: string },
  cleanups: (() => Promise<void> | void)[],
): Promise<ClusterNode> {
  // The charts first (yours and the built-ins): a chart module that does not load is refused before anything opens.
  const charts = await chartsForNode(cfg.charts, opts);
  const metrics = cfg.metrics ? new NodeMetrics() : undefined;
  await ensureDir(cfg.dataDir);
  // The data directory belongs to one cluster: a config whose meta differs is refused.
  await writeClusterMeta(cfg.dataDir, meta);
  const layout = cfg.journal ?? 'per-node';
  const etcd = cfg.membership?.kind === 'etcd' ? cfg.membership : undefined;
  const kube = cfg.membership?.kind === 'kubernetes' ? cfg.membership : undefined;
  // The schema requires `authority` with static membership and `storeHost` with etcd,
  // Kubernetes or gossip and a shared store.
  const authorityId = cfg.authority ?? cfg.self;
  const storeHostId = cfg.storeHost ?? authorityId;
  const gossip = cfg.membership?.kind === 'gossip' ? cfg.membership : undefined;
  const isAuthority = etcd === undefined && kube === undefined && gossip === undefined && cfg.self === cfg.authority;
  const clock = opts.clock ?? heldClock;

  // The journal first: a layout that does not fit is refused before any socket opens.
  let wire!: Http2Wire;
  const {
    open: openShard,
    nodeLog,
    holds,
    storeHost,
  } = await openJournals(cfg, meta, layout, storeHostId, cleanups, () => wire);
  const open = metrics ? metrics.observeOpen(openShard) : openShard;
  const deadLog = await openLog(join(cfg.dataDir, DEAD_LETTER_LOG), { fsync: 'batch' });
  cleanups.push(() => deadLog.close());
  const dead = new DeadLetters(deadLog);

  // The lease authority, with its state restored from the data directory (refused when damaged).
  const host: LeaseAuthority | undefined = isAuthority
    ? await AuthorityHost.open({
        stateDir: cfg.dataDir,
        meta,
        members: cfg.members,
        ...(cfg.lease ? { lease: cfg.lease } : {}),
        ...(cfg.detector ? { detector: cfg.detector } : {}),
        journals: layout,
        autoAssign: false,
        epochBase: BigInt(Math.floor(clock.now())) << 16n,
        tickEveryMs: 20,
        ...(opts.onError ? { onFatal: opts.onError } : {}),
      })
    : undefined;
  if (host) cleanups.push(() => host.close());
  // With etcd or Kubernetes, every node opens its own authority on the cluster's keys or Lease
  // objects (the module is loaded only for such a config); the node talks to it through the
  // same seam.
  const local: LeaseAuthority | undefined = etcd
    ? await openEtcdAuthority(cfg, etcd, meta)
    : kube
      ? await openKubeAuthority(cfg, kube, meta)
      : undefined;
  if (local) cleanups.push(() => local.close());

  // Gossip: the nodes removed from the cluster, as this node kept them (refused at the
  // handshake from the start, and by the leader it may host).
  const removed = gossip ? new Set(await loadGossipRemoved(cfg.dataDir, meta.id)) : new Set<string>();
  let membership: Membership | undefined;
  let gm: GossipMembership | undefined;
  let transport: WireGossipTransport | undefined;
  // Where a node listens: its address in the view, in the config, or (gossip) in the gossip table.
  const addressOf = (node: string) =>
    membership?.view().members.find((m) => m.id === node)?.address ??
    cfg.members.find((m) => m.id === node)?.address ??
    transport?.addressOf(node);
  const cc = clusterConfig(cfg.cluster);
  const cut = me.address.lastIndexOf(':');
  const hostName = me.address.slice(0, cut).replace(/^\[(.*)\]$/, '$1');
  wire = new Http2Wire({
    self: cfg.self,
    cluster: meta.id,
    tls,
    host: hostName || '127.0.0.1',
    port: Number(me.address.slice(cut + 1)),
    resolve: addressOf,
    // Programs outside the cluster call with client certificates (ts/cluster/client.ts).
    admitsClients: true,
    isMember: (node) => {
      // Gossip admits every node the cluster CA certified (the handshake checked that) but one
      // removed from the cluster (kept in the data directory, learned from the leader).
      if (gossip) return gm ? gm.admits(node) : !removed.has(node);
      const a = host ?? local;
      return a ? a.isAdmitted(node) : cfg.members.some((m) => m.id === node);
    },
    // One wire attempt is bounded well below the delivery deadline, so that the processor
    // asks placement again (the owner may have changed) between attempts.
    deliveryDeadlineMs: Math.min(cc.deliveryDeadlineMs, 2000),
    retryBackoffMs: cc.retryBackoffMs,
    dedupCapacity: cc.dedupCapacity,
    maxFrameBytes: cc.maxFrameBytes,
    ...(cfg.wire?.streamCap === undefined ? {} : { streamCap: cfg.wire.streamCap }),
    ...(cfg.wire?.poolSize === undefined ? {} : { poolSize: cfg.wire.poolSize }),
    ...(opts.wireSpinMs === undefined ? {} : { spinMs: opts.wireSpinMs }),
    clock,
  });
  const w = wire;
  cleanups.push(() => w.close());
  let address: string;
  try {
    address = await wire.listen();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw clusterError(
      ClusterCode.LISTEN,
      `node ${cfg.self} cannot listen on its member address ${me.address}: ${code === 'EADDRINUSE' ? 'the port is taken' : code === 'EADDRNOTAVAIL' ? 'the address is not this machine’s' : (e as Error).message}`,
      { field: 'members', address: me.address, errno: code },
      e,
    );
  }
  let leaving: ClusterNode | undefined;
  const control = serveControl(cfg.self, {
    leave: async () => {
      if (leaving === undefined) throw clusterError(ClusterCode.UNAVAILABLE, `node ${cfg.self} is still starting`);
      if (isAuthority) {
        throw clusterError(
          ClusterCode.BAD_REQUEST,
          `node ${cfg.self} hosts the cluster's lease authority: it cannot leave (the others would lose their leases); stop it last`,
          { reason: 'authority' },
        );
      }
      if (storeHost !== undefined) {
        throw clusterError(
          ClusterCode.BAD_REQUEST,
          `node ${cfg.self} hosts the cluster's shared store: it cannot leave (the others would lose their journals); stop it last`,
          { reason: 'store-host' },
        );
      }
      const cn = leaving;
      if (opts.onLeaveRequest) return opts.onLeaveRequest(cn);
      const left = await cn.leave();
      setTimeout(() => void cn.stop(), 100);
      return { left };
    },
  });
  if (gossip) transport = wireGossipTransport(wire, gossipName(cfg.self, address));
  const clients = serveClients(() => leaving?.node);
  wire.onCall(async (from, body) => {
    if (body[0] === CLIENT_TAG) return clients(from, body);
    if (isClientPeer(from)) {
      throw clusterError(ClusterCode.BAD_REQUEST, `node ${cfg.self} takes only client requests from ${from}`, {
        reason: 'client',
        from,
      });
    }
    if (body[0] === CONTROL_TAG) return control(from, body);
    if (body[0] === GOSSIP_TAG && transport) return transport.handleCall(from, body);
    if (body[0] === STORE_TAG) {
      if (!storeHost) throw clusterError(ClusterCode.BAD_REQUEST, `node ${cfg.self} hosts no shared store`);
      return storeHost.handle(from, body);
    }
    if (gm) return gm.serve(from, body);
    if (!host) throw clusterError(ClusterCode.BAD_REQUEST, `node ${cfg.self} hosts no lease authority`);
    return serveAuthority(host)(from, body);
  });
  const own = host ?? local;
  const rate = cfg.leaseClockRate ?? 1;
  if (gossip && transport) {
    gm = new GossipMembership({
      meta,
      self: { id: cfg.self, address },
      seeds: gossipSeeds(gossip.seeds, cfg.members),
      transport,
      call: (peer, bytes) => wire.call(peer, bytes),
      // Nodes claim their own shards (startClaiming below), as with static membership.
      leader: defaultGossipLeader({
        meta,
        ...(cfg.lease ? { lease: cfg.lease } : {}),
        ...(cfg.detector ? { detector: cfg.detector } : {}),
        autoAssign: false,
      }),
      gossip: nodeGossipConfig(cfg.detector, gossip.gossip),
      ...(cfg.lease ? { lease: cfg.lease } : {}),
      ...(cfg.heartbeatEveryMs ? { heartbeatEveryMs: cfg.heartbeatEveryMs } : {}),
      clock: monotonicClock,
      ...(rate !== 1 ? { leaseClock: { now: () => performance.now() * rate } } : {}),
      ...(opts.onError ? { onError: opts.onError } : {}),
      removed: [...removed],
      saveRemoved: (list) => saveGossipRemoved(cfg.dataDir, meta.id, list),
    });
    membership = gm;
  } else {
    const call: AuthorityCall = own
      ? own.call
      : async (req) => decodeReply(await wire.call(authorityId, encodeRequest(req)));
    membership = new StaticMembership({
      config: {
        meta,
        self: { id: cfg.self, address },
        members: cfg.members,
        authority: etcd ? 'etcd' : kube ? 'kubernetes' : authorityId,
      },
      call,
      ...(cfg.lease ? { lease: cfg.lease } : {}),
      ...(cfg.heartbeatEveryMs ? { heartbeatEveryMs: cfg.heartbeatEveryMs } : {}),
      ...(rate !== 1 ? { clock: { now: () => performance.now() * rate } } : {}),
      ...(opts.onError ? { onError: opts.onError } : {}),
    });
  }
  const m = membership;
  cleanups.push(() => m.close());
  const cn = assembleClusterNode({
    self: cfg.self,
    meta,
    membership: m,
    wire,
    layout,
    open,
    deadLetters: dead,
    config: cc,
    ...(cfg.runtime ? { runtime: cfg.runtime } : {}),
    charts,
    ...onMacrostepOf(opts.onMacrostep, metrics?.onMacrostep),
    onStop: () =>
      stopNode({ layout, membership: m, host: host ?? local, wire, storeHost, deadLog, clock, left: () => cn.left }),
    handOver: layout === 'shared' ? sharedStoreHandOver : perNodeHandOver(holds, meta.shardCount),
  });
  leaving = cn;
  if (nodeLog !== undefined) {
    // The node log outlives the shard views the journal closes.
    const nl = nodeLog;
    const close = cn.journal.close.bind(cn.journal);
    cn.journal.close = async () => {
      await close();
      await nl.close();
    };
  }
  cn.claimClock = clock;
  const metricsServer =
    metrics && cfg.metrics
      ? await startNodeMetrics({
          metrics,
          node: cn,
          cluster: meta.id,
          dataDir: cfg.dataDir,
          deadLetters: () => deadLog.last,
          ...(cfg.metrics.host === undefined ? {} : { host: cfg.metrics.host }),
          port: cfg.metrics.port,
          tls,
        })
      : undefined;
  if (metricsServer) cleanups.push(() => metricsServer.close());
  cn.metricsAddress = metricsServer?.address;
  await joinWithRetry(m, clock);
  const stopClaiming = startClaiming(
    m,
    meta.shardCount,
    cfg.members.map((x) => x.id),
    {
      ...(layout === 'per-node' ? { holds: (s: number) => holds(s) } : {}),
      skip: (s: number) => (cn.claimPausedUntil.get(s) ?? 0) > clock.now(),
    },
  );
  const stop = cn.stop.bind(cn);
  cn.stop = async () => {
    stopClaiming();
    await stop();
    await metricsServer?.close();
  };
  return cn;
}

/** The runtime's macrostep hook: the caller's and the metrics', either or both. */
function onMacrostepOf(...fns: (((iri: string, entry: MacrostepEntry) => void) | undefined)[]): {
  onMacrostep?: (iri: string, entry: MacrostepEntry) => void;
} {
  const set = fns.filter((f) => f !== undefined);
  if (set.length === 0) return {};
  if (set.length === 1) return { onMacrostep: set[0] };
  return {
    onMacrostep: (iri, entry) => {
      for (const f of set) f(iri, entry);
    },
  };
}

/** Opens this node's EtcdAuthority; the module (and its HTTP client) is imported only here. */
async function openEtcdAuthority(
  cfg: ClusterNodeConfig,
  etcd: Extract<MembershipConfig, { kind: 'etcd' }>,
  meta: ClusterMeta,
): Promise<LeaseAuthority> {
  const { EtcdAuthority } = await import('./etcd-authority.js');
  return EtcdAuthority.open({
    etcd: { endpoints: etcd.endpoints, ...(etcd.timeoutMs === undefined ? {} : { timeoutMs: etcd.timeoutMs }) },
    ...(etcd.prefix === undefined ? {} : { prefix: etcd.prefix }),
    meta,
    members: cfg.members,
    ...(cfg.lease ? { lease: cfg.lease } : {}),
    ...(cfg.detector ? { detector: cfg.detector } : {}),
  });
}

/**
 * Opens this node's KubeAuthority; the module (and `@kubernetes/client-node`, which it imports
 * when it opens) is imported only here.
 */
async function openKubeAuthority(
  cfg: ClusterNodeConfig,
  kube: Extract<MembershipConfig, { kind: 'kubernetes' }>,
  meta: ClusterMeta,
): Promise<LeaseAuthority> {
  const { KubeAuthority } = await import('./kube-authority.js');
  return KubeAuthority.open({
    namespace: kube.namespace,
    ...(kube.prefix === undefined ? {} : { prefix: kube.prefix }),
    ...(kube.kubeconfig === undefined ? {} : { kubeconfig: kube.kubeconfig }),
    ...(kube.timeoutMs === undefined ? {} : { timeoutMs: kube.timeoutMs }),
    meta,
    members: cfg.members,
    ...(cfg.lease ? { lease: cfg.lease } : {}),
    ...(cfg.detector ? { detector: cfg.detector } : {}),
  });
}

/** A node's shard journals, as its layout keeps them. */
interface NodeJournals {
  readonly open: (shard: number) => Promise<LogStorage>;
  /** The node-wide log, when the journal layout keeps one. */
  readonly nodeLog: MultiplexedLog | undefined;
  /** Whether this node's own store holds a shard's journal (it takes such shards back). */
  readonly holds: (shard: number) => boolean;
  /** The shared store, when this node hosts it. */
  readonly storeHost: StoreHost | undefined;
}

/**
 * Opens the journals of `layout`: the shared store (hosted here, or reached through the
 * wire `wire()` gives once it is up), the node-wide log, or one log per shard. Whatever it
 * opens is added to `cleanups`.
 */
async function openJournals(
  cfg: ClusterNodeConfig,
  meta: ClusterMeta,
  layout: 'shared' | 'per-node',
  storeHostId: string,
  cleanups: (() => Promise<void> | void)[],
  wire: () => Http2Wire,
): Promise<NodeJournals> {
  let open: (shard: number) => Promise<LogStorage>;
  let nodeLog: MultiplexedLog | undefined;
  /** With `per-node`: the shards whose journals this node's store holds (it takes them back). */
  const journalsHeld = new Set<number>();
  let holds = (s: number) => journalsHeld.has(s);
  let storeHost: StoreHost | undefined;
  if (layout === 'shared') {
    if (cfg.self === storeHostId) {
      const sharedDir = cfg.sharedDir ?? join(cfg.dataDir, 'shared');
      await ensureDir(sharedDir);
      const sh = new StoreHost(sharedDir, meta.shardCount, cfg.fsync ?? 'batch');
      storeHost = sh;
      cleanups.push(() => sh.close());
    }
    open = async (shard) =>
      storeHost
        ? RemoteLog.open(shard, (body) => (storeHost as StoreHost).handle(cfg.self, body))
        : RemoteLog.open(shard, (body) => wire().call(storeHostId, body));
  } else {
    const journalDir = join(cfg.dataDir, 'journal');
    // The single-node journal layout (`journal.meta`): a single-node directory with per-shard
    // stores keeps them; a new one gets one node-wide log (group commit across shards).
    const j = await openJournal(journalDir, { shardCount: meta.shardCount });
    await j.close();
    if ((await journalStoreMode(journalDir)) === 'node') {
      const nl = await MultiplexedLog.open(
        join(journalDir, NODE_LOG_DIR),
        { fsync: cfg.fsync ?? 'batch' },
        cfg.journalLanes ?? DEFAULT_NODE_LOG_LANES,
      );
      nodeLog = nl;
      cleanups.push(() => nl.close());
      holds = (s) => nl.holds(s);
      open = async (shard) => nl.shard(shard);
    } else {
      for (let s = 0; s < meta.shardCount; s++) {
        const d = shardDir(journalDir, s);
        if (!existsSync(d)) continue;
        const log = await openLog(d, { fsync: cfg.fsync ?? 'batch' });
        if (log.last > 0n) journalsHeld.add(s);
        await log.close();
      }
      open = async (shard) => {
        const d = shardDir(journalDir, shard);
        await mkdir(d, { recursive: true });
        journalsHeld.add(shard);
        return openLog(d, { fsync: cfg.fsync ?? 'batch' });
      };
    }
  }
  return { open, nodeLog, holds, storeHost };
}

/** What a node closes when it stops, after its runtime stopped. */
interface NodeParts {
  readonly layout: 'shared' | 'per-node';
  readonly membership: Membership;
  readonly host: LeaseAuthority | undefined;
  readonly wire: Http2Wire;
  readonly storeHost: StoreHost | undefined;
  readonly deadLog: LogStorage;
  /** Timers of the hand-over bound. */
  readonly clock: ClockTimers;
  /** Whether the node left the cluster already (`ClusterNode.leave()`): nothing to hand over. */
  readonly left: () => boolean;
}

/** How long a node that stops waits for its shards to be handed over (ms). */
const HAND_OVER_BOUND_MS = 3000;

async function stopNode({ layout, membership, host, wire, storeHost, deadLog, clock, left }: NodeParts): Promise<void> {
  if (layout === 'shared' && !left()) {
    // A shared store needs no shipping: hand every shard over so another node takes it now.
    // Bounded: when the authority is gone already, the leases simply expire.
    let timer: TimerHandle | undefined;
    const handOver = (async () => {
      await membership.drain();
      for (const l of membership.held()) await membership.release(l.shard, l.epoch);
      await membership.leave();
    })().catch(() => {});
    await Promise.race([
      handOver,
      new Promise((r) => (timer = clock.setTimeout(() => r(undefined), HAND_OVER_BOUND_MS))),
    ]);
    if (timer !== undefined) clock.clearTimeout(timer);
  }
  await membership.close();
  host?.close();
  await wire.close();
  await storeHost?.close();
  await deadLog.close();
}

/** Joins through `membership`; the authority's node may still be starting: retries for a while. */
async function joinWithRetry(membership: Membership, clock: ClockTimers = heldClock): Promise<void> {
  const joinBy = clock.now() + 30_000;
  for (;;) {
    try {
      await membership.join();
      break;
    } catch (e) {
      if ((e as { code?: string }).code !== ClusterCode.UNAVAILABLE || clock.now() > joinBy) throw e;
      await delay(100, clock);
    }
  }
}
