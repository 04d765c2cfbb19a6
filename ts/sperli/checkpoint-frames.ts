/**
 * The checkpoint frames of one checkpoint or resume call (docs/sperli-checkpoints.md):
 * what the procedure needs of the communicator (`CheckpointLink`), and a router that
 * hands each arriving checkpoint frame to the part of the procedure waiting for it.
 *
 * Several parts of one call wait on the same peer at once (with two ranks, a rank's
 * buddy is also the rank it serves, and rank 0 is both), so one pump per peer reads the
 * communicator's checkpoint queue and gives each frame to the first waiter it matches.
 * A frame that the call expects later waits in a stash; a frame the call never expects
 * from that peer (another type, another CKPT_DATA kind) is refused: H1610 `ckpt-order`,
 * and the call ends the job with ABORT reason 2.
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { FrameType, frameTypeName } from '../codec/sperli-frame.js';
import {
  CKPT_DATA_HEADER_SIZE,
  type CkptData,
  decodeCkptData,
  encodeCkptData,
  MAX_CHUNK,
} from '../codec/sperli-payloads.js';
import type { PlexusError } from '../core/errors.js';
import type { CommitCheck, JobLayout } from './checkpoint-layout.js';
import type { CheckpointStore } from './checkpoint-store.js';
import type { IncomingFrame } from './comm-stream.js';
import type { TransportFrame } from './transport.js';

/** What the checkpoint procedure needs of the communicator (comm.ts provides it). */
export interface CheckpointLink {
  readonly rank: number;
  readonly size: number;
  /** `isend`/`irecv` requests still open. */
  openRequests(): number;
  /** The job's failure, or the error of a finalized communicator; undefined while it runs. */
  stopped(): PlexusError | undefined;
  /** allreduce with `sum` over u64 (a collective call of the communicator). */
  allreduceSum(data: BigUint64Array): Promise<BigUint64Array>;
  /** barrier (a collective call of the communicator). */
  barrier(): Promise<void>;
  /**
   * Sends one checkpoint frame to `peer` after every earlier send to it; with `prefix`,
   * its payload is `prefix` followed by `payload`.
   */
  send(peer: number, type: number, payload: Uint8Array, epoch: bigint, prefix?: Uint8Array): Promise<void>;
  /** The next checkpoint frame from `peer`. */
  next(peer: number): Promise<TransportFrame>;
  /** Ends the job with ABORT `reason` (unless it has failed already). */
  abort(reason: number, error: PlexusError): Promise<unknown>;
}

/** Everything a checkpoint or resume call of one rank works with. */
export interface CheckpointJob {
  readonly link: CheckpointLink;
  readonly rank: number;
  readonly size: number;
  readonly layout: JobLayout;
  readonly store: CheckpointStore;
  /** Job id, size and public key, to verify COMMIT files. */
  readonly check: CommitCheck;
  /** Rank 0's job secret key (null on the other ranks). */
  readonly secretKey: Uint8Array | null;
}

/** The rank whose file this rank keeps as a buddy copy: (rank - 1) mod size. */
export function servedRank(job: CheckpointJob): number {
  return (job.rank + job.size - 1) % job.size;
}

/** This rank's buddy, which keeps a copy of its file: (rank + 1) mod size. */
export function buddyRank(job: CheckpointJob): number {
  return (job.rank + 1) % job.size;
}

/**
 * Sends `file` (the rank file of `rank`) to `peer` as CKPT_DATA frames of `kind` (0 or
 * 2): chunks of at most 1 MiB in order, each with the bytes sent before it as its offset
 * and the file's length as the total.
 */
export async function sendFile(
  link: CheckpointLink,
  peer: number,
  kind: number,
  rank: number,
  epoch: bigint,
  file: Uint8Array,
): Promise<void> {
  return sendFileParts(link, peer, kind, rank, epoch, EMPTY, file);
}

const EMPTY: Uint8Array = new Uint8Array(0);

/**
 * `sendFile` of the file `head` followed by `body`, without joining them: each chunk's
 * frame is its 24-byte CKPT_DATA header (and, for the first chunk, `head`) followed by a
 * view of `body`, so the file is never copied. At most SEND_AHEAD chunks are handed to
 * the connection before the earlier ones are taken.
 */
