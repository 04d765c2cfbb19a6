/**
 * The communicator of a SPERLI rank (docs/sperli-comm.md): point-to-point messages
 * matched by (source, tag), and the collectives of collectives.ts, on top of a
 * RankTransport (transport.ts) and nothing else, so the same code runs over the TLS
 * mesh and in memory.
 *
 * Sending: every frame to one rank goes through one send queue per rank, one message at
 * a time, so the frames of a message larger than one frame are consecutive. A send joins
 * the queue when it is called; a collective when it runs (after the collectives before
 * it). Receiving: DATA frames go to the mailbox, COLLECTIVE frames to a queue per peer,
 * checkpoint frames to another queue per peer; whoever waits for one kind leaves the
 * others where they are.
 */

import { endsMessage, FrameType, MAX_COLLECTIVE_DATA, MAX_PAYLOAD, MAX_USER_TAG } from '../codec/sperli-frame.js';
import { type CollectiveHeader, encodeCollective, encodeCollectiveHeader } from '../codec/sperli-payloads.js';
import type { ElementTypeName, ReduceOpName } from '../core/codes.js';
import { type PlexusDetails, PlexusError } from '../core/errors.js';
import { type Checkpointable, type CheckpointContext, Checkpointer, type CheckpointState } from './checkpoint.js';
import { type CollectiveLink, Collectives, type ReduceArray, type Reduced, type ScatterData } from './collectives.js';
import { HeldBytes } from './comm-bytes.js';
import { ANY_SOURCE, ANY_TAG, FrameQueue, Mailbox, type Message } from './comm-queues.js';
import type { IncomingFrame } from './comm-stream.js';
import type { GrowingBytes } from './growing-bytes.js';
import { AbortReason, lostPeerError } from './mesh-errors.js';
import { KeepAlive, RankSpinner } from './spin.js';
import { type RankTransport, SEND_NOW_MAX, type TransportFrame } from './transport.js';

export type { ReduceArray, Reduced, ScatterData } from './collectives.js';

/** Options of `allreduce`: `into` receives the result (data's kind and length, not overlapping it). */
export interface AllreduceOptions<T extends ArrayBufferView = ArrayBufferView> {
  readonly into?: T;
}
export { ANY_SOURCE, ANY_TAG, type Message } from './comm-queues.js';

/** A local argument of a point-to-point call is refused. */
const BAD_ARGUMENT = 'PLX_SPERLI_BAD_ARGUMENT';
/** A call on a communicator after `finalize()` (the code the transport gives a send after `close()`). */
const CLOSED = 'PLX_SPERLI_CLOSED';

/** A reduce operation by name or code (1..10). */
export type ReduceOperation = ReduceOpName | number;
/** An element type by name or code (0..6). */
export type ElementTypeArg = ElementTypeName | number;

/** A send or receive started with `isend` or `irecv`. */
export interface Request<T> {
  /** True once the operation has completed or failed. */
  readonly done: boolean;
  /** Settles with the operation (the same promise every time). */
  wait(): Promise<T>;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (typeof v === 'object') return `a ${(v as object).constructor?.name ?? 'object'}`;
  return `a ${typeof v}`;
}

/**
 * The operation and options of `reduce`/`allreduce` after their (type or) operation: an
 * object in third place is the options of the form without a type.
 */
function opAndOptions(third: unknown, fourth: unknown): [op: unknown, options: unknown] {
  return fourth === undefined && typeof third === 'object' && third !== null ? [undefined, third] : [third, fourth];
}

function badArgument(message: string, details: PlexusDetails<typeof BAD_ARGUMENT>): PlexusError {
  return new PlexusError(BAD_ARGUMENT, message, details);
}

