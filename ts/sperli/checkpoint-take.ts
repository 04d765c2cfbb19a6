/**
 * The collective checkpoint (docs/sperli-checkpoints.md, "The procedure"), as one rank
 * runs it:
 *
 * 0. Agreement: an allreduce (u64 sum) of 2 x size slots: slot r = rank r's open
 *    `isend`/`irecv` requests, slot size + r = the newest epoch rank r knows committed.
 *    Every rank so learns every rank's count: if any is open, every rank passes a barrier
 *    (so each knows before anyone aborts), sends ABORT reason 5 and rejects with H1624.
 *    Otherwise the new epoch is e = the highest committed epoch + 1, on every rank.
 * 1. Rank 0 removes an old COMMIT of epoch e and sends CKPT_BEGIN(version 1, size) with
 *    header epoch e to every rank; a rank refuses another version, size or epoch.
 * 2. Each rank removes its own old copy of COMMIT e, writes rank-<n>.ckpt durably and
 *    sends CKPT_ACK with the file's SHA-256 to rank 0.
 * 3. Each rank sends its file to its buddy (n + 1) mod size as CKPT_DATA kind 0 and keeps
 *    the file of (n - 1) mod size as rank-<n - 1>.ckpt.buddy (written durably as it comes).
 * 4. Rank 0, with every ACK, signs the COMMIT, writes it durably and sends CKPT_COMMIT.
 *    Each rank verifies it, checks its own file's and its buddy copy's SHA-256 in it,
 *    keeps a copy and deletes every epoch directory older than e - 1.
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { FILE_VERSION, RANK_FILE_HEADER_SIZE, RANK_FILE_MAGIC } from '../codec/sperli-files.js';
import { FrameType } from '../codec/sperli-frame.js';
import {
  AbortReason,
  ChunkReceiver,
  CkptDataKind,
  decodeCkptAck,
  decodeCkptBegin,
  encodeCkptAck,
  encodeCkptBegin,
} from '../codec/sperli-payloads.js';
import { createSha256, sha256 } from '../core/index.js';
import {
  buddyRank,
  type CheckpointJob,
  expectEpoch,
  expectFileOf,
  FrameRouter,
  frameKey,
  sendFileParts,
  servedRank,
} from './checkpoint-frames.js';
import { checkCommit } from './checkpoint-layout.js';
import type { CheckpointStore, PieceWriter } from './checkpoint-store.js';
import { signCommit } from './tokens.js';

const BEGIN = frameKey(FrameType.CKPT_BEGIN);
const ACK = frameKey(FrameType.CKPT_ACK);
const COMMIT = frameKey(FrameType.CKPT_COMMIT);
const OWN_CHUNK = frameKey(FrameType.CKPT_DATA, CkptDataKind.ownChunk);

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The frames a rank takes from `peer` during a checkpoint. */
function expectedFrames(job: CheckpointJob): (peer: number) => ReadonlySet<string> {
  const served = servedRank(job);
  return (peer) => {
    const keys = new Set<string>();
    if (job.rank === 0) keys.add(ACK);
    else if (peer === 0) {
      keys.add(BEGIN);
      keys.add(COMMIT);
    }
    if (peer === served) keys.add(OWN_CHUNK);
    return keys;
  };
}

/** Step 0: every rank's open requests and newest committed epoch; H1624 on every rank if any is open. */
async function agree(job: CheckpointJob, committed: bigint): Promise<bigint> {
  const { link, rank, size } = job;
  const slots = new BigUint64Array(2 * size);
  slots[rank] = BigInt(link.openRequests());
  slots[size + rank] = committed;
  const all = await link.allreduceSum(slots);
  const open: Record<number, number> = {};
  let last = 0n;
  for (let r = 0; r < size; r++) {
    if ((all[r] as bigint) > 0n) open[r] = Number(all[r]);
    if ((all[size + r] as bigint) > last) last = all[size + r] as bigint;
  }
  const ranks = Object.keys(open);
  if (ranks.length > 0) {
    const error = sperliError(
      SperliCode.checkpointOpen,
      'open-requests',
      `checkpoint refused: ${ranks.map((r) => `rank ${r} has ${open[Number(r)]}`).join(', ')} isend/irecv request(s) still open; wait for every request before a checkpoint`,
      { openRequests: open },
    );
    // Every rank knows once the barrier is passed; only then may ABORTs fly.
    await link.barrier().catch(() => {});
    await link.abort(AbortReason.failedCheckpoint, error);
    throw error;
  }
  return last + 1n;
}

