/**
 * Raft snapshots of the replicated log and the catch-up stream that goes with them
 * (docs/chronacta-ha.md, "Snapshots and catch-up").
 *
 * A snapshot's data is a small descriptor of the member's local log as of the snapshot's Raft
 * index: the last position, the batch id and epoch of the record there, and the members'
 * addresses (their membership records may be compacted away). The records themselves stay in
 * each member's local log; a member that installs a snapshot whose last position it does not
 * hold pulls the missing records from a member that holds them over a side stream of the Raft
 * transport (`CatchUpServer` answers, `fetchRecords` asks), one bounded, CRC-checked chunk at
 * a time, appending each chunk to its local log before asking for the next: a cut transfer
 * resumes from the local log's last position, on any source.
 */
import {
  CATCH_UP_MAX_REQUEST_BODY,
  type CatchUpFrame,
  CatchUpStream,
  encodeFetch,
  encodeHolding,
  encodeQuery,
  encodeRecords,
  encodeRefused,
  RefusedReason,
} from '../codec/catch-up.js';
import {
  decodeSnapshotDescriptor,
  encodeSnapshotDescriptor,
  type SnapshotDescriptorData,
} from '../codec/snapshot-descriptor.js';
import { systemClock, type Timers } from '../core/clock.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { LogRecord, LogStorage } from '../storage/types.js';
import { checkMember, type HaMember } from './config.js';
import { catchUpRefusal, descriptorRefusal, ReplicationErrorCode, replicationError } from './errors.js';

/** The snapshot data (docs/formats.md, ts/codec/snapshot-descriptor.ts) with the members it names. */
export type SnapshotDescriptor = SnapshotDescriptorData<HaMember>;

export function encodeDescriptor(d: SnapshotDescriptor): Uint8Array {
  return encodeSnapshotDescriptor(d, descriptorRefusal);
}

/** Decodes snapshot data; `undefined` for the empty data of a founding snapshot. */
export function decodeDescriptor(data: Uint8Array): SnapshotDescriptor | undefined {
  const d = decodeSnapshotDescriptor(data, descriptorRefusal);
  return d === undefined ? undefined : { ...d, members: d.members.map(checkMember) };
}

/**
 * The byte stream a catch-up runs over: what the catch-up source and client use of a socket.
 * A `node:net` Socket is one (the TLS side stream of the Raft transport, `openStream` and
 * `onStream` in ts/raft-io/tcp-transport.ts); the simulator passes its own, carried over its
 * faulty network on simulated time (ts/sim/replication/streams.ts). Bytes arrive in order,
 * or the stream closes.
 */
export interface CatchUpSocket {
  readonly destroyed: boolean;
  /** Queues `bytes`; false when the caller should wait for `drain` before writing more. */
  write(bytes: Uint8Array): boolean;
  on(event: 'data', listener: (chunk: Uint8Array) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  once(event: 'drain', listener: () => void): unknown;
  pause(): unknown;
  resume(): unknown;
  isPaused(): boolean;
  destroy(): unknown;
}

/** Frames a FrameReader holds before it stops reading its socket. */
const READ_AHEAD = 4;

/** Reads frames off a socket one at a time (a pull model: the caller asks for the next frame). */
class FrameReader {
  private readonly decoder: CatchUpStream;
  private readonly frames: CatchUpFrame[] = [];
  private waiter: { resolve(f: CatchUpFrame): void; reject(e: unknown): void } | undefined;
  private error: unknown;

  /**
   * Reads frames of at most `maxBody` bytes; stops reading the socket while READ_AHEAD frames
   * wait to be taken (a peer that sends faster than it is answered waits in TCP, not in memory).
   */
  constructor(
    private readonly socket: CatchUpSocket,
    maxBody?: number,
    private readonly timers: Timers = systemClock,
  ) {
    this.decoder = new CatchUpStream(catchUpRefusal, maxBody);
    socket.on('data', (chunk: Uint8Array) => {
      try {
        this.frames.push(...this.decoder.push(chunk));
      } catch (e) {
        this.fail(e);
        socket.destroy();
        return;
      }
      if (this.frames.length >= READ_AHEAD) socket.pause();
      this.deliver();
    });
    socket.on('close', () =>
      this.fail(new PlexusError('PLX_RAFT_TRANSPORT_UNREACHABLE', 'the connection closed', { reason: 'closed' })),
    );
    socket.on('error', (e) => this.fail(e));
    socket.resume();
  }

