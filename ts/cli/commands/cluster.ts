import { existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { writeClientCertificate } from '../../cluster/client-cert.js';
import { decodeReply, encodeRequest } from '../../cluster/codec.js';
import { decodeControlReply, encodeControl } from '../../cluster/control.js';
import { ClusterCode, clusterError } from '../../cluster/errors.js';
import { DEAD_LETTER_LOG, listDeadLetters } from '../../cluster/fencing.js';
import { initCluster } from '../../cluster/init.js';
import type { AuthorityReply } from '../../cluster/lease-authority.js';
import { askGossipLeader, readLeases, writeLeaseDump } from '../../cluster/lease-dump.js';
import { type ClusterNodeConfig, readNodeConfig } from '../../cluster/node.js';
import { runNodeProcess } from '../../cluster/node-main.js';
import { readNodeTls } from '../../cluster/node-tls.js';
import { Http2Wire } from '../../net/http2-wire.js';
import { WIRE_SPIN_VARIABLE, wireSpinMs } from '../../net/http2-wire-shared.js';
import { type Command, parse, UsageError } from '../command.js';
import { RESHARD_HELP, reshard } from './cluster-reshard.js';

const HELP = [
  'Usage: plexus cluster <subcommand> [options]',
  '',
  'A cluster of trusted nodes sharing one population of virtual actors, placed by shard',
  'lease (docs/cluster.md). Output is JSON, one object per line.',
  '',
  'Subcommands:',
  '  init --dir DIR --id ID --shards N --nodes a,b,c [--base-port P] [--journal per-node|shared]',
  '       [--membership static|etcd|kubernetes|gossip] [--etcd-endpoints URL,URL,...] [--etcd-prefix /P/]',
  '       [--kube-namespace NS] [--kubeconfig FILE] [--seeds ID|HOST:PORT,...] [--force]',
  '        Writes DIR/cluster.meta, the cluster CA (ca.pem, ca-key.pem) and per node',
  '        DIR/nodes/<id>/ with its certificate, key and node.json. Nodes listen on',
  '        127.0.0.1:P, P+1, ... (default 7400; every port from 1 to 65535); the first',
  '        node hosts the lease authority (and, with --journal shared, the shard stores in',
  '        DIR/shared). A DIR that already holds a cluster is refused (PLX_CLUSTER_EXISTS)',
  '        and left unchanged; --force replaces its CA key, certificates, node configs and',
  "        cluster.meta (the nodes' data directories are kept). The replication factor is 1.",
  '        --membership etcd: leases in etcd (--etcd-endpoints), every node its own authority.',
  '        --membership kubernetes: leases as Lease objects in namespace --kube-namespace,',
  '        reached with --kubeconfig (default: $KUBECONFIG, ~/.kube/config or the',
  '        in-cluster service account); every node its own authority.',
  '        --membership gossip: the nodes form the cluster through --seeds (node ids or',
  '        host:port; default every node) and the live member with the lowest id grants',
  '        the leases. etcd, kubernetes and gossip take the shared journal (the first',
  '        node hosts the stores).',
  '  node --config FILE [--charts MODULE] [--control]',
  '        Runs one node until SIGTERM or SIGINT, then drains (running macrosteps finish,',
  '        outboxes flush, shards are handed over with a shared store) and exits 0.',
  '        FILE is checked first: unknown keys, duplicate node ids or addresses, ports',
  '        outside 1..65535, an authority or self that members does not list, a meta that',
  '        differs from cluster.meta or from the data directory are refused with the path',
  '        of the bad value (PLX_CLUSTER_BAD_CONFIG ...). The authority node keeps its',
  '        state in its data directory (authority.state) and refuses to start on a damaged',
  '        one (PLX_CLUSTER_AUTHORITY_STATE). --control takes JSON commands on standard',
  '        input (see ts/cluster/node-main.ts).',
  '        --charts MODULE runs your own actors next to the built-in ones: an ES module',
  '        exporting charts (IRI prefix to { initial, transition }), and optionally',
  '        replaces (built-in prefixes it redefines) and builtins: false; it takes the',
  "        place of the config's charts key. Refused: a module that does not load",
  '        (PLX_CLUSTER_CHARTS_LOAD), of another shape (PLX_CLUSTER_CHARTS_SHAPE), or',
  '        redefining a built-in prefix it does not name (PLX_CLUSTER_CHARTS_BUILTIN).',
  '        With "metrics": {"host","port"} in FILE the node serves /metrics, /healthz and',
  '        /readyz there (docs/cluster.md, "Metrics").',
  '  status --config FILE',
  '        Asks the lease authority for the view: members and their health, every',
  "        shard's owner and fencing epoch. Uses the node's certificate from FILE.",
  '        With gossip membership the leader answers (the members are asked in turn).',
  '  leases --config FILE --dump OUT',
  '        Writes the leases (shard, owner, fencing epoch, expiry where known) of the',
  "        cluster FILE's node belongs to as one JSON document to OUT (durably). etcd",
  '        membership: read from etcd, running or stopped; kubernetes: from the Lease',
  "        objects, running or stopped. static: the authority's view",
  '        over the wire when it runs; when it is stopped its leases ended with it, and the',
  '        dump gives the epoch ceiling and journal homes of its authority.state (read from',
  '        nodes/<authority>/data). Unreachable and no state here: PLX_CLUSTER_UNAVAILABLE.',
  '        gossip: the leader\'s view when a member answers (source "leader"); when the',
  '        cluster is stopped its leases ended with it, and the dump gives per shard the',
  "        highest fencing epoch in the shared store's journals and their maximum as the",
  '        epoch ceiling (source "journals"): an offline writer uses an epoch above it.',
  '  leave --config FILE',
  '        Asks the running node FILE configures to leave the cluster: it refuses new',
  '        activations, finishes running macrosteps, flushes its outboxes, hands each shard',
  '        over (another node takes it at a greater epoch), forwards the messages it held',
  "        and leaves, then exits 0. It is reached over its own mutual-TLS wire with FILE's",
  '        certificate: a node obeys only its own. Waits until the node left and prints',
  '        {"node","left","ms"}. Refused: the node hosting the static lease authority or',
  '        the shared store (PLX_CLUSTER_BAD_REQUEST), per-node journals (nothing replicates',
  '        them yet: PLX_CLUSTER_REPLICATION_UNSUPPORTED), a node not running',
  '        (PLX_CLUSTER_UNAVAILABLE).',
  ...RESHARD_HELP,
  '  client-cert --dir DIR --name NAME [--force]',
  '        Writes DIR/clients/NAME/ (cert.pem, key.pem, ca.pem): a client certificate of',
  '        the cluster CA for a program outside the cluster (ActorClient, docs/cluster.md,',
  '        "Programs outside the cluster"). It names NAME.client.<id>.plexus.internal: nodes',
  '        take calls from it, never a member. Existing files: PLX_CLUSTER_EXISTS unless --force.',
  '  dead-letters DIR',
  '        Lists the dead-letter log of a stopped node whose data directory is DIR',
  '        (frames dropped for a stale fencing epoch or past the hop limit). A DIR that',
  '        is not a directory is refused (PLX_CLUSTER_BAD_PATH); nothing is created.',
  '',
  'Exit status: 0 success; 1 a refusal or failure, printed as "plexus: error <CODE>: ..."',
  '(codes in docs/errors.md); 2 a usage mistake (unknown option, missing argument).',
  '',
  'Examples:',
  '  plexus cluster init --dir ./c1 --id c1 --shards 64 --nodes a,b,c',
  '  plexus cluster node --config ./c1/nodes/a/node.json',
  '  plexus cluster node --config ./c1/nodes/a/node.json --charts ./my-charts.mjs',
  '  plexus cluster status --config ./c1/nodes/b/node.json',
  '  plexus cluster leases --config ./c1/nodes/b/node.json --dump leases.json',
  '  plexus cluster init --dir ./c2 --id c2 --shards 64 --nodes a,b,c --membership etcd \\',
  '    --etcd-endpoints http://127.0.0.1:2379,http://127.0.0.1:22379',
  '  plexus cluster leave --config ./c1/nodes/b/node.json',
  '  plexus cluster init --dir ./c3 --id c3 --shards 64 --nodes a,b,c --membership kubernetes \\',
  '    --kube-namespace plexus --kubeconfig ~/.kube/config',
  '  plexus cluster init --dir ./c3 --id c3 --shards 64 --nodes a,b,c --membership gossip --seeds a,b',
  '  plexus cluster dead-letters ./c1/nodes/b/data',
  '  plexus cluster reshard ./c1 ./c1-128 --json',
].join('\n');

const json = (o: unknown) =>
  process.stdout.write(`${JSON.stringify(o, (_k, v) => (typeof v === 'bigint' ? `${v}` : v))}\n`);

function num(name: string, v: string | undefined, dflt?: number): number {
  if (v === undefined) {
    if (dflt !== undefined) return dflt;
    throw new UsageError('cluster', `--${name} is required`);
  }
  if (!/^\d+$/.test(v)) throw new UsageError('cluster', `--${name} takes a whole number, got "${v}"`);
  return Number(v);
}

/** The nodes of `--nodes a,b,c`. */
function nodeCount(nodes: string | undefined): number {
  return (nodes ?? '').split(',').filter((s) => s.length > 0).length;
}

/** `--base-port`: a port from 1 whose range of `count` ports ends at 65535 at most (default 7400). */
function portOption(name: string, v: string | undefined, count: number): number {
  const p = num(name, v, 7400);
  const last = p + Math.max(count, 1) - 1;
  if (p < 1 || last > 65535) {
    throw new UsageError(
      'cluster',
      `--${name} takes 1 to ${65536 - Math.max(count, 1)} for ${count} nodes, got "${v}"`,
    );
  }
  return p;
}

async function init(args: string[]): Promise<number> {
  const { values } = parse('cluster', {
    args,
    options: {
      dir: { type: 'string' },
      id: { type: 'string' },
      shards: { type: 'string' },
      nodes: { type: 'string' },
      'base-port': { type: 'string' },
      journal: { type: 'string' },
      membership: { type: 'string' },
      'etcd-endpoints': { type: 'string' },
      'etcd-prefix': { type: 'string' },
      'kube-namespace': { type: 'string' },
      kubeconfig: { type: 'string' },
      seeds: { type: 'string' },
      force: { type: 'boolean' },
    },
  });
  if (!values.dir || !values.id || !values.nodes) {
    throw new UsageError('cluster', 'init needs --dir, --id, --shards and --nodes');
  }
  const kind = values.membership ?? 'static';
  if (kind !== 'static' && kind !== 'etcd' && kind !== 'kubernetes' && kind !== 'gossip') {
    throw new UsageError('cluster', `--membership is static, etcd, kubernetes or gossip, got "${kind}"`);
  }
  const endpoints = (values['etcd-endpoints'] ?? '').split(',').filter((s) => s.length > 0);
  if (kind === 'etcd' && endpoints.length === 0) {
    throw new UsageError('cluster', '--membership etcd needs --etcd-endpoints URL,URL,...');
  }
  if (kind !== 'etcd' && (values['etcd-endpoints'] !== undefined || values['etcd-prefix'] !== undefined)) {
    throw new UsageError('cluster', '--etcd-endpoints and --etcd-prefix are for --membership etcd');
  }
  if (kind === 'kubernetes' && !values['kube-namespace']) {
    throw new UsageError('cluster', '--membership kubernetes needs --kube-namespace NS');
  }
  if (kind !== 'kubernetes' && (values['kube-namespace'] !== undefined || values.kubeconfig !== undefined)) {
    throw new UsageError('cluster', '--kube-namespace and --kubeconfig are for --membership kubernetes');
  }
  if (kind !== 'gossip' && values.seeds !== undefined) {
    throw new UsageError('cluster', '--seeds is for --membership gossip');
  }
  const seeds = (values.seeds ?? '').split(',').filter((s) => s.length > 0);
  if (values.seeds !== undefined && seeds.length === 0) {
    throw new UsageError('cluster', '--seeds takes node ids or host:port, separated by commas');
  }
  const journal = values.journal ?? (kind === 'static' ? 'per-node' : 'shared');
  if (journal !== 'per-node' && journal !== 'shared') {
    throw new UsageError('cluster', `--journal is per-node or shared, got "${journal}"`);
  }
  const files = await initCluster({
    dir: values.dir,
    id: values.id,
    shards: num('shards', values.shards),
    nodes: values.nodes.split(',').filter((s) => s.length > 0),
    basePort: portOption('base-port', values['base-port'], nodeCount(values.nodes)),
    journal,
    ...(kind === 'etcd'
      ? {
          membership: {
            kind: 'etcd' as const,
            endpoints,
            ...(values['etcd-prefix'] === undefined ? {} : { prefix: values['etcd-prefix'] }),
          },
        }
      : kind === 'kubernetes'
        ? {
            membership: {
              kind: 'kubernetes' as const,
              namespace: values['kube-namespace'] as string,
              // Written absolute: a node config's relative paths are relative to the config.
              ...(values.kubeconfig === undefined ? {} : { kubeconfig: resolve(values.kubeconfig) }),
            },
          }
        : kind === 'gossip'
          ? { membership: { kind: 'gossip' as const, ...(seeds.length > 0 ? { seeds } : {}) } }
          : {}),
    force: values.force === true,
  });
  for (const [node, config] of files) json({ node, config });
  return 0;
}

async function node(args: string[]): Promise<number> {
  const { values } = parse('cluster', {
    args,
    options: { config: { type: 'string' }, control: { type: 'boolean' }, charts: { type: 'string' } },
  });
  if (!values.config) throw new UsageError('cluster', 'node needs --config FILE');
  try {
    return await runNodeProcess(values.config, {
      control: values.control === true,
      ...(values.charts === undefined ? {} : { charts: values.charts }),
    });
  } catch (e) {
    // The node closes what it opened before it throws; should a handle still hold the
    // process, it ends anyway once the error is printed.
    setTimeout(() => process.exit(process.exitCode ?? 1), 5000).unref();
    throw e;
  }
}

/** A client wire with the node's certificate (it does not listen). */
function clientWire(cfg: ClusterNodeConfig, deliveryDeadlineMs = 3000): Http2Wire {
  return new Http2Wire({
    self: cfg.self,
    cluster: cfg.meta.id,
    tls: readNodeTls(cfg),
    resolve: (n) => cfg.members.find((m) => m.id === n)?.address,
    isMember: (n) => cfg.members.some((m) => m.id === n),
    deliveryDeadlineMs,
    spinMs: wireSpinMs(undefined, process.env[WIRE_SPIN_VARIABLE]),
  });
}

async function status(args: string[]): Promise<number> {
  const { values } = parse('cluster', { args, options: { config: { type: 'string' } } });
  if (!values.config) throw new UsageError('cluster', 'status needs --config FILE');
  const cfg = await readNodeConfig(values.config);
  if (cfg.membership?.kind === 'etcd' || cfg.membership?.kind === 'kubernetes') {
    // No authority node: the leases as etcd (or the Lease objects) hold them.
    const d = await readLeases(cfg, async () => {
      throw new Error('unused');
    });
    json({ cluster: cfg.meta.id, shardCount: cfg.meta.shardCount, membership: d.membership });
    const owned = new Map<string, number>();
    for (const l of d.leases) {
      owned.set(l.owner, (owned.get(l.owner) ?? 0) + 1);
      json({ shard: l.shard, owner: l.owner, epoch: l.epoch });
    }
    json({ leased: d.leases.length, free: cfg.meta.shardCount - d.leases.length, byOwner: Object.fromEntries(owned) });
    return 0;
  }
  const gossip = cfg.membership?.kind === 'gossip';
  let authority = gossip ? 'the gossip leader' : (cfg.authority as string);
  const wire = clientWire(cfg);
  try {
    let r: AuthorityReply;
    if (gossip) ({ leader: authority, reply: r } = await askGossipLeader(cfg, (id, body) => wire.call(id, body)));
    else r = decodeReply(await wire.call(authority, encodeRequest({ type: 'view' })));
    const v = r.view;
    json({
      cluster: cfg.meta.id,
      shardCount: cfg.meta.shardCount,
      ...(gossip ? { membership: 'gossip', leader: authority } : {}),
      version: v.version,
      members: v.members.map((m) => ({ id: m.id, address: m.address, status: m.status })),
    });
    const owned = new Map<string, number>();
    for (const l of v.leases) {
      owned.set(l.owner, (owned.get(l.owner) ?? 0) + 1);
      json({ shard: l.shard, owner: l.owner, epoch: `${l.epoch}` });
    }
    json({ leased: v.leases.length, free: cfg.meta.shardCount - v.leases.length, byOwner: Object.fromEntries(owned) });
    return 0;
  } catch (e) {
    const own = (e as { code?: unknown }).code;
    const code = typeof own === 'string' && own.startsWith('PLX_') ? own : ClusterCode.UNAVAILABLE;
    process.stderr.write(
      `plexus: error ${code}: cluster status cannot reach the authority ${authority}: ${(e as Error).message}\n`,
    );
    return 1;
  } finally {
    await wire.close();
  }
}

async function leases(args: string[]): Promise<number> {
  const { values } = parse('cluster', { args, options: { config: { type: 'string' }, dump: { type: 'string' } } });
  if (!values.config || !values.dump) throw new UsageError('cluster', 'leases needs --config FILE and --dump OUT');
  const cfg = await readNodeConfig(values.config);
  let wire: Http2Wire | undefined;
  try {
    const d = await readLeases(cfg, async () => {
      const w = clientWire(cfg);
      wire = w;
      return (authority, body) => w.call(authority, body);
    });
    await writeLeaseDump(values.dump, d);
    json({ dump: values.dump, source: d.source, leases: d.leases.length });
    return 0;
  } finally {
    await wire?.close();
  }
}

/** How long `leave` waits for the node's answer: its leave bound and its steps, with room. */
const LEAVE_WAIT_MS = 60_000;

async function leave(args: string[]): Promise<number> {
  const { values } = parse('cluster', { args, options: { config: { type: 'string' } } });
  if (!values.config) throw new UsageError('cluster', 'leave needs --config FILE');
  const cfg = await readNodeConfig(values.config);
  const wire = clientWire(cfg, LEAVE_WAIT_MS);
  try {
    let reply: Uint8Array;
    try {
      reply = await wire.call(cfg.self, encodeControl({ op: 'leave' }));
    } catch (e) {
      const own = (e as { code?: unknown }).code;
      if (typeof own === 'string' && own.startsWith('PLX_CLUSTER_')) throw e;
      throw clusterError(
        ClusterCode.UNAVAILABLE,
        `cluster leave cannot reach node ${cfg.self}: ${(e as Error).message}`,
        { node: cfg.self },
        e,
      );
    }
    const r = decodeControlReply(reply);
    json({ node: r.node ?? cfg.self, left: r.left === true, ms: r.ms });
    return r.left === true ? 0 : 1;
  } finally {
    await wire.close();
  }
}

async function clientCert(args: string[]): Promise<number> {
  const { values } = parse('cluster', {
    args,
    options: { dir: { type: 'string' }, name: { type: 'string' }, force: { type: 'boolean' } },
  });
  if (!values.dir || !values.name) throw new UsageError('cluster', 'client-cert needs --dir DIR and --name NAME');
  json(await writeClientCertificate({ dir: values.dir, client: values.name, force: values.force === true }));
  return 0;
}

/** What a node writes into its data directory when it first starts. */
const NODE_DIR_MARKS = ['cluster.meta', 'journal', 'shared', DEAD_LETTER_LOG];

async function deadLetters(args: string[]): Promise<number> {
  const { positionals } = parse('cluster', { args, allowPositionals: true, options: {} });
  const dir = positionals[0];
  if (dir === undefined) throw new UsageError('cluster', 'dead-letters needs the node data directory');
  if (positionals.length > 1) throw new UsageError('cluster', 'dead-letters takes one data directory');
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    isDir = false;
  }
  if (!isDir) {
    throw clusterError(
      ClusterCode.BAD_PATH,
      `${dir} is not a node data directory (${existsSync(dir) ? 'not a directory' : 'it does not exist'}); nothing was created`,
      { file: dir, field: 'dir', missing: !existsSync(dir) },
    );
  }
  // A node's data directory holds what the node wrote at its first start (its cluster.meta,
  // its journal); anything else is not one, and nothing is created in it.
  if (!NODE_DIR_MARKS.some((m) => existsSync(join(dir, m)))) {
    throw clusterError(
      ClusterCode.BAD_PATH,
      `${dir} is not a node data directory (it has none of ${NODE_DIR_MARKS.join(', ')}); nothing was created`,
      { file: dir, field: 'dir', missing: false },
    );
  }
  // A node that never dropped a frame has no log yet: nothing to list, nothing to create.
  if (!existsSync(join(dir, DEAD_LETTER_LOG))) {
    json({ count: 0 });
    return 0;
  }
  const list = await listDeadLetters(dir);
  for (const d of list) json(d);
  json({ count: list.length });
  return 0;
}

export const cluster: Command = {
  name: 'cluster',
  summary:
    'run and inspect a cluster of actor nodes (init, node, status, leases, leave, dead-letters, reshard, client-cert; membership static, etcd, kubernetes or gossip)',
  help: HELP,
  async run(args: string[]): Promise<number> {
    const [sub, ...rest] = args;
    if (sub === undefined || sub === '-h' || sub === '--help' || rest.includes('--help') || rest.includes('-h')) {
      process.stdout.write(`${HELP}\n`);
      return 0;
    }
    switch (sub) {
      case 'init':
        return init(rest);
      case 'node':
        return node(rest);
      case 'status':
        return status(rest);
      case 'leases':
        return leases(rest);
      case 'leave':
        return leave(rest);
      case 'dead-letters':
        return deadLetters(rest);
      case 'reshard':
        return reshard(rest);
      case 'client-cert':
        return clientCert(rest);
      default:
        throw new UsageError('cluster', `unknown subcommand "${sub}"`);
    }
  },
};

/** The same command under a descriptive name. */
export const clusterCommand = cluster;
