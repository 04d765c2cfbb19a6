// A program outside the cluster talks to its actors. It inits a 3-node cluster on loopback,
// issues a client certificate (as `plexus cluster client-cert` does), starts three
// `plexus cluster node` processes, then, as a client that is no member: sends `inc` to a few
// built-in counters, asks one for its count, kills one node with SIGKILL and asks again
// (the client fails over to another member, or gets PLX_CLUSTER_DEADLINE after its deadline),
// and stops the other nodes with SIGTERM.
//
//   npx bun examples/cluster/actor-client.ts [--dir DIR] [--ports 7410,7411,7412]
//
// (after `npm ci`, which builds dist/; the nodes run `node` from PATH.) Without --dir the
// cluster lives in a temporary directory that is removed at the end.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { ActorClient, initCluster, isClientDeadline, writeClientCertificate } from 'plexus/cluster';

const PLEXUS = join(dirname(createRequire(import.meta.url).resolve('plexus/package.json')), 'dist/cli/main.js');
const { values } = parseArgs({
  options: { dir: { type: 'string' }, ports: { type: 'string', default: '7410,7411,7412' } },
});
const ports = (values.ports ?? '').split(',').map(Number);
const dir = values.dir ?? mkdtempSync(join(tmpdir(), 'plexus-client-'));
const NODES = ['a', 'b', 'c'];

/** Starts `plexus cluster node` and resolves once it joined. */
function start(config: string): Promise<ChildProcess> {
  const child = spawn('node', [PLEXUS, 'cluster', 'node', '--config', config, '--control'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      if ((JSON.parse(line) as { ev?: string }).ev === 'joined') resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`a node exited (${code}) before it joined`)));
  });
}

const nodes: ChildProcess[] = [];
let client: ActorClient | undefined;
try {
  const configs = await initCluster({ dir, id: 'shop', shards: 16, nodes: NODES, ports, journal: 'shared' });
  // The client's certificate: DIR/clients/web/{cert,key,ca}.pem, naming web.client.shop.plexus.internal.
  const files = await writeClientCertificate({ dir, client: 'web' });
  for (const id of NODES) nodes.push(await start(configs.get(id) as string));
  console.log(`nodes a, b, c: pids ${nodes.map((n) => n.pid).join(', ')}`);

  client = ActorClient.connect({
    members: ports.map((p) => `127.0.0.1:${p}`),
    tls: {
      cert: readFileSync(files.cert, 'utf8'),
      key: readFileSync(files.key, 'utf8'),
      ca: readFileSync(files.ca, 'utf8'),
    },
    deadlineMs: 8000,
  });
  for (let i = 0; i < 5; i++) {
    // Resolves once the actor's owner took the message durably, wherever the actor lives.
    console.log(`send vt:counter/cart${i} inc: ${await client.send(`vt:counter/cart${i}`, 'inc')}`);
  }
  const r = await client.ask('vt:counter/cart0', 'inc', { reply: true });
  console.log(`ask vt:counter/cart0: ${r.name} ${JSON.stringify(r.data)}`);

  // One member dies; the client goes on through the others. An actor on a shard the dead node
  // held answers once its lease expired and another node took the shard; until then its ask
  // waits, and after the client's deadline it fails with PLX_CLUSTER_DEADLINE.
  nodes[2]?.kill('SIGKILL');
  console.log('node c killed');
  for (let i = 0; i < 5; i++) {
    try {
      const a = await client.ask(`vt:counter/cart${i}`, 'inc', { reply: true });
      console.log(`ask vt:counter/cart${i}: ${a.name} ${JSON.stringify(a.data)}`);
    } catch (e) {
      if (!isClientDeadline(e)) throw e;
      console.log(`ask vt:counter/cart${i}: no answer within the deadline (${(e as Error).message})`);
    }
  }
  console.log(`attempts ${client.stats.attempts}, failovers ${client.stats.failovers}`);
} finally {
  client?.close();
  // Stop every node still running by its PID: it drains and exits 0.
  for (const n of nodes) {
    if (n.exitCode === null && n.signalCode === null) n.kill('SIGTERM');
    n.stdin?.end();
  }
  await Promise.all(
    nodes.map((n) =>
      n.exitCode !== null || n.signalCode !== null ? undefined : new Promise((r) => n.once('exit', r)),
    ),
  );
  if (values.dir === undefined) rmSync(dir, { recursive: true, force: true });
}