export class Comm {
  readonly rank: number;
  readonly size: number;
  private readonly transport: RankTransport;
  private failure: PlexusError | undefined;
  private ended: PlexusError | undefined;
  private finalizing: Promise<void> | undefined;
  private readonly mailbox: Mailbox;
  private readonly spinner: RankSpinner;
  /** Holds the process open while a call waits for a peer (spin.ts). */
  private readonly keepAlive = new KeepAlive();
  /** Per peer: it has left the job with BYE. */
  private readonly left: boolean[] = [];
  /** Peers that have left with BYE. */
  private leftCount = 0;
  private readonly finalizedListener: (() => void) | undefined;
  /** How long (ms) a wait for a frame keeps the event loop polling before it sleeps (spin.ts). */
  readonly spinMs: number;
  private readonly collectiveFrames: FrameQueue<Uint8Array | IncomingFrame>[] = [];
  private readonly checkpointFrames: FrameQueue<TransportFrame>[] = [];
  /** Per peer: the last queued send, settled either way. */
  private readonly sendQueue: Promise<void>[] = [];
  /** Per peer: queued sends that have not settled yet. */
  private readonly sendsOpen: number[] = [];
  private readonly collectives: Collectives;
  private open = 0;
  private readonly failureListeners: ((error: PlexusError) => void)[] = [];
  private failureNotified = false;
  private readonly checkpoints: Checkpointer;

  /**
   * A communicator on `transport`. `options.checkpoint` (the checkpoint directory and the
   * job's id and keys, see `checkpointContextOf`) enables `checkpoint` and `resume`;
   * `options.spinMs` (default 0) keeps the event loop polling for that long while a call
   * waits for a frame (`init()` picks it, see spin.ts).
   */
  constructor(
    transport: RankTransport,
    options: {
      readonly checkpoint?: CheckpointContext;
      readonly spinMs?: number;
      /** Called once `finalize()` has said BYE to every peer and closed the transport. */
      readonly onFinalized?: () => void;
    } = {},
  ) {
    this.transport = transport;
    this.spinMs = options.spinMs ?? 0;
    this.finalizedListener = options.onFinalized;
    this.rank = transport.rank;
    this.size = transport.size;
    this.spinner = new RankSpinner(this.spinMs, this.keepAlive);
    this.mailbox = new Mailbox(this.spinner, this.rank);
    this.checkpoints = new Checkpointer(
      {
        rank: this.rank,
        size: this.size,
        openRequests: () => this.open,
        stopped: () => this.stopped(),
        allreduceSum: (data) => this.collectives.allreduce(data, 'sum') as Promise<BigUint64Array>,
        barrier: () => this.collectives.barrier(),
        send: (peer, type, payload, epoch, prefix) => this.sendCheckpointFrame(peer, type, payload, epoch, prefix),
        next: (peer) => this.nextCheckpointFrame(peer),
        abort: (reason, error) => this.abort(reason, error),
      },
      options.checkpoint,
    );
    for (let r = 0; r < this.size; r++) {
      this.collectiveFrames.push(new FrameQueue(this.spinner));
      this.checkpointFrames.push(new FrameQueue(this.spinner));
      this.sendQueue.push(Promise.resolve());
      this.sendsOpen.push(0);
      this.left.push(false);
    }
    const link: CollectiveLink = {
      rank: this.rank,
      size: this.size,
      stopped: () => this.stopped(),
      sendCollective: (peer, h, data) => this.sendCollective(peer, h, data),
      sendCollectiveGrowing: (peer, h, source) => this.sendCollectiveGrowing(peer, h, source),
      sendCollectiveNow: (peer, head, data) => this.sendCollectiveNow(peer, head, data),
      nextCollective: (peer) => {
        const next = this.collectiveFrames[peer]!.next(this.stopped());
        if (this.leftCount > 0) this.checkLeft();
        return next;
      },
      pollCollective: (peer) => this.collectiveFrames[peer]!.poll(),
      waitCollective: (peer, taker) => {
        this.collectiveFrames[peer]!.wait(taker, this.stopped());
        if (this.leftCount > 0) this.checkLeft();
      },
      unshiftCollective: (peer, item) => this.collectiveFrames[peer]!.unshift(item),
      abort: (reason, error) => this.abort(reason, error),
      hold: () => this.keepAlive.hold(),
      release: () => this.keepAlive.release(),
    };
    this.collectives = new Collectives(link);
    transport.enableStreams?.();
    transport.onFrame((peer, frame) => this.onFrame(peer, frame));
    transport.onFailure((error) => this.fail(error));
    transport.onPeerLeft?.((peer) => this.peerLeft(peer));
    if (transport.failure !== undefined) this.fail(transport.failure);
  }

