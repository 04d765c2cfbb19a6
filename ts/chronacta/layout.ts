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
 *
 * The data format is node.json's `version` (DATA_FORMAT; `plexus chronacta migrate`
 * raises it, see migrate.ts): format 1 has no `clusterId` in node.json; format 2 records
 * the cluster the node's data belongs to, and a node.json of format 2 whose `clusterId`
 * differs from cluster.json's is refused (the cluster files were replaced). Both formats
 * are read; a format above DATA_FORMAT, or a cluster.json above version 1, is refused with
 * PLX_CHRONACTA_DATA_FORMAT_UNSUPPORTED. New directories are written in format 2.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PlexusError } from '../core/errors.js';
import { makeDirs, replaceFile } from '../storage/files.js';
import { type HaMember, parseHaConfig } from './cluster-config.js';
import { ChronactaCode, chronactaError } from './errors.js';

/** The data format this build writes and the highest it reads (node.json's `version`). */
export const DATA_FORMAT = 2;
/** A data directory (or cluster.json) written by a newer plexus than this one. */
export const DATA_FORMAT_UNSUPPORTED = 'PLX_CHRONACTA_DATA_FORMAT_UNSUPPORTED';

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
  /** Cluster mode: a learner (replicated to, not counted in quorums). */
  readonly learner?: boolean;
}

export type ClusterMode = 'standalone' | 'cluster';

export interface ClusterFile {
  readonly version: 1;
  readonly clusterId: string;
  readonly mode: ClusterMode;
  readonly epoch: number;
  readonly members: readonly ClusterMember[];
  readonly leader: string;
  /** Cluster mode: ids of members removed from the cluster; ids are never reused. */
  readonly removed?: readonly string[];
  /**
   * Cluster mode: the members' group commit (`groupCommitBytes` of the replicated log), when
   * `plexus chronacta cluster init` made the cluster: every member then runs a plexus that
   * applies several appends per Raft entry. Absent (off) in clusters made before, until the
   * operator sets it once every member runs such a version. `--group-commit-bytes` overrides it.
   */
  readonly groupCommitBytes?: number;
}

/** The group commit size `cluster init` records in cluster.json (bytes of frames per Raft entry). */
export const DEFAULT_GROUP_COMMIT_BYTES = 131_072;
/** The largest group commit size accepted (in cluster.json or `--group-commit-bytes`). */
export const MAX_GROUP_COMMIT_BYTES = 1_048_576;

export interface NodeFile {
  /** The data format: 1, or 2 with `clusterId`. */
  readonly version: 1 | 2;
  readonly id: string;
  readonly advertiseAddress: string;
  /** Format 2: the cluster this node's data belongs to (cluster.json's `clusterId`). */
  readonly clusterId?: string;
  /**
   * Cluster mode: the node was added to a running cluster (`plexus chronacta cluster
   * join-files`): it starts as an empty member the leader adds, never bootstrapping a
   * configuration of its own.
   */
  readonly join?: boolean;
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
  await replaceFile(dir, name, Buffer.from(text), true);
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
  if (o.join !== undefined && typeof o.join !== 'boolean') bad(file, '"join" must be true or false');
  const version = formatOf(file, (o as { version?: unknown }).version, DATA_FORMAT);
  if (version === 2 && (typeof o.clusterId !== 'string' || o.clusterId === '')) {
    bad(file, 'format 2 needs a "clusterId"');
  }
  return {
    version: version as 1 | 2,
    id: o.id,
    advertiseAddress: o.advertiseAddress,
    ...(version === 2 ? { clusterId: o.clusterId as string } : {}),
    ...(o.join ? { join: true } : {}),
  };
}

/** Checks a file's `version`: a whole number from 1 to `known`; above it, PLX_CHRONACTA_DATA_FORMAT_UNSUPPORTED. */
export function formatOf(file: string, version: unknown, known: number): number {
  if (!Number.isSafeInteger(version) || (version as number) < 1) bad(file, '"version" must be a whole number from 1');
  if ((version as number) > known) {
    throw new PlexusError(
      DATA_FORMAT_UNSUPPORTED,
      `${file} has format version ${version}, newer than this plexus reads (up to ${known}): run a plexus that knows it`,
      { file, version, supported: known },
    );
  }
  return version as number;
}

