/**
 * The collectives of a SPERLI rank (docs/sperli-comm.md): barrier, bcast, reduce,
 * allreduce, gather, scatter and the raw `bytes` exchange, all a star at the root as
 * the SPERLI protocol text has it. Calls run one at a time in the order they were made;
 * each takes the next sequence number when it is called, before its arguments are
 * checked, so a refused call still counts. Reduce arithmetic runs on the reduce kernels
 * of plexus/core, folded straight from the arriving pieces into the result
 * (reduce-fold.ts).
 *
 * This module knows nothing of connections: it sends and receives through a
 * CollectiveLink, which the communicator (comm.ts) provides.
 */

import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { endsMessage, MAX_COLLECTIVE_DATA } from '../codec/sperli-frame.js';
import {
  AbortReason,
  COLLECTIVE_HEADER_SIZE,
  type CollectiveHeader,
  CollectiveOp,
  CollectivePhase,
  decodeCollective,
  matchCollective,
} from '../codec/sperli-payloads.js';
import {
  backend,
  combine,
  ELEMENT_TYPE_NAMES,
  ELEMENT_WIDTH,
  ElementType,
  type ElementTypeName,
  elementTypeOf,
  isPlexusError,
  type PlexusError,
  REDUCE_OP_NAMES,
  ReduceOp,
  reduceAllowed,
} from '../core/index.js';
import { HeldBytes } from './comm-bytes.js';
import type { Taker } from './comm-queues.js';
import { IncomingFrame } from './comm-stream.js';
import { GrowingBytes } from './growing-bytes.js';
import { type FoldKind, PieceFold } from './reduce-fold.js';
import { SEND_NOW_MAX } from './transport.js';

/** A COLLECTIVE frame as the communicator queues it: whole, or still arriving. */
export type CollectiveItem = Uint8Array | IncomingFrame;

/** What the collectives need of the communicator. */
export interface CollectiveLink {
  readonly rank: number;
  readonly size: number;
  /** The job's failure, or the error of a finalized communicator; undefined while it runs. */
  stopped(): PlexusError | undefined;
  /**
   * Sends one collective message to `peer` as COLLECTIVE frames that all carry `header`
   * (split at MAX_COLLECTIVE_DATA), after every earlier send to that rank.
   */
  sendCollective(peer: number, header: CollectiveHeader, data: HeldBytes): Promise<void>;
  /** sendCollective of bytes still being filled: each part goes out as soon as it is final. */
  sendCollectiveGrowing(peer: number, header: CollectiveHeader, source: GrowingBytes): Promise<void>;
  /**
   * sendCollective of a message of one frame (the 16 header bytes `head`, then `data`,
   * at most SEND_NOW_MAX bytes together), handed to the transport before this returns,
   * both copied; false, with nothing sent, when it cannot be (an earlier send to `peer`
   * still waits, or the transport has no `sendNow`). Undefined when the transport took
   * it with nothing to wait for; else a promise whose rejection the caller handles.
   */
  sendCollectiveNow(peer: number, head: Uint8Array, data: Uint8Array): Promise<void> | undefined | false;
  /**
   * The next COLLECTIVE frame from `peer`, in arrival order: its whole payload, or a
   * large frame whose payload is still arriving (comm-stream.ts).
   */
  nextCollective(peer: number): Promise<CollectiveItem>;
  /** nextCollective when one is queued already (taken), else undefined. */
  pollCollective(peer: number): CollectiveItem | undefined;
  /**
   * Hands the next COLLECTIVE frame from `peer` to `taker` in the call that delivers it
   * (call it only when pollCollective found none); fails it at once when the job has
   * stopped.
   */
  waitCollective(peer: number, taker: Taker<CollectiveItem>): void;
  /** Puts back a frame taken from `peer`'s queue: it is the next one again. */
  unshiftCollective(peer: number, item: CollectiveItem): void;
  /** Ends the job with ABORT `reason`; resolves to the error the call rejects with. */
  abort(reason: number, error: PlexusError): Promise<PlexusError>;
  /**
   * A call began that may wait for peers: the communicator keeps the process alive until
   * the matching `release` (spin.ts, KeepAlive).
   */
  hold(): void;
  /** A call begun with `hold` has settled. */
  release(): void;
}

/** The arrays whose element type a reduce can tell from the array itself. */
export type ReduceArray =
  | Float64Array
  | Float32Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Uint8Array;

/** The array type of a reduce result: the type of the array passed in (Uint8Array for a DataView). */
export type Reduced<T> = T extends Float64Array
  ? Float64Array
  : T extends Float32Array
    ? Float32Array
    : T extends Int32Array
      ? Int32Array
      : T extends Uint32Array
        ? Uint32Array
        : T extends BigInt64Array
          ? BigInt64Array
          : T extends BigUint64Array
            ? BigUint64Array
            : T extends Int8Array
              ? Int8Array
              : T extends Int16Array
                ? Int16Array
                : T extends Uint16Array
                  ? Uint16Array
                  : T extends Uint8ClampedArray
                    ? Uint8ClampedArray
                    : Uint8Array;

/** The data a scatter root passes: `size` blocks of equal length, or one buffer cut into `size` such blocks. */
export type ScatterData = readonly ArrayBufferView[] | ArrayBufferView;

type ViewCtor = {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): ArrayBufferView;
  readonly BYTES_PER_ELEMENT: number;
};

