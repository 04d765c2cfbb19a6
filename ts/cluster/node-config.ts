/**
 * The schema of a node config file (`plexus cluster init` writes one per node) and the checks
 * that span fields: unique member ids and addresses, ports from 1 to 65535, `self`,
 * `authority` and `storeHost` among the members, the `membership` block (`static`, the
 * default, with an `authority` member hosting the in-memory authority; `etcd`, with its
 * endpoints and key prefix and no authority member; `kubernetes`, with its namespace, Lease
 * name prefix and kubeconfig and no authority member; or `gossip`, with its seeds and gossip
 * timings and no authority member). Every refusal is PLX_CLUSTER_BAD_CONFIG
 * with `details.path` naming the bad value (also in `details.field`), except what
 * `clusterMeta` refuses in `meta` (PLX_CLUSTER_BAD_META, PLX_CLUSTER_REPLICATION_UNSUPPORTED).
 */
import { MAX_SHARDS } from '../core/index.js';
import { DNS_LABEL as DNS_LABEL_RE } from '../core/names.js';
import { clusterConfig, type DetectorConfig, detectorConfig, leaseConfig } from './config.js';
import { ClusterCode, clusterError } from './errors.js';
import { type GossipConfig, gossipConfigFor } from './gossip/config.js';
import { clusterMeta } from './meta.js';
import { firstProblem, type Schema } from './schema.js';

const DNS_LABEL = {
  re: DNS_LABEL_RE,
  what: 'a DNS label (lower-case letters, digits, hyphens; 1 to 63)',
};
/** host:port, the host a DNS name, an IPv4 address or a bracketed IPv6 address. */
const ADDRESS = {
  re: /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/,
  what: 'host:port',
};
const MS = { type: 'integer', min: 0, max: 2_147_483_647 } as const;
const PATH: Schema = { type: 'string', maxLength: 4096 };
const MAX_MEMBERS = 4096;
/** An etcd client URL: `http://host:port` (the JSON gateway speaks plain HTTP here). */
const ETCD_URL = {
  re: /^http:\/\/(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5}\/?$/,
  what: 'an etcd client URL http://host:port',
};
/** An etcd key prefix: starts and ends with `/`, printable ASCII. */
const ETCD_PREFIX = {
  re: /^\/(?:[\x21-\x7e]*\/)?$/,
  what: 'a key prefix that starts and ends with / (printable ASCII)',
};

/** A Kubernetes namespace: a DNS label. */
const KUBE_NAMESPACE = {
  re: /^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$/,
  what: 'a Kubernetes namespace name (a DNS label)',
};
/** The prefix of the Kubernetes Lease names: a DNS label short enough for `-member-<id>` after it. */
const KUBE_PREFIX = {
  re: /^[a-z0-9](?:[-a-z0-9]{0,38}[a-z0-9])?$/,
  what: 'a Lease name prefix (a DNS label of at most 40 characters)',
};

/** The metrics port's host: a DNS name, an IPv4 address or an IPv6 address (no brackets). */
const METRICS_HOST = {
  re: /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$/,
  what: 'a host name or an IP address',
};

/** Membership kinds a node config may name. */
export const MEMBERSHIP_KINDS = ['static', 'etcd', 'kubernetes', 'gossip'] as const;
export type MembershipKind = (typeof MEMBERSHIP_KINDS)[number];

/** The node config's `membership` block. */
export type MembershipConfig =
  | { readonly kind: 'static' }
  | {
      readonly kind: 'etcd';
      /** Client URLs of the etcd members, tried in turn. */
      readonly endpoints: readonly string[];
      /** Where the cluster's keys live (default `/plexus/<meta.id>/`). */
      readonly prefix?: string;
      /** One etcd HTTP exchange's limit (ms, default 2000). */
      readonly timeoutMs?: number;
    }
  | {
      readonly kind: 'kubernetes';
      /** The namespace of the cluster's Lease objects. */
      readonly namespace: string;
      /** The Lease names' prefix (default `plexus-<meta.id>`). */
      readonly prefix?: string;
      /**
       * A kubeconfig file, relative to the node config; default $KUBECONFIG, else
       * ~/.kube/config, else the in-cluster service account.
       */
      readonly kubeconfig?: string;
      /** One API call's limit (ms, default 5000). */
      readonly timeoutMs?: number;
    }
  | {
      readonly kind: 'gossip';
      /**
       * Members to join gossip through: node ids of `members`, their `host:port`, or
       * `<id>@<host:port>` for a node `members` does not list.
       */
      readonly seeds: readonly string[];
      /** Gossip timings over those `gossipConfigFor(detector)` derives (ts/cluster/gossip/config.ts). */
      readonly gossip?: Partial<GossipConfig>;
    };

