/**
 * Raft I/O (docs/raft.md): the driver that runs a RaftNode on a clock, a transport and a
 * storage writer; the TCP/TLS transport; the journal-backed file storage.
 */
export { type RaftApplier, RaftDriver, type RaftDriverOptions } from './driver.js';
export { FileRaftStorage } from './file-storage.js';
export {
  RaftTcpTransport,
  type RaftTlsOptions,
  type RaftTransportOptions,
  type RaftTransportStats,
} from './tcp-transport.js';
