/**
 * The data directory of a Chronacta node (docs/chronacta.md#the-data-directory):
 *
 *   DIR/log/                 the event log (ts/storage segments)
 *   DIR/replica/             cluster mode: the replicated log (raft/ and log/) in place of DIR/log/
 *   DIR/archive/             compacted history: CURRENT and gen-<n>/ logs
 *   DIR/cluster/cluster.json cluster id, mode, epoch, members, leader
 *   DIR/cluster/node.json    this node's id and advertise address
 *
 * The cluster files are made on first use with mode `standalone`. Mode `cluster` (written
 * by `plexus chronacta cluster init`) lists every member with its Raft id, Raft address and
 * advertise address; node.json names this node among them; `haConfigOf` reads the
 * replicated log's configuration from them. Any other mode is refused.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { ChronactaCode, chronactaError } from './errors.js';
import { type HaMember, parseHaConfig } from './ha/config.js';

export interface DataPaths {
  readonly root: string;
  readonly log: string;
  readonly archive: string;
  readonly cluster: string;
  readonly clusterFile: string;
  readonly nodeFile: string;
}

export interface ClusterMember {
  readonly id: string;
  /** The gRPC address clients reach the member at (its advertise address). */
  readonly address: string;
  /** Cluster mode: the address its Raft transport listens on. */
  readonly raftAddress?: string;
}

export type ClusterMode = 'standalone' | 'cluster';

export interface ClusterFile {
  readonly version: 1;
  readonly clusterId: string;
  readonly mode: ClusterMode;
  readonly epoch: number;
  readonly members: readonly ClusterMember[];
  readonly leader: string;
}

export interface NodeFile {
  readonly version: 1;
  readonly id: string;
  readonly advertiseAddress: string;
}

export function dataPaths(root: string): DataPaths {
  const cluster = join(root, 'cluster');
  return {
    root,
    log: join(root, 'log'),
    archive: join(root, 'archive'),
    cluster,
    clusterFile: join(cluster, 'cluster.json'),
    nodeFile: join(cluster, 'node.json'),
  };
}

/** Writes `file` atomically: a temporary file written and fsynced, renamed over it, the directory fsynced. */
export async function writeFileAtomic(dir: string, name: string, text: string): Promise<void> {
  const tmp = join(dir, `${name}.tmp`);
  const fh = await open(tmp, 'w');
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(dir, name));
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

async function readJson(file: string): Promise<unknown | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as { code?: string }).code === 'ENOENT') return undefined;
    throw chronactaError(ChronactaCode.BAD_DATA_DIR, `cannot read ${file}: ${(e as Error).message}`, { file }, e);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw chronactaError(ChronactaCode.BAD_DATA_DIR, `${file} is not JSON: ${(e as Error).message}`, { file }, e);
  }
}

function bad(file: string, what: string): never {
  throw chronactaError(ChronactaCode.BAD_DATA_DIR, `${file}: ${what}`, { file });
}

function checkNode(file: string, v: unknown): NodeFile {
  const o = v as Partial<NodeFile>;
  if (typeof o !== 'object' || o === null || typeof o.id !== 'string' || o.id === '') bad(file, 'no node "id"');
  if (typeof o.advertiseAddress !== 'string') bad(file, '"advertiseAddress" must be a string');
  return { version: 1, id: o.id, advertiseAddress: o.advertiseAddress };
}

function checkCluster(file: string, v: unknown): ClusterFile {
  const o = v as Partial<ClusterFile> & { mode?: unknown };
  if (typeof o !== 'object' || o === null) bad(file, 'not an object');
  if (o.mode !== 'standalone' && o.mode !== 'cluster') {
    bad(file, `mode is ${JSON.stringify(o.mode)}; use "standalone" or "cluster"`);
  }
  if (typeof o.clusterId !== 'string' || o.clusterId === '') bad(file, 'no "clusterId"');
  if (!Number.isSafeInteger(o.epoch) || (o.epoch as number) < 0) bad(file, '"epoch" must be a whole number');
  if (!Array.isArray(o.members)) bad(file, '"members" must be an array');
  for (const m of o.members) {
    if (typeof m?.id !== 'string' || typeof m?.address !== 'string') bad(file, 'a member needs "id" and "address"');
    if (o.mode === 'cluster' && typeof m.raftAddress !== 'string') {
      bad(file, `member "${m.id}" needs a "raftAddress" in cluster mode`);
    }
  }
  if (typeof o.leader !== 'string') bad(file, '"leader" must be a string');
  return {
    version: 1,
    clusterId: o.clusterId,
    mode: o.mode,
    epoch: o.epoch as number,
    members: o.members,
    leader: o.leader,
  };
}

export interface PreparedDataDir {
  readonly paths: DataPaths;
  readonly cluster: ClusterFile;
  readonly node: NodeFile;
}

