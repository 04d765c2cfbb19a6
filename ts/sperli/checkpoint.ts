/**
 * SPERLI checkpoints and resume inside a rank (docs/sperli-checkpoints.md): the collective
 * `comm.checkpoint(state, codec)` writes every rank's state durably, gives each file to
 * the next rank as a buddy copy and ends with a COMMIT file that rank 0 signs with the
 * job key; `comm.resume(codec)` finds the newest epoch whose COMMIT verifies and whose
 * files load, fetching a missing or damaged file from its buddy.
 *
 * The state goes through a `Checkpointable<T>` codec. A state that holds a handle, a
 * socket, a file, the communicator, a request or a function has no checkpoint: the types
 * of `checkpoint` and `resume` refuse it at compile time (`CheckpointState<T>`).
 *
 * This module holds the public surface and the rules every call follows; the procedures
 * are in checkpoint-take.ts, checkpoint-resume.ts and checkpoint-load.ts, the files in
 * checkpoint-layout.ts and checkpoint-store.ts, the frames in checkpoint-frames.ts.
 */
import type { FileHandle } from 'node:fs/promises';
import type { Server, Socket } from 'node:net';
import type { JobDescription } from '../codec/sperli-jobdesc.js';
import { AbortReason, PUBLIC_KEY_LENGTH } from '../codec/sperli-payloads.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { CheckpointJob, CheckpointLink } from './checkpoint-frames.js';
import { CHECKPOINT_STATE, CommitShelf, JobLayout } from './checkpoint-layout.js';
import { resumeState } from './checkpoint-resume.js';
import { CHECKPOINT_IO, type CheckpointStore, fileStore } from './checkpoint-store.js';
import { takeCheckpoint } from './checkpoint-take.js';
import type { Comm, Request } from './comm.js';
import type { RankTransport } from './transport.js';

export type { CheckpointLink } from './checkpoint-frames.js';
export { CHECKPOINT_STATE } from './checkpoint-layout.js';
export { CHECKPOINT_IO, type CheckpointStore, fileStore, type PieceWriter } from './checkpoint-store.js';

/**
 * How a state becomes bytes and back. `decode` throws on cut or wrong input; it is only
 * given bytes whose SHA-256 has been checked against the signed COMMIT.
 */
export interface Checkpointable<T> {
  encode(value: T): Uint8Array;
  decode(bytes: Uint8Array): T;
}

/** Things that live only in this process: a state holding one has no checkpoint. */
type Resource = Socket | Server | FileHandle | Comm | Request<unknown> | RankTransport;

/** Values a state holds as they are. */
type Plain = string | number | bigint | boolean | symbol | null | undefined | ArrayBufferLike | ArrayBufferView | Date;

/**
 * `T` with every part that cannot be checkpointed replaced by `never`: sockets, servers,
 * file handles, the communicator, `isend`/`irecv` requests, transports, and functions
 * (so also objects with methods, promises and event emitters). Plain data, arrays,
 * tuples, Maps, Sets, Dates and typed arrays stay as they are. A value of `T` is
 * assignable to `CheckpointState<T>` exactly when it holds none of them, which is how
 * `checkpoint` and `resume` refuse such states at compile time.
 */
export type CheckpointState<T> = T extends Resource
  ? never
  : T extends (...args: never) => unknown
    ? never
    : T extends abstract new (
          ...args: never
        ) => unknown
      ? never
      : T extends Plain
        ? T
        : T extends ReadonlyMap<infer K, infer V>
          ? ReadonlyMap<CheckpointState<K>, CheckpointState<V>>
          : T extends ReadonlySet<infer V>
            ? ReadonlySet<CheckpointState<V>>
            : T extends object
              ? { [K in keyof T]: CheckpointState<T[K]> }
              : T;

/**
 * What a communicator needs to take and resume checkpoints; `checkpointContextOf` makes
 * it from the rank's job description.
 */
export interface CheckpointContext {
  /** The checkpoint directory; ranks may share it or each have their own. */
  readonly dir: string;
  /** The job id (16 bytes): files live under `<dir>/<job id in hex>/`. */
  readonly jobId: Uint8Array;
  /** The job's CompositeSig public key (1344 bytes): every rank verifies COMMIT files. */
  readonly publicKey: Uint8Array;
  /** The job's CompositeSig secret key: rank 0 signs COMMIT files with it; null on the other ranks. */
  readonly secretKey: Uint8Array | null;
  /** The disk operations (default: `fileStore`, node:fs with fsync). */
  readonly store?: CheckpointStore;
}

/** The checkpoint context of a rank: its job description and the checkpoint directory. */
export function checkpointContextOf(desc: JobDescription, dir: string, store?: CheckpointStore): CheckpointContext {
  return {
    dir,
    jobId: desc.jobId,
    publicKey: desc.jobPublicKey,
    secretKey: desc.jobSecretKey,
    ...(store === undefined ? {} : { store }),
  };
}

function badArgument(reason: string, message: string): PlexusError {
  return new PlexusError('PLX_SPERLI_BAD_ARGUMENT', message, { reason });
}

