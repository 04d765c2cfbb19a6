/**
 * plexus net: the cluster wire (HTTP/2 over mutual TLS 1.3, and an in-memory stand-in) and
 * the cluster CA that issues its node certificates. docs/cluster.md describes them.
 */
export {
  CLIENT_PEER_PREFIX,
  type ClusterCa,
  clientName,
  clientOfCertificate,
  clientOfName,
  createClusterCa,
  isClientPeer,
  issueClientCertificate,
  issueNodeCertificate,
  NAME_SUFFIX,
  type NodeCredentials,
  nodeName,
  nodeOfName,
  nodeOfPeer,
  wireIdentityPolicy,
} from './ca.js';
export { Http2Wire } from './http2-wire.js';
export {
  DEFAULT_WIRE_SPIN_MS,
  type Http2WireOptions,
  MAX_WIRE_SPIN_MS,
  WIRE_SPIN_VARIABLE,
  wireSpinMs,
} from './http2-wire-shared.js';
export { type MemoryFaults, MemoryNetwork, MemoryWire, type MemoryWireOptions } from './memory-wire.js';
export { DedupCache, Receiver } from './receiver.js';
export type {
  CallHandler,
  DeliveryVerdict,
  FrameHandler,
  OutboundFrame,
  Wire,
  WireRefusal,
  WireTuning,
} from './types.js';
