// Two builds of the Chronacta server side by side: `node bench/chronacta/ab.mjs ROOT_A ROOT_B [--rounds N]`.
//
// Starts `plexus chronacta serve` from each root (ROOT/dist/cli/main.js, fsync batch),
// then drives them in turns from this process with the benchmark's client stack (grpc-js
// + proto-loader, 64 clients each on their own HTTP/2 connection, closed loops): a window
// of WINDOW_MS on A, then on B, for N rounds per case. On a busy machine the load drifts
// slowly; windows taken in turns see the same drift, so their medians compare the builds
// where whole benchmark runs one after the other do not. Prints one JSON line per case:
//   { case, a: { eventsPerSec, p50Ms, p99Ms }, b: {...}, ratio: b/a events/s }
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const roundsAt = args.indexOf('--rounds');
const rounds = roundsAt >= 0 ? Number(args[roundsAt + 1]) : 10;
const [rootA, rootB] = args
  .filter((a, i) => !a.startsWith('--') && (roundsAt < 0 || i !== roundsAt + 1))
  .map((r) => resolve(r));
if (!rootA || !rootB) {
  console.error('usage: node bench/chronacta/ab.mjs ROOT_A ROOT_B [--rounds N]');
  process.exit(2);
}
const here = createRequire(join(dirname(fileURLToPath(import.meta.url)), '../../package.json'));
const grpc = here('@grpc/grpc-js');
const protoLoader = here('@grpc/proto-loader');
const CONC = 64;
const WINDOW_MS = 700;
const payload = Buffer.alloc(100, 0x61);

async function start(root) {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-chronacta-ab-'));
  const child = spawn(
    process.execPath,
    [join(root, 'dist/cli/main.js'), 'chronacta', 'serve', '--data', dir, '--port', '0', '--metrics-port', '0'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const address = await new Promise((ok, no) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c) => {
      out += c;
      const m = /"address":"([^"]+)"/.exec(out);
      if (m) ok(m[1]);
    });
    child.on('close', (code) => no(new Error(`server exited ${code}`)));
  });
  const def = protoLoader.loadSync(join(root, 'proto/chronacta.proto'), {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const EventStore = grpc.loadPackageDefinition(def).plexus.chronacta.v1.EventStore;
  const clients = Array.from(
    { length: CONC },
    () => new EventStore(address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
  return {
    clients,
    async stop() {
      for (const c of clients) c.close();
      child.kill('SIGTERM');
      await new Promise((r) => child.on('close', r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One window of closed loops on `srv`: calls completed and their latencies. */
async function window(srv, batch, tag) {
  const events = Array.from({ length: batch }, () => ({ type: 'bench', data: payload }));
  const stop = performance.now() + WINDOW_MS;
  const lats = [];
  await Promise.all(
    srv.clients.map(async (c, i) => {
      while (performance.now() < stop) {
        const t = performance.now();
        await new Promise((ok, no) => c.append({ stream: `ab-${tag}-${i}`, events }, (e) => (e ? no(e) : ok())));
        lats.push(performance.now() - t);
      }
    }),
  );
  return lats;
}

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
const q = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

const a = await start(rootA);
const b = await start(rootB);
try {
  for (const batch of [1, 100]) {
    await window(a, batch, 'warm'); // warm-up, not counted
    await window(b, batch, 'warm');
    const rates = { a: [], b: [] };
    const lats = { a: [], b: [] };
    for (let r = 0; r < rounds; r++) {
      // Alternate which goes first, so neither always follows the other.
      const order = r % 2 === 0 ? ['a', 'b'] : ['b', 'a'];
      for (const k of order) {
        const l = await window(k === 'a' ? a : b, batch, `${batch}-${r}`);
        rates[k].push((l.length * batch * 1000) / WINDOW_MS);
        lats[k].push(...l);
      }
    }
    const sum = (k) => {
      const s = Float64Array.from(lats[k]).sort();
      return { eventsPerSec: Math.round(median(rates[k])), p50Ms: q(s, 0.5), p99Ms: q(s, 0.99) };
    };
    const ra = sum('a');
    const rb = sum('b');
    console.log(
      JSON.stringify({
        case: `append x${batch}, ${CONC} clients`,
        a: ra,
        b: rb,
        ratio: Number((rb.eventsPerSec / ra.eventsPerSec).toFixed(2)),
      }),
    );
  }
} finally {
  await a.stop();
  await b.stop();
}