  /** The job's failure, once there is one (every later call rejects with it). */
  get failed(): PlexusError | undefined {
    return this.failure;
  }

  /**
   * Calls `listener` once when the job fails, after this rank's ABORT (if it sent one)
   * has been handed to its peers. `init()` uses it to end the process.
   */
  onFailure(listener: (error: PlexusError) => void): void {
    this.failureListeners.push(listener);
    if (this.failureNotified && this.failure) listener(this.failure);
  }

  private notifyFailure(error: PlexusError): void {
    if (this.failureNotified) return;
    this.failureNotified = true;
    for (const l of this.failureListeners) l(error);
  }

  /** Collective calls made so far: the sequence number of the last one (refused calls count). */
  get collectiveSequence(): bigint {
    return this.collectives.sequence;
  }

  /** `isend` and `irecv` requests that have not completed yet. */
  get openRequests(): number {
    return this.open;
  }

  // -------------------------------------------------------------------------------------
  // Point to point

  /**
   * Sends `data` to rank `dest` with `tag` (0 ..= 2^31 - 1). Resolves when every frame is
   * handed to the transport (not when it is received); the bytes must stay unchanged
   * until then. A message to this rank itself is copied into its own mailbox.
   */
  async send(dest: number, tag: number, data: ArrayBufferView): Promise<void> {
    return this.startSend(dest, tag, data);
  }

  /** Receives the first message that matches `source` and `tag` (ANY_SOURCE, ANY_TAG match all). */
  async recv(source: number = ANY_SOURCE, tag: number = ANY_TAG): Promise<Message> {
    return this.startRecv(source, tag);
  }

  /** `send` as a request; refused arguments throw at once. */
  isend(dest: number, tag: number, data: ArrayBufferView): Request<void> {
    return this.request(this.startSend(dest, tag, data));
  }

  /** `recv` as a request; refused arguments throw at once. */
  irecv(source: number = ANY_SOURCE, tag: number = ANY_TAG): Request<Message> {
    return this.request(this.startRecv(source, tag));
  }

  private startSend(dest: number, tag: number, data: ArrayBufferView): Promise<void> {
    this.checkRank(dest, 'send: destination', false);
    this.checkTag(tag, 'send', false);
    if (!ArrayBuffer.isView(data)) {
      throw badArgument(`send takes bytes (a Uint8Array or another typed array), got ${describe(data)}`, {
        reason: 'data',
      });
    }
    const stopped = this.stopped();
    if (stopped !== undefined) return Promise.reject(stopped);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (dest === this.rank) {
      this.mailbox.deliver({ source: this.rank, tag, data: bytes.slice() });
      return Promise.resolve();
    }
    const held = HeldBytes.of(bytes);
    return this.enqueue(dest, async () => {
      for (let at = 0; ; ) {
        const part = held.bytes.subarray(at, at + MAX_PAYLOAD);
        await this.transport.send(dest, FrameType.DATA, tag, part);
        at += part.length;
        if (endsMessage(part.length, MAX_PAYLOAD)) return;
        if (this.failure !== undefined) throw this.failure;
      }
    });
  }

  private startRecv(source: number, tag: number): Promise<Message> {
    this.checkRank(source, 'recv: source', true);
    this.checkTag(tag, 'recv', true);
    const stopped = this.stopped();
    if (stopped !== undefined) return Promise.reject(stopped);
    const taken = this.mailbox.take(source, tag, undefined);
    if (this.leftCount > 0) this.checkLeft();
    return taken;
  }