/** Array types a result is given back as (the type of the input). */
const VIEW_TYPES: readonly ViewCtor[] = [
  Uint8Array,
  Float64Array,
  Float32Array,
  Int32Array,
  Uint32Array,
  BigInt64Array,
  BigUint64Array,
  Int8Array,
  Int16Array,
  Uint16Array,
  Uint8ClampedArray,
];

const EMPTY = new Uint8Array(0);
/**
 * Bytes of the result an allreduce root passes on at a time while it folds the last
 * contribution (whole elements of every type), and of the root's own array it folds at a
 * time when the root is not rank 0.
 */
const REDUCE_RUN = 256 * 1024;
/** An allreduce result from this size on is sent while the last contribution is still being folded. */
const STREAMED_RESULT = 32 * 1024;
/**
 * Reduce and allreduce data up to this many bytes (one frame each way) take the small
 * path (SmallReduce) when no other call is running.
 */
const SMALL_REDUCE = SEND_NOW_MAX - COLLECTIVE_HEADER_SIZE;
/**
 * a = a op b on the small path, by the process's backend like every reduction (the backend
 * switch, not the caller, picks WebAssembly or the TypeScript twin: docs/core.md).
 */
function foldSmall(a: Uint8Array, b: Uint8Array, op: number, type: number): void {
  backend().combine(a, b, op, type);
}
const noop = (): void => {};

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `a ${(v as object).constructor?.name ?? 'object'}`;
  return `a ${typeof v}`;
}

function refused(reason: string, message: string, details: Record<string, unknown> = {}): PlexusError {
  return sperliError(SperliCode.collectiveArgs, reason, message, details);
}

function bytesOf(v: unknown, what: string): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  throw refused('data', `${what} takes bytes (a Uint8Array or another typed array), got ${describe(v)}`);
}

function viewLike(like: ArrayBufferView, bytes: Uint8Array<ArrayBuffer>): ArrayBufferView {
  for (const C of VIEW_TYPES) {
    if (like instanceof C) return new C(bytes.buffer, bytes.byteOffset, bytes.byteLength / C.BYTES_PER_ELEMENT);
  }
  return bytes;
}

function typeCode(type: unknown): number {
  const code = typeof type === 'string' ? (ElementType as Record<string, number>)[type] : type;
  if (typeof code !== 'number' || !Number.isInteger(code) || code < 0 || code > 6) {
    throw refused(
      'type',
      `element type ${JSON.stringify(type) ?? String(type)} is not defined: use ${ELEMENT_TYPE_NAMES.join(', ')} or codes 0..6`,
      { type },
    );
  }
  return code;
}

function opCode(op: unknown): number {
  const code = typeof op === 'string' ? (ReduceOp as Record<string, number>)[op] : op;
  if (typeof code !== 'number' || !Number.isInteger(code) || code < 1 || code > 10) {
    throw refused(
      'op',
      `reduce operation ${JSON.stringify(op) ?? String(op)} is not defined: use ${REDUCE_OP_NAMES.join(', ')} or codes 1..10`,
      { op },
    );
  }
  return code;
}

interface ReduceArgs {
  readonly data: HeldBytes;
  readonly like: ArrayBufferView;
  readonly type: number;
  readonly op: number;
}

/**
 * The checks of reduce and allreduce that every rank makes alone (H1618): the element
 * type (from the array, or given), the operation, the pair, and a whole number of
 * elements.
 */
function reduceArgs(data: unknown, typeOrOp: unknown, op: unknown, what: string): ReduceArgs {
  if (!ArrayBuffer.isView(data)) {
    throw refused('data', `${what} takes a typed array, got ${describe(data)}`);
  }
  let type: number;
  let o: number;
  if (op === undefined) {
    const found = elementTypeOf(data);
    if (found === undefined) {
      throw refused(
        'type',
        `${what}: the element type of ${describe(data)} cannot be told from the array; pass it (${what}(..., data, type, op))`,
      );
    }
    type = found;
    o = opCode(typeOrOp);
  } else {
    type = typeCode(typeOrOp);
    o = opCode(op);
  }
  const typeName = ELEMENT_TYPE_NAMES[type] as ElementTypeName;
  if (!reduceAllowed(o, type)) {
    const hint = type === ElementType.u8 ? 'bytes take band, bor and bxor' : 'floats take sum, prod, min and max';
    throw refused('op-type', `${what}: ${REDUCE_OP_NAMES[o - 1]} is not defined on ${typeName} (${hint})`, {
      op: o,
      type,
    });
  }
  const width = ELEMENT_WIDTH[type] as number;
  if (data.byteLength % width !== 0) {
    throw refused(
      'length',
      `${what}: ${data.byteLength} bytes are not a whole number of ${width}-byte ${typeName} elements`,
      { length: data.byteLength, width },
    );
  }
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return { data: HeldBytes.of(bytes), like: data, type, op: o };
}

/**
 * `options.into` of allreduce (where the result goes, like MPI's receive buffer: an array of
 * data's kind and byte length that does not overlap it) checked against the call's data
 * (H1618 like every local argument).
 */