  next(timeoutMs: number): Promise<CatchUpFrame> {
    const f = this.frames.shift();
    if (this.frames.length < READ_AHEAD && this.socket.isPaused() && !this.socket.destroyed) this.socket.resume();
    if (f) return Promise.resolve(f);
    if (this.error !== undefined) return Promise.reject(this.error);
    return new Promise((resolve, reject) => {
      const timer = this.timers.setTimeout(() => {
        this.waiter = undefined;
        reject(
          new PlexusError('PLX_RAFT_TRANSPORT_UNREACHABLE', `no answer within ${timeoutMs} ms`, { reason: 'timeout' }),
        );
      }, timeoutMs);
      this.waiter = {
        resolve: (x) => {
          this.timers.clearTimeout(timer);
          resolve(x);
        },
        reject: (e) => {
          this.timers.clearTimeout(timer);
          reject(e);
        },
      };
    });
  }

  private deliver(): void {
    const w = this.waiter;
    const f = w ? this.frames.shift() : undefined;
    if (w && f) {
      this.waiter = undefined;
      w.resolve(f);
    }
  }

  private fail(e: unknown): void {
    if (this.error === undefined) this.error = e;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(this.error);
  }
}

export interface CatchUpServerStats {
  streams: number;
  fetches: number;
  recordsSent: number;
  refused: number;
}

/**
 * Answers the catch-up streams peers open: each FETCH gets the records of the local log from
 * `from` (at most `to`, and at most min(maxBytes, `maxChunkBytes`) of payload, one record at
 * least) or a REFUSED saying why not. Requests on one stream are answered one after another;
 * a stream that sends anything else is closed.
 */
export class CatchUpServer {
  readonly stats: CatchUpServerStats = { streams: 0, fetches: 0, recordsSent: 0, refused: 0 };
  private readonly sockets = new Set<CatchUpSocket>();

  constructor(
    private readonly local: LogStorage,
    private readonly maxChunkBytes: number,
    private readonly logger?: { warn(message: string, details?: Record<string, unknown>): void },
    /** The last local position known to be on disk (a QUERY's answer); `local.last` when not given. */
    private readonly durable?: () => bigint,
    /** The timers of the wait for a request (default systemClock). */
    private readonly timers: Timers = systemClock,
  ) {}

  serve(from: number, socket: CatchUpSocket): void {
    this.stats.streams++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    // Requests are a few bytes: a bigger frame is refused from its header.
    const reader = new FrameReader(socket, CATCH_UP_MAX_REQUEST_BODY, this.timers);
    void (async () => {
      try {
        for (;;) {
          const f = await reader.next(60_000);
          let answer: Uint8Array;
          if (f.type === 'query') {
            const last = this.local.last;
            const durable = this.durable?.() ?? last;
            // biome-ignore lint/complexity/useMathMinMax: bigint operands, which Math.min does not take
            answer = encodeHolding(this.local.first, last, durable < last ? durable : last, catchUpRefusal);
          } else if (f.type === 'fetch') {
            this.stats.fetches++;
            answer = await this.answer(f.from, f.to, f.maxBytes);
          } else
            throw replicationError(ReplicationErrorCode.BAD_FRAME, `a ${f.type} frame from a member that catches up`, {
              reason: 'type',
            });
          if (socket.destroyed) return;
          // Wait for the socket to drain before the next request: one chunk in flight per stream.
          if (!socket.write(answer)) await new Promise<void>((r) => socket.once('drain', () => r()));
        }
      } catch (e) {
        if (!socket.destroyed)
          this.logger?.warn('replicated log: closing a catch-up stream', { from, error: String(e) });
        socket.destroy();
      }
    })();
  }

