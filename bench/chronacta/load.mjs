// The load generator of the Chronacta suite (bench/chronacta.mjs starts it as a child
// process). One process, one thread: every gRPC client below is grpc-js with proto-loader,
// the same stack for both servers, each client on its own HTTP/2 connection (a local
// subchannel pool per channel). better-sqlite3 is a library, so it runs here, in this
// process, on this thread.
//
// argv[2] is a JSON object:
//   { root, chronacta: 'host:port', etcd: 'host:port' | null, sqliteDir,
//     concurrencies: [1, 16, 64], batches: [1, 100], readers: [1, 16],
//     samples, sampleMs, warmupMs, eventBytes }
//
// Every case runs closed loops (each client sends its next call when the previous one has
// been answered) for warmupMs, then `samples` windows of sampleMs. A window's rate counts
// the calls completed inside it; latencies are those of the calls completed inside the
// windows. One `BENCH {json}` line per case on stdout:
//   { impl, op: 'append' | 'read', conc, batch, eventsPerSec: [per window],
//     callsPerSec: [per window], p50Ms, p99Ms, calls }
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

const cfg = JSON.parse(process.argv[2]);
const require = createRequire(join(cfg.root, 'package.json'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const LOADER = { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true };
const CHANNEL = {
  'grpc.use_local_subchannel_pool': 1,
  'grpc.max_receive_message_length': 64 << 20,
  'grpc.max_send_message_length': 64 << 20,
};
const PAGE = 1000;
const payload = Buffer.alloc(cfg.eventBytes, 0x61);

function emit(o) {
  process.stdout.write(`BENCH ${JSON.stringify(o)}\n`);
}

function unary(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

function quantile(sorted, q) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** The per-window rates and latency quantiles of one case's recorded calls. */
function summarize(ends, lats, start, events) {
  const n = cfg.samples;
  const counts = new Array(n).fill(0);
  const inWindow = [];
  const stop = start + n * cfg.sampleMs;
  for (let i = 0; i < ends.length; i++) {
    const t = ends[i];
    if (t < start || t >= stop) continue;
    counts[Math.floor((t - start) / cfg.sampleMs)]++;
    inWindow.push(lats[i]);
  }
  const lat = Float64Array.from(inWindow).sort();
  const callsPerSec = counts.map((c) => (c * 1000) / cfg.sampleMs);
  return {
    callsPerSec,
    eventsPerSec: callsPerSec.map((c) => c * events),
    p50Ms: quantile(lat, 0.5),
    p99Ms: quantile(lat, 0.99),
    calls: lat.length,
  };
}

/**
 * Runs `conc` closed loops of `op(client index)` (which resolves with the number of events
 * it handled) through warm-up and the sample windows.
 */
async function closedLoop(conc, op) {
  const ends = [];
  const lats = [];
  const events = [];
  const t0 = performance.now();
  const start = t0 + cfg.warmupMs;
  const stop = start + cfg.samples * cfg.sampleMs;
  const loop = async (i) => {
    for (;;) {
      const a = performance.now();
      if (a >= stop) return;
      const ev = await op(i);
      const b = performance.now();
      ends.push(b);
      lats.push(b - a);
      events.push(ev);
    }
  };
  await Promise.all(Array.from({ length: conc }, (_, i) => loop(i)));
  return { ends, lats, events, start };
}

/** The same as closedLoop for a synchronous op, on this thread (one client). */
function syncLoop(op) {
  const ends = [];
  const lats = [];
  const events = [];
  const t0 = performance.now();
  const start = t0 + cfg.warmupMs;
  const stop = start + cfg.samples * cfg.sampleMs;
  for (;;) {
    const a = performance.now();
    if (a >= stop) break;
    const ev = op();
    const b = performance.now();
    ends.push(b);
    lats.push(b - a);
    events.push(ev);
  }
  return { ends, lats, events, start };
}

function report(impl, op, conc, batch, r) {
  const s = summarize(r.ends, r.lats, r.start, 1);
  // Reads return a varying number of events per call: count them per window.
  if (op === 'read') {
    const ev = new Array(cfg.samples).fill(0);
    const stop = r.start + cfg.samples * cfg.sampleMs;
    for (let i = 0; i < r.ends.length; i++) {
      const t = r.ends[i];
      if (t >= r.start && t < stop) ev[Math.floor((t - r.start) / cfg.sampleMs)] += r.events[i];
    }
    s.eventsPerSec = ev.map((c) => (c * 1000) / cfg.sampleMs);
  } else {
    s.eventsPerSec = s.callsPerSec.map((c) => c * batch);
  }
  emit({ impl, op, conc, batch, ...s });
}

const maxConc = Math.max(...cfg.concurrencies, ...cfg.readers);

// ---------- plexus Chronacta ----------
if (cfg.chronacta) {
  const def = protoLoader.loadSync(join(cfg.root, 'proto/chronacta.proto'), LOADER);
  const EventStore = grpc.loadPackageDefinition(def).plexus.chronacta.v1.EventStore;
  const clients = Array.from(
    { length: maxConc },
    () => new EventStore(cfg.chronacta, grpc.credentials.createInsecure(), CHANNEL),
  );
  let run = 0;
  for (const batch of cfg.batches) {
    const events = Array.from({ length: batch }, () => ({ type: 'bench', data: payload }));
    for (const conc of cfg.concurrencies) {
      run++;
      const r = await closedLoop(conc, async (i) => {
        await unary(clients[i], 'append', { stream: `bench-${run}-${i}`, events });
        return batch;
      });
      report('chronacta', 'append', conc, batch, r);
    }
  }
  for (const conc of cfg.readers) {
    const next = new Array(conc).fill(undefined);
    const r = await closedLoop(conc, async (i) => {
      const req = { maxCount: PAGE };
      if (next[i] !== undefined) req.fromPosition = next[i];
      const res = await unary(clients[i], 'readAll', req);
      next[i] = res.end ? undefined : res.nextPosition;
      return res.events.length;
    });
    report('chronacta', 'read', conc, PAGE, r);
  }
  for (const c of clients) c.close();
}

// ---------- etcd ----------
if (cfg.etcd) {
  const def = protoLoader.loadSync(join(cfg.root, 'bench/chronacta/etcd.proto'), LOADER);
  const KV = grpc.loadPackageDefinition(def).etcdserverpb.KV;
  const clients = Array.from({ length: maxConc }, () => new KV(cfg.etcd, grpc.credentials.createInsecure(), CHANNEL));
  const seq = new Array(maxConc).fill(0);
  const key = (run, i) => Buffer.from(`ev/${run}/${i}/${String(seq[i]++).padStart(10, '0')}`);
  let run = 0;
  for (const batch of cfg.batches) {
    for (const conc of cfg.concurrencies) {
      run++;
      const r = await closedLoop(conc, async (i) => {
        if (batch === 1) {
          await unary(clients[i], 'put', { key: key(run, i), value: payload });
        } else {
          const success = [];
          for (let k = 0; k < batch; k++) success.push({ requestPut: { key: key(run, i), value: payload } });
          await unary(clients[i], 'txn', { success });
        }
        return batch;
      });
      report('etcd', 'append', conc, batch, r);
    }
  }
  const from = Buffer.from('ev/');
  const end = Buffer.from('ev0');
  for (const conc of cfg.readers) {
    const next = new Array(conc).fill(from);
    const r = await closedLoop(conc, async (i) => {
      const res = await unary(clients[i], 'range', { key: next[i], rangeEnd: end, limit: PAGE });
      const kvs = res.kvs;
      next[i] = res.more && kvs.length > 0 ? Buffer.concat([kvs[kvs.length - 1].key, Buffer.from([0])]) : from;
      return kvs.length;
    });
    report('etcd', 'read', conc, PAGE, r);
  }
  for (const c of clients) c.close();
}

// ---------- better-sqlite3 (in this process) ----------
if (cfg.sqliteDir) {
  const Database = require('better-sqlite3');
  mkdirSync(cfg.sqliteDir, { recursive: true });
  const db = new Database(join(cfg.sqliteDir, 'events.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE events (id INTEGER PRIMARY KEY, stream TEXT NOT NULL, type TEXT NOT NULL, data BLOB)');
  const insert = db.prepare('INSERT INTO events (stream, type, data) VALUES (?, ?, ?)');
  let run = 0;
  for (const batch of cfg.batches) {
    run++;
    const stream = `bench-${run}-0`;
    const txn = db.transaction(() => {
      for (let k = 0; k < batch; k++) insert.run(stream, 'bench', payload);
    });
    const r = syncLoop(() => {
      if (batch === 1) insert.run(stream, 'bench', payload);
      else txn();
      return batch;
    });
    report('sqlite', 'append', 1, batch, r);
    await new Promise((resolve) => setImmediate(resolve));
  }
  const page = db.prepare('SELECT id, stream, type, data FROM events WHERE id > ? ORDER BY id LIMIT ?');
  let last = 0;
  const r = syncLoop(() => {
    const rows = page.all(last, PAGE);
    last = rows.length === PAGE ? rows[rows.length - 1].id : 0;
    return rows.length;
  });
  report('sqlite', 'read', 1, PAGE, r);
  db.close();
}
process.stdout.write('DONE\n');
