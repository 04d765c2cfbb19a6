/**
 * Where SPERLI checkpoints live and how a rank finds the COMMIT files it holds
 * (docs/sperli-checkpoints.md, "Layout on disk"):
 *
 *   <dir>/<job id as 32 lower-case hex digits>/<epoch in decimal>/rank-<n>.ckpt
 *                                                                /rank-<n>.ckpt.buddy
 *                                                                /COMMIT
 *
 * Also the failures a resume reports, as the numbers the ranks agree on.
 */
import { join } from 'node:path';
import { SperliCode, type SperliCodeValue, sperliError } from '../codec/sperli-errors.js';
import type { Commit } from '../codec/sperli-files.js';
import { SIGNATURE_LENGTH } from '../codec/sperli-payloads.js';
import { codeFromPeer, isPlexusError, type PlexusCode, PlexusError } from '../core/errors.js';
import type { CheckpointStore } from './checkpoint-store.js';
import { verifyCommitFile } from './tokens.js';

/** The codec refused a state: `encode` threw or gave no bytes, or `decode` threw on checked bytes. */
export const CHECKPOINT_STATE = 'PLX_SPERLI_CHECKPOINT_STATE';

export const COMMIT_NAME = 'COMMIT';

/** The longest COMMIT file: one of 4096 ranks. */
export const MAX_COMMIT_LENGTH = 40 + 32 * 4096 + 2 + SIGNATURE_LENGTH;

export function rankFileName(rank: number): string {
  return `rank-${rank}.ckpt`;
}

export function buddyFileName(rank: number): string {
  return `rank-${rank}.ckpt.buddy`;
}

/** The epoch of a directory name: a decimal number from 1 without leading zeros, else undefined. */
export function parseEpochName(name: string): bigint | undefined {
  if (!/^[1-9][0-9]{0,19}$/.test(name)) return undefined;
  const e = BigInt(name);
  return e <= 0xffff_ffff_ffff_ffffn ? e : undefined;
}

/** The directories of one job under a checkpoint directory. */
export class JobLayout {
  readonly jobDir: string;

  constructor(
    readonly dir: string,
    readonly jobId: Uint8Array,
  ) {
    this.jobDir = join(dir, Buffer.from(jobId).toString('hex'));
  }

  epochDir(epoch: bigint): string {
    return join(this.jobDir, epoch.toString());
  }

  rankFile(epoch: bigint, rank: number): string {
    return join(this.epochDir(epoch), rankFileName(rank));
  }

  buddyFile(epoch: bigint, rank: number): string {
    return join(this.epochDir(epoch), buddyFileName(rank));
  }

  commitFile(epoch: bigint): string {
    return join(this.epochDir(epoch), COMMIT_NAME);
  }

  /** The epoch directories of the job, newest first. */
  async epochs(store: CheckpointStore): Promise<bigint[]> {
    const out: bigint[] = [];
    for (const name of await store.list(this.jobDir)) {
      const e = parseEpochName(name);
      if (e !== undefined) out.push(e);
    }
    return out.sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
  }
}

/** A COMMIT file that verifies against the job key, job id, its epoch and the job's size. */
export interface HeldCommit {
  readonly epoch: bigint;
  readonly bytes: Uint8Array;
  readonly commit: Commit;
}

/** A failure a resume met: the epoch it is about and the error. */
export interface ResumeFailure {
  readonly epoch: bigint;
  readonly error: PlexusError;
}

/** What the job needs to check a COMMIT file. */
export interface CommitCheck {
  readonly jobId: Uint8Array;
  readonly size: number;
  readonly publicKey: Uint8Array;
}

/**
 * Verifies a COMMIT file of `epoch` (H1621 malformed, badly signed, another job or
 * epoch; H1623 another size). Throws the refusal.
 */
