/**
 * `init()`: what a rank program calls first. It reads the job description the launcher
 * wrote to standard input (one hex line), refuses it if anything is wrong (H1610
 * job-description, refused hosts included), opens the TLS 1.3 mesh to every other rank
 * and returns the communicator.
 *
 * By default a failure of the job ends the process, as MPI's default error handler does:
 * the rank prints one `sperli-failure {json}` line on standard error (the launcher reads
 * it and names the cause) and exits with status 3. With `onFailure: 'throw'` the rank
 * prints the same line, the process stays up and every pending and later call rejects
 * with the failure (catch and finally blocks run in both modes).
 *
 * The rank also tells the launcher, on standard error, when it has joined the job
 * (`sperli-joined {"rank":n}`, once the mesh is open) and when it has left it normally
 * (`sperli-finalized {"rank":n}`, once `finalize()` has said BYE to every peer): a rank
 * that joined and exits with status 0 without finalizing is a failure of the job.
 */
import { decodeJobLine, type JobDescription } from '../codec/sperli-jobdesc.js';
import { PlexusError } from '../core/errors.js';
import { checkpointContextOf } from './checkpoint.js';
import { Comm } from './comm.js';
import { refusedHosts } from './hosts.js';
import {
  CHECKPOINT_DIR_VARIABLE,
  DEFAULT_SILENCE_MS,
  DENY_FILE_VARIABLE,
  FAILURE_PREFIX,
  FINALIZED_PREFIX,
  JOINED_PREFIX,
  SILENCE_VARIABLE,
} from './launcher.js';
import { openMesh } from './mesh.js';
import { ranksOnMachine, SPIN_VARIABLE, spinWindowMs } from './spin.js';

export interface InitOptions {
  /** Where the job description comes from (default: standard input). */
  readonly input?: NodeJS.ReadableStream;
  /** Silence limit in ms (default: SPERLI_SILENCE_MS from the launcher, else 5000). */
  readonly silenceMs?: number;
  /** 'exit' (default): a failed job ends the process with status 3; 'throw': calls reject. */
  readonly onFailure?: 'exit' | 'throw';
  /**
   * Where this rank keeps its checkpoints (comm.checkpoint / comm.resume); default
   * SPERLI_CHECKPOINT_DIR from the launcher's --checkpoint-dir.
   */
  readonly checkpointDir?: string;
  /**
   * How long (ms, 0..1000) a call waiting for a frame keeps the event loop polling before
   * it sleeps. Default: SPERLI_SPIN_MS when set, else 1 when the job's ranks on this
   * machine fit its cores and 0 when they outnumber them.
   */
  readonly spinMs?: number;
}

/** Exit status of a rank whose job failed. */
export const FAILURE_EXIT_CODE = 3;

/** Reads the first line of a stream (at most 1 MiB: a job description is far smaller). */
export function readFirstLine(input: NodeJS.ReadableStream, limit = 1 << 20): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer | string) => {
      text += typeof chunk === 'string' ? chunk : chunk.toString('latin1');
      const nl = text.indexOf('\n');
      if (nl >= 0) {
        cleanup();
        resolve(text.slice(0, nl));
      } else if (text.length > limit) {
        cleanup();
        reject(
          new PlexusError('H1610', 'the job description line is longer than 1 MiB', { reason: 'job-description' }),
        );
      }
    };
    const onEnd = () => {
      cleanup();
      if (text.length > 0) resolve(text);
      else {
        reject(
          new PlexusError(
            'H1610',
            'no job description on standard input: start rank programs with `plexus sperli launch`',
            { reason: 'job-description' },
          ),
        );
      }
    };
    const cleanup = () => {
      input.off('data', onData);
      input.off('end', onEnd);
      input.off('error', onError);
      input.pause?.();
    };
    const onError = (e: unknown) => {
      cleanup();
      reject(e);
    };
    input.on('data', onData);
    input.on('end', onEnd);
    input.on('error', onError);
  });
}

