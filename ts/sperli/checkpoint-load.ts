/**
 * Step 3 of a resume (docs/sperli-checkpoints.md, "Resume"), as one rank runs it for the
 * epoch rank 0 chose: load its own rank file, checked against its header and the COMMIT
 * entry; if that fails, ask its buddy with CKPT_DATA kind 1 and check what comes back
 * (kind 2 chunks, or kind 3 for "no valid copy"); else tell the buddy kind 4. At the same
 * time, answer the request (or kind 4) of the rank whose buddy copy it keeps. A file or
 * state that does not load is recorded as a failure for the outcome of the resume, not
 * thrown: the rank answers RESUME 2 and the resume goes on. A refused frame throws (H1610).
 *
 * A fetched file goes to the disk as it arrives, as a buddy copy does during a
 * checkpoint (checkpoint-take.ts, keepBuddyCopy): each piece of a chunk is copied into a
 * piece writer for the rank file's path as it comes off the connection, and into the
 * file's bytes in memory (the resume decodes the state from them). The writer's
 * temporary file takes the rank file's name only once the whole file has passed every
 * check against its header and the COMMIT; a file that does not is discarded.
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { decodeRankFile } from '../codec/sperli-files.js';
import { FrameType } from '../codec/sperli-frame.js';
import { ChunkReceiver, CkptDataKind } from '../codec/sperli-payloads.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import {
  buddyRank,
  type CheckpointJob,
  expectEpoch,
  expectFileOf,
  type FrameRouter,
  frameKey,
  orderError,
  sendFile,
  sendNotice,
  servedRank,
} from './checkpoint-frames.js';
import { CHECKPOINT_STATE, type HeldCommit, type ResumeFailure } from './checkpoint-layout.js';
import type { PieceWriter } from './checkpoint-store.js';
import { ChunkSink } from './checkpoint-take.js';

export const REQUEST = frameKey(FrameType.CKPT_DATA, CkptDataKind.request);
export const NEED_NOTHING = frameKey(FrameType.CKPT_DATA, CkptDataKind.needNothing);
export const ANSWER_CHUNK = frameKey(FrameType.CKPT_DATA, CkptDataKind.answerChunk);
export const NO_COPY = frameKey(FrameType.CKPT_DATA, CkptDataKind.noCopy);

export interface Attempt {
  readonly job: CheckpointJob;
  readonly router: FrameRouter;
  readonly epoch: bigint;
  /** The chosen COMMIT, or undefined when it did not verify on this rank. */
  readonly held: HeldCommit | undefined;
  readonly failures: ResumeFailure[];
}

/** Reads and checks the rank file (or buddy copy) of `rank` at `path` against the COMMIT. */
/** What rank `rank`'s file at the attempt's epoch must be: its identity and the COMMIT's hash of it. */
function expectedFile(a: Attempt, rank: number) {
  const { job, epoch } = a;
  return {
    jobId: job.check.jobId,
    epoch,
    rank,
    size: job.size,
    fileSha256: (a.held as HeldCommit).commit.hashes[rank] as Uint8Array,
  };
}

async function loadFile(a: Attempt, path: string, rank: number): Promise<{ file: Uint8Array; state: Uint8Array }> {
  const { job } = a;
  let file: Uint8Array | null;
  try {
    file = await job.store.read(path);
  } catch (e) {
    throw sperliError(SperliCode.rankFile, 'unreadable', `rank file refused: ${path} cannot be read`, { path }, e);
  }
  if (file === null) {
    throw sperliError(SperliCode.rankFile, 'missing', `rank file refused: ${path} does not exist`, { path });
  }
  return { file, state: decodeRankFile(file, expectedFile(a, rank)).state };
}

/**
 * The bytes of a file as its chunks arrive, in one buffer that grows with them: doubled
 * as needed (from 1 MiB), never past the total the chunks announce, so a total that is
 * not true costs no more memory than the bytes that came.
 */
class FileBytes {
  private buf = new Uint8Array(0);
  private length = 0;

  constructor(private readonly total: number) {}

  append(bytes: Uint8Array): void {
    const need = this.length + bytes.length;
    if (need > this.buf.length) {
      const cap = Math.min(this.total, Math.max(need, 2 * this.buf.length, 1 << 20));
      const grown = new Uint8Array(cap);
      grown.set(this.buf.subarray(0, this.length));
      this.buf = grown;
    }
    this.buf.set(bytes, this.length);
    this.length = need;
  }

  get bytes(): Uint8Array {
    return this.length === this.buf.length ? this.buf : this.buf.subarray(0, this.length);
  }
}

/**
 * This rank's state from the file its buddy keeps: kind 1, then kind 2 chunks (or kind
 * 3: no valid copy). Each piece of a chunk goes into the file's bytes and, at once, into
 * a piece writer for this rank's file (ChunkSink, as a buddy copy is kept); the file is
 * checked whole against its header and the COMMIT, and only a file that passes takes its
 * place on the disk (a failed disk write only leaves it out: the resume holds either
 * way). Undefined when the buddy has no copy or the file does not pass.
 */