/** Step 1 on a rank other than 0: CKPT_BEGIN from rank 0 for epoch `epoch`. */
async function begin(job: CheckpointJob, router: FrameRouter, epoch: bigint): Promise<void> {
  const f = await router.take(0, BEGIN);
  decodeCkptBegin(f.payload, job.size);
  if (f.epoch !== epoch) {
    throw sperliError(
      SperliCode.frame,
      'ckpt-begin',
      `CKPT_BEGIN refused: rank 0 begins epoch ${f.epoch}, but the ranks agreed on epoch ${epoch}`,
      { rule: 'epoch', epoch: f.epoch, expected: epoch },
    );
  }
}

/**
 * Appends chunks to a piece writer in order, in the background. A writer that can `copy`
 * takes every chunk at once into its own buffers (pieces of a frame as they come off the
 * connection, or whole payloads). Otherwise the first chunk goes to the disk at once, and
 * whatever arrived while a write ran goes as one `writev` after it, so a file that comes
 * in many 1 MiB chunks takes few system calls and receiving never waits for the disk.
 */
export class ChunkSink {
  private queue: Uint8Array[] = [];
  private running: Promise<void> | undefined;
  private failure: { error: unknown } | undefined;

  constructor(private readonly writer: PieceWriter) {}

  /**
   * Takes `chunk`, which is valid only until this returns (a view of a read buffer):
   * copied into the writer at once where it can copy, else copied here and queued. Never
   * throws (it runs inside the connection's read): a failure is kept for `settled`.
   */
  take(chunk: Uint8Array): void {
    if (this.failure !== undefined || chunk.length === 0) return;
    if (this.writer.copy === undefined) {
      this.push(chunk.slice());
      return;
    }
    try {
      this.writer.copy(chunk);
    } catch (e) {
      this.failure = { error: e };
    }
  }

  /** Takes `chunk`, which stays valid (a received frame's payload). */
  push(chunk: Uint8Array): void {
    if (this.writer.copy !== undefined) {
      this.take(chunk);
      if (this.failure !== undefined) throw this.failure.error;
      return;
    }
    if (this.failure !== undefined) throw this.failure.error;
    if (chunk.length === 0) return;
    this.queue.push(chunk);
    if (this.running === undefined) {
      this.running = this.drain();
      this.running.catch(() => {}); // kept in `failure`: thrown by the next push or `settled`
    }
  }

  /** Throws the first failure so far. */
  check(): void {
    if (this.failure !== undefined) throw this.failure.error;
  }

  /** Resolves once every chunk handed over is written; rejects with the first failure. */
  async settled(): Promise<void> {
    while (this.running !== undefined) await this.running.catch(() => {});
    if (this.failure !== undefined) throw this.failure.error;
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        if (batch.length > 1 && this.writer.writev !== undefined) await this.writer.writev(batch);
        else for (const c of batch) await this.writer.write(c);
      }
    } catch (e) {
      this.failure = { error: e };
      this.queue = [];
      throw e;
    } finally {
      this.running = undefined;
    }
  }
}

/**
 * Step 3, receiving: the file of the served rank, hashed as each piece of a chunk comes
 * off the connection and copied at once into the writer (the piece is a view of the read
 * buffer), written durably behind it; its SHA-256 (the bytes are never read back).
 */
async function keepBuddyCopy(job: CheckpointJob, router: FrameRouter, epoch: bigint): Promise<Uint8Array> {
  const served = servedRank(job);
  const writer = await job.store.begin(job.layout.buddyFile(epoch, served));
  const sink = new ChunkSink(writer);
  try {
    const hash = createSha256();
    const rx = new ChunkReceiver();
    const piece = (_at: number, bytes: Uint8Array): void => {
      hash.update(bytes);
      sink.take(bytes);
    };
    for (;;) {
      const f = await router.take(served, OWN_CHUNK);
      expectEpoch(f, epoch);
      const d = expectFileOf(f, served);
      const complete = rx.accept(d);
      if (f.incoming !== undefined) {
        await f.incoming.drain(piece);
        sink.check();
      } else {
        hash.update(d.chunk);
        sink.push(d.chunk);
      }
      if (complete) break;
    }
    await sink.settled();
    await writer.commit();
    return hash.digest();
  } catch (e) {
    await sink.settled().catch(() => {});
    await writer.discard();
    throw e;
  }
}