function intoOf(options: unknown, a: ReduceArgs, what: string): Into | undefined {
  if (options === undefined || options === null) return undefined;
  if (typeof options !== 'object')
    throw refused('options', `${what}: options must be an object, got ${describe(options)}`);
  const into = (options as { into?: unknown }).into;
  if (into === undefined) return undefined;
  if (!ArrayBuffer.isView(into) || !(into.buffer instanceof ArrayBuffer)) {
    throw refused('into', `${what}: into must be a typed array over an ArrayBuffer, got ${describe(into)}`);
  }
  if (into.constructor !== a.like.constructor) {
    throw refused('into', `${what}: into must be a ${a.like.constructor.name} like data, got ${describe(into)}`);
  }
  if (into.byteLength !== a.data.length) {
    throw refused(
      'into',
      `${what}: into holds ${into.byteLength} bytes and data ${a.data.length}; they must be equal`,
      {
        into: into.byteLength,
        length: a.data.length,
      },
    );
  }
  const d = a.data.bytes;
  if (
    into.buffer === d.buffer &&
    into.byteOffset < d.byteOffset + d.length &&
    d.byteOffset < into.byteOffset + into.byteLength
  ) {
    throw refused('into', `${what}: into overlaps data; give the result a buffer of its own`);
  }
  return { bytes: new Uint8Array(into.buffer, into.byteOffset, into.byteLength), view: into };
}

/** Where a reduce or allreduce puts its result when the caller gave `into`. */
interface Into {
  readonly bytes: Uint8Array<ArrayBuffer>;
  /** The caller's array itself: what the call resolves to. */
  readonly view: ArrayBufferView;
}

/** A small call's result (a new array; null on a non-root rank of reduce) copied into `into`. */
function copiedInto<T extends ArrayBufferView | null>(small: Promise<T>, into: Into): Promise<ArrayBufferView | T> {
  return small.then((r) => {
    if (r === null) return r;
    into.bytes.set(new Uint8Array(r.buffer, r.byteOffset, r.byteLength));
    return into.view;
  });
}

function header(
  op: number,
  phase: number,
  root: number,
  sequence: bigint,
  elementType = 0,
  reduceOp = 0,
): CollectiveHeader {
  return { op, elementType, reduceOp, phase, root, sequence };
}

function callName(h: CollectiveHeader): string {
  const name = Object.entries(CollectiveOp).find(([, c]) => c === h.op)?.[0] ?? `operation ${h.op}`;
  return `${name} #${h.sequence} (root ${h.root}, phase ${h.phase})`;
}

/** Splits the data of a scatter root into blocks, or says why it cannot be split. */
function scatterBlocks(data: unknown, size: number): HeldBytes[] | PlexusError {
  const bad = (message: string, details: Record<string, unknown> = {}) =>
    refused('scatter-blocks', `scatter at the root: ${message}`, details);
  if (Array.isArray(data)) {
    if (data.length !== size) return bad(`${data.length} blocks for ${size} ranks; pass one block per rank`);
    const blocks: HeldBytes[] = [];
    for (let i = 0; i < data.length; i++) {
      const b = data[i] as unknown;
      if (!ArrayBuffer.isView(b)) return bad(`block ${i} is ${describe(b)}, not bytes`, { block: i });
      blocks.push(HeldBytes.of(new Uint8Array(b.buffer, b.byteOffset, b.byteLength)));
    }
    const n = blocks[0]?.length ?? 0;
    const other = blocks.findIndex((b) => b.length !== n);
    if (other >= 0) {
      return bad(`block ${other} has ${blocks[other]?.length} bytes and block 0 has ${n}; blocks must be equal`, {
        block: other,
      });
    }
    return blocks;
  }
  if (!ArrayBuffer.isView(data)) return bad(`the data is ${describe(data)}, not bytes or an array of blocks`);
  if (data.byteLength % size !== 0) {
    return bad(`${data.byteLength} bytes are not a whole number of blocks for ${size} ranks`, {
      length: data.byteLength,
    });
  }
  const n = data.byteLength / size;
  const all = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return Array.from({ length: size }, (_, r) => HeldBytes.of(all.subarray(r * n, (r + 1) * n)));
}

/** A length fault: the error for a message that has (at least, when `more`) `got` bytes. */
type LengthFault = (got: number, more: boolean) => PlexusError;

export class Collectives {
  private seq = 0n;
  private chain: Promise<unknown> = Promise.resolve();
  /** Calls queued on `chain` that have not settled. */
  private queued = 0;
  private readonly settledOne = (): void => {
    this.queued--;
    this.link.release();
  };
  /**
   * The small call running outside `chain` (SmallReduce), while no call is queued on
   * `chain`; the first call queued after it waits for it.
   */
  small: SmallReduce | undefined;
  private readonly host: SmallHost;

  constructor(private readonly link: CollectiveLink) {
    this.host = {
      receiveResult: (root, h, length) => this.receiveExact(root, h, length, this.dataFault(root, h, length)),
      reduceRest: (h, own, type, op, from) => this.reduceAtRoot(h, own, type, op, undefined, from),
    };
  }

  /** Collective calls made so far (the sequence number of the last one). */
  get sequence(): bigint {
    return this.seq;
  }

  /** Settles once every call made so far has settled. */
  idle(): Promise<void> {
    const small = this.small;
    return (small !== undefined ? small.promise : this.chain).then(noop, noop);
  }

  /**
   * Takes the next sequence number, runs `prepare` (the checks every rank makes alone,
   * before anything is sent) and queues the runner it returns behind earlier calls; or,
   * when `prepare` started the call on the small path itself, returns that call.
   */
  private call<T>(prepare: (seq: bigint) => (() => Promise<T>) | Promise<T>): Promise<T> {
    const seq = ++this.seq;
    let run: () => Promise<T>;
    try {
      const stopped = this.link.stopped();
      if (stopped !== undefined) throw stopped;
      const r = prepare(seq);
      if (typeof r !== 'function') return r;
      run = r;
    } catch (e) {
      return Promise.reject(e);
    }
    if (this.small !== undefined) {
      this.chain = this.small.promise.then(noop, noop);
      this.small = undefined;
    }
    this.queued++;
    this.link.hold();
    const p = this.chain.then(() => {
      const stopped = this.link.stopped();
      if (stopped !== undefined) throw stopped;
      return run();
    });
    this.chain = p.then(this.settledOne, this.settledOne);
    return p;
  }