function checkCluster(file: string, v: unknown): ClusterFile {
  const o = v as Partial<ClusterFile> & { mode?: unknown };
  if (typeof o !== 'object' || o === null) bad(file, 'not an object');
  formatOf(file, (o as { version?: unknown }).version, 1);
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
  if (o.removed !== undefined && (!Array.isArray(o.removed) || o.removed.some((r) => typeof r !== 'string'))) {
    bad(file, '"removed" must be an array of member ids');
  }
  const g = o.groupCommitBytes;
  if (g !== undefined && (!Number.isSafeInteger(g) || g < 0 || g > MAX_GROUP_COMMIT_BYTES)) {
    bad(file, `"groupCommitBytes" must be a whole number from 0 to ${MAX_GROUP_COMMIT_BYTES}`);
  }
  return {
    ...(o.removed !== undefined ? { removed: o.removed } : {}),
    ...(g !== undefined ? { groupCommitBytes: g } : {}),
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

/** Format 2: node.json names the cluster its data belongs to, and cluster.json must be that cluster's. */
export function checkBinding(paths: DataPaths, node: NodeFile, cluster: ClusterFile): void {
  if (node.clusterId === undefined || node.clusterId === cluster.clusterId) return;
  throw chronactaError(
    ChronactaCode.BAD_DATA_DIR,
    `${paths.nodeFile} says this node's data belongs to cluster "${node.clusterId}" but ${paths.clusterFile} is cluster "${cluster.clusterId}": put back this node's cluster.json, or start the other cluster's member from an empty directory`,
    { file: paths.clusterFile, nodeClusterId: node.clusterId, clusterId: cluster.clusterId },
  );
}

/**
 * Makes `dir` (a directory of the data directory `root`) and its missing parents, refusing
 * with PLX_CHRONACTA_BAD_DATA_DIR what cannot be made: a file in the way, a parent that
 * refuses new entries (`/proc`), no permission.
 */
export async function makeDataDir(root: string, dir: string): Promise<void> {
  try {
    await makeDirs(dir);
  } catch (e) {
    const errno = (e as { code?: string }).code;
    throw chronactaError(
      ChronactaCode.BAD_DATA_DIR,
      `cannot use ${root} as a data directory: ${dir} cannot be made (${(e as Error).message}); give a directory, or a path where one can be made`,
      { dir, ...(errno ? { errno } : {}) },
      e,
    );
  }
}

/** Makes the directories and the cluster files when missing; reads and checks them otherwise. */
export async function prepareDataDir(root: string): Promise<PreparedDataDir> {
  if (typeof root !== 'string' || root === '') {
    throw chronactaError(ChronactaCode.BAD_INPUT, 'the data directory must be a non-empty path');
  }
  const paths = dataPaths(root);
  for (const d of [paths.root, paths.log, paths.archive, paths.cluster]) await makeDataDir(root, d);
  const nodeRaw = await readJson(paths.nodeFile);
  const clusterRaw = await readJson(paths.clusterFile);
  const found = clusterRaw === undefined ? undefined : checkCluster(paths.clusterFile, clusterRaw);
  const clusterId = found?.clusterId ?? randomUUID();
  let node: NodeFile;
  if (nodeRaw === undefined) {
    node = { version: DATA_FORMAT, id: randomUUID(), advertiseAddress: '', clusterId };
    await writeFileAtomic(paths.cluster, 'node.json', `${JSON.stringify(node, null, 2)}\n`);
  } else node = checkNode(paths.nodeFile, nodeRaw);
  let cluster: ClusterFile;
  if (found === undefined) {
    cluster = {
      version: 1,
      clusterId,
      mode: 'standalone',
      epoch: 0,
      members: [{ id: node.id, address: node.advertiseAddress }],
      leader: node.id,
    };
    await writeFileAtomic(paths.cluster, 'cluster.json', `${JSON.stringify(cluster, null, 2)}\n`);
  } else cluster = found;
  checkBinding(paths, node, cluster);
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
  /** node.json says the node joins a running cluster: open the replicated log with `join: true`. */
  readonly join?: true;
  /** cluster.json's `groupCommitBytes`, when it has one. */
  readonly groupCommitBytes?: number;
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
  return {
    clusterId: config.clusterId,
    id: self.id,
    members: config.members,
    ...(prep.node.join === true ? { join: true as const } : {}),
    ...(prep.cluster.groupCommitBytes !== undefined ? { groupCommitBytes: prep.cluster.groupCommitBytes } : {}),
  };
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
      groupCommitBytes: DEFAULT_GROUP_COMMIT_BYTES,
    },
    node: { version: DATA_FORMAT, id: String(id), advertiseAddress: self.advertise, clusterId },
  };
}