/** A gossip seed as the node config gives it: a node id, `host:port`, or `<id>@<host:port>`. */
const SEED = {
  re: /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?@)?(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5}$|^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/,
  what: 'a node id, host:port or id@host:port',
};
const GOSSIP_MS = { type: 'integer', min: 1, max: 2_147_483_647 } as const;
const GOSSIP_COUNT = { type: 'integer', min: 0, max: 1024 } as const;

export const NODE_CONFIG_SCHEMA: Schema = {
  type: 'object',
  required: ['meta', 'self', 'members', 'authority', 'dataDir', 'tls'],
  properties: {
    meta: {
      type: 'object',
      required: ['id', 'shardCount', 'hashVersion', 'replicationFactor'],
      properties: {
        id: { type: 'string', pattern: DNS_LABEL },
        shardCount: { type: 'integer', min: 1, max: MAX_SHARDS },
        hashVersion: { type: 'integer', min: 1, max: 1 },
        replicationFactor: { type: 'integer', min: 1, max: 255 },
      },
    },
    clusterMeta: PATH,
    self: { type: 'string', pattern: DNS_LABEL },
    members: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_MEMBERS,
      items: {
        type: 'object',
        required: ['id', 'address'],
        properties: { id: { type: 'string', pattern: DNS_LABEL }, address: { type: 'string', pattern: ADDRESS } },
      },
    },
    authority: { type: 'string', pattern: DNS_LABEL },
    dataDir: PATH,
    tls: { type: 'object', required: ['cert', 'key', 'ca'], properties: { cert: PATH, key: PATH, ca: PATH } },
    journal: { type: 'string', enum: ['per-node', 'shared'] },
    sharedDir: PATH,
    storeHost: { type: 'string', pattern: DNS_LABEL },
    cluster: {
      type: 'object',
      properties: {
        hopLimit: { type: 'integer', min: 0, max: 255 },
        mailboxBound: { type: 'integer', min: 1, max: 1 << 24 },
        dedupCapacity: { type: 'integer', min: 0, max: 1 << 24 },
        deliveryDeadlineMs: MS,
        retryBackoffMs: MS,
        maxFrameBytes: { type: 'integer', min: 40, max: 1 << 20 },
      },
    },
    lease: { type: 'object', properties: { ttlMs: MS, safetyMarginMs: MS, renewEveryMs: MS } },
    detector: { type: 'object', properties: { suspectAfterMs: MS, failedAfterMs: MS } },
    heartbeatEveryMs: { type: 'integer', min: 1, max: 60_000 },
    runtime: {
      type: 'object',
      properties: {
        mailboxBound: { type: 'integer', min: 1, max: 1 << 24 },
        dedupWindow: { type: 'integer', min: 0, max: 1 << 24 },
        snapshotEvery: { type: 'integer', min: 0, max: 2 ** 31 - 1 },
        idleAfter: MS,
      },
    },
    fsync: { type: 'string', enum: ['batch', 'always', 'never'] },
    wire: {
      type: 'object',
      properties: {
        streamCap: { type: 'integer', min: 1, max: 65_536 },
        poolSize: { type: 'integer', min: 1, max: 64 },
      },
    },
    journalLanes: { type: 'integer', min: 1, max: 1024 },
    leaseClockRate: { type: 'number', min: 0, max: 1000, exclusiveMin: true },
    charts: PATH,
    metrics: {
      type: 'object',
      required: ['port'],
      properties: {
        host: { type: 'string', pattern: METRICS_HOST },
        port: { type: 'integer', min: 0, max: 65_535 },
      },
    },
    membership: {
      type: 'object',
      required: ['kind'],
      properties: {
        kind: { type: 'string', enum: MEMBERSHIP_KINDS },
        endpoints: { type: 'array', minItems: 1, maxItems: 64, items: { type: 'string', pattern: ETCD_URL } },
        prefix: { type: 'string', pattern: ETCD_PREFIX, maxLength: 1024 },
        timeoutMs: { type: 'integer', min: 1, max: 600_000 },
        seeds: { type: 'array', minItems: 1, maxItems: MAX_MEMBERS, items: { type: 'string', pattern: SEED } },
        gossip: {
          type: 'object',
          properties: {
            probeIntervalMs: GOSSIP_MS,
            probeTimeoutMs: GOSSIP_MS,
            indirectChecks: GOSSIP_COUNT,
            retransmitMult: GOSSIP_COUNT,
            suspicionMult: GOSSIP_COUNT,
            suspicionMaxTimeoutMult: GOSSIP_COUNT,
            awarenessMaxMultiplier: GOSSIP_COUNT,
            gossipIntervalMs: GOSSIP_MS,
            gossipNodes: GOSSIP_COUNT,
            pushPullIntervalMs: GOSSIP_MS,
            maxPiggyback: GOSSIP_COUNT,
            lifeguard: { type: 'boolean' },
          },
        },
      },
    },
  },
};

