/** One `plexus` subcommand. */
export interface Command {
  readonly name: string;
  readonly summary: string;
  readonly help: string;
  /** Runs with the arguments after the command name; resolves to the exit code. */
  run(args: string[]): Promise<number>;
}

/** A mistake in how the command was called: printed with a pointer to --help, exit 2. */
export class UsageError extends Error {
  constructor(
    readonly command: string,
    message: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

import { type ParseArgsConfig, parseArgs } from 'node:util';

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