export async function sendFileParts(
  link: CheckpointLink,
  peer: number,
  kind: number,
  rank: number,
  epoch: bigint,
  head: Uint8Array,
  body: Uint8Array,
): Promise<void> {
  const length = head.length + body.length;
  const total = BigInt(length);
  const inFlight: Promise<void>[] = [];
  for (let at = 0; ; ) {
    const end = Math.min(at + MAX_CHUNK, length);
    const prefix = encodeCkptData({ kind, rank, offset: BigInt(at), total, chunk: EMPTY });
    let fromHead: Uint8Array = EMPTY;
    if (at < head.length) fromHead = head.subarray(at, Math.min(end, head.length));
    const first = fromHead.length > 0 ? joinBytes(prefix, fromHead) : prefix;
    const part = body.subarray(Math.max(0, at - head.length), end - head.length);
    const sent = link.send(peer, FrameType.CKPT_DATA, part, epoch, first);
    sent.catch(() => {}); // awaited below; a failure must not go unhandled meanwhile
    inFlight.push(sent);
    if (inFlight.length >= SEND_AHEAD) await inFlight.shift();
    at = end;
    if (at >= length) break;
  }
  await Promise.all(inFlight);
}

/** Chunks a file transfer hands to the connection ahead of the ones already taken. */
const SEND_AHEAD = 4;

