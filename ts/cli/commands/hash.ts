import { open } from 'node:fs/promises';
import { crc32c, createSha256 } from '../../core/index.js';
import { type Command, parse, UsageError } from '../command.js';

const ALGS = ['sha256', 'crc32c'] as const;
type Alg = (typeof ALGS)[number];

const CHUNK = 1 << 20;

async function digestFile(path: string, alg: Alg): Promise<string> {
  const fh = path === '-' ? undefined : await open(path, 'r');
  const buf = new Uint8Array(CHUNK);
  const sha = alg === 'sha256' ? createSha256() : undefined;
  let crc = 0;
  const feed = (b: Uint8Array) => {
    if (sha) sha.update(b);
    else crc = crc32c(b, crc);
  };
  try {
    if (fh) {
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, CHUNK, null);
        if (bytesRead === 0) break;
        feed(buf.subarray(0, bytesRead));
      }
    } else {
      for await (const chunk of process.stdin) feed(chunk as Uint8Array);
    }
  } finally {
    await fh?.close();
  }
  if (sha) return Buffer.from(sha.digest()).toString('hex');
  return crc.toString(16).padStart(8, '0');
}

export const hash: Command = {
  name: 'hash',
  summary: 'digest files with the core kernels (sha256, crc32c)',
  help: [
    'Usage: plexus hash [--alg sha256|crc32c] FILE... (- for standard input)',
    '',
    'Prints "<digest>  <file>" per file, in hex, using the WebAssembly kernels',
    '(PLEXUS_BACKEND=js uses their TypeScript twins).',
    '',
    'Options:',
    '  -a, --alg NAME   sha256 (default) or crc32c',
    '',
    'Exit status: 0, 1 when a FILE cannot be read (PLX_CLI_IO; the others are still',
    'digested), 2 for a usage mistake.',
  ].join('\n'),
  async run(args) {
    const { values, positionals } = parse('hash', {
      args,
      allowPositionals: true,
      options: { alg: { type: 'string', short: 'a', default: 'sha256' } },
    });
    const alg = values.alg as Alg;
    if (!ALGS.includes(alg)) throw new UsageError('hash', `unknown --alg "${values.alg}": use ${ALGS.join(', ')}`);
    if (positionals.length === 0) throw new UsageError('hash', 'give at least one FILE (or - for standard input)');
    let status = 0;
    for (const path of positionals) {
      try {
        process.stdout.write(`${await digestFile(path, alg)}  ${path}\n`);
      } catch (e) {
        // The other files are still digested; the exit status says one could not be read.
        const err = e as NodeJS.ErrnoException;
        process.stderr.write(`plexus: error PLX_CLI_IO: cannot read ${path}: ${err.code ?? ''} ${err.message}\n`);
        status = 1;
      }
    }
    return status;
  },
};
