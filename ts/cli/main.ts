#!/usr/bin/env node
/**
 * The `plexus` command. Subcommands live in ts/cli/commands/; each exports a
 * `Command` with its own help text.
 */
import { readFileSync } from 'node:fs';
import { PlexusError } from '../core/errors.js';
import { type Command, UsageError } from './command.js';
import { chronacta } from './commands/chronacta.js';
import { cluster } from './commands/cluster.js';
import { demo } from './commands/demo.js';
import { federation } from './commands/federation.js';
import { hash } from './commands/hash.js';
import { shard } from './commands/shard.js';
import { sperli } from './commands/sperli.js';

const commands: readonly Command[] = [demo, shard, hash, sperli, chronacta, federation, cluster];

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
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    const which = name === 'help' ? commands.find((c) => c.name === rest[0]) : undefined;
    process.stdout.write(`${which ? which.help : usage()}\n`);
    return 0;
  }
  if (name === '-v' || name === '--version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const cmd = commands.find((c) => c.name === name);
  if (!cmd) {
    process.stderr.write(`plexus: unknown command "${name}"\n\n${usage()}\n`);
    return 2;
  }
  if (rest.includes('-h') || rest.includes('--help')) {
    process.stdout.write(`${cmd.help}\n`);
    return 0;
  }
  return cmd.run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`plexus: ${err.message}\n(see plexus ${err.command} --help)\n`);
      process.exitCode = 2;
    } else if (err instanceof PlexusError) {
      process.stderr.write(`plexus: error ${err.code}: ${err.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(
        `plexus: unexpected failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exitCode = 1;
    }
  },
);