/** The 80-byte rank file header of docs/sperli.md for a state of `length` bytes whose SHA-256 is `stateHash`. */
export function rankFileHeader(
  id: { readonly jobId: Uint8Array; readonly epoch: bigint; readonly rank: number; readonly size: number },
  length: number,
  stateHash: Uint8Array,
): Uint8Array {
  const out = new Uint8Array(RANK_FILE_HEADER_SIZE);
  const v = new DataView(out.buffer);
  out.set(RANK_FILE_MAGIC, 0);
  v.setUint16(4, FILE_VERSION, true);
  v.setUint16(6, 0, true);
  out.set(id.jobId, 8);
  v.setBigUint64(24, id.epoch, true);
  v.setUint32(32, id.rank, true);
  v.setUint32(36, id.size, true);
  v.setBigUint64(40, BigInt(length), true);
  out.set(stateHash, 48);
  return out;
}

/** Bytes hashed between two turns of the event loop, so that frames keep flowing meanwhile. */
const HASH_SLICE = 1 << 20;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The SHA-256 of `parts` one after the other, hashed a slice at a time. */
async function digestOf(parts: readonly Uint8Array[]): Promise<Uint8Array> {
  const h = createSha256();
  for (const p of parts) {
    for (let at = 0; at < p.length; at += HASH_SLICE) {
      h.update(p.subarray(at, at + HASH_SLICE));
      if (at + HASH_SLICE < p.length) await nextTurn();
    }
    if (p.length === 0) h.update(p);
  }
  return h.digest();
}

/** Writes `parts` one after the other as `path`, durably. */
function writeParts(store: CheckpointStore, path: string, parts: readonly Uint8Array[]): Promise<void> {
  if (store.writeParts !== undefined) return store.writeParts(path, parts);
  let n = 0;
  for (const p of parts) n += p.length;
  const all = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return store.write(path, all);
}

/** Step 4 at rank 0: every ACK, then the signed COMMIT on disk and to every rank. */
async function commitAtRoot(
  job: CheckpointJob,
  router: FrameRouter,
  epoch: bigint,
  own: Uint8Array,
): Promise<Uint8Array> {
  const { link, size } = job;
  const hashes: Uint8Array[] = [own];
  await Promise.all(
    others(size).map(async (p) => {
      const f = await router.take(p, ACK);
      expectEpoch(f, epoch);
      hashes[p] = decodeCkptAck(f.payload);
    }),
  );
  const bytes = signCommit(job.secretKey as Uint8Array, { jobId: job.check.jobId, epoch, hashes });
  await job.store.write(job.layout.commitFile(epoch), bytes);
  await Promise.all(others(size).map((p) => link.send(p, FrameType.CKPT_COMMIT, bytes, epoch)));
  return bytes;
}

function others(size: number): number[] {
  return Array.from({ length: size - 1 }, (_, i) => i + 1);
}

/** Step 4 on every rank: the COMMIT must verify and list this rank's file and its buddy copy. */
function checkHeld(job: CheckpointJob, epoch: bigint, bytes: Uint8Array, own: Uint8Array, buddy: Uint8Array): void {
  const { commit } = checkCommit(bytes, epoch, job.check);
  const served = servedRank(job);
  const entries: [number, Uint8Array, string][] = [
    [job.rank, own, 'its own file'],
    [served, buddy, `the buddy copy of rank ${served}'s file`],
  ];
  for (const [r, digest, what] of entries) {
    if (!sameBytes(commit.hashes[r] as Uint8Array, digest)) {
      throw sperliError(
        SperliCode.rankFileHash,
        r === job.rank ? 'commit-entry' : 'buddy-copy',
        `checkpoint of epoch ${epoch} failed on rank ${job.rank}: the COMMIT entry of rank ${r} is not the SHA-256 of ${what}`,
        { rank: r, epoch },
      );
    }
  }
}

