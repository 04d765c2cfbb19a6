import { shardOf } from '../../core/index.js';
import { type Command, parse, UsageError } from '../command.js';

export const shard: Command = {
  name: 'shard',
  summary: 'print the shard of actor IRIs (shard hash version 1)',
  help: [
    'Usage: plexus shard IRI... --shards N [--json]',
    '',
    'Prints the shard of each IRI under shard hash version 1: FNV-1a 64 of the',
    "IRI's UTF-8 bytes, mod N. N is a power of two from 1 to 1048576.",
    '',
    'Options:',
    '  -n, --shards N   number of shards (required)',
    '      --json       one JSON object per line: {"iri", "shard", "fnv1a64"}',
    '',
    'Example:',
    '  plexus shard vt:orders/1234 --shards 256',
  ].join('\n'),
  async run(args) {
    const { values, positionals } = parse('shard', {
      args,
      allowPositionals: true,
      options: { shards: { type: 'string', short: 'n' }, json: { type: 'boolean' } },
    });
    if (values.shards === undefined) throw new UsageError('shard', 'missing --shards N');
    if (!/^\d+$/.test(values.shards))
      throw new UsageError('shard', `--shards takes a whole number, got "${values.shards}"`);
    if (positionals.length === 0) throw new UsageError('shard', 'give at least one IRI');
    const n = Number(values.shards);
    const { fnv1a64 } = await import('../../core/index.js');
    for (const iri of positionals) {
      const s = shardOf(iri, n);
      if (values.json) {
        process.stdout.write(
          `${JSON.stringify({ iri, shard: s, fnv1a64: fnv1a64(iri).toString(16).padStart(16, '0') })}\n`,
        );
      } else process.stdout.write(`${s}\t${iri}\n`);
    }
    return 0;
  },
};