function report(rank: number | undefined, e: unknown): void {
  const err = e instanceof PlexusError ? e : undefined;
  const line = {
    code: err?.code ?? 'PLX_SPERLI_FAILED',
    reason: err?.details.reason,
    message: e instanceof Error ? e.message : String(e),
    details: err?.details,
    rank,
  };
  process.stderr.write(
    `${FAILURE_PREFIX}${JSON.stringify(line, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))}\n`,
  );
}

/** Reports the failure for the launcher and ends the process once stderr is flushed. */
function reportAndExit(rank: number | undefined, e: unknown): void {
  report(rank, e);
  process.exitCode = FAILURE_EXIT_CODE;
  // Give the sockets a moment to hand over the ABORT frames, then stop for good.
  setTimeout(() => process.exit(FAILURE_EXIT_CODE), 100).unref?.();
  process.stderr.write('', () => setTimeout(() => process.exit(FAILURE_EXIT_CODE), 50));
}

/**
 * With onFailure 'exit': a call that rejects with the job's failure and that the program
 * does not catch (`await comm.barrier()` at the top level of a module, or a promise nobody
 * awaits) does not end the process with Node's stack trace and status 1: the failure is
 * reported already, and the process ends with status 3 in a moment. Anything else uncaught
 * ends it as Node would, its stack on standard error and status 1 (unless the program
 * listens for these events itself).
 */
function quietFailure(comm: Comm): void {
  const isFailure = (e: unknown): boolean => e !== undefined && e === comm.failed;
  process.on('unhandledRejection', (reason) => {
    if (isFailure(reason) || process.listenerCount('unhandledRejection') > 1) return;
    throw reason;
  });
  process.on('uncaughtException', (e) => {
    if (isFailure(e) || process.listenerCount('uncaughtException') > 1) return;
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}

export async function init(options: InitOptions = {}): Promise<Comm> {
  const exitOnFailure = (options.onFailure ?? 'exit') === 'exit';
  let desc: JobDescription | undefined;
  try {
    const line = await readFirstLine(options.input ?? process.stdin);
    const refused = refusedHosts({
      env: process.env.SPERLI_REFUSED_HOSTS,
      denyFile: process.env[DENY_FILE_VARIABLE],
    });
    desc = decodeJobLine(`${line.replace(/\r$/, '')}\n`, refused);
    const envSilence = Number(process.env[SILENCE_VARIABLE]);
    const silenceMs =
      options.silenceMs ?? (Number.isInteger(envSilence) && envSilence > 0 ? envSilence : DEFAULT_SILENCE_MS);
    const spinMs = spinWindowMs(options.spinMs ?? process.env[SPIN_VARIABLE], ranksOnMachine(desc.hosts, desc.rank));
    const transport = await openMesh(desc, { silenceMs, refused });
    const dir = options.checkpointDir ?? process.env[CHECKPOINT_DIR_VARIABLE];
    const rank = desc.rank;
    const onFinalized = () => {
      process.stderr.write(`${FINALIZED_PREFIX}${JSON.stringify({ rank })}\n`);
    };
    const comm = new Comm(
      transport,
      dir ? { checkpoint: checkpointContextOf(desc, dir), spinMs, onFinalized } : { spinMs, onFinalized },
    );
    process.stderr.write(`${JOINED_PREFIX}${JSON.stringify({ rank })}\n`);
    // With 'throw' the failure is still reported for the launcher; the program goes on.
    comm.onFailure(exitOnFailure ? (e) => reportAndExit(rank, e) : (e) => report(rank, e));
    if (exitOnFailure) quietFailure(comm);
    return comm;
  } catch (e) {
    if (exitOnFailure) {
      reportAndExit(desc?.rank, e);
      // The process ends in a moment; nothing after init() runs.
      await new Promise(() => {});
    }
    throw e;
  }
}
