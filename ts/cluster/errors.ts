/**
 * The error codes of the cluster core (docs/errors.md, "Cluster"). Every refusal is a
 * PlexusError with one of these codes and, where a field is at fault, `details.field`.
 */
import { PlexusError } from '../core/errors.js';

export const ClusterCode = {
  /** A ClusterMeta value is malformed (shard count not a power of two, empty id, ...). */
  BAD_META: 'PLX_CLUSTER_BAD_META',
  /** A joining node's ClusterMeta differs from the cluster's; `details.field` names the field. */
  META_MISMATCH: 'PLX_CLUSTER_META_MISMATCH',
  /** A node id that the configuration does not list, or a second node with the same id. */
  UNKNOWN_NODE: 'PLX_CLUSTER_UNKNOWN_NODE',
  /** A configuration value out of range. */
  BAD_CONFIG: 'PLX_CLUSTER_BAD_CONFIG',
  /** A lease request refused: the shard is held by another member, or the node is not active. */
  LEASE_HELD: 'PLX_CLUSTER_LEASE_HELD',
  /** A renewal or release of a lease the node no longer holds (expired, revoked, other epoch). */
  LEASE_LOST: 'PLX_CLUSTER_LEASE_LOST',
  /** An append with an epoch lower than the shard store accepted (from PLX_STORAGE_FENCED). */
  FENCED: 'PLX_CLUSTER_FENCED',
  /** The node is draining or has left: no new activations or leases. */
  LEAVING: 'PLX_CLUSTER_LEAVING',
  /** The lease authority cannot be reached. */
  UNAVAILABLE: 'PLX_CLUSTER_UNAVAILABLE',
  /** An authority request or reply of a bad shape or size. */
  BAD_REQUEST: 'PLX_CLUSTER_BAD_REQUEST',
  /** A shard number outside 0 .. shardCount-1. */
  BAD_SHARD: 'PLX_CLUSTER_BAD_SHARD',
  /** An actor message no node acknowledged within `deliveryDeadlineMs` (the sender gets error.communication). */
  DEADLINE: 'PLX_CLUSTER_DEADLINE',
  /** An actor message forwarded `hopLimit` times between nodes that disagree on its shard's owner. */
  HOP_LIMIT: 'PLX_CLUSTER_HOP_LIMIT',
  /** An operation a remote shard store does not offer (truncation, compaction, backward reads). */
  UNSUPPORTED: 'PLX_CLUSTER_UNSUPPORTED',
  /** A replication factor above 1: nothing replicates shards yet, so the value would be a promise not kept. */
  REPLICATION_UNSUPPORTED: 'PLX_CLUSTER_REPLICATION_UNSUPPORTED',
  /** The lease authority's state file cannot be read, is damaged, or belongs to another cluster. */
  AUTHORITY_STATE: 'PLX_CLUSTER_AUTHORITY_STATE',
  /** `plexus cluster init` over a directory that already holds a cluster, without `--force`. */
  EXISTS: 'PLX_CLUSTER_EXISTS',
  /** `plexus cluster reshard` while a node of the cluster runs (a log of its held open by a live process). */
  RESHARD_RUNNING: 'PLX_CLUSTER_RESHARD_RUNNING',
  /** `plexus cluster reshard` found a journal it cannot read, a record in the wrong shard, or a copy that differs. */
  RESHARD_DAMAGED: 'PLX_CLUSTER_RESHARD_DAMAGED',
  /** `plexus cluster reshard` refused before writing: an out directory that exists, a membership it cannot reshard, ... */
  RESHARD_REFUSED: 'PLX_CLUSTER_RESHARD_REFUSED',
  /** A file or directory the command or node config names cannot be read or created (missing, not a file or directory, no access). */
  BAD_PATH: 'PLX_CLUSTER_BAD_PATH',
  /** The TLS files of a node config cannot be used: not PEM, a key that is not the certificate's, a certificate the CA did not sign or that names another node. */
  BAD_TLS: 'PLX_CLUSTER_BAD_TLS',
  /** A chart module (`--charts`, the node config's `charts`) cannot be imported: missing, a syntax error, a throw while it loads. */
  CHARTS_LOAD: 'PLX_CLUSTER_CHARTS_LOAD',
  /** A chart module exports something other than `charts` (IRI prefix to `{ initial, transition }`), `replaces`, `builtins`. */
  CHARTS_SHAPE: 'PLX_CLUSTER_CHARTS_SHAPE',
  /** A chart of yours has a built-in chart's prefix and `replaces` does not name it. */
  CHARTS_BUILTIN: 'PLX_CLUSTER_CHARTS_BUILTIN',
  /** A node cannot listen on its member address (the port is taken, or the address is not this machine's). */
  LISTEN: 'PLX_CLUSTER_LISTEN',
  /** An etcd gateway reply that is not JSON, is above its size limit, lacks a field or holds a value of a bad shape. */
  ETCD_RESPONSE: 'PLX_CLUSTER_ETCD_RESPONSE',
  /** A Kubernetes API server answer the Kubernetes authority cannot use: an unexpected status (401, 403, 404, 422, ...) or a body that is no Lease. */
  KUBE_RESPONSE: 'PLX_CLUSTER_KUBE_RESPONSE',
} as const;
export type ClusterCodeValue = (typeof ClusterCode)[keyof typeof ClusterCode];

export function clusterError(
  code: ClusterCodeValue,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}
