/**
 * The collective resume (docs/sperli-checkpoints.md, "Resume"), as one rank runs it:
 *
 * 1. Offers. Each rank looks for the newest COMMIT it holds that verifies (signature,
 *    job id, its directory's epoch, the job's size); every rank but 0 sends it to rank 0
 *    as RESUME status 3 (header epoch = its epoch; empty with epoch 0 when it holds none).
 * 2. Choice. Rank 0 takes the newest epoch among the offers and its own files and sends
 *    RESUME status 0 with that COMMIT (header epoch e) to every rank; or, with none, RESUME
 *    status 0 without a COMMIT and epoch 0 ("no epoch to load").
 * 3. Load (checkpoint-load.ts). Each rank verifies the COMMIT and loads rank-<n>.ckpt, checked against its
 *    header and the COMMIT entry. If that fails it asks its buddy with CKPT_DATA kind 1
 *    and checks what comes (kind 2 chunks) the same way; kind 3 means the buddy has no
 *    valid copy. A rank that needs nothing sends kind 4. Each rank also answers the
 *    request (or kind 4) of the rank it keeps a buddy copy for. Then it answers rank 0
 *    with RESUME 0 (loaded) or 2 (cannot load), header epoch e.
 * 4. Verdict. All loaded: rank 0 sends RESUME status 0 without a COMMIT, header epoch e
 *    ("go on"). Otherwise it chooses the next older epoch (back to step 3) or, with none
 *    left, sends "no epoch to load" (status 0, epoch 0).
 * 5. Outcome, after "no epoch to load": an allreduce (u64 sum) of 3 x size slots: slot r =
 *    the epoch of rank r's newest failure, size + r = its code as a number (1619 for
 *    H1619; 0 for none), 2 size + r = the highest epoch directory rank r holds. No failure
 *    and no directory above 1: a fresh start; each rank answers RESUME 1, rank 0 sends
 *    RESUME 0 (epoch 0) and resume returns null. Otherwise every rank answers RESUME 2,
 *    rank 0 sends RESUME 2, and every rank sends ABORT reason 5 and rejects with the same
 *    code: that of the failure of the newest epoch (the lowest rank among equals), or
 *    H1622 when nothing failed but a directory above 1 proves an epoch was committed once.
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { FrameType } from '../codec/sperli-frame.js';
import { AbortReason, decodeResume, encodeResume, type Resume, ResumeStatus } from '../codec/sperli-payloads.js';
import { isPlexusError, type PlexusCode, type PlexusError } from '../core/errors.js';
import {
  buddyRank,
  type CheckpointJob,
  expectEpoch,
  FrameRouter,
  frameKey,
  orderError,
  type RoutedFrame,
  servedRank,
} from './checkpoint-frames.js';
import {
  CommitShelf,
  checkCommit,
  codeText,
  failureCode,
  failureNumber,
  type HeldCommit,
  type ResumeFailure,
  withCode,
} from './checkpoint-layout.js';
import { ANSWER_CHUNK, attempt, NEED_NOTHING, NO_COPY, REQUEST } from './checkpoint-load.js';

const RESUME = frameKey(FrameType.RESUME);

/** A resumed state and its epoch. */
export interface Resumed {
  readonly epoch: bigint;
  readonly state: unknown;
}

