// The load generator of the Chronacta suite (bench/chronacta.mjs starts it as one or more
// child processes). One thread per process: every gRPC client below is grpc-js with
// proto-loader, the same stack for both servers, each client on its own HTTP/2 connection
// (a local subchannel pool per channel). better-sqlite3 is a library, so it runs in the
// first load process, on its thread, after the gRPC cases.
//
// argv[2] is a JSON object:
//   { root, chronacta: 'host:port', etcd: 'host:port' | null, sqliteDir,
//     concurrencies: [1, 16, 64], batches: [1, 100], readers: [1, 16],
//     samples, sampleMs, warmupMs, eventBytes,
//     loaders: 1, loader: 0, startAt: epoch ms | undefined, gapMs, warmSlots: 0,
//     serverPids: { chronacta: pid, etcd: pid } }
//
// warmSlots: before its first measured case, each gRPC server gets that many slots of
// appends at the largest concurrency (batch sizes in turn, nothing reported), so that what
// is measured is a server past its start: V8 optimises a Node.js server's hot functions only
// after seconds of load, and the load processes' own gRPC code warms up the same way.
//
// With `loaders` = N, N processes share every case: the case's clients 0 .. conc-1 are
// dealt out round robin (client i runs in process i mod N), and every process runs case k
// of the gRPC cases (Chronacta appends, reads, then etcd's) in the same wall-clock slot,
// from startAt + k * (warmupMs + samples * sampleMs + gapMs). Without startAt the first
// slot starts at once.
//
// Every case runs closed loops (each client sends its next call when the previous one has
// been answered) for warmupMs, then `samples` windows of sampleMs. One `BENCH {json}` line
// per case and process on stdout, which bench/chronacta.mjs adds up over the processes:
//   { impl, op, conc, batch, loader, clients, calls: [per window], events: [per window],
//     lats: [ms of every call completed inside the windows], lateMs,
//     serverCpuUs, loadCpuUs }
// serverCpuUs is the server's user + system CPU time over the windows (from /proc: it does
// not depend on what else the machine runs), loadCpuUs this process's own.
import { mkdirSync, readFileSync } from 'node:fs';
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
const LOADERS = cfg.loaders ?? 1;
const ME = cfg.loader ?? 0;
const SLOT_MS = cfg.warmupMs + cfg.samples * cfg.sampleMs + (cfg.gapMs ?? 500);
/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes. */
const now = () => performance.timeOrigin + performance.now();
let firstSlot = cfg.startAt;
let slot = 0;

/** The global indices (0 .. conc-1) of the clients this process runs. */
function mine(conc) {
  const out = [];
  for (let i = ME; i < conc; i += LOADERS) out.push(i);
  return out;
}

/** User + system CPU time of process `pid` in microseconds (from /proc), or NaN. */
function procCpuUs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) * (1e6 / 100); // USER_HZ ticks
  } catch {
    return Number.NaN;
  }
}

/** CPU time of the server under test and of this process, read at `from` and at `to` (wall clock). */
function cpuOver(serverPid, from, to) {
  const read = () => {
    const c = process.cpuUsage();
    return { server: serverPid ? procCpuUs(serverPid) : Number.NaN, self: c.user + c.system };
  };
  const at = (t) => new Promise((r) => setTimeout(() => r(read()), Math.max(0, t - now())));
  return Promise.all([at(from), at(to)]).then(([a, b]) => ({
    serverCpuUs: b.server - a.server,
    loadCpuUs: b.self - a.self,
  }));
}

/** Waits for the next case's slot; returns its start and how late this process is for it. */
async function nextSlot() {
  firstSlot ??= now();
  const at = firstSlot + slot++ * SLOT_MS;
  const wait = at - now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  return { t0: at, lateMs: Math.max(0, -wait) };
}

function emit(o) {
  process.stdout.write(`BENCH ${JSON.stringify(o)}\n`);
}