/** The schema of a config whose membership is not static: no `authority` member (with etcd every node talks to etcd). */
const ETCD_NODE_CONFIG_SCHEMA: Schema = {
  ...NODE_CONFIG_SCHEMA,
  required: (NODE_CONFIG_SCHEMA as { required: readonly string[] }).required.filter((k) => k !== 'authority'),
};

/** The schema of a config with Kubernetes membership: no `authority` member, the Kubernetes keys. */
const KUBE_NODE_CONFIG_SCHEMA: Schema = {
  ...ETCD_NODE_CONFIG_SCHEMA,
  properties: {
    ...(NODE_CONFIG_SCHEMA as { properties: Record<string, Schema> }).properties,
    membership: {
      type: 'object',
      required: ['kind', 'namespace'],
      properties: {
        kind: { type: 'string', enum: MEMBERSHIP_KINDS },
        namespace: { type: 'string', pattern: KUBE_NAMESPACE },
        prefix: { type: 'string', pattern: KUBE_PREFIX },
        kubeconfig: PATH,
        timeoutMs: { type: 'integer', min: 1, max: 600_000 },
      },
    },
  },
};

function refuse(file: string, path: string, message: string, extra: Record<string, unknown> = {}): never {
  throw clusterError(ClusterCode.BAD_CONFIG, `node config ${file}: ${path === '' ? 'the file' : path} ${message}`, {
    file,
    path,
    field: path,
    ...extra,
  });
}

/**
 * The gossip names (`<id>@<host:port>`) of a config's seeds: a node id takes its address from
 * `members`, a `host:port` its id; a seed neither names is refused (`membership.seeds[i]`).
 */
export function gossipSeeds(
  seeds: readonly string[],
  members: readonly { readonly id: string; readonly address: string }[],
  file = 'node.json',
): string[] {
  return seeds.map((seed, i) => {
    if (seed.includes('@')) return seed;
    const m = members.find((x) => (seed.includes(':') ? x.address === seed : x.id === seed));
    if (m === undefined) {
      refuse(
        file,
        `membership.seeds[${i}]`,
        `names ${JSON.stringify(seed)}, which members does not list: give a listed node id or address, or <id>@<host:port>`,
      );
    }
    return `${m.id}@${m.address}`;
  });
}

/**
 * A node's gossip timings: those `gossipConfigFor` derives from its failure detector, with the
 * config's `membership.gossip` over them (a probe interval given alone brings a probe timeout
 * of half of it).
 */
export function nodeGossipConfig(
  detector: Partial<DetectorConfig> | undefined,
  over: Partial<GossipConfig> = {},
): GossipConfig {
  const timeout =
    over.probeIntervalMs !== undefined && over.probeTimeoutMs === undefined
      ? { probeTimeoutMs: Math.max(1, Math.floor(over.probeIntervalMs / 2)) }
      : {};
  return gossipConfigFor(detectorConfig(detector), { ...timeout, ...over });
}

/** The port of a `host:port` address that the schema accepted. */
export function portOf(address: string): number {
  return Number(address.slice(address.lastIndexOf(':') + 1));
}

/**
 * Checks a parsed node config against the schema and the rules across fields; throws the
 * first problem (PLX_CLUSTER_BAD_CONFIG with `details.path`).
 */
