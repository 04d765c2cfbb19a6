/** One `plexus` subcommand. */
export interface Command {
  readonly name: string;
  readonly summary: string;
  readonly help: string;
  /** Runs with the arguments after the command name; resolves to the exit code. */
  run(args: string[]): Promise<number>;
}

import { type ParseArgsConfig, parseArgs } from 'node:util';
import { PlexusError } from '../core/errors.js';

/** Exit status of a command that did its work. */
export const EXIT_OK = 0;
/** Exit status when the work failed: the message names a `PLX_*` code (bad input files included). */
export const EXIT_FAILED = 1;
/** Exit status of a usage mistake (unknown command or option, a missing or out-of-range argument). */
export const EXIT_USAGE = 2;

/**
 * A mistake in how the command was called: printed as `error PLX_CLI_USAGE` with a pointer to
 * --help, exit 2.
 */
export class UsageError extends Error {
  readonly code = 'PLX_CLI_USAGE';
  constructor(
    readonly command: string,
    message: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * What `plexus` prints for a failure and the exit status it gives, the same for every command:
 * a usage mistake is `error PLX_CLI_USAGE` (2); a PlexusError its code (1); a system error
 * (a file that is missing, a directory where a file was expected, ...) `PLX_CLI_IO` (1); anything
 * else `PLX_CLI_INTERNAL` (1), a defect to report. Stack traces are printed only with PLEXUS_DEBUG=1.
 */
export function failureReport(
  err: unknown,
  debug: boolean = process.env.PLEXUS_DEBUG === '1',
): { exitCode: number; text: string } {
  const stack = debug && err instanceof Error && err.stack ? `\n${err.stack}` : '';
  if (err instanceof UsageError || (err as Error)?.name === 'UsageError') {
    const u = err as UsageError;
    return {
      exitCode: EXIT_USAGE,
      text: `plexus: error PLX_CLI_USAGE: ${u.message}\n(see plexus ${u.command} --help)${stack}\n`,
    };
  }
  if (err instanceof PlexusError || (err as Error)?.name === 'PlexusError') {
    const p = err as PlexusError;
    return { exitCode: EXIT_FAILED, text: `plexus: error ${p.code}: ${p.message}${stack}\n` };
  }
  const sys = err as NodeJS.ErrnoException | undefined;
  if (typeof sys?.code === 'string' && /^E[A-Z0-9]+$/.test(sys.code) && typeof sys.syscall === 'string') {
    return { exitCode: EXIT_FAILED, text: `plexus: error PLX_CLI_IO: ${sys.message}${stack}\n` };
  }
  const message = err instanceof Error ? err.message : String(err);
  return {
    exitCode: EXIT_FAILED,
    text: `plexus: error PLX_CLI_INTERNAL: ${message}${debug ? stack : ' (a defect: PLEXUS_DEBUG=1 prints where)'}\n`,
  };
}

/** parseArgs that turns its errors into UsageError for `command`. */
export function parse<T extends ParseArgsConfig>(command: string, config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    throw new UsageError(command, e instanceof Error ? e.message : String(e));
  }
}

/** Resolves on the first SIGINT or SIGTERM (the way a long-running command is asked to stop). */
export function untilStopped(): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