function unary(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

/** The calls and events completed in each sample window, and the latencies of those calls. */
function windows(r) {
  const n = cfg.samples;
  const calls = new Array(n).fill(0);
  const events = new Array(n).fill(0);
  const lats = [];
  const stop = r.start + n * cfg.sampleMs;
  for (let i = 0; i < r.ends.length; i++) {
    const t = r.ends[i];
    if (t < r.start || t >= stop) continue;
    const w = Math.floor((t - r.start) / cfg.sampleMs);
    calls[w]++;
    events[w] += r.events[i];
    lats.push(Math.round(r.lats[i] * 1000) / 1000);
  }
  return { calls, events, lats };
}

/**
 * Runs `conc` closed loops of `op(client index)` (which resolves with the number of events
 * it handled) through warm-up and the sample windows.
 */
async function closedLoop(conc, op, serverPid) {
  const ends = [];
  const lats = [];
  const events = [];
  const { t0, lateMs } = await nextSlot();
  const start = t0 + cfg.warmupMs;
  const stop = start + cfg.samples * cfg.sampleMs;
  const loop = async (i) => {
    for (;;) {
      const a = now();
      if (a >= stop) return;
      const ev = await op(i);
      const b = now();
      ends.push(b);
      lats.push(b - a);
      events.push(ev);
    }
  };
  const ids = mine(conc);
  const cpu = cpuOver(serverPid, start, stop);
  await Promise.all(ids.map((i) => loop(i)));
  return { ends, lats, events, start, clients: ids.length, lateMs, ...(await cpu) };
}

/** The same as closedLoop for a synchronous op, on this thread (one client). */
function syncLoop(op) {
  const ends = [];
  const lats = [];
  const events = [];
  const t0 = now();
  const start = t0 + cfg.warmupMs;
  const stop = start + cfg.samples * cfg.sampleMs;
  let c0;
  for (;;) {
    const a = now();
    if (a >= stop) break;
    if (c0 === undefined && a >= start) c0 = process.cpuUsage();
    const ev = op();
    const b = now();
    ends.push(b);
    lats.push(b - a);
    events.push(ev);
  }
  const cpu = process.cpuUsage(c0);
  return {
    ends,
    lats,
    events,
    start,
    clients: 1,
    lateMs: 0,
    serverCpuUs: Number.NaN,
    loadCpuUs: cpu.user + cpu.system,
  };
}

function report(impl, op, conc, batch, r) {
  emit({
    impl,
    op,
    conc,
    batch,
    loader: ME,
    clients: r.clients,
    lateMs: Math.round(r.lateMs),
    serverCpuUs: r.serverCpuUs,
    loadCpuUs: r.loadCpuUs,
    ...windows(r),
  });
}

const maxConc = Math.max(...cfg.concurrencies, ...cfg.readers);
const WARM_SLOTS = cfg.warmSlots ?? 0;

/** The warm-up slots of one server: appends at the largest concurrency, batch sizes in turn. */
async function warmUp(append, serverPid) {
  const conc = Math.max(...cfg.concurrencies);
  for (let w = 0; w < WARM_SLOTS; w++) {
    const batch = cfg.batches[w % cfg.batches.length];
    await closedLoop(conc, (i) => append(`warm-${w}`, i, batch), serverPid);
  }
}

// ---------- plexus Chronacta ----------
if (cfg.chronacta) {
  const def = protoLoader.loadSync(join(cfg.root, 'proto/chronacta.proto'), LOADER);
  const EventStore = grpc.loadPackageDefinition(def).plexus.chronacta.v1.EventStore;
  // Indexed by the client's global index; only this process's clients are made.
  const clients = Array.from({ length: maxConc }, (_, i) =>
    i % LOADERS === ME ? new EventStore(cfg.chronacta, grpc.credentials.createInsecure(), CHANNEL) : undefined,
  );
  const eventsOf = new Map(
    cfg.batches.map((b) => [b, Array.from({ length: b }, () => ({ type: 'bench', data: payload }))]),
  );
  const append = async (tag, i, batch) => {
    await unary(clients[i], 'append', { stream: `bench-${tag}-${i}`, events: eventsOf.get(batch) });
    return batch;
  };
  await warmUp(append, cfg.serverPids?.chronacta);
  let run = 0;
  for (const batch of cfg.batches) {
    for (const conc of cfg.concurrencies) {
      run++;
      const r = await closedLoop(conc, (i) => append(run, i, batch), cfg.serverPids?.chronacta);
      report('chronacta', 'append', conc, batch, r);
    }
  }
  for (const conc of cfg.readers) {
    const next = new Array(conc).fill(undefined);
    const r = await closedLoop(
      conc,
      async (i) => {
        const req = { maxCount: PAGE };
        if (next[i] !== undefined) req.fromPosition = next[i];
        const res = await unary(clients[i], 'readAll', req);
        next[i] = res.end ? undefined : res.nextPosition;
        return res.events.length;
      },
      cfg.serverPids?.chronacta,
    );
    report('chronacta', 'read', conc, PAGE, r);
  }
  for (const c of clients) c?.close();
}

// ---------- etcd ----------
if (cfg.etcd) {
  const def = protoLoader.loadSync(join(cfg.root, 'bench/chronacta/etcd.proto'), LOADER);
  const KV = grpc.loadPackageDefinition(def).etcdserverpb.KV;
  const clients = Array.from({ length: maxConc }, (_, i) =>
    i % LOADERS === ME ? new KV(cfg.etcd, grpc.credentials.createInsecure(), CHANNEL) : undefined,
  );
  const seq = new Array(maxConc).fill(0);
  // Warm-up keys live under wu/, outside the ev/ range the read cases page through.
  const key = (run, i) =>
    Buffer.from(`${typeof run === 'number' ? 'ev' : 'wu'}/${run}/${i}/${String(seq[i]++).padStart(10, '0')}`);
  const append = async (run, i, batch) => {
    if (batch === 1) {
      await unary(clients[i], 'put', { key: key(run, i), value: payload });
    } else {
      const success = [];
      for (let k = 0; k < batch; k++) success.push({ requestPut: { key: key(run, i), value: payload } });
      await unary(clients[i], 'txn', { success });
    }
    return batch;
  };
  await warmUp(append, cfg.serverPids?.etcd);
  let run = 0;
  for (const batch of cfg.batches) {
    for (const conc of cfg.concurrencies) {
      run++;
      const r = await closedLoop(conc, (i) => append(run, i, batch), cfg.serverPids?.etcd);
      report('etcd', 'append', conc, batch, r);
    }
  }
  const from = Buffer.from('ev/');
  const end = Buffer.from('ev0');
  for (const conc of cfg.readers) {
    const next = new Array(conc).fill(from);
    const r = await closedLoop(
      conc,
      async (i) => {
        const res = await unary(clients[i], 'range', { key: next[i], rangeEnd: end, limit: PAGE });
        const kvs = res.kvs;
        next[i] = res.more && kvs.length > 0 ? Buffer.concat([kvs[kvs.length - 1].key, Buffer.from([0])]) : from;
        return kvs.length;
      },
      cfg.serverPids?.etcd,
    );
    report('etcd', 'read', conc, PAGE, r);
  }
  for (const c of clients) c?.close();
}

// ---------- better-sqlite3 (in this process) ----------
if (cfg.sqliteDir && ME === 0) {
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