export function checkNodeConfig(cfg: unknown, file: string): void {
  const membership = (cfg as { membership?: { kind?: unknown } } | null)?.membership;
  // `authority` is required with static membership only (a bad kind is named before it).
  const p = firstProblem(
    membership === undefined || membership?.kind === 'static'
      ? NODE_CONFIG_SCHEMA
      : membership?.kind === 'kubernetes'
        ? KUBE_NODE_CONFIG_SCHEMA
        : ETCD_NODE_CONFIG_SCHEMA,
    cfg,
  );
  if (p) refuse(file, p.path, p.message);
  const c = cfg as {
    meta: Parameters<typeof clusterMeta>[0];
    self: string;
    members: { id: string; address: string }[];
    authority?: string;
    storeHost?: string;
    membership?: {
      kind: MembershipKind;
      endpoints?: string[];
      prefix?: string;
      timeoutMs?: number;
      seeds?: string[];
      gossip?: Partial<GossipConfig>;
    };
    journal?: string;
    cluster?: object;
    lease?: object;
    detector?: Partial<DetectorConfig>;
  };
  const ids = new Map<string, number>();
  const addresses = new Map<string, number>();
  c.members.forEach((m, i) => {
    const port = portOf(m.address);
    if (port < 1 || port > 65_535) {
      refuse(file, `members[${i}].address`, `has port ${port}: a port is from 1 to 65535`);
    }
    const dup = ids.get(m.id);
    if (dup !== undefined)
      refuse(file, `members[${i}].id`, `repeats the id ${JSON.stringify(m.id)} of members[${dup}]`);
    ids.set(m.id, i);
    const same = addresses.get(m.address);
    if (same !== undefined) {
      refuse(file, `members[${i}].address`, `repeats the address ${m.address} of members[${same}]`);
    }
    addresses.set(m.address, i);
  });
  if (!ids.has(c.self)) refuse(file, 'self', `names ${JSON.stringify(c.self)}, which members does not list`);
  const m = c.membership ?? { kind: 'static' };
  if (m.kind === 'etcd' && m.endpoints === undefined) {
    refuse(file, 'membership.endpoints', 'is required with "kind": "etcd"');
  }
  if (m.kind === 'gossip' && m.seeds === undefined)
    refuse(file, 'membership.seeds', 'is required with "kind": "gossip"');
  if (m.kind === 'etcd' || m.kind === 'kubernetes' || m.kind === 'gossip') {
    // None has an authority member; a shard taken over must find its journal, so the
    // journal is the shared store.
    const who =
      m.kind === 'etcd'
        ? 'with etcd every node talks to etcd itself'
        : m.kind === 'kubernetes'
          ? 'with kubernetes every node talks to the Kubernetes API server itself'
          : 'with gossip the live member with the lowest id hosts it';
    const why =
      m.kind === 'gossip'
        ? "the gossip leader does not record which node's store holds a shard's journal"
        : `the ${m.kind} authority does not record which node's store holds a shard's journal`;
    if (c.authority !== undefined) refuse(file, 'authority', `is only for "membership": static (${who})`);
    if (c.journal !== 'shared') {
      refuse(
        file,
        'journal',
        `must be "shared" with ${m.kind} membership: ${why}, so with per-node stores a shard taken over would start from an empty journal`,
      );
    }
    if (c.storeHost === undefined) {
      refuse(
        file,
        'storeHost',
        `is required for "journal": "shared" with ${m.kind} membership (no authority node hosts the store)`,
      );
    }
  }
  if (m.kind !== 'etcd' && m.kind !== 'kubernetes') {
    // Kubernetes takes `prefix` and `timeoutMs` too; its schema refuses `endpoints`.
    for (const f of ['endpoints', 'prefix', 'timeoutMs'] as const) {
      if (m[f] !== undefined) refuse(file, `membership.${f}`, 'is only for "kind": "etcd"');
    }
  }
  if (m.kind !== 'gossip') {
    for (const f of ['seeds', 'gossip'] as const) {
      if (m[f] !== undefined) refuse(file, `membership.${f}`, 'is only for "kind": "gossip"');
    }
  } else {
    gossipSeeds(m.seeds ?? [], c.members, file);
  }
  if (c.authority !== undefined && !ids.has(c.authority)) {
    refuse(
      file,
      'authority',
      `names ${JSON.stringify(c.authority)}, which members does not list: no node would host the lease authority`,
    );
  }
  if (c.storeHost !== undefined && !ids.has(c.storeHost)) {
    refuse(file, 'storeHost', `names ${JSON.stringify(c.storeHost)}, which members does not list`);
  }
  if (c.storeHost !== undefined && c.journal !== 'shared') {
    refuse(file, 'storeHost', 'is only for "journal": "shared"');
  }
  clusterMeta(c.meta);
  const within = (section: string, check: () => unknown) => {
    try {
      check();
    } catch (e) {
      const field = (e as { details?: { field?: string } }).details?.field ?? '';
      refuse(file, `${section}.${field}`, (e as Error).message);
    }
  };
  within('cluster', () => clusterConfig(c.cluster));
  within('lease', () => leaseConfig(c.lease));
  within('detector', () => detectorConfig(c.detector));
  if (m.kind === 'gossip') within('membership.gossip', () => nodeGossipConfig(c.detector, m.gossip));
}
