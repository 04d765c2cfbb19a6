/**
 * `plexus cluster reshard <dir> <out>`: doubles the shard count of a stopped cluster into a
 * new directory (ts/cluster/reshard.ts; docs/cluster.md, "Offline resharding").
 */
import { reshardCluster } from '../../cluster/reshard.js';
import { parse, UsageError } from '../command.js';

/** The lines of `plexus cluster --help` for reshard. */
export const RESHARD_HELP = [
  '  reshard DIR OUT [--json]',
  '        Doubles the shard count of the STOPPED cluster in DIR (static membership,',
  "        per-node or shared journal) into the new directory OUT: every actor's",
  '        journal moves from shard s to s or s+N (FNV-1a 64 mod 2N) with its records',
  '        and epochs, and is read back and compared; OUT gets the CA, certificates,',
  '        node configs and cluster.meta of the new count and an authority.state whose',
  '        epoch ceiling is at or above every epoch DIR used (new leases are above it).',
  '        DIR is not changed. Start the nodes with OUT/nodes/<id>/node.json.',
  '        Refused: a node running (a log held open by a live Node.js process:',
  '        PLX_CLUSTER_RESHARD_RUNNING), OUT existing or',
  '        etcd/kubernetes/gossip membership (PLX_CLUSTER_RESHARD_REFUSED), a journal',
  '        damaged or a copy that differs (PLX_CLUSTER_RESHARD_DAMAGED; OUT removed).',
  '        Prints a progress bar on stderr when it is a terminal, then a summary;',
  '        --json: one object {cluster, layout, actors, entries, shardsBefore,',
  '        shardsAfter, bytes, epochCeiling, ms}.',
];

/** A one-line bar on stderr, redrawn at most every 100 ms, when stderr is a terminal. */
function progressBar(): { update(done: number, total: number): void; end(): void } {
  if (!process.stderr.isTTY) return { update() {}, end() {} };
  let last = 0;
  let drawn = false;
  const draw = (done: number, total: number) => {
    const width = 30;
    const full = total === 0 ? width : Math.round((done / total) * width);
    process.stderr.write(`\rresharding [${'#'.repeat(full)}${'.'.repeat(width - full)}] ${done}/${total} shards`);
    drawn = true;
  };
  return {
    update(done, total) {
      const now = performance.now();
      if (done === total || now - last >= 100) {
        last = now;
        draw(done, total);
      }
    },
    end() {
      if (drawn) process.stderr.write('\n');
    },
  };
}

export async function reshard(args: string[]): Promise<number> {
  const { values, positionals } = parse('cluster', {
    args,
    allowPositionals: true,
    options: { json: { type: 'boolean' } },
  });
  const [dir, out] = positionals;
  if (dir === undefined || out === undefined || positionals.length > 2) {
    throw new UsageError('cluster', 'reshard needs the cluster directory and the new directory: reshard DIR OUT');
  }
  const bar = progressBar();
  let s: Awaited<ReturnType<typeof reshardCluster>>;
  try {
    s = await reshardCluster({ dir, out, onProgress: (d, t) => bar.update(d, t) });
  } finally {
    bar.end();
  }
  if (values.json === true) {
    process.stdout.write(`${JSON.stringify(s)}\n`);
  } else {
    process.stdout.write(
      `resharded ${s.cluster} (${s.layout} journal) from ${s.shardsBefore} to ${s.shardsAfter} shards: ${s.actors} actors, ${s.entries} entries, ${s.bytes} bytes, verified, in ${s.ms} ms\n` +
        `start its nodes with ${out}/nodes/<id>/node.json\n`,
    );
  }
  return 0;
}