function others(size: number): number[] {
  return Array.from({ length: size - 1 }, (_, i) => i + 1);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function expectedFrames(job: CheckpointJob): (peer: number) => ReadonlySet<string> {
  const buddy = buddyRank(job);
  const served = servedRank(job);
  return (peer) => {
    const keys = new Set<string>();
    if (job.rank === 0 || peer === 0) keys.add(RESUME);
    if (peer === buddy) {
      keys.add(ANSWER_CHUNK);
      keys.add(NO_COPY);
    }
    if (peer === served) {
      keys.add(REQUEST);
      keys.add(NEED_NOTHING);
    }
    return keys;
  };
}

/** A RESUME frame from `f.peer` whose status is one of `allowed`. */
function resumeOf(f: RoutedFrame, allowed: readonly number[], step: string): Resume {
  const m = decodeResume(f.payload);
  if (!allowed.includes(m.status)) {
    throw orderError(f.peer, `RESUME status ${m.status} is not an answer to ${step}`, {
      rule: 'resume-status',
      status: m.status,
    });
  }
  return m;
}

function sendAll(job: CheckpointJob, payload: Uint8Array, epoch: bigint): Promise<void> {
  return Promise.all(others(job.size).map((p) => job.link.send(p, FrameType.RESUME, payload, epoch))).then(() => {});
}

/** The newest failure of a rank (the later one among equal epochs). */
function newest(failures: readonly ResumeFailure[]): ResumeFailure | undefined {
  let best: ResumeFailure | undefined;
  for (const f of failures) if (best === undefined || f.epoch >= best.epoch) best = f;
  return best;
}

/** After a good resume: this rank's epoch directory holds the COMMIT (put back if it was missing or damaged). */
async function keepCommit(job: CheckpointJob, held: HeldCommit): Promise<void> {
  const path = job.layout.commitFile(held.epoch);
  const mine = await job.store.read(path).catch(() => null);
  if (mine !== null && sameBytes(mine, held.bytes)) return;
  await job.store.write(path, held.bytes).catch(() => {});
}

// ---------------------------------------------------------------------------------------
// Step 5: the outcome when no epoch loads

/** Every rank's newest failure and highest epoch directory; the error every rank gives, or null (fresh). */
async function outcome(job: CheckpointJob, shelf: CommitShelf, failures: ResumeFailure[]): Promise<PlexusError | null> {
  const { link, rank, size } = job;
  const mine = newest(failures);
  const slots = new BigUint64Array(3 * size);
  if (mine !== undefined) {
    slots[rank] = mine.epoch;
    slots[size + rank] = BigInt(failureNumber(mine.error.code));
  }
  slots[2 * size + rank] = shelf.highestEpoch;
  const all = await link.allreduceSum(slots);
  const list: { rank: number; epoch: bigint; code: PlexusCode }[] = [];
  let highest = 0n;
  for (let r = 0; r < size; r++) {
    const n = all[size + r] as bigint;
    if (n !== 0n) list.push({ rank: r, epoch: all[r] as bigint, code: failureCode(Number(n)) });
    if ((all[2 * size + r] as bigint) > highest) highest = all[2 * size + r] as bigint;
  }
  let pick: (typeof list)[number] | undefined;
  for (const f of list) if (pick === undefined || f.epoch > pick.epoch) pick = f;
  if (pick === undefined) {
    if (highest < 2n) return null;
    return sperliError(
      SperliCode.noEpoch,
      'nothing-resumable',
      `no epoch can be resumed: no rank holds a COMMIT file, yet epoch directory ${highest} exists, which is made only after epoch ${highest - 1n} was committed; the COMMIT files were lost (remove ${job.layout.jobDir} on every rank to start afresh)`,
      { highestEpoch: highest },
    );
  }
  // A rank that met the same failure itself gives its own error (with the exact check).
  if (mine !== undefined && mine.epoch === pick.epoch && failureCode(failureNumber(mine.error.code)) === pick.code) {
    const e = mine.error;
    const details = { ...e.details, rank, epoch: pick.epoch, failures: list };
    return withCode(pick.code, String(e.details.reason ?? 'resume'), e.message, details, e);
  }
  return withCode(
    pick.code,
    'other-rank',
    `resume failed: on rank ${pick.rank}, ${codeText(pick.code)} (epoch ${pick.epoch}), and no other epoch can be resumed`,
    { rank: pick.rank, epoch: pick.epoch, failures: list },
  );
}

// ---------------------------------------------------------------------------------------
// The whole resume

/** Rank 0's choices: its own verified COMMIT files and the offers, newest first. */
class Choices {
  private readonly offered = new Map<bigint, HeldCommit>();
  private readonly known: HeldCommit[] = [];

  constructor(
    private readonly shelf: CommitShelf,
    private readonly job: CheckpointJob,
    own: HeldCommit | undefined,
  ) {
    if (own !== undefined) this.known.push(own);
  }

  /**
   * Takes an offered COMMIT of `epoch`; throws its refusal. Most ranks offer the same
   * file: bytes already verified are not verified again.
   */
  offer(bytes: Uint8Array, epoch: bigint): void {
    let c = this.known.find((k) => k.epoch === epoch && sameBytes(k.bytes, bytes));
    if (c === undefined) {
      c = checkCommit(bytes, epoch, this.job.check);
      this.known.push(c);
    }
    if (!this.offered.has(c.epoch)) this.offered.set(c.epoch, c);
  }

  /** The newest COMMIT older than `below` (any when undefined); rank 0's own among equals. */
  async next(below?: bigint): Promise<HeldCommit | undefined> {
    let best = await this.shelf.next(below);
    for (const c of this.offered.values()) {
      if (below !== undefined && c.epoch >= below) continue;
      if (best === undefined || c.epoch > best.epoch) best = c;
    }
    return best;
  }
}

/** Rank 0: the offers of every other rank. */
async function takeOffers(job: CheckpointJob, router: FrameRouter, choices: Choices, failures: ResumeFailure[]) {
  await Promise.all(
    others(job.size).map(async (p) => {
      const f = await router.take(p, RESUME);
      const m = resumeOf(f, [ResumeStatus.offer], 'the offer step');
      if (m.commit === null) return;
      try {
        choices.offer(m.commit, f.epoch);
      } catch (e) {
        if (!isPlexusError(e)) throw e;
        failures.push({ epoch: f.epoch, error: e });
      }
    }),
  );
}

/** Rank 0: every rank's answer to the load of `epoch`; true when all loaded. */
async function takeAnswers(job: CheckpointJob, router: FrameRouter, epoch: bigint, allowed: number[]) {
  const answers = await Promise.all(
    others(job.size).map(async (p) => {
      const f = await router.take(p, RESUME);
      expectEpoch(f, epoch);
      return resumeOf(f, allowed, `the load of epoch ${epoch}`).status;
    }),
  );
  return answers.every((s) => s !== ResumeStatus.cannotLoad);
}

/** Step 5 with the answers and the verdict; null for a fresh start, else throws the agreed error. */
async function finish(
  job: CheckpointJob,
  router: FrameRouter,
  shelf: CommitShelf,
  failures: ResumeFailure[],
): Promise<null> {
  const { link, rank } = job;
  const error = await outcome(job, shelf, failures);
  const answer = error === null ? ResumeStatus.fresh : ResumeStatus.cannotLoad;
  try {
    if (rank === 0) {
      await takeAnswers(job, router, 0n, [answer]);
      await sendAll(job, encodeResume(error === null ? ResumeStatus.go : ResumeStatus.cannotLoad), 0n);
    } else {
      await link.send(0, FrameType.RESUME, encodeResume(answer), 0n);
      const f = await router.take(0, RESUME);
      expectEpoch(f, 0n);
      resumeOf(f, [error === null ? ResumeStatus.go : ResumeStatus.cannotLoad], 'the outcome');
    }
  } catch (e) {
    // Once every rank knows the agreed error, an ABORT that overtakes the verdict changes nothing.
    if (error === null) throw e;
  }
  if (error === null) return null;
  await link.abort(AbortReason.failedCheckpoint, error);
  throw error;
}

/** Runs the resume on this rank: the state of the resumed epoch, or null on a fresh start. */
export async function resumeState(job: CheckpointJob, decode: (bytes: Uint8Array) => unknown): Promise<Resumed | null> {
  const { link, rank } = job;
  const shelf = new CommitShelf(job.store, job.layout, job.check);
  const failures = shelf.failures;
  // Chunks of a fetched rank file are taken piece by piece (checkpoint-load.ts, fetchFromBuddy).
  const router = new FrameRouter(link, expectedFrames(job), new Set([ANSWER_CHUNK]));
  const best = await shelf.next();

  if (rank === 0) {
    const choices = new Choices(shelf, job, best);
    await takeOffers(job, router, choices, failures);
    for (let choice = await choices.next(); ; ) {
      if (choice === undefined) {
        await sendAll(job, encodeResume(ResumeStatus.go), 0n);
        return finish(job, router, shelf, failures);
      }
      const epoch = choice.epoch;
      await sendAll(job, encodeResume(ResumeStatus.go, choice.bytes), epoch);
      const [got, othersLoaded] = await Promise.all([
        attempt({ job, router, epoch, held: choice, failures }, decode),
        takeAnswers(job, router, epoch, [ResumeStatus.go, ResumeStatus.cannotLoad]),
      ]);
      if (got !== undefined && othersLoaded) {
        await sendAll(job, encodeResume(ResumeStatus.go), epoch);
        await keepCommit(job, choice);
        return { epoch, state: got.state };
      }
      choice = await choices.next(epoch);
    }
  }

  await link.send(0, FrameType.RESUME, encodeResume(ResumeStatus.offer, best?.bytes ?? null), best?.epoch ?? 0n);
  let f = await router.take(0, RESUME);
  for (;;) {
    const m = resumeOf(f, [ResumeStatus.go], 'the offers (a choice)');
    if (m.commit === null) {
      if (f.epoch !== 0n) throw orderError(0, `RESUME "go on" for epoch ${f.epoch} came before any choice`);
      return finish(job, router, shelf, failures);
    }
    const epoch = f.epoch;
    let held: HeldCommit | undefined;
    try {
      held = checkCommit(m.commit, epoch, job.check);
    } catch (e) {
      if (!isPlexusError(e)) throw e;
      failures.push({ epoch, error: e });
    }
    const got = await attempt({ job, router, epoch, held, failures }, decode);
    await link.send(0, FrameType.RESUME, encodeResume(got ? ResumeStatus.go : ResumeStatus.cannotLoad), epoch);
    f = await router.take(0, RESUME);
    const verdict = resumeOf(f, [ResumeStatus.go, ResumeStatus.cannotLoad], `the load of epoch ${epoch}`);
    if (verdict.status === ResumeStatus.cannotLoad) {
      throw sperliError(SperliCode.aborted, 'resume-abort', `rank 0 ended the resume of epoch ${epoch} (RESUME 2)`, {
        epoch,
      });
    }
    if (verdict.commit === null && f.epoch === epoch) {
      if (got === undefined || held === undefined) {
        throw orderError(0, `rank 0 says go on with epoch ${epoch}, which this rank could not load`);
      }
      await keepCommit(job, held);
      return { epoch, state: got.state };
    }
  }
}