  private request<T>(p: Promise<T>): Request<T> {
    let done = false;
    this.open++;
    const settle = () => {
      done = true;
      this.open--;
    };
    p.then(settle, settle);
    return {
      get done() {
        return done;
      },
      wait: () => p,
    };
  }

  private checkRank(v: unknown, what: string, any: boolean): void {
    if (any && v === ANY_SOURCE) return;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= this.size) {
      throw badArgument(
        `${what} ${String(v)} is not a rank of this job (0..${this.size - 1}${any ? ' or ANY_SOURCE' : ''})`,
        { reason: 'rank', rank: v },
      );
    }
  }

  private checkTag(v: unknown, what: string, any: boolean): void {
    if (any && v === ANY_TAG) return;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_USER_TAG) {
      throw badArgument(
        `${what}: tag ${String(v)} is not a user tag (0..${MAX_USER_TAG}${any ? ' or ANY_TAG' : ''}); tags from 2^31 are reserved`,
        { reason: 'tag', tag: v },
      );
    }
  }

  // -------------------------------------------------------------------------------------
  // Collectives (collectives.ts)

  /** Waits until every rank has called barrier. */
  barrier(): Promise<void> {
    return this.collectives.barrier();
  }

  /** The root's bytes on every rank; `data` is needed at the root only. */
  bcast(root: number, data?: ArrayBufferView): Promise<Uint8Array> {
    return this.collectives.bcast(root, data);
  }

  /**
   * Reduces the arrays of every rank with `op` in ascending rank order; the root gets
   * the result (an array of the type passed in, or `options.into` as in `allreduce`), the
   * others null. The element type comes from the array type, or is given before `op`.
   */
  reduce<T extends ReduceArray>(
    root: number,
    data: T,
    op: ReduceOperation,
    options?: AllreduceOptions<T>,
  ): Promise<Reduced<T> | null>;
  reduce<T extends ArrayBufferView>(
    root: number,
    data: T,
    type: ElementTypeArg,
    op: ReduceOperation,
    options?: AllreduceOptions<T>,
  ): Promise<Reduced<T> | null>;
  reduce(
    root: number,
    data: ArrayBufferView,
    typeOrOp: unknown,
    third?: unknown,
    fourth?: unknown,
  ): Promise<ArrayBufferView | null> {
    const [op, options] = opAndOptions(third, fourth);
    return this.collectives.reduce(root, data, typeOrOp, op, options);
  }

  /**
   * `reduce` at rank 0, with the result on every rank: a new array, or `options.into` (an
   * array of data's kind and length that does not overlap it, like MPI's receive buffer).
   */
  allreduce<T extends ReduceArray>(data: T, op: ReduceOperation, options?: AllreduceOptions<T>): Promise<Reduced<T>>;
  allreduce<T extends ArrayBufferView>(
    data: T,
    type: ElementTypeArg,
    op: ReduceOperation,
    options?: AllreduceOptions<T>,
  ): Promise<Reduced<T>>;
  allreduce(data: ArrayBufferView, typeOrOp: unknown, third?: unknown, fourth?: unknown): Promise<ArrayBufferView> {
    const [op, options] = opAndOptions(third, fourth);
    return this.collectives.allreduce(data, typeOrOp, op, options);
  }

  /** The root gets every rank's block (all of one length) in rank order; the others get null. */
  gather(root: number, data: ArrayBufferView): Promise<Uint8Array[] | null> {
    return this.collectives.gather(root, data);
  }

  /** Each rank gets its block of the root's data (`size` equal blocks, or one buffer cut into them). */
  scatter(root: number, data?: ScatterData): Promise<Uint8Array> {
    return this.collectives.scatter(root, data);
  }

  /** The raw exchange: the root gets every rank's bytes (of any length) in rank order; the others get null. */
  bytes(root: number, data: ArrayBufferView): Promise<Uint8Array[] | null> {
    return this.collectives.bytes(root, data);
  }

  // -------------------------------------------------------------------------------------
  // Checkpoint frames (for the checkpoint layer)

  /**
   * Sends one checkpoint frame (CKPT_BEGIN ..= RESUME) to `peer`, after every earlier send
   * to it. With `prefix`, the frame's payload is `prefix` followed by `payload` (sent
   * without joining them first).
   */
  sendCheckpointFrame(
    peer: number,
    type: number,
    payload: Uint8Array,
    epoch: bigint,
    prefix?: Uint8Array,
  ): Promise<void> {
    this.checkRank(peer, 'sendCheckpointFrame: peer', false);
    if (peer === this.rank || !Number.isInteger(type) || type < FrameType.CKPT_BEGIN || type > FrameType.RESUME) {
      throw badArgument(`sendCheckpointFrame: type ${type} to rank ${peer} is not a checkpoint frame to a peer`, {
        reason: 'type',
        type,
      });
    }
    const stopped = this.stopped();
    if (stopped !== undefined) return Promise.reject(stopped);
    const t = this.transport;
    if (prefix === undefined) return this.enqueue(peer, () => t.send(peer, type, 0, payload, epoch), true);
    if (t.sendPrefixed !== undefined) {
      return this.enqueue(peer, () => t.sendPrefixed!(peer, type, 0, prefix, payload, epoch), true);
    }
    const joined = new Uint8Array(prefix.length + payload.length);
    joined.set(prefix);
    joined.set(payload, prefix.length);
    return this.enqueue(peer, () => t.send(peer, type, 0, joined, epoch), true);
  }

  /**
   * The next checkpoint frame from `peer`, in arrival order. Over the mesh, a CKPT_DATA
   * frame of at least 64 KiB that does not arrive in one read comes at its header, with
   * `incoming` set and an empty `payload`: its payload bytes follow through `incoming`.
   */
  nextCheckpointFrame(peer: number): Promise<TransportFrame> {
    this.checkRank(peer, 'nextCheckpointFrame: peer', false);
    const next = this.checkpointFrames[peer]!.next(this.stopped());
    if (this.leftCount > 0) this.checkLeft();
    return next;
  }

  // -------------------------------------------------------------------------------------
  // Checkpoints (checkpoint.ts, docs/sperli-checkpoints.md)

  /**
   * Collective: writes this rank's `state` (through `codec`) as the next checkpoint epoch
   * and resolves to that epoch once the signed COMMIT is held. A state (or a codec whose
   * type) holding a socket, file handle, communicator, request or function is refused at
   * compile time; an open isend/irecv request on any rank fails the call on every rank
   * (H1624). A failed call ends the job (ABORT reason 5).
   */
  checkpoint<T>(
    state: NoInfer<CheckpointState<T>>,
    codec: Checkpointable<T> & Checkpointable<NoInfer<CheckpointState<T>>>,
  ): Promise<bigint> {
    return this.held(this.checkpoints.checkpoint(state as T, codec));
  }

  /**
   * Collective: the state of the newest epoch that every rank can load (a missing or
   * damaged file is fetched from the buddy), or null on a fresh start. A failed call ends
   * the job (ABORT reason 5) with the same code on every rank.
   */
  resume<T>(codec: Checkpointable<T> & Checkpointable<NoInfer<CheckpointState<T>>>): Promise<T | null> {
    return this.held(this.checkpoints.resume<T>(codec));
  }

  // -------------------------------------------------------------------------------------
  // Lifecycle

  /**
   * Leaves the job normally: later calls are refused (PLX_SPERLI_CLOSED), receives
   * still waiting end with that error (a collective still waiting too), the sends already
   * made are handed to the transport, and then the transport says BYE to every peer and
   * closes. After a failure it rejects with the failure.
   */
  finalize(): Promise<void> {
    if (this.finalizing !== undefined) return this.finalizing;
    if (this.failure !== undefined) return Promise.reject(this.failure);
    this.ended = new PlexusError(CLOSED, `rank ${this.rank} has finalized its communicator; no call can follow`, {
      reason: 'finalized',
    });
    this.stopReceives(this.ended);
    // Until BYE has gone to every peer and the connections are closed, the process stays.
    this.keepAlive.hold();
    this.finalizing = (async () => {
      try {
        await this.collectives.idle();
        await Promise.all(this.sendQueue);
        if (this.failure !== undefined) throw this.failure;
        await this.transport.close();
      } finally {
        this.keepAlive.release();
        this.keepAlive.stop();
      }
      this.finalizedListener?.();
    })();
    return this.finalizing;
  }

  /** `call`, with the process kept alive until it settles (it may wait for peers in many steps). */
  private held<T>(call: Promise<T>): Promise<T> {
    this.keepAlive.hold();
    return call.then(
      (v) => {
        this.keepAlive.release();
        return v;
      },
      (e: unknown) => {
        this.keepAlive.release();
        throw e;
      },
    );
  }

  private stopped(): PlexusError | undefined {
    return this.failure ?? this.ended;
  }

  private stopReceives(error: PlexusError): void {
    this.mailbox.fail(error);
    for (const q of this.collectiveFrames) q.fail(error);
    for (const q of this.checkpointFrames) q.fail(error);
  }

  /** The job has failed: every waiting and later call rejects with `error`. */
  private fail(error: PlexusError, notify = true): void {
    if (this.failure === undefined) {
      this.failure = error;
      this.stopReceives(error);
      this.keepAlive.stop();
    }
    if (notify) this.notifyFailure(this.failure);
  }

  /** Ends the job with ABORT `reason` (unless it has failed already); returns the job's failure. */
  private async abort(reason: number, error: PlexusError): Promise<PlexusError> {
    if (this.failure !== undefined) return this.failure;
    this.fail(error, false);
    try {
      await this.transport.abort(reason, error);
    } catch {
      // The job ends either way; the call rejects with its own error.
    }
    this.notifyFailure(error);
    return error;
  }

  private onFrame(peer: number, frame: TransportFrame): void {
    if (this.stopped() !== undefined) return;
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) return;
    if (frame.type === FrameType.DATA) this.mailbox.frame(peer, frame.tag, frame.payload);
    else if (frame.type === FrameType.COLLECTIVE) this.collectiveFrames[peer]!.push(frame.incoming ?? frame.payload);
    else this.checkpointFrames[peer]!.push(frame);
  }

  /**
   * Queues `job` behind every earlier send to `peer`; it does not run once the job has
   * failed. With `needsPeer` (a collective's or a checkpoint's frames), a peer that has
   * left with BYE fails the job (H1612 `lost-peer`, cause `left`) instead of the send
   * being refused alone.
   */
  private enqueue(peer: number, job: () => Promise<void>, needsPeer = false): Promise<void> {
    this.sendsOpen[peer]!++;
    this.keepAlive.hold();
    const p = this.sendQueue[peer]!.then(async () => {
      if (this.failure !== undefined) throw this.failure;
      if (!needsPeer) return job();
      if (this.left[peer]) throw await this.leftFailure(peer, 'a send of a collective or checkpoint');
      try {
        await job();
      } catch (e) {
        if (this.failure === undefined && this.left[peer]) {
          throw await this.leftFailure(peer, 'a send of a collective or checkpoint');
        }
        throw e;
      }
    });
    const settled = (): void => {
      this.sendsOpen[peer]!--;
      this.keepAlive.release();
    };
    this.sendQueue[peer] = p.then(settled, settled);
    return p;
  }

  // -------------------------------------------------------------------------------------
  // Peers that have left

  /** `peer` said BYE: a call that still needs a frame from it can never complete. */
  private peerLeft(peer: number): void {
    if (this.left[peer] || peer === this.rank) return;
    this.left[peer] = true;
    this.leftCount++;
    this.checkLeft();
  }

  /**
   * Fails the job (H1612 `lost-peer`, cause `left`, naming the peer) when a call waits
   * for a frame that only a peer that has left could send: a receive from it (from
   * ANY_SOURCE once every other rank has left), a collective's or a checkpoint's frame.
   */
  private checkLeft(): void {
    if (this.stopped() !== undefined) return;
    const everyOther = this.leftCount === this.size - 1;
    for (let r = 0; r < this.size; r++) {
      if (!this.left[r]) continue;
      let waiting: string | undefined;
      const source = this.mailbox.waitsFor(r, everyOther);
      if (source !== undefined) waiting = source === r ? `a receive from rank ${r}` : 'a receive from any rank';
      else if (this.collectiveFrames[r]!.waiting) waiting = 'a collective';
      else if (this.checkpointFrames[r]!.waiting) waiting = 'a checkpoint step';
      if (waiting !== undefined) {
        void this.leftFailure(r, waiting);
        return;
      }
    }
  }

  /** Ends the job because `peer` has left while `waiting` needs it; returns the job's failure. */
  private leftFailure(peer: number, waiting: string): Promise<PlexusError> {
    return this.abort(
      AbortReason.lostPeer,
      lostPeerError(peer, 'left', undefined, undefined, { rank: this.rank, waiting }),
    );
  }

  /**
   * A collective message of one small frame (collective header `head`, then `data`)
   * handed to the transport before this returns, when no earlier send to `peer` is still
   * queued and the transport can (`sendNow`); false when it cannot, and then nothing was
   * sent. Undefined when the transport took it with nothing to wait for; else a promise
   * that settles as sendCollective's would.
   */
  private sendCollectiveNow(peer: number, head: Uint8Array, data: Uint8Array): Promise<void> | undefined | false {
    const t = this.transport;
    if (t.sendNow === undefined || this.sendsOpen[peer] !== 0 || head.length + data.length > SEND_NOW_MAX) {
      return false;
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.left[peer]) return this.leftFailure(peer, 'a collective').then((e) => Promise.reject(e));
    return t.sendNow(peer, FrameType.COLLECTIVE, head, data);
  }

  /** sendCollective of bytes still being filled: each frame goes out as its bytes become final. */
  private sendCollectiveGrowing(peer: number, h: CollectiveHeader, source: GrowingBytes): Promise<void> {
    const t = this.transport;
    const head = encodeCollectiveHeader(h);
    const length = source.bytes.length;
    return this.enqueue(
      peer,
      async () => {
        for (let at = 0; ; ) {
          const end = Math.min(at + MAX_COLLECTIVE_DATA, length);
          const last = endsMessage(end - at, MAX_COLLECTIVE_DATA);
          if (t.sendGrowing !== undefined) await t.sendGrowing(peer, FrameType.COLLECTIVE, head, source, at, end, last);
          else {
            await source.until(end);
            const part = source.bytes.subarray(at, end);
            if (t.sendPrefixed !== undefined) await t.sendPrefixed(peer, FrameType.COLLECTIVE, 0, head, part);
            else await t.send(peer, FrameType.COLLECTIVE, 0, encodeCollective(h, part));
          }
          at = end;
          if (last) return;
          if (this.failure !== undefined) throw this.failure;
        }
      },
      true,
    );
  }

  private sendCollective(peer: number, h: CollectiveHeader, data: HeldBytes): Promise<void> {
    const t = this.transport;
    const head = encodeCollectiveHeader(h);
    return this.enqueue(
      peer,
      async () => {
        for (let at = 0; ; ) {
          const part = data.bytes.subarray(at, at + MAX_COLLECTIVE_DATA);
          if (t.sendPrefixed !== undefined) await t.sendPrefixed(peer, FrameType.COLLECTIVE, 0, head, part);
          else await t.send(peer, FrameType.COLLECTIVE, 0, encodeCollective(h, part));
          at += part.length;
          if (endsMessage(part.length, MAX_COLLECTIVE_DATA)) return;
          if (this.failure !== undefined) throw this.failure;
        }
      },
      true,
    );
  }
}