  /**
   * A reduce or allreduce on the small path (SmallReduce): data of at most SMALL_REDUCE
   * bytes and no other call running or queued. Undefined when it cannot start; nothing
   * was sent then.
   */
  private startSmall(
    op: number,
    root: number,
    seq: bigint,
    a: ReduceArgs,
  ): Promise<ArrayBufferView | null> | undefined {
    if (a.data.length > SMALL_REDUCE || this.queued !== 0 || this.small !== undefined) return undefined;
    const call = new SmallReduce(this, this.link, this.host, op, root, seq, a);
    if (!call.start()) return undefined;
    if (!call.settled) {
      this.small = call;
      call.hold();
    }
    return call.promise;
  }

  private root(root: unknown, what: string): number {
    const size = this.link.size;
    if (typeof root !== 'number' || !Number.isInteger(root) || root < 0 || root >= size) {
      throw refused('root', `${what}: root ${String(root)} is not a rank of this job (0..${size - 1})`, { root });
    }
    return root;
  }

  private others(root: number): number[] {
    const out: number[] = [];
    for (let r = 0; r < this.link.size; r++) if (r !== root) out.push(r);
    return out;
  }

  private toAll(root: number, h: CollectiveHeader, data: (r: number) => HeldBytes): Promise<void> {
    return Promise.all(this.others(root).map((r) => this.link.sendCollective(r, h, data(r)))).then(noop);
  }

  /**
   * One frame of the call from `peer`: its data (a whole frame), or the frame whose data
   * is still arriving, once its collective header has been checked; or the end of the
   * job (H1617, ABORT reason 3).
   */
  private async accept(peer: number, expected: CollectiveHeader): Promise<Uint8Array | IncomingFrame> {
    const item = await this.link.nextCollective(peer);
    const streamed = item instanceof IncomingFrame;
    const payload = streamed ? await item.header() : item;
    let got: ReturnType<typeof decodeCollective>;
    try {
      got = decodeCollective(payload);
      matchCollective(got.header, expected);
    } catch (e) {
      if (!isPlexusError(e)) throw e;
      const cut = e.code !== SperliCode.collectiveMismatch;
      const reason = cut ? 'cut' : String(e.details.reason);
      const message = cut
        ? `a COLLECTIVE frame from rank ${peer} has ${payload.length} bytes, fewer than its 16-byte collective header`
        : `${e.message} (frame from rank ${peer}; this rank is in ${callName(expected)})`;
      const error = sperliError(SperliCode.collectiveMismatch, reason, message, { ...e.details, rank: peer }, e);
      throw await this.link.abort(AbortReason.collectiveMismatch, error);
    }
    return streamed ? item : got.data;
  }

  /**
   * Receives one message of the call from `peer` that must have exactly `length` bytes.
   * With `write`, each frame's data is handed to it at its offset (a frame still arriving
   * piece by piece, as its pieces arrive); without, the message is returned (the frame's
   * own bytes when it came whole in one frame). Another length ends the job with `fault`
   * (ABORT reason 3), checked before any byte of the frame is used.
   */
  private async receiveExact(
    peer: number,
    h: CollectiveHeader,
    length: number,
    fault: LengthFault,
    write?: (at: number, chunk: Uint8Array) => void,
  ): Promise<Uint8Array> {
    let out: Uint8Array | undefined;
    let at = 0;
    for (;;) {
      const data = await this.accept(peer, h);
      const streamed = data instanceof IncomingFrame;
      const n = streamed ? data.dataLength : data.length;
      const last = endsMessage(n, MAX_COLLECTIVE_DATA);
      const end = at + n;
      if (end > length || (last && end !== length)) {
        throw await this.link.abort(AbortReason.collectiveMismatch, fault(end, !last));
      }
      if (streamed) {
        const base = at;
        if (write !== undefined) await data.drain((off, chunk) => write(base + off, chunk));
        else {
          const o = out ?? filledLater(length);
          out = o;
          await data.drain((off, chunk) => o.set(chunk, base + off));
        }
      } else if (write !== undefined) {
        if (data.length > 0) write(at, data);
      } else if (last && at === 0) {
        return data;
      } else {
        out ??= filledLater(length);
        out.set(data, at);
      }
      at = end;
      if (last) return out ?? EMPTY;
    }
  }

  /** Receives one message of the call from `peer`, of any length. */
  private async receiveAny(peer: number, h: CollectiveHeader): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    let total = 0;
    for (;;) {
      const item = await this.accept(peer, h);
      let data: Uint8Array;
      if (item instanceof IncomingFrame) {
        const buf = filledLater(item.dataLength);
        await item.drain((off, chunk) => buf.set(chunk, off));
        data = buf;
      } else data = item;
      if (parts.length === 0 && endsMessage(data.length, MAX_COLLECTIVE_DATA)) return data;
      parts.push(data);
      total += data.length;
      if (endsMessage(data.length, MAX_COLLECTIVE_DATA)) break;
    }
    const out = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  private dataFault(peer: number, h: CollectiveHeader, length: number): LengthFault {
    return (got, more) =>
      sperliError(
        SperliCode.collectiveMismatch,
        'data-length',
        `${callName(h)}: rank ${peer} sent ${more ? 'more than ' : ''}${got} bytes where ${length} belong`,
        { rank: peer, got, expected: length },
      );
  }