async function fetchFromBuddy(a: Attempt): Promise<Uint8Array | undefined> {
  const { job, router, epoch } = a;
  const buddy = buddyRank(job);
  await sendNotice(job.link, buddy, CkptDataKind.request, job.rank, epoch);
  const rx = new ChunkReceiver();
  let file: FileBytes | undefined;
  let writer: PieceWriter | undefined;
  let sink: ChunkSink | undefined;
  const piece = (_at: number, bytes: Uint8Array): void => {
    (file as FileBytes).append(bytes);
    (sink as ChunkSink).take(bytes);
  };
  try {
    for (;;) {
      const f = await router.take(buddy, ANSWER_CHUNK, NO_COPY);
      expectEpoch(f, epoch);
      const d = expectFileOf(f, job.rank);
      if (d.kind === CkptDataKind.noCopy) {
        if (file !== undefined) {
          throw orderError(buddy, 'CKPT_DATA kind 3 came in the middle of a file', { rule: 'kind', kind: d.kind });
        }
        return undefined;
      }
      const complete = rx.accept(d);
      if (file === undefined) {
        file = new FileBytes(Number(d.total));
        writer = await job.store.begin(job.layout.rankFile(epoch, job.rank)).catch(() => undefined);
        // Without a writer (the disk refused it) the file is only kept in memory.
        sink = new ChunkSink(writer ?? DISCARD);
      }
      if (f.incoming !== undefined) await f.incoming.drain(piece);
      else piece(0, d.chunk);
      if (complete) break;
    }
  } catch (e) {
    await sink?.settled().catch(() => {});
    await writer?.discard();
    throw e;
  }
  const bytes = (file as FileBytes).bytes;
  let state: Uint8Array | undefined;
  try {
    state = decodeRankFile(bytes, expectedFile(a, job.rank)).state;
  } catch (e) {
    if (!isPlexusError(e)) throw e;
  }
  // Put the good file back in place; the resume holds either way.
  let kept = false;
  if (state !== undefined && writer !== undefined) {
    try {
      await (sink as ChunkSink).settled();
      await writer.commit();
      kept = true;
    } catch {
      // The file stays out of place; the state was loaded.
    }
  }
  if (!kept) {
    await sink?.settled().catch(() => {});
    await writer?.discard();
  }
  return state;
}

/** A piece writer that keeps nothing, for a fetched file the disk would not take. */
const DISCARD: PieceWriter = {
  write: async () => {},
  copy: () => {},
  commit: async () => {},
  discard: async () => {},
};

/** Answers the request of the rank this rank keeps a buddy copy for (or takes its kind 4). */
async function serve(a: Attempt): Promise<void> {
  const { job, router, epoch } = a;
  const served = servedRank(job);
  const f = await router.take(served, REQUEST, NEED_NOTHING);
  expectEpoch(f, epoch);
  const d = expectFileOf(f, served);
  if (d.kind === CkptDataKind.needNothing) return;
  let copy: Uint8Array | undefined;
  if (a.held !== undefined) {
    try {
      copy = (await loadFile(a, job.layout.buddyFile(epoch, served), served)).file;
    } catch (e) {
      if (!isPlexusError(e)) throw e;
    }
  }
  if (copy === undefined) await sendNotice(job.link, served, CkptDataKind.noCopy, served, epoch);
  else await sendFile(job.link, served, CkptDataKind.answerChunk, served, epoch, copy);
}

/** This rank's state bytes at epoch e: its own file, else the buddy's copy; undefined when neither loads. */
async function obtain(a: Attempt): Promise<Uint8Array | undefined> {
  const { job, epoch } = a;
  let ownError: PlexusError;
  if (a.held === undefined) {
    // The COMMIT did not verify here (recorded already): nothing can be checked.
    if (job.size > 1) await sendNotice(job.link, buddyRank(job), CkptDataKind.needNothing, job.rank, epoch);
    return undefined;
  }
  try {
    const own = await loadFile(a, job.layout.rankFile(epoch, job.rank), job.rank);
    if (job.size > 1) await sendNotice(job.link, buddyRank(job), CkptDataKind.needNothing, job.rank, epoch);
    return own.state;
  } catch (e) {
    if (!isPlexusError(e)) throw e;
    ownError = e;
  }
  if (job.size > 1) {
    const state = await fetchFromBuddy(a);
    if (state !== undefined) return state;
    a.failures.push({ epoch, error: ownError });
    return undefined;
  }
  // A job of one rank keeps its buddy copy beside its own file.
  const fetched = (await job.store.read(job.layout.buddyFile(epoch, job.rank)).catch(() => null)) ?? undefined;
  if (fetched !== undefined) {
    try {
      const state = decodeRankFile(fetched, expectedFile(a, job.rank)).state;
      // Put the good file back in place; the resume holds either way.
      await job.store.write(job.layout.rankFile(epoch, job.rank), fetched).catch(() => {});
      return state;
    } catch (e) {
      if (!isPlexusError(e)) throw e;
    }
  }
  a.failures.push({ epoch, error: ownError });
  return undefined;
}

/** Step 3 on this rank: the decoded state, or undefined (the failure is recorded). */
export async function attempt(
  a: Attempt,
  decode: (bytes: Uint8Array) => unknown,
): Promise<{ state: unknown } | undefined> {
  const [bytes] = await Promise.all([obtain(a), a.job.size > 1 ? serve(a) : undefined]);
  if (bytes === undefined) return undefined;
  try {
    return { state: decode(bytes) };
  } catch (e) {
    a.failures.push({
      epoch: a.epoch,
      error: new PlexusError(
        CHECKPOINT_STATE,
        `the codec could not decode the state of epoch ${a.epoch}: ${e instanceof Error ? e.message : String(e)}`,
        { reason: 'decode', epoch: a.epoch },
        { cause: e },
      ),
    });
    return undefined;
  }
}
