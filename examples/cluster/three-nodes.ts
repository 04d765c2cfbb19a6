// Your own actors on a 3-node cluster on loopback. It inits the cluster (CA, certificates, one
// node config per node), adds the chart module greeter-charts.mjs and a metrics port to the
// node configs, starts three `plexus cluster node` processes, greets actors that live on
// different nodes, reads the guestbook they signed across the cluster, shows that the built-in
// charts are still there, scrapes each node's /metrics, and stops the nodes with SIGTERM.
//
//   npx bun examples/cluster/three-nodes.ts [--dir DIR] [--ports 7400,7401,7402]
//                                          [--metrics-ports 9400,9401,9402]
//
// (after `npm ci`, which builds dist/: the imports below are the package's public entry points;
// the nodes run `node` from PATH.) Without --dir the cluster lives in a temporary directory that
// is removed at the end.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type ChartModule, type ClusterNodeConfig, initCluster, shardOfIri } from 'plexus/cluster';
import * as greeterCharts from './greeter-charts.mjs';

// The chart module has the shape a node loads (checked by the compiler here, by the node at start).
const chartModule: ChartModule = greeterCharts;
const CHARTS_FILE = join(dirname(fileURLToPath(import.meta.url)), 'greeter-charts.mjs');
const PLEXUS = join(dirname(createRequire(import.meta.url).resolve('plexus/package.json')), 'dist/cli/main.js');

const { values } = parseArgs({
  options: {
    dir: { type: 'string' },
    ports: { type: 'string', default: '7400,7401,7402' },
    'metrics-ports': { type: 'string', default: '9400,9401,9402' },
  },
});
const ports = (values.ports ?? '').split(',').map(Number);
const metricsPorts = (values['metrics-ports'] ?? '').split(',').map(Number);
const dir = values.dir ?? mkdtempSync(join(tmpdir(), 'plexus-greeters-'));
const NODES = ['a', 'b', 'c'];
const SHARDS = 16;

/** A running node: its process, and its control channel (JSON lines on stdin and stdout). */
interface RunningNode {
  readonly id: string;
  readonly child: ChildProcess;
  metrics?: string;
  ask(cmd: Record<string, unknown>): Promise<Record<string, unknown>>;
  exited: Promise<number | null>;
}

function start(id: string, config: string, extra: string[]): Promise<RunningNode> {
  const child = spawn('node', [PLEXUS, 'cluster', 'node', '--config', config, '--control', ...extra], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let q = 0;
  const waiting = new Map<number, (o: Record<string, unknown>) => void>();
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return new Promise((resolve, reject) => {
    const node: RunningNode = {
      id,
      child,
      exited,
      ask: (cmd) =>
        new Promise((res) => {
          const n = ++q;
          waiting.set(n, res);
          child.stdin?.write(`${JSON.stringify({ ...cmd, q: n })}\n`);
        }),
    };
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (o.ev === 'joined') {
        node.metrics = o.metrics as string | undefined;
        resolve(node);
      } else if (typeof o.q === 'number') {
        waiting.get(o.q)?.(o);
        waiting.delete(o.q);
      }
    });
    void exited.then((code) => reject(new Error(`node ${id} exited (${code}) before it joined`)));
  });
}

/** One metric's value (summed over its labels) from Prometheus text. */
function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

const running: RunningNode[] = [];
try {
  const configs = await initCluster({ dir, id: 'greeters', shards: SHARDS, nodes: NODES, ports });
  // Nodes a and b name the chart module in their config (relative to the config file); node c
  // gets it on the command line. Every node serves metrics on loopback.
  NODES.forEach((id, i) => {
    const file = configs.get(id) as string;
    const cfg = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    if (id !== 'c') cfg.charts = relative(dirname(file), CHARTS_FILE);
    cfg.metrics = { host: '127.0.0.1', port: metricsPorts[i] };
    writeFileSync(file, `${JSON.stringify(cfg, null, 2)}\n`);
  });
  for (const id of NODES) {
    const n = await start(id, configs.get(id) as string, id === 'c' ? ['--charts', CHARTS_FILE] : []);
    running.push(n);
    console.log(`node ${id}: pid ${n.child.pid}, metrics http://${n.metrics}/metrics`);
  }
  const [a, b] = running as [RunningNode, RunningNode, RunningNode];
  const meta = (JSON.parse(readFileSync(configs.get('a') as string, 'utf8')) as ClusterNodeConfig).meta;

  // Wait until every shard has an owner.
  const ownerOf = new Map<number, string>();
  for (const t0 = Date.now(); ownerOf.size < SHARDS; ) {
    if (Date.now() - t0 > 60_000) throw new Error('the shards did not all get an owner within 60 s');
    const s = await a.ask({ cmd: 'status' });
    for (const l of s.leases as { shard: number; owner: string }[]) ownerOf.set(l.shard, l.owner);
    if (ownerOf.size < SHARDS) await new Promise((r) => setTimeout(r, 100));
  }

  // Greet from node a: each greeter lives on the node that owns its shard.
  const guests = ['Ada', 'Grace', 'Linus', 'Barbara', 'Edsger'];
  for (const who of guests) {
    const target = `vt:greeter/${who.toLowerCase()}`;
    const r = await a.ask({ cmd: 'ask', target, event: 'greet', data: { who }, timeoutMs: 30_000 });
    if (r.error !== undefined) throw new Error(`${target}: ${r.error} ${r.message}`);
    const d = r.data as { text: string; greeted: number };
    console.log(`${target} (node ${ownerOf.get(shardOfIri(meta, target))}) answered: ${d.text} (#${d.greeted})`);
  }

  // The greeters signed the guestbook wherever it lives; read it from node b.
  let names: string[] = [];
  let reads = 0;
  for (const t0 = Date.now(); names.length < guests.length; ) {
    if (Date.now() - t0 > 30_000) throw new Error(`the guestbook has ${names.length} of ${guests.length} names`);
    const r = await b.ask({ cmd: 'ask', target: 'vt:guestbook/main', event: 'read', timeoutMs: 30_000 });
    reads++;
    names = ((r.data as { names?: string[] } | null)?.names ?? []).slice();
    if (names.length < guests.length) await new Promise((res) => setTimeout(res, 100));
  }
  const home = ownerOf.get(shardOfIri(meta, 'vt:guestbook/main'));
  console.log(
    `vt:guestbook/main (node ${home}) holds ${names.length} names (read ${reads} time(s)): ${names.join(', ')}`,
  );

  // The built-in charts run next to yours.
  const c = await b.ask({ cmd: 'ask', target: 'vt:counter/visits', event: 'inc', data: { reply: true } });
  console.log(`built-in vt:counter/visits answered ${(c.data as { n: number }).n}`);
  console.log(`charts from the module: ${Object.keys(chartModule.charts).join(', ')}`);

  for (const n of running) {
    const text = await (await fetch(`http://${n.metrics}/metrics`)).text();
    console.log(
      `node ${n.id} metrics: ${['messages_in', 'messages_out', 'macrosteps', 'journal_appends']
        .map((m) => `${m} ${metric(text, `plexus_node_${m}_total`)}`)
        .join(', ')}, leases_held ${metric(text, 'plexus_node_leases_held')}`,
    );
  }
} finally {
  // Stop every node by its PID: it drains and exits 0.
  for (const n of running) {
    if (n.child.exitCode === null) n.child.kill('SIGTERM');
    n.child.stdin?.end();
  }
  for (const n of running) console.log(`node ${n.id} stopped (exit ${await n.exited})`);
  if (values.dir === undefined) rmSync(dir, { recursive: true, force: true });
}