  /**
   * The reduction at the root: the contributions in ascending rank order, the root's own
   * value as its rank's (the first contribution is the left operand), each folded
   * straight from the pieces of its frames into the result as they arrive (reduce-fold.ts:
   * no staging copy, and the result is the accumulator). Contributions of another length
   * than the root's end the job (H1618, ABORT reason 3), checked before any byte of a
   * frame is used. With `out` (an allreduce), the result is out's buffer, and each run of
   * it is passed on as soon as the last contribution has been folded into it; its last
   * byte only once the whole reduction has succeeded.
   */
  private async reduceAtRoot(
    h: CollectiveHeader,
    own: HeldBytes,
    type: number,
    op: number,
    out?: GrowingBytes,
    from?: SmallRest,
  ): Promise<Uint8Array<ArrayBuffer>> {
    const length = own.length;
    const size = this.link.size;
    const result = from?.result ?? (out?.bytes as Uint8Array<ArrayBuffer> | undefined) ?? filledLater(length);
    // Rank 0's contribution: the root's own array waits to be the left operand of rank 1's fold.
    let ownFirst = from?.ownFirst ?? h.root === 0;
    for (let r = from?.rank ?? 0; r < size; r++) {
      if (r === h.root) {
        if (r !== 0) foldOwn(result, own, op, type);
        continue;
      }
      const kind: FoldKind = r === 0 ? 'copy' : ownFirst ? 'seed' : 'fold';
      ownFirst = false;
      const fold = new PieceFold(result, kind, type, op, own);
      const streams = out !== undefined && r === size - 1;
      let released = 0;
      await this.receiveExact(r, h, length, this.contributionFault(h, r, length), (_at, chunk) => {
        fold.piece(chunk);
        if (streams && fold.folded - released >= REDUCE_RUN) {
          released = fold.folded;
          out.advance(released);
        }
      });
    }
    if (ownFirst) result.set(own.bytes);
    out?.complete();
    return result;
  }

  private contributionFault(h: CollectiveHeader, r: number, length: number): LengthFault {
    return (got, more) =>
      sperliError(
        SperliCode.collectiveArgs,
        'contribution-length',
        `${callName(h)}: rank ${r} contributed ${more ? 'more than ' : ''}${got} bytes and the root ${length}; every rank must contribute the same number of elements`,
        { rank: r, got, expected: length },
      );
  }

  /** Every rank waits until every rank has called it. Root 0. */
  barrier(): Promise<void> {
    return this.call((seq) => async () => {
      const up = header(CollectiveOp.barrier, CollectivePhase.toRoot, 0, seq);
      const down = header(CollectiveOp.barrier, CollectivePhase.fromRoot, 0, seq);
      const none = HeldBytes.of(EMPTY);
      if (this.link.rank === 0) {
        for (const r of this.others(0)) await this.receiveExact(r, up, 0, this.dataFault(r, up, 0));
        await this.toAll(0, down, () => none);
        return;
      }
      await Promise.all([
        this.link.sendCollective(0, up, none),
        this.receiveExact(0, down, 0, this.dataFault(0, down, 0)),
      ]);
    });
  }

  /** The root's bytes on every rank (the root gets its own bytes back; the others' `data` is not used). */
  bcast(root: number, data?: ArrayBufferView): Promise<Uint8Array> {
    return this.call((seq) => {
      const r0 = this.root(root, 'bcast');
      const h = header(CollectiveOp.bcast, CollectivePhase.fromRoot, r0, seq);
      if (this.link.rank !== r0) return () => this.receiveAny(r0, h);
      const held = HeldBytes.of(bytesOf(data, 'bcast at the root'));
      return async () => {
        await this.toAll(r0, h, () => held);
        return held.bytes;
      };
    });
  }

  /**
   * Reduces every rank's array into the root's result; the other ranks get null. With
   * `options.into` (checked on every rank, used at the root) the root's result goes there.
   */
  reduce(
    root: number,
    data: ArrayBufferView,
    typeOrOp: unknown,
    op?: unknown,
    options?: unknown,
  ): Promise<ArrayBufferView | null> {
    return this.call((seq) => {
      const r0 = this.root(root, 'reduce');
      const a = reduceArgs(data, typeOrOp, op, 'reduce');
      const into = intoOf(options, a, 'reduce');
      const small = this.startSmall(CollectiveOp.reduce, r0, seq, a);
      if (small !== undefined) return into === undefined ? small : copiedInto(small, into);
      const h = header(CollectiveOp.reduce, CollectivePhase.toRoot, r0, seq, a.type, a.op);
      if (this.link.rank !== r0) {
        return async () => {
          await this.link.sendCollective(r0, h, a.data);
          return null;
        };
      }
      if (into === undefined) return async () => viewLike(a.like, await this.reduceAtRoot(h, a.data, a.type, a.op));
      return async () => {
        await this.reduceAtRoot(h, a.data, a.type, a.op, new GrowingBytes(into.bytes));
        return into.view;
      };
    });
  }