function joinBytes(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Sends a CKPT_DATA frame without a chunk (kinds 1, 3 and 4) about the file of `rank`. */
export function sendNotice(link: CheckpointLink, peer: number, kind: number, rank: number, epoch: bigint) {
  const payload = encodeCkptData({ kind, rank, offset: 0n, total: 0n, chunk: new Uint8Array(0) });
  return link.send(peer, FrameType.CKPT_DATA, payload, epoch);
}

/** A checkpoint frame with its CKPT_DATA payload decoded. */
export interface RoutedFrame extends TransportFrame {
  readonly peer: number;
  /**
   * Set on CKPT_DATA frames. On a frame taken in pieces (`incoming` set), `chunk` only
   * stands for the chunk's length (its bytes are zeros): the bytes come through `incoming`.
   */
  readonly data?: CkptData;
}

/**
 * Zeros behind a CKPT_DATA header: a streamed frame's header is decoded as the payload
 * `header + zeros`, so every check of decodeCkptData sees the chunk's true length.
 */
let standIn: Uint8Array | undefined;

/** The CKPT_DATA header `head` of a frame whose chunk has `chunkLength` bytes, decoded and checked. */
function decodeStreamedHead(head: Uint8Array, chunkLength: number): CkptData {
  standIn ??= new Uint8Array(CKPT_DATA_HEADER_SIZE + MAX_CHUNK + 1);
  standIn.set(head);
  // A chunk above MAX_CHUNK is refused whatever its length: one byte more stands for it.
  return decodeCkptData(standIn.subarray(0, CKPT_DATA_HEADER_SIZE + Math.min(chunkLength, MAX_CHUNK + 1)));
}

/** The key a frame is routed by: its type, and for CKPT_DATA also its kind ("7:2"). */
export function frameKey(type: number, kind?: number): string {
  return kind === undefined ? String(type) : `${type}:${kind}`;
}

function keyOf(f: RoutedFrame): string {
  return f.data === undefined ? frameKey(f.type) : frameKey(f.type, f.data.kind);
}

interface Waiter {
  readonly keys: ReadonlySet<string>;
  resolve(f: RoutedFrame): void;
  reject(e: unknown): void;
}

interface PeerState {
  readonly stash: RoutedFrame[];
  readonly waiters: Waiter[];
  pumping: boolean;
  error: unknown;
}

/** H1610 `ckpt-order`: a checkpoint frame that this step of the procedure does not take. */
export function orderError(peer: number, message: string, details: Record<string, unknown> = {}): PlexusError {
  return sperliError(SperliCode.frame, 'ckpt-order', `checkpoint frame from rank ${peer} refused: ${message}`, {
    ...details,
    sourceRank: peer,
  });
}

export class FrameRouter {
  private readonly peers = new Map<number, PeerState>();

  /**
   * `expected(peer)` lists the keys that may arrive from `peer` during this call; any
   * other frame from it is refused. Frames of the keys in `inPieces` that arrive piece by
   * piece are handed on at their header, with `incoming` set, for their taker to drain;
   * any other frame is handed on whole.
   */
  constructor(
    private readonly link: CheckpointLink,
    private readonly expected: (peer: number) => ReadonlySet<string>,
    private readonly inPieces: ReadonlySet<string> = new Set(),
  ) {}

  /** The next frame from `peer` whose key is one of `keys`, in arrival order. */
  take(peer: number, ...keys: string[]): Promise<RoutedFrame> {
    const s = this.state(peer);
    if (s.error !== undefined) return Promise.reject(s.error);
    const want = new Set(keys);
    const i = s.stash.findIndex((f) => want.has(keyOf(f)));
    if (i >= 0) return Promise.resolve(s.stash.splice(i, 1)[0] as RoutedFrame);
    return new Promise<RoutedFrame>((resolve, reject) => {
      s.waiters.push({ keys: want, resolve, reject });
      if (!s.pumping) void this.pump(peer, s);
    });
  }

  private state(peer: number): PeerState {
    let s = this.peers.get(peer);
    if (s === undefined) {
      s = { stash: [], waiters: [], pumping: false, error: undefined };
      this.peers.set(peer, s);
    }
    return s;
  }

  private async pump(peer: number, s: PeerState): Promise<void> {
    s.pumping = true;
    try {
      while (s.waiters.length > 0) {
        const raw = await this.link.next(peer);
        const f = raw.incoming === undefined ? this.classify(peer, raw) : await this.classifyStreamed(peer, raw);
        const key = keyOf(f);
        const w = s.waiters.findIndex((x) => x.keys.has(key));
        if (w >= 0) (s.waiters.splice(w, 1)[0] as Waiter).resolve(f);
        else if (this.expected(peer).has(key)) s.stash.push(f);
        else {
          throw orderError(peer, `a ${describeKey(f)} frame is not expected from it at this step`, {
            type: f.type,
            kind: f.data?.kind,
          });
        }
      }
    } catch (e) {
      s.error = e;
      for (const w of s.waiters.splice(0)) w.reject(e);
    } finally {
      s.pumping = false;
    }
  }

  private classify(peer: number, f: TransportFrame): RoutedFrame {
    if (f.type !== FrameType.CKPT_DATA) return { ...f, peer };
    return { ...f, peer, data: decodeCkptData(f.payload) };
  }

  /**
   * A frame whose payload arrives piece by piece: its header decoded (and checked) as soon
   * as it is there; the frame is handed on with `incoming` if its key is taken in pieces,
   * or else gathered whole first.
   */
  private async classifyStreamed(peer: number, f: TransportFrame): Promise<RoutedFrame> {
    const incoming = f.incoming as IncomingFrame;
    const head = await incoming.header();
    if (f.type === FrameType.CKPT_DATA) {
      const data = decodeStreamedHead(head, incoming.dataLength);
      if (this.inPieces.has(frameKey(f.type, data.kind))) return { ...f, peer, data };
    }
    const payload = new Uint8Array(incoming.length);
    payload.set(head);
    await incoming.drain((at, chunk) => payload.set(chunk, head.length + at));
    return this.classify(peer, { type: f.type, tag: f.tag, epoch: f.epoch, payload });
  }
}

function describeKey(f: RoutedFrame): string {
  const name = frameTypeName(f.type);
  return f.data === undefined ? name : `${name} kind ${f.data.kind}`;
}

/** H1610 `ckpt-data` unless a CKPT_DATA frame is about the file of `rank`. */
export function expectFileOf(f: RoutedFrame, rank: number): CkptData {
  const d = f.data as CkptData;
  if (d.rank !== rank) {
    throw sperliError(
      SperliCode.frame,
      'ckpt-data',
      `CKPT_DATA refused: rank ${f.peer} sent kind ${d.kind} about the file of rank ${d.rank}; this step is about rank ${rank}'s`,
      { rule: 'rank', rank: d.rank, expected: rank, sourceRank: f.peer },
    );
  }
  return d;
}

/** H1610 `ckpt-order` unless `f` carries `epoch` in its header. */
export function expectEpoch(f: RoutedFrame, epoch: bigint): void {
  if (f.epoch !== epoch) {
    throw orderError(f.peer, `a ${describeKey(f)} frame carries epoch ${f.epoch}, this step is about epoch ${epoch}`, {
      rule: 'epoch',
      epoch: f.epoch,
      expected: epoch,
    });
  }
}