function checkContext(rank: number, c: CheckpointContext): void {
  if (typeof c.dir !== 'string' || c.dir.length === 0) {
    throw badArgument('checkpoint-dir', 'the checkpoint directory must be a non-empty path');
  }
  if (!(c.jobId instanceof Uint8Array) || c.jobId.length !== 16) {
    throw badArgument('job-id', 'the checkpoint context needs the 16-byte job id');
  }
  if (!(c.publicKey instanceof Uint8Array) || c.publicKey.length !== PUBLIC_KEY_LENGTH) {
    throw badArgument('public-key', `the checkpoint context needs the ${PUBLIC_KEY_LENGTH}-byte job public key`);
  }
  if (rank === 0 && !(c.secretKey instanceof Uint8Array)) {
    throw badArgument('secret-key', "rank 0 signs COMMIT files: its checkpoint context needs the job's secret key");
  }
}

function checkCodec(codec: unknown): asserts codec is Checkpointable<unknown> {
  const c = codec as Partial<Checkpointable<unknown>> | null | undefined;
  if (typeof c?.encode !== 'function' || typeof c?.decode !== 'function') {
    throw badArgument('codec', 'a checkpoint codec is an object with encode(value) and decode(bytes)');
  }
}

/**
 * The checkpoint calls of one communicator. Calls run one after another in the order
 * they were made (each is a collective call of every rank). A call that fails ends the
 * job: ABORT reason 2 for a refused checkpoint frame (H1610), reason 5 for everything
 * else; a call made after the job failed rejects with the job's failure.
 */
export class Checkpointer {
  private chain: Promise<unknown> = Promise.resolve();
  private readonly job: CheckpointJob | undefined;
  /** The newest epoch this rank knows to be committed (undefined until looked up). */
  private committed: bigint | undefined;

  constructor(
    private readonly link: CheckpointLink,
    context: CheckpointContext | undefined,
  ) {
    if (context === undefined) return;
    checkContext(link.rank, context);
    this.job = {
      link,
      rank: link.rank,
      size: link.size,
      layout: new JobLayout(context.dir, context.jobId),
      store: context.store ?? fileStore,
      check: { jobId: context.jobId, size: link.size, publicKey: context.publicKey },
      secretKey: context.secretKey,
    };
  }

  /** Takes a checkpoint of `state`; resolves to its epoch once this rank holds the COMMIT. */
  checkpoint<T>(state: T, codec: Checkpointable<T>): Promise<bigint> {
    return this.run(async (job) => {
      checkCodec(codec);
      const bytes = encodeState(state, codec);
      const epoch = await takeCheckpoint(job, bytes, () => this.lastCommitted(job));
      this.committed = epoch;
      return epoch;
    });
  }

  /** The state of the newest resumable epoch, or null on a fresh start. */
  resume<T>(codec: Checkpointable<T>): Promise<T | null> {
    return this.run(async (job) => {
      checkCodec(codec);
      const got = await resumeState(job, (bytes) => codec.decode(bytes));
      this.committed = got?.epoch ?? 0n;
      return got === null ? null : (got.state as T);
    });
  }

  private run<R>(body: (job: CheckpointJob) => Promise<R>): Promise<R> {
    const p = this.chain.then(() => this.guard(body));
    this.chain = p.catch(() => {});
    return p;
  }

  private async guard<R>(body: (job: CheckpointJob) => Promise<R>): Promise<R> {
    const stopped = this.link.stopped();
    if (stopped !== undefined) throw stopped;
    try {
      if (this.job === undefined) {
        throw badArgument(
          'checkpoint-dir',
          'no checkpoint directory: pass init({ checkpointDir }) or set SPERLI_CHECKPOINT_DIR (plexus sperli launch --checkpoint-dir)',
        );
      }
      return await body(this.job);
    } catch (e) {
      const now = this.link.stopped();
      if (now !== undefined && e === now) throw e;
      const error = isPlexusError(e)
        ? e
        : new PlexusError(
            CHECKPOINT_IO,
            `checkpoint failed: ${e instanceof Error ? e.message : String(e)}`,
            { op: 'checkpoint' },
            { cause: e },
          );
      const reason = error.code === 'H1610' ? AbortReason.protocolViolation : AbortReason.failedCheckpoint;
      await this.link.abort(reason, error);
      throw error;
    }
  }

  private async lastCommitted(job: CheckpointJob): Promise<bigint> {
    if (this.committed === undefined) {
      const shelf = new CommitShelf(job.store, job.layout, job.check);
      this.committed = (await shelf.next())?.epoch ?? 0n;
    }
    return this.committed;
  }
}

function encodeState<T>(state: T, codec: Checkpointable<T>): Uint8Array {
  let bytes: unknown;
  try {
    bytes = codec.encode(state);
  } catch (e) {
    throw new PlexusError(
      CHECKPOINT_STATE,
      `the codec could not encode the state: ${e instanceof Error ? e.message : String(e)}`,
      { reason: 'encode' },
      { cause: e },
    );
  }
  if (!(bytes instanceof Uint8Array)) {
    throw new PlexusError(CHECKPOINT_STATE, 'the codec must encode a state to a Uint8Array', { reason: 'encode' });
  }
  return bytes;
}