  /**
   * Reduces every rank's array at rank 0 and gives the result to every rank; with
   * `options.into`, in that array (resolving to it) instead of a new one.
   */
  allreduce(data: ArrayBufferView, typeOrOp: unknown, op?: unknown, options?: unknown): Promise<ArrayBufferView> {
    return this.call((seq) => {
      const a = reduceArgs(data, typeOrOp, op, 'allreduce');
      const into = intoOf(options, a, 'allreduce');
      const small = this.startSmall(CollectiveOp.allreduce, 0, seq, a) as Promise<ArrayBufferView> | undefined;
      if (small !== undefined) return into === undefined ? small : copiedInto(small, into);
      const up = header(CollectiveOp.allreduce, CollectivePhase.toRoot, 0, seq, a.type, a.op);
      const down = header(CollectiveOp.allreduce, CollectivePhase.fromRoot, 0, seq, a.type, a.op);
      if (this.link.rank === 0) {
        return async () => {
          const length = a.data.length;
          if (length < STREAMED_RESULT || this.link.size === 1) {
            const result = await this.reduceAtRoot(
              up,
              a.data,
              a.type,
              a.op,
              into === undefined ? undefined : new GrowingBytes(into.bytes),
            );
            const held = HeldBytes.of(result);
            await this.toAll(0, down, () => held);
            return into === undefined ? viewLike(a.like, result) : into.view;
          }
          // The result goes out run by run while the last contribution is still arriving:
          // sending overlaps receiving, and nothing is sent before it is final.
          const out = new GrowingBytes(into?.bytes ?? filledLater(length));
          const sending = Promise.all(this.others(0).map((r) => this.link.sendCollectiveGrowing(r, down, out)));
          sending.catch(noop);
          try {
            await this.reduceAtRoot(up, a.data, a.type, a.op, out);
          } catch (e) {
            out.fail(e);
            throw e;
          }
          await sending;
          return into === undefined ? viewLike(a.like, out.bytes as Uint8Array<ArrayBuffer>) : into.view;
        };
      }
      return async () => {
        const length = a.data.length;
        const fault = this.dataFault(0, down, length);
        if (into !== undefined) {
          await Promise.all([
            this.link.sendCollective(0, up, a.data),
            this.receiveExact(0, down, length, fault, (at, chunk) => into.bytes.set(chunk, at)),
          ]);
          return into.view;
        }
        const [, result] = await Promise.all([
          this.link.sendCollective(0, up, a.data),
          this.receiveExact(0, down, length, fault),
        ]);
        return viewLike(a.like, ownAligned(result));
      };
    });
  }

  /** The root gets every rank's block (all of one length), in rank order; the others get null. */
  gather(root: number, data: ArrayBufferView): Promise<Uint8Array[] | null> {
    return this.call((seq) => {
      const r0 = this.root(root, 'gather');
      const held = HeldBytes.of(bytesOf(data, 'gather'));
      const h = header(CollectiveOp.gather, CollectivePhase.toRoot, r0, seq);
      if (this.link.rank !== r0) {
        return async () => {
          await this.link.sendCollective(r0, h, held);
          return null;
        };
      }
      return async () => {
        const length = held.length;
        const blocks: Uint8Array[] = [];
        for (let r = 0; r < this.link.size; r++) {
          if (r === r0) {
            blocks.push(held.bytes);
            continue;
          }
          const fault: LengthFault = (got, more) =>
            sperliError(
              SperliCode.collectiveMismatch,
              'block-length',
              `${callName(h)}: rank ${r} sent a block of ${more ? 'more than ' : ''}${got} bytes and the root's has ${length}; gather blocks must be of one length`,
              { rank: r, got, expected: length },
            );
          blocks.push(await this.receiveExact(r, h, length, fault));
        }
        return blocks;
      };
    });
  }

  /**
   * Each rank gets its block of the root's data: `size` equal blocks, or one buffer cut
   * into `size` equal blocks. The others' `data` is not used. Data at the root that
   * cannot be cut so ends the job (H1618 at the root, ABORT reason 4).
   */
  scatter(root: number, data?: ScatterData): Promise<Uint8Array> {
    return this.call((seq) => {
      const r0 = this.root(root, 'scatter');
      const h = header(CollectiveOp.scatter, CollectivePhase.fromRoot, r0, seq);
      if (this.link.rank !== r0) return () => this.receiveAny(r0, h);
      const blocks = scatterBlocks(data, this.link.size);
      return async () => {
        if (!Array.isArray(blocks)) throw await this.link.abort(AbortReason.badScatter, blocks);
        await this.toAll(r0, h, (r) => blocks[r] as HeldBytes);
        return (blocks[r0] as HeldBytes).bytes;
      };
    });
  }

  /**
   * The raw exchange: every rank sends its bytes (any length, lengths may differ) to the
   * root, which gets them all in rank order; the others get null.
   */
  bytes(root: number, data: ArrayBufferView): Promise<Uint8Array[] | null> {
    return this.call((seq) => {
      const r0 = this.root(root, 'bytes');
      const held = HeldBytes.of(bytesOf(data, 'bytes'));
      const h = header(CollectiveOp.bytes, CollectivePhase.toRoot, r0, seq);
      if (this.link.rank !== r0) {
        return async () => {
          await this.link.sendCollective(r0, h, held);
          return null;
        };
      }
      return async () => {
        const all: Uint8Array[] = [];
        for (let r = 0; r < this.link.size; r++) all.push(r === r0 ? held.bytes : await this.receiveAny(r, h));
        return all;
      };
    });
  }
}

/** Where a reduction at the root goes on from: the next rank, the result so far. */
interface SmallRest {
  readonly rank: number;
  readonly result: Uint8Array<ArrayBuffer>;
  readonly ownFirst: boolean;
}