/** Makes the directories and the cluster files when missing; reads and checks them otherwise. */
export async function prepareDataDir(root: string): Promise<PreparedDataDir> {
  if (typeof root !== 'string' || root === '') {
    throw chronactaError(ChronactaCode.BAD_INPUT, 'the data directory must be a non-empty path');
  }
  const paths = dataPaths(root);
  for (const d of [paths.root, paths.log, paths.archive, paths.cluster]) await mkdir(d, { recursive: true });
  const nodeRaw = await readJson(paths.nodeFile);
  let node: NodeFile;
  if (nodeRaw === undefined) {
    node = { version: 1, id: randomUUID(), advertiseAddress: '' };
    await writeFileAtomic(paths.cluster, 'node.json', `${JSON.stringify(node, null, 2)}\n`);
  } else node = checkNode(paths.nodeFile, nodeRaw);
  const clusterRaw = await readJson(paths.clusterFile);
  let cluster: ClusterFile;
  if (clusterRaw === undefined) {
    cluster = {
      version: 1,
      clusterId: randomUUID(),
      mode: 'standalone',
      epoch: 0,
      members: [{ id: node.id, address: node.advertiseAddress }],
      leader: node.id,
    };
    await writeFileAtomic(paths.cluster, 'cluster.json', `${JSON.stringify(cluster, null, 2)}\n`);
  } else cluster = checkCluster(paths.clusterFile, clusterRaw);
  return { paths, cluster, node };
}

/** Records the address the node serves on in node.json and in its cluster.json member entry. */
export async function recordAddress(prep: PreparedDataDir, address: string): Promise<PreparedDataDir> {
  const node: NodeFile = { ...prep.node, advertiseAddress: address };
  const members = prep.cluster.members.map((m) => (m.id === node.id ? { ...m, address } : m));
  const cluster: ClusterFile = { ...prep.cluster, members };
  if (prep.node.advertiseAddress !== address) {
    await writeFileAtomic(prep.paths.cluster, 'node.json', `${JSON.stringify(node, null, 2)}\n`);
    await writeFileAtomic(prep.paths.cluster, 'cluster.json', `${JSON.stringify(cluster, null, 2)}\n`);
  }
  return { paths: prep.paths, node, cluster };
}

/** Cluster mode: this node's Raft id and the members, from cluster.json and node.json. */
export interface NodeHaConfig {
  readonly clusterId: string;
  readonly id: number;
  readonly members: readonly HaMember[];
}

/**
 * The replicated log's configuration of a cluster-mode data directory: member ids are
 * whole numbers (the Raft ids), node.json names one of them.
 */
export function haConfigOf(prep: PreparedDataDir): NodeHaConfig {
  const file = prep.paths.clusterFile;
  if (prep.cluster.mode !== 'cluster') bad(file, 'mode is "standalone"; run `plexus chronacta cluster init` first');
  const members = prep.cluster.members.map((m) => ({
    id: /^[1-9][0-9]{0,15}$/.test(m.id) ? Number(m.id) : Number.NaN,
    raftAddress: m.raftAddress,
    advertise: m.address,
  }));
  for (const m of members) {
    if (!Number.isSafeInteger(m.id)) bad(file, 'member ids must be whole numbers from 1 in cluster mode');
  }
  let config: ReturnType<typeof parseHaConfig>;
  try {
    config = parseHaConfig({ clusterId: prep.cluster.clusterId, members });
  } catch (e) {
    throw chronactaError(ChronactaCode.BAD_DATA_DIR, `${file}: ${(e as Error).message}`, { file }, e);
  }
  const self = config.members.find((m) => String(m.id) === prep.node.id);
  if (!self) bad(prep.paths.nodeFile, `node id "${prep.node.id}" is not a member of ${file}`);
  return { clusterId: config.clusterId, id: self.id, members: config.members };
}

/** The cluster files of member `id` of a cluster-mode cluster (what `cluster init` writes). */
export function clusterFiles(
  clusterId: string,
  members: readonly HaMember[],
  id: number,
): { cluster: ClusterFile; node: NodeFile } {
  const self = members.find((m) => m.id === id);
  if (!self) throw chronactaError(ChronactaCode.BAD_INPUT, `member ${id} is not in the member list`);
  return {
    cluster: {
      version: 1,
      clusterId,
      mode: 'cluster',
      epoch: 0,
      members: members.map((m) => ({ id: String(m.id), address: m.advertise, raftAddress: m.raftAddress })),
      leader: '',
    },
    node: { version: 1, id: String(id), advertiseAddress: self.advertise },
  };
}

/** Writes a member's cluster files into `root` (made when missing), replacing any there. */
export async function writeClusterFiles(root: string, files: { cluster: ClusterFile; node: NodeFile }): Promise<void> {
  const paths = dataPaths(root);
  await mkdir(paths.cluster, { recursive: true });
  await writeFileAtomic(paths.cluster, 'node.json', `${JSON.stringify(files.node, null, 2)}\n`);
  await writeFileAtomic(paths.cluster, 'cluster.json', `${JSON.stringify(files.cluster, null, 2)}\n`);
}
