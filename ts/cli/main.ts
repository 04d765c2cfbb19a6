#!/usr/bin/env node
/**
 * The `plexus` command. Subcommands live in ts/cli/commands/; each exports a
 * `Command` with its own help text.
 */
import { readFileSync } from 'node:fs';
import { EXIT_USAGE, failureReport } from './command.js';
import { commands } from './registry.js';

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

function usage(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'plexus: run software on more than one machine.',
    '',
    'Usage: plexus <command> [options]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Options:',
    '  -h, --help     show help (plexus <command> --help for one command)',
    '  -v, --version  print the version',
    '',
    'Environment:',
    '  PLEXUS_BACKEND=wasm|js   kernels from WebAssembly (default) or their TypeScript twins',
    '  PLEXUS_DEBUG=1           print the stack trace of a failure',
    '',
    'Exit status (docs/cli.md):',
    '  0  done',
    '  1  the work failed; the message names its PLX_* code (a missing or malformed file too)',
    '  2  usage mistake (PLX_CLI_USAGE): unknown command or option, missing or out-of-range value',
    '  (sperli launch gives its job status, chronacta verify 1 for damage it finds)',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    const which = name === 'help' ? commands.find((c) => c.name === rest[0]) : undefined;
    process.stdout.write(`${which ? (await which.load()).help : usage()}\n`);
    return 0;
  }
  if (name === '-v' || name === '--version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const entry = commands.find((c) => c.name === name);
  if (!entry) {
    process.stderr.write(`plexus: error PLX_CLI_USAGE: unknown command "${name}"\n\n${usage()}\n`);
    return EXIT_USAGE;
  }
  // Options after `--` belong to the program a command runs (sperli launch ... -- PROGRAM).
  const dd = rest.indexOf('--');
  const own = dd >= 0 ? rest.slice(0, dd) : rest;
  const cmd = await entry.load();
  if (own.includes('-h') || own.includes('--help')) {
    process.stdout.write(`${cmd.help}\n`);
    return 0;
  }
  return cmd.run(rest);
}

// A failure outside the command's own promise (an event handler, a stray rejection) is reported
// the same way, without a stack trace unless PLEXUS_DEBUG=1, and ends the process as Node would.
function fatal(err: unknown): void {
  const r = failureReport(err);
  process.stderr.write(r.text);
  process.exit(r.exitCode);
}
process.on('uncaughtException', fatal);
process.on('unhandledRejection', fatal);

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    const r = failureReport(err);
    process.stderr.write(r.text);
    process.exitCode = r.exitCode;
  },
);