/** The general code a small call hands over to when a frame is not the one it expects. */
interface SmallHost {
  /** Receives the result from `root` (its frame was put back first), with every check of the general path. */
  receiveResult(root: number, h: CollectiveHeader, length: number): Promise<Uint8Array>;
  /** Goes on with the reduction at the root from `from.rank` on (that rank's frame was put back first). */
  reduceRest(
    h: CollectiveHeader,
    own: HeldBytes,
    type: number,
    op: number,
    from: SmallRest,
  ): Promise<Uint8Array<ArrayBuffer>>;
}

/**
 * One reduce or allreduce of at most SMALL_REDUCE bytes, run while no other call runs:
 * every message is one frame, written at once (`sendCollectiveNow`: no send queue, no
 * promise per step), and each frame it waits for is handed over in the call that
 * delivers it (`waitCollective`), so a rank goes from the frame's arrival to the result
 * without a promise in between, and the call's own promise is the only one its caller
 * waits on. The rules are the general path's: the arguments were checked (reduceArgs)
 * before anything is sent, the sequence number was taken at the call, contributions are
 * folded in ascending rank order with the root's own array at its rank (foldSmall). A frame is taken only when it is exactly the one
 * expected (header bytes equal to the call's, one whole frame of the call's length);
 * any other frame is put back and the general code (receiveExact, reduceAtRoot) takes it
 * from there, with its checks, errors and ABORT.
 */
class SmallReduce implements Taker<CollectiveItem> {
  readonly promise: Promise<ArrayBufferView | null>;
  settled = false;
  /** The call holds the process alive (see `hold`). */
  private held = false;
  private resolve!: (v: ArrayBufferView | null) => void;
  private reject!: (e: unknown) => void;
  /** The call's collective header with phase 1 (towards the root). */
  private readonly head = new Uint8Array(COLLECTIVE_HEADER_SIZE);
  private readonly length: number;
  /** At the root: the next rank whose contribution is folded, and the result so far. */
  private rank = 0;
  private result: Uint8Array<ArrayBuffer> = EMPTY as Uint8Array<ArrayBuffer>;
  private ownFirst: boolean;

  constructor(
    private readonly owner: Collectives,
    private readonly link: CollectiveLink,
    private readonly host: SmallHost,
    private readonly op: number,
    private readonly root: number,
    private readonly seq: bigint,
    private readonly a: ReduceArgs,
  ) {
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.length = a.data.length;
    this.ownFirst = root === 0;
    const h = this.head;
    h[0] = op;
    h[1] = a.type;
    h[2] = a.op;
    h[3] = CollectivePhase.toRoot;
    h[4] = root & 0xff;
    h[5] = (root >>> 8) & 0xff;
    h[6] = (root >>> 16) & 0xff;
    h[7] = root >>> 24;
    if (seq <= 0xffff_ffffn) {
      const n = Number(seq);
      h[8] = n & 0xff;
      h[9] = (n >>> 8) & 0xff;
      h[10] = (n >>> 16) & 0xff;
      h[11] = n >>> 24;
    } else new DataView(h.buffer).setBigUint64(8, seq, true);
  }

  /** A send that was still handed over when it settles: the call fails if it fails (after the job has, in practice). */
  private watch(sent: Promise<void>): void {
    sent.then(undefined, (e: unknown) => this.fail(e));
  }

  /** Starts the call; false when it cannot run on the small path (nothing was sent). */
  start(): boolean {
    if (this.link.rank === this.root) {
      this.step();
      return true;
    }
    const sent = this.link.sendCollectiveNow(this.root, this.head, this.a.data.bytes);
    if (sent === false) return false;
    if (this.op === CollectiveOp.reduce) {
      // The general path's reduce ends at a non-root once its contribution is handed over.
      if (sent === undefined) this.done(null);
      else
        sent.then(
          () => this.done(null),
          (e: unknown) => this.fail(e),
        );
      return true;
    }
    if (sent !== undefined) this.watch(sent);
    const item = this.link.pollCollective(this.root);
    if (item !== undefined) this.take(item);
    else this.link.waitCollective(this.root, this);
    return true;
  }

  /** Taker: the frame waited for (called by the transport's delivery: it must not throw). */
  item(item: CollectiveItem): void {
    try {
      this.take(item);
    } catch (e) {
      this.fail(e);
    }
  }

  private take(item: CollectiveItem): void {
    if (this.link.rank !== this.root) {
      if (!this.expected(item, CollectivePhase.fromRoot)) {
        this.link.unshiftCollective(this.root, item);
        this.host.receiveResult(this.root, this.header(CollectivePhase.fromRoot), this.length).then(
          (r) => this.done(viewLike(this.a.like, ownAligned(r))),
          (e) => this.fail(e),
        );
        return;
      }
      const p = item as Uint8Array;
      const r = new Uint8Array(p.buffer, p.byteOffset + COLLECTIVE_HEADER_SIZE, this.length);
      this.done(viewLike(this.a.like, ownAligned(r)));
      return;
    }
    if (this.fold(item)) {
      this.rank++;
      this.step();
    }
  }

  /** Taker: the job failed or ended while the call waited. */
  fail(error: unknown): void {
    if (this.settled) return;
    this.settle();
    this.reject(error);
  }

  private done(v: ArrayBufferView | null): void {
    if (this.settled) return;
    this.settle();
    this.resolve(v);
  }

  private settle(): void {
    this.settled = true;
    if (this.owner.small === this) this.owner.small = undefined;
    if (this.held) {
      this.held = false;
      this.link.release();
    }
  }