/** Writes a member's cluster files into `root` (made when missing), replacing any there. */
export async function writeClusterFiles(root: string, files: { cluster: ClusterFile; node: NodeFile }): Promise<void> {
  const paths = dataPaths(root);
  await mkdir(paths.cluster, { recursive: true });
  await writeFileAtomic(paths.cluster, 'node.json', `${JSON.stringify(files.node, null, 2)}\n`);
  await writeFileAtomic(paths.cluster, 'cluster.json', `${JSON.stringify(files.cluster, null, 2)}\n`);
}

/** What a member knows of the membership: `ReplicatedLog.status()`'s voters, learners and addresses. */
export interface MembershipView {
  readonly voters: readonly number[];
  readonly learners: readonly number[];
  readonly members: readonly HaMember[];
  /** The leader's id (0: none known). */
  readonly leader: number;
}

/**
 * The cluster.json that records `view`, or undefined when `file` already lists exactly its
 * members (ids, addresses, learner flags). The epoch goes up by one; ids that left the
 * configuration join `removed`. A view without voters (a joining member that has not
 * received the configuration yet) changes nothing.
 */
export function membershipFile(file: ClusterFile, view: MembershipView): ClusterFile | undefined {
  if (file.mode !== 'cluster' || view.voters.length === 0) return undefined;
  const byId = new Map(view.members.map((m) => [m.id, m]));
  const old = new Map(file.members.map((m) => [m.id, m]));
  const ids = [...view.voters, ...view.learners].sort((a, b) => a - b);
  const learners = new Set(view.learners);
  const members: ClusterMember[] = [];
  for (const id of ids) {
    const m = byId.get(id);
    const prev = old.get(String(id));
    const address = m?.advertise ?? prev?.address;
    const raftAddress = m?.raftAddress ?? prev?.raftAddress;
    // A member whose addresses this node has not learnt yet: wait for them.
    if (address === undefined || raftAddress === undefined) return undefined;
    members.push({ id: String(id), address, raftAddress, ...(learners.has(id) ? { learner: true } : {}) });
  }
  const same =
    members.length === file.members.length &&
    members.every((m) => {
      const p = old.get(m.id);
      return (
        p && p.address === m.address && p.raftAddress === m.raftAddress && (p.learner ?? false) === (m.learner ?? false)
      );
    });
  if (same) return undefined;
  const now = new Set(members.map((m) => m.id));
  const removed = new Set(file.removed ?? []);
  for (const m of file.members) if (!now.has(m.id)) removed.add(m.id);
  return {
    version: 1,
    clusterId: file.clusterId,
    mode: 'cluster',
    epoch: file.epoch + 1,
    members,
    leader: view.leader === 0 ? '' : String(view.leader),
    ...(removed.size > 0 ? { removed: [...removed].sort((a, b) => Number(a) - Number(b)) } : {}),
    ...(file.groupCommitBytes !== undefined ? { groupCommitBytes: file.groupCommitBytes } : {}),
  };
}

/** Replaces a data directory's cluster.json (atomic: written, fsynced, renamed, directory fsynced). */
export async function writeClusterFile(root: string, cluster: ClusterFile): Promise<void> {
  const paths = dataPaths(root);
  await mkdir(paths.cluster, { recursive: true });
  await writeFileAtomic(paths.cluster, 'cluster.json', `${JSON.stringify(cluster, null, 2)}\n`);
}

/**
 * The cluster files of a member about to join a running cluster: the cluster's members as
 * one of them reports them, plus the new member (a learner until the leader promotes it);
 * node.json says `join`, so the node never bootstraps a configuration of its own.
 */
export function joinFiles(
  clusterId: string,
  current: readonly HaMember[],
  self: HaMember,
): { cluster: ClusterFile; node: NodeFile } {
  if (current.some((m) => m.id === self.id)) {
    throw chronactaError(ChronactaCode.BAD_INPUT, `member ${self.id} is already in the cluster`, { id: self.id });
  }
  const members = [...current, self].sort((a, b) => a.id - b.id);
  return {
    cluster: {
      version: 1,
      clusterId,
      mode: 'cluster',
      epoch: 0,
      members: members.map((m) => ({
        id: String(m.id),
        address: m.advertise,
        raftAddress: m.raftAddress,
        ...(m.id === self.id ? { learner: true } : {}),
      })),
      leader: '',
    },
    node: { version: DATA_FORMAT, id: String(self.id), advertiseAddress: self.advertise, clusterId, join: true },
  };
}