  private async answer(from: number, to: number, maxBytes: number): Promise<Uint8Array> {
    const first = this.local.first;
    const last = this.local.last;
    const refuse = (reason: number, text: string) => {
      this.stats.refused++;
      return encodeRefused(first, last, reason, text);
    };
    if (from < 1 || to < from) return refuse(RefusedReason.BAD_REQUEST, `bad range ${from}..${to}`);
    if (BigInt(from) > last) return refuse(RefusedReason.BEHIND, `the local log ends at ${last}`);
    if (first === 0n || BigInt(from) < first) {
      return refuse(RefusedReason.COMPACTED, `the local log was compacted: it starts at ${first}`);
    }
    const limit = Math.max(1, Math.min(maxBytes, this.maxChunkBytes));
    const recs = await this.local.read(BigInt(from), { maxBytes: limit, maxCount: Math.min(to - from + 1, 1 << 20) });
    const out: LogRecord[] = [];
    for (const r of recs) {
      if (r.position > BigInt(to)) break;
      out.push(r);
    }
    if (out.length === 0 || out[0]?.position !== BigInt(from)) {
      return refuse(RefusedReason.COMPACTED, `position ${from} is not in the local log`);
    }
    this.stats.recordsSent += out.length;
    return encodeRecords(first, last, out, catchUpRefusal);
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }
}

export interface FetchOptions {
  /** Where the records go: appended in position order, one append per run of one batch. */
  readonly local: LogStorage;
  /** Fetch up to this position (inclusive). */
  readonly to: number;
  readonly chunkBytes: number;
  readonly timeoutMs: number;
  /** The timers of the answer timeout (default systemClock). */
  readonly timers?: Timers;
  /** Called after each chunk is durable in the local log, with its runs (one batch id and epoch each) in order. */
  readonly onChunk?: (runs: readonly (readonly LogRecord[])[]) => void;
  /** Checked between chunks: stop when it says so. */
  readonly stopped?: () => boolean;
}

/**
 * Pulls the records after the local log's last position up to `to` over an open catch-up
 * stream, chunk by chunk; resolves with the records appended. Fails (the caller retries,
 * here or on another source) when the source refuses, the stream breaks or a chunk does not
 * continue the local log.
 */
export async function fetchRecords(socket: CatchUpSocket, o: FetchOptions): Promise<number> {
  const reader = new FrameReader(socket, undefined, o.timers);
  let appended = 0;
  while (o.local.last < BigInt(o.to)) {
    if (o.stopped?.()) throw replicationError(ReplicationErrorCode.STOPPED, 'the member closed during a catch-up');
    const from = Number(o.local.last) + 1;
    socket.write(encodeFetch(from, o.to, o.chunkBytes));
    const f = await reader.next(o.timeoutMs);
    if (f.type === 'refused') {
      throw replicationError(
        ReplicationErrorCode.CATCH_UP_UNAVAILABLE,
        `the source cannot send positions ${from}..${o.to}: ${f.text} (it holds ${f.sourceFirst}..${f.sourceLast})`,
        { from, to: o.to, reason: f.reason, sourceFirst: f.sourceFirst, sourceLast: f.sourceLast },
      );
    }
    if (f.type !== 'records' || f.records.length === 0)
      throw replicationError(ReplicationErrorCode.BAD_FRAME, 'the source answered a fetch with no records', {
        reason: 'type',
      });
    let expect = BigInt(from);
    for (const r of f.records) {
      if (r.position !== expect || r.position > BigInt(o.to)) {
        throw replicationError(
          ReplicationErrorCode.BAD_FRAME,
          `the source sent position ${r.position} where ${expect} was due`,
          {
            reason: 'position',
          },
        );
      }
      expect++;
    }
    // One append per run of one batch id and epoch, issued together (one shared fsync).
    const runs: Promise<unknown>[] = [];
    const parts: LogRecord[][] = [];
    let start = 0;
    for (let i = 1; i <= f.records.length; i++) {
      const a = f.records[start] as LogRecord;
      const b = f.records[i];
      if (b && b.epoch === a.epoch && sameBytes(b.batchId, a.batchId)) continue;
      const run = f.records.slice(start, i);
      parts.push(run);
      runs.push(
        o.local.append(
          run.map((r) => r.payload),
          { batchId: a.batchId.slice(), epoch: a.epoch, expectedLast: a.position - 1n },
        ),
      );
      start = i;
    }
    const settled = await Promise.allSettled(runs);
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) {
      const err = (failed as PromiseRejectedResult).reason;
      throw replicationError(
        ReplicationErrorCode.STOPPED,
        `appending caught-up records to the local log failed: ${isPlexusError(err) ? err.code : String(err)}`,
        {},
        err,
      );
    }
    appended += f.records.length;
    o.onChunk?.(parts);
  }
  return appended;
}

/** Where a member's local log stands (the answer to a QUERY on a catch-up stream). */
export interface Holding {
  readonly first: number;
  readonly last: number;
  /** The last position known to be on disk: what the member keeps through a power loss. */
  readonly durable: number;
}

/** Asks the member at the other end of an open catch-up stream where its local log stands. */
export async function queryHolding(socket: CatchUpSocket, timeoutMs: number, timers?: Timers): Promise<Holding> {
  const reader = new FrameReader(socket, undefined, timers);
  socket.write(encodeQuery());
  const f = await reader.next(timeoutMs);
  if (f.type !== 'holding')
    throw replicationError(ReplicationErrorCode.BAD_FRAME, `the member answered a QUERY with a ${f.type} frame`, {
      reason: 'type',
    });
  return { first: f.first, last: f.last, durable: f.durable };
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