  /** Holds the process alive (CollectiveLink.hold) until the call settles. */
  hold(): void {
    if (this.settled || this.held) return;
    this.held = true;
    this.link.hold();
  }

  /** At the root: folds every contribution already queued, in rank order, then waits for the next. */
  private step(): void {
    const size = this.link.size;
    if (this.rank === 0) this.result = new Uint8Array(this.length);
    for (; this.rank < size; this.rank++) {
      const r = this.rank;
      if (r === this.root) {
        // The root's own array at its rank: the left operand of the next fold, or folded now.
        if (r !== 0) foldSmall(this.result, this.a.data.bytes, this.a.op, this.a.type);
        continue;
      }
      const item = this.link.pollCollective(r);
      if (item === undefined) {
        this.link.waitCollective(r, this);
        return;
      }
      if (!this.fold(item)) return;
    }
    if (this.ownFirst) this.result.set(this.a.data.bytes);
    this.finish();
  }

  /**
   * Folds rank `this.rank`'s contribution into the result; false when the frame is not
   * the expected one, which the general code then takes over with the rest of the call.
   */
  private fold(item: CollectiveItem): boolean {
    if (!this.expected(item, CollectivePhase.toRoot)) {
      this.link.unshiftCollective(this.rank, item);
      void this.rest();
      return false;
    }
    const p = item as Uint8Array;
    const data = new Uint8Array(p.buffer, p.byteOffset + COLLECTIVE_HEADER_SIZE, this.length);
    const result = this.result;
    if (this.rank === 0) result.set(data);
    else {
      if (this.ownFirst) result.set(this.a.data.bytes);
      foldSmall(result, data, this.a.op, this.a.type);
    }
    this.ownFirst = false;
    return true;
  }

  /** The reduction from `this.rank` on through the general code, then the end of the call. */
  private async rest(): Promise<void> {
    try {
      const from: SmallRest = { rank: this.rank, result: this.result, ownFirst: this.ownFirst };
      const h = this.header(CollectivePhase.toRoot);
      this.result = await this.host.reduceRest(h, this.a.data, this.a.type, this.a.op, from);
      this.finish();
    } catch (e) {
      this.fail(e);
    }
  }

  /** The result at the root: returned (reduce), or first sent to every other rank (allreduce). */
  private finish(): void {
    const result = this.result;
    if (this.op === CollectiveOp.allreduce) {
      const head = this.head;
      head[3] = CollectivePhase.fromRoot;
      let queued: Promise<void>[] | undefined;
      for (let r = 0; r < this.link.size; r++) {
        if (r === this.root) continue;
        const sent = this.link.sendCollectiveNow(r, head, result);
        if (sent === false) {
          const h = this.header(CollectivePhase.fromRoot);
          (queued ??= []).push(this.link.sendCollective(r, h, HeldBytes.of(result)));
        } else if (sent !== undefined) (queued ??= []).push(sent);
      }
      if (queued !== undefined) {
        // Sends still on their way: the call ends once they have been handed over, as on the general path.
        Promise.all(queued).then(
          () => this.done(viewLike(this.a.like, result)),
          (e: unknown) => this.fail(e),
        );
        return;
      }
    }
    this.done(viewLike(this.a.like, result));
  }

  /** Whether `item` is the call's frame of `phase`: one whole frame, header bytes equal to the call's. */
  private expected(item: CollectiveItem, phase: number): boolean {
    if (item instanceof IncomingFrame || item.length !== COLLECTIVE_HEADER_SIZE + this.length) return false;
    const h = this.head;
    if (item[3] !== phase) return false;
    for (let i = 0; i < COLLECTIVE_HEADER_SIZE; i++) if (i !== 3 && item[i] !== h[i]) return false;
    return true;
  }

  /** The call's collective header of `phase` for the general code. */
  private header(phase: number): CollectiveHeader {
    return header(this.op, phase, this.root, this.seq, this.a.type, this.a.op);
  }
}

/** result = result op own, a run at a time (the root's own value, when the root is not rank 0). */
function foldOwn(result: Uint8Array, own: HeldBytes, op: number, type: number): void {
  for (let at = 0; at < result.length; at += REDUCE_RUN) {
    const end = Math.min(at + REDUCE_RUN, result.length);
    combine(result.subarray(at, end), own.bytes.subarray(at, end), op, type);
  }
}

/**
 * A new array of `length` bytes that the caller writes in full before anyone reads it
 * (a message received at its known length, a reduction result). Large ones are not
 * zeroed first: a fresh zeroed 16 MiB array costs a page fault per 4 KiB on first
 * touch, where memory the allocator hands out again does not. It is never shared with
 * other arrays (its own ArrayBuffer, from byte 0).
 */
function filledLater(length: number): Uint8Array<ArrayBuffer> {
  if (length < 65536) return new Uint8Array(length);
  const b = Buffer.allocUnsafeSlow(length);
  return new Uint8Array(b.buffer as ArrayBuffer, b.byteOffset, length);
}

/**
 * The bytes themselves when they start on an 8-byte boundary of an ArrayBuffer (so any
 * typed array can view them), else a copy that does.
 */
function ownAligned(b: Uint8Array): Uint8Array<ArrayBuffer> {
  if (b.buffer instanceof ArrayBuffer && b.byteOffset % 8 === 0) return b as Uint8Array<ArrayBuffer>;
  const out = new Uint8Array(b.length);
  out.set(b);
  return out;
}