export function checkCommit(bytes: Uint8Array, epoch: bigint, job: CommitCheck): HeldCommit {
  const commit = verifyCommitFile(bytes, { jobId: job.jobId, epoch, size: job.size }, job.publicKey);
  return { epoch, bytes, commit };
}

/**
 * The COMMIT files a rank holds, newest first, each verified when it is first asked
 * for. Files that fail are kept as failures (they never count).
 */
export class CommitShelf {
  private epochs: bigint[] | undefined;
  private at = 0;
  private readonly verified: HeldCommit[] = [];
  readonly failures: ResumeFailure[] = [];
  /** The highest epoch directory of the job this rank holds (0 when none). */
  highestEpoch = 0n;

  constructor(
    private readonly store: CheckpointStore,
    private readonly layout: JobLayout,
    private readonly job: CommitCheck,
  ) {}

  /** The newest verified COMMIT below `below` (any epoch when undefined), or undefined. */
  async next(below?: bigint): Promise<HeldCommit | undefined> {
    const found = this.verified.find((c) => below === undefined || c.epoch < below);
    if (found !== undefined) return found;
    if (this.epochs === undefined) {
      this.epochs = await this.layout.epochs(this.store);
      this.highestEpoch = this.epochs[0] ?? 0n;
    }
    while (this.at < this.epochs.length) {
      const epoch = this.epochs[this.at++] as bigint;
      const held = await this.load(epoch);
      if (held === undefined) continue;
      this.verified.push(held);
      if (below === undefined || epoch < below) return held;
    }
    return undefined;
  }

  private async load(epoch: bigint): Promise<HeldCommit | undefined> {
    const path = this.layout.commitFile(epoch);
    let bytes: Uint8Array | null;
    try {
      bytes = await this.store.read(path, MAX_COMMIT_LENGTH);
    } catch (e) {
      this.failures.push({
        epoch,
        error: sperliError(SperliCode.commit, 'unreadable', `COMMIT refused: ${path} cannot be read`, { path }, e),
      });
      return undefined;
    }
    // An epoch without a COMMIT was never committed: not a failure, it just does not count.
    if (bytes === null) return undefined;
    try {
      return checkCommit(bytes, epoch, this.job);
    } catch (e) {
      if (!isPlexusError(e)) throw e;
      this.failures.push({ epoch, error: e });
      return undefined;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Failure codes as numbers (what the ranks agree on at the end of a resume)

/** The number a failure code travels as: 1619 for H1619, 1 for the codec's refusal, 2 for anything else. */
export function failureNumber(code: string): number {
  const m = /^H(16[0-9]{2})$/.exec(code);
  if (m !== null) return Number(m[1]);
  return code === CHECKPOINT_STATE ? 1 : 2;
}

/** The code of a failure number. */
export function failureCode(n: number): PlexusCode {
  if (n >= 1600 && n <= 1699) return codeFromPeer(`H${n}`);
  return n === 1 ? CHECKPOINT_STATE : 'PLX_SPERLI_CHECKPOINT_IO';
}

const CODE_TEXT: Record<string, string> = {
  H1619: 'a rank file is not the one expected',
  H1620: "a rank file's SHA-256 does not match",
  H1621: 'a COMMIT file is malformed or its signature does not hold',
  H1622: 'no epoch can be resumed',
  H1623: 'a signed COMMIT is of another size than the job',
  [CHECKPOINT_STATE]: 'the codec could not decode the state',
};

/** What a failure code means, in words. */
export function codeText(code: string): string {
  return CODE_TEXT[code] ?? 'a checkpoint file could not be read';
}

/** A SPERLI refusal with the code of another failure (the agreed code of a resume). */
export function withCode(
  code: PlexusCode,
  reason: string,
  message: string,
  details: Record<string, unknown>,
  cause?: unknown,
) {
  if (/^H16[0-9]{2}$/.test(code)) return sperliError(code as SperliCodeValue, reason, message, details, cause);
  return new PlexusError(code, message, { ...details, reason }, cause === undefined ? undefined : { cause });
}