/** Step 5: only epochs e and e - 1 stay; later epochs are left alone. */
async function retain(job: CheckpointJob, epoch: bigint): Promise<void> {
  const old = (await job.layout.epochs(job.store)).filter((e) => e < epoch - 1n);
  await Promise.all(old.map((e) => job.store.removeTree(job.layout.epochDir(e))));
}

/**
 * Step 4, a rank other than 0 keeping its copy of the COMMIT. Ranks sharing a directory
 * find rank 0's copy already there, written durably before CKPT_COMMIT was sent; the
 * same bytes are not written again (a COMMIT's signature is randomized, so equal bytes
 * are this very COMMIT; an earlier try's copy was removed after CKPT_BEGIN).
 */
async function keepCommit(store: CheckpointStore, path: string, bytes: Uint8Array): Promise<void> {
  // A copy that cannot be read is simply written again.
  const held = await store.read(path, bytes.length).catch(() => null);
  if (held !== null && sameBytes(held, bytes)) return;
  await store.write(path, bytes);
}

/**
 * Runs the checkpoint of `state` (the encoded state) on this rank; resolves to the new
 * epoch once this rank holds its verified COMMIT. `committed` gives the newest epoch this
 * rank knows committed.
 */
export async function takeCheckpoint(
  job: CheckpointJob,
  state: Uint8Array,
  committed: () => Promise<bigint>,
): Promise<bigint> {
  const { link, rank, size, layout, store } = job;
  const epoch = await agree(job, await committed());
  // The buddy copy's chunks are hashed and written piece by piece as they come off the connection.
  const router = new FrameRouter(link, expectedFrames(job), new Set([OWN_CHUNK]));

  if (rank === 0) {
    await store.remove(layout.commitFile(epoch));
    await Promise.all(others(size).map((p) => link.send(p, FrameType.CKPT_BEGIN, encodeCkptBegin(size), epoch)));
  } else {
    await begin(job, router, epoch);
    // With a directory of its own, a rank holds its own copy of an earlier try's COMMIT.
    await store.remove(layout.commitFile(epoch));
  }

  // The rank file is its 80-byte header and the state, kept as two parts: it is written,
  // hashed and sent to the buddy from them, never joined into one copy.
  const head = rankFileHeader({ jobId: job.check.jobId, epoch, rank, size }, state.length, sha256(state));
  const parts = [head, state];
  // The copy for the buddy, the buddy's copy and the rank file on disk all travel at the
  // same time, while the file's SHA-256 is computed: network, disk and hashing overlap.
  // Nothing counts before the COMMIT, which needs every ACK.
  const sending =
    size > 1 ? sendFileParts(link, buddyRank(job), CkptDataKind.ownChunk, rank, epoch, head, state) : undefined;
  const keeping = size > 1 ? keepBuddyCopy(job, router, epoch) : undefined;
  sending?.catch(() => {});
  keeping?.catch(() => {});
  const writing = writeParts(store, layout.rankFile(epoch, rank), parts);
  writing.catch(() => {});
  const digest = await digestOf(parts);
  await writing;
  // A rank ACKs (and rank 0 signs) only once it also holds its buddy's copy durably, so a
  // COMMIT always means that every rank file is on two ranks' disks, and a buddy copy
  // that fails fails the checkpoint everywhere before any COMMIT exists.
  const buddyDigest = await (keeping ?? writeParts(store, layout.buddyFile(epoch, rank), parts).then(() => digest));
  if (rank !== 0) await link.send(0, FrameType.CKPT_ACK, encodeCkptAck(digest), epoch);

  const [, commitBytes] = await Promise.all([
    sending,
    rank === 0
      ? commitAtRoot(job, router, epoch, digest)
      : router.take(0, COMMIT).then((f) => {
          expectEpoch(f, epoch);
          return f.payload;
        }),
  ]);

  checkHeld(job, epoch, commitBytes, digest, buddyDigest);
  if (rank !== 0) await keepCommit(store, layout.commitFile(epoch), commitBytes);
  await retain(job, epoch);
  return epoch;
}
