/**
 * What a replica needs from ts/raft beyond the pure core (docs/replication.md, "Seams"): its
 * Raft storage on disk, its Raft transport and the driver that runs the Ready loop. The
 * replicated log takes them as `ReplicaRaft`, with its clock, timers and randomness, in
 * `ReplicaDeps`; `tcpRaft` is the real one (files, TCP/TLS), the one place in the replicated
 * log that constructs FileRaftStorage, RaftTcpTransport and RaftDriver. A simulation passes
 * its own (simulated disk and network on a ManualClock).
 */
import { randomBytes, randomInt } from 'node:crypto';
import { type ClockTimers, systemClock } from '../core/clock.js';
import type { Snapshot } from '../raft/types.js';
import { RaftDriver, type RaftDriverOptions } from '../raft-io/driver.js';
import { FileRaftStorage } from '../raft-io/file-storage.js';
import { RaftTcpTransport, type RaftTransportOptions } from '../raft-io/tcp-transport.js';
import type { FileLog, FileLogOptions } from '../storage/file-log.js';
import type { StorageLogger } from '../storage/types.js';
import { markCleanClose, openLocalLog, type SyncedSegments, syncLocalLog } from './local-tail.js';
import type { CatchUpSocket } from './snapshot.js';

/** The Raft storage of a replica: what its node reads and its driver writes, and compaction. */
export type ReplicaRaftStorage = Pick<
  FileRaftStorage,
  | 'initialState'
  | 'entries'
  | 'term'
  | 'firstIndex'
  | 'lastIndex'
  | 'snapshot'
  | 'append'
  | 'setHardState'
  | 'applySnapshot'
  | 'compact'
  | 'sync'
  | 'setInlineSyncWrites'
  | 'close'
>;

/**
 * The Raft transport of a replica: messages, catch-up streams, peers' addresses. A catch-up
 * stream is any `CatchUpSocket` (snapshot.ts): TLS side streams in production, streams over
 * the simulated network in the simulator.
 */
export type ReplicaTransport = Pick<
  RaftTcpTransport,
  'port' | 'send' | 'flush' | 'setPeer' | 'removePeer' | 'close'
> & {
  openStream(id: number, timeoutMs?: number): Promise<CatchUpSocket>;
};

/** How a replica starts its Raft transport: the side streams it serves are catch-up streams. */
export type ReplicaTransportOptions = Omit<RaftTransportOptions, 'onStream'> & {
  readonly onStream?: (from: number, socket: CatchUpSocket) => void;
};

/** The Ready loop of a replica's Raft node. */
export type ReplicaDriver = Pick<RaftDriver, 'start' | 'stop' | 'propose' | 'read' | 'receive' | 'wake'>;

export interface ReplicaRaft {
  openStorage(dir: string, opts: FileLogOptions): Promise<ReplicaRaftStorage>;
  bootstrapStorage(
    dir: string,
    confState: Snapshot['metadata']['confState'],
    data: Uint8Array,
    opts: FileLogOptions,
  ): Promise<ReplicaRaftStorage>;
  startTransport(opts: ReplicaTransportOptions): Promise<ReplicaTransport>;
  startDriver(opts: RaftDriverOptions): ReplicaDriver;
}

/** The local log of committed records, as the replica uses it. */
export type ReplicaLocalLog = Pick<
  FileLog,
  'first' | 'last' | 'highestEpoch' | 'append' | 'read' | 'readBackward' | 'compactBefore' | 'close' | 'segmentFiles'
>;

/** Where a replica keeps its local log: open it, make it durable, mark a clean close (local-tail.ts). */
export interface ReplicaLocalStore {
  open(
    dir: string,
    opts: { segmentBytes?: number; logger?: StorageLogger },
    fsync: 'batch' | 'never',
    logger: StorageLogger | undefined,
  ): Promise<ReplicaLocalLog>;
  /** Makes every record appended so far durable (`logDir`: the log's own directory). */
  sync(logDir: string, files: readonly string[], synced: SyncedSegments): Promise<void>;
  markClean(dir: string, files: readonly string[]): Promise<void>;
}

/** The local log in files (`<dir>/log/`). */
export const fileLocalStore: ReplicaLocalStore = {
  open: (dir, opts, fsync, logger) => openLocalLog(dir, opts, fsync, logger),
  sync: (logDir, files, synced) => syncLocalLog(logDir, files, synced),
  markClean: (dir, files) => markCleanClose(dir, files),
};

/** Everything a replica takes from outside itself. */
export interface ReplicaDeps {
  readonly clock: ClockTimers;
  /** Uniform integers in [0, n) (election timeouts). */
  readonly random: (n: number) => number;
  /** `n` random bytes (batch ids of appends that bring none). */
  readonly randomBytes: (n: number) => Uint8Array;
  readonly raft: ReplicaRaft;
  /** The local log of committed records. */
  readonly local: ReplicaLocalStore;
}

/** Raft on files and TCP/TLS. */
export const tcpRaft: ReplicaRaft = {
  openStorage: (dir, opts) => FileRaftStorage.open(dir, opts),
  bootstrapStorage: (dir, confState, data, opts) => FileRaftStorage.bootstrap(dir, confState, data, opts),
  startTransport: (opts) => RaftTcpTransport.start(opts),
  startDriver: (opts) => new RaftDriver(opts),
};

/** The real dependencies: wall time, node:crypto randomness, Raft on files and TCP/TLS. */
export function realReplicaDeps(over: Partial<ReplicaDeps> = {}): ReplicaDeps {
  return {
    clock: over.clock ?? systemClock,
    random: over.random ?? ((n: number) => randomInt(n)),
    randomBytes: over.randomBytes ?? ((n: number) => new Uint8Array(randomBytes(n))),
    raft: over.raft ?? tcpRaft,
    local: over.local ?? fileLocalStore,
  };
}
