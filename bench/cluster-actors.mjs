// The cluster actor benchmark: `node bench/cluster-actors.mjs` (uses dist/: build first with
// `npx tsc -p tsconfig.build.json`). Two plexus cluster nodes run as their own processes on
// loopback (HTTP/2 over mutual TLS 1.3, static membership, per-node journals with group-commit
// fsync). Node a sends 100-byte events to counter actors whose shards node b owns; every
// message is a durable actor message: b runs one macrostep for it, journals it (fsync'd) and
// only then acknowledges it. Two modes, at 1, 16 and 256 concurrent actor pairs (one sender
// loop per target actor, one message in flight each):
//
// - one-way: `node.send` resolves once b's macrostep is durable;
// - request/reply: `node.ask`; b's counter answers with a send back to a.
//
// Next to it:
// - moleculer 0.15.2 with its TCP transporter between two processes (this one calls, a child
//   serves `counter.inc`), request/reply with 16 in flight, nothing persisted;
// - the durable floor: the cheapest durable request/reply over the same parts, with no plexus
//   code. Bare node:http2 streams (one per pair) over mutual TLS 1.3 carry length-prefixed
//   100-byte requests. The serving process appends each request to a file opened with O_DSYNC,
//   gathering the requests of one turn of its event loop into one write (group commit), and
//   answers each with a 100-byte reply once its write returned. No acknowledgements, no actor,
//   no journal format, no deduplication: any durable request/reply over node:http2 on this
//   machine costs at least this much.
// Every case runs REPEATS times, alternating; the table gives medians. Target: durable actor
// request/reply at 16 pairs >= 1x moleculer's rate. `runClusterActorsSuite` is the hook for
// bench/run.mjs (it returns { entries, targets, table } like the other suites).
import { spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, write } from 'node:fs';
import * as http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connectH2, serverTls } from './mtls.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
// CLUSTER_ACTORS_ROOT points at another checkout's build (its dist/ and build/) to compare builds.
const ROOT = resolve(process.env.CLUSTER_ACTORS_ROOT ?? resolve(HERE, '..'));
const PAIRS = [1, 16, 256];
const REPEATS = Number(process.env.CLUSTER_ACTORS_REPEATS ?? 3);
const CASE_MS = Number(process.env.CLUSTER_ACTORS_MS ?? 1500);
const PAYLOAD = 'x'.repeat(100);
const SHARDS = Number(process.env.CLUSTER_ACTORS_SHARDS ?? 64);
const STREAMS = process.env.CLUSTER_ACTORS_STREAMS ? Number(process.env.CLUSTER_ACTORS_STREAMS) : undefined;
/** Extra node arguments for the two plexus node processes (e.g. `--cpu-prof`). */
const NODE_ARGS = (process.env.CLUSTER_ACTORS_NODE_ARGS ?? '').split(' ').filter(Boolean);
/** libuv's thread pool size of the two node processes (UV_THREADPOOL_SIZE; node's default is 4). */
const THREADS = process.env.CLUSTER_ACTORS_THREADS;
/** Lanes of each node's journal log (`journalLanes` of the node config; the default is 4). */
const LANES = process.env.CLUSTER_ACTORS_LANES ? Number(process.env.CLUSTER_ACTORS_LANES) : undefined;

/** CPU milliseconds a process has used (user + system, all threads), from /proc; undefined elsewhere. */
function cpuMs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return undefined;
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** Ports the nodes bind after they are written into their configs: below the ephemeral range (ts/net/ports.ts). */
const { freePorts } = await import(new URL('../dist/net/ports.js', import.meta.url).href);

// ------------------------------------------------------------------------------------------
// Child processes: a plexus node, or the moleculer server.

async function plexusNode(root, config) {
  const { runNodeProcess } = await import(pathToFileURL(resolve(root, 'dist/cluster/node-main.js')).href);
  process.exit(await runNodeProcess(config, { control: true }));
}

function moleculerOptions(id, ports) {
  return {
    nodeID: id,
    logger: false,
    transporter: {
      type: 'TCP',
      options: {
        udpDiscovery: false,
        port: id === 'ma' ? ports[0] : ports[1],
        urls: [`127.0.0.1:${ports[0]}/ma`, `127.0.0.1:${ports[1]}/mb`],
      },
    },
  };
}

async function moleculerServer(ports) {
  const { ServiceBroker } = await import('moleculer');
  const broker = new ServiceBroker(moleculerOptions('mb', ports));
  const counts = new Map();
  broker.createService({
    name: 'counter',
    actions: {
      inc(ctx) {
        const n = (counts.get(ctx.params.k) ?? 0) + 1;
        counts.set(ctx.params.k, n);
        return { n };
      },
    },
  });
  await broker.start();
  process.stdout.write('{"ev":"ready"}\n');
  process.on('SIGTERM', () => broker.stop().then(() => process.exit(0)));
}

/**
 * Reads length-prefixed frames (4-byte little-endian length, then the body) from a stream:
 * `onFrame(bytes)` gets each whole frame, length included (a view, valid during the call);
 * `onChunk()` runs after the frames of each chunk. A length above 1 MiB destroys the stream.
 */
function readFrames(stream, onFrame, onChunk) {
  let buf = Buffer.alloc(0);
  stream.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    let at = 0;
    while (buf.length - at >= 4) {
      const len = buf.readUInt32LE(at);
      if (len > 1 << 20) return stream.destroy();
      if (buf.length - at < 4 + len) break;
      onFrame(buf.subarray(at, at + 4 + len));
      at += 4 + len;
    }
    buf = buf.subarray(at);
    onChunk?.();
  });
}

/**
 * The durable floor's serving process: reads length-prefixed requests from bare node:http2
 * streams, appends them to `file` (O_DSYNC) one group per turn of the event loop, and writes
 * each request's reply on its stream once the group's write returned.
 */
async function floorServer(credsFile, file) {
  const creds = JSON.parse(readFileSync(credsFile, 'utf8'));
  const fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC);
  let group = [];
  let writing = false;
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (writing || group.length === 0) return;
    writing = true;
    const g = group;
    group = [];
    const bytes = Buffer.concat(g.map((e) => e.request));
    write(fd, bytes, 0, bytes.length, null, (err) => {
      writing = false;
      if (err) throw err;
      for (const e of g) e.stream.write(e.reply);
      flush();
    });
  };
  const server = http2.createSecureServer(serverTls(creds));
  server.prependListener('secureConnection', (socket) => socket.setNoDelay(true));
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200 });
    readFrames(
      stream,
      (frame) => {
        const request = Buffer.from(frame);
        const reply = Buffer.allocUnsafe(4 + 16 + PAYLOAD.length);
        reply.writeUInt32LE(16 + PAYLOAD.length, 0);
        request.copy(reply, 4, 4, 20);
        reply.fill(9, 20);
        group.push({ request, reply, stream });
      },
      () => {
        if (!scheduled) {
          scheduled = true;
          setImmediate(flush);
        }
      },
    );
    stream.on('error', () => {});
  });
  server.on('sessionError', () => {});
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  process.stdout.write(`${JSON.stringify({ ev: 'ready', port: server.address().port })}\n`);
  process.on('SIGTERM', () => {
    closeSync(fd);
    process.exit(0);
  });
}

/** The durable floor's calling side: `call(i)` sends one request on stream i and resolves with its reply. */
async function floorClient(port, creds) {
  const session = await connectH2(port, creds);
  let seq = 0;
  const lanes = new Map();
  const lane = (i) => {
    let l = lanes.get(i);
    if (l) return l;
    const stream = session.request({ ':method': 'POST', ':path': '/requests' }, { endStream: false });
    const waiting = [];
    l = { stream, waiting };
    readFrames(stream, () => waiting.shift()?.());
    stream.on('error', () => {});
    lanes.set(i, l);
    return l;
  };
  return {
    call(i) {
      const l = lane(i);
      const request = Buffer.allocUnsafe(4 + 16 + PAYLOAD.length);
      request.writeUInt32LE(16 + PAYLOAD.length, 0);
      request.writeDoubleLE(++seq, 4);
      request.writeDoubleLE(i, 12);
      request.fill(7, 20);
      return new Promise((r) => {
        l.waiting.push(r);
        l.stream.write(request);
      });
    },
    close: () => session.destroy(),
  };
}

// ------------------------------------------------------------------------------------------
// The driver

class Proc {
  constructor(args, env = process.env) {
    this.child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'], env });
    this.q = 0;
    this.waiters = [];
    this.lines = [];
    let buf = '';
    this.child.stdout.on('data', (d) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        let l;
        try {
          l = JSON.parse(buf.slice(0, i));
        } catch {
          l = undefined;
        }
        buf = buf.slice(i + 1);
        if (!l) continue;
        this.lines.push(l);
        this.waiters = this.waiters.filter((w) => {
          if (!w.pred(l)) return true;
          w.resolve(l);
          return false;
        });
      }
    });
    this.exit = new Promise((r) => this.child.on('exit', r));
  }
  wait(pred, ms = 60_000) {
    const f = this.lines.find(pred);
    if (f) return Promise.resolve(f);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('timed out')), ms);
      this.waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(t);
          resolve(l);
        },
      });
    });
  }
  cmd(c, ms) {
    const q = ++this.q;
    this.child.stdin.write(`${JSON.stringify({ ...c, q })}\n`);
    return this.wait((l) => l.q === q, ms);
  }
  async stop() {
    try {
      process.kill(this.child.pid, 'SIGTERM');
    } catch {}
    const t = setTimeout(() => {
      try {
        process.kill(this.child.pid, 'SIGKILL');
      } catch {}
    }, 8000);
    await this.exit;
    clearTimeout(t);
  }
}

/**
 * Runs one plexus case for about CASE_MS (a count from the previous rate); records the CPU
 * time both node processes spent per message in `cpu` (by case).
 */
async function plexusCase(pair, mode, pairs, rates, cpu) {
  const { a, b } = pair;
  const key = `${mode}/${pairs}`;
  const guess = rates.get(key) ?? (pairs === 1 ? 200 : 1500);
  const count = Math.max(pairs * 4, Math.round((guess * CASE_MS) / 1000));
  const c0 = [cpuMs(a.child.pid), cpuMs(b.child.pid)];
  const r = await a.cmd({ cmd: 'load', pairs, count, mode, prefix: `${mode}${pairs}-` }, 120_000);
  if (r.error) throw new Error(`load failed: ${r.error} ${r.message}`);
  const c1 = [cpuMs(a.child.pid), cpuMs(b.child.pid)];
  if (cpu && c0[0] !== undefined && c1[0] !== undefined) {
    const us = ((c1[0] - c0[0] + c1[1] - c0[1]) * 1000) / count;
    cpu.set(key, [...(cpu.get(key) ?? []), us]);
  }
  rates.set(key, r.perSec);
  return r.perSec;
}

async function moleculerCase(broker, inflight) {
  const end = performance.now() + CASE_MS;
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inflight }, async (_, i) => {
      while (performance.now() < end) {
        await broker.call('counter.inc', { k: `k${i}`, p: PAYLOAD });
        done++;
      }
    }),
  );
  return (done / (performance.now() - t0)) * 1000;
}

/** Runs the durable floor for about CASE_MS with `inflight` callers; records CPU µs per request (both processes) in `cpu`. */
async function floorCase(client, server, inflight, cpu) {
  const end = performance.now() + CASE_MS;
  let done = 0;
  const a0 = process.cpuUsage();
  const b0 = cpuMs(server.child.pid);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inflight }, async (_, i) => {
      while (performance.now() < end) {
        await client.call(i);
        done++;
      }
    }),
  );
  const rate = (done / (performance.now() - t0)) * 1000;
  const a1 = process.cpuUsage(a0);
  const b1 = cpuMs(server.child.pid);
  if (b0 !== undefined && b1 !== undefined) {
    const key = `floor/${inflight}`;
    cpu.set(key, [...(cpu.get(key) ?? []), (a1.user + a1.system + (b1 - b0) * 1000) / done]);
  }
  return rate;
}

export async function runClusterActorsSuite({ root = ROOT, log = console.log } = {}) {
  const { initCluster } = await import(pathToFileURL(resolve(root, 'dist/cluster/init.js')).href);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-cluster-actors-bench-'));
  const procs = [];
  let broker;
  let floor;
  try {
    const [ma, mb] = await freePorts(2);
    const self = fileURLToPath(import.meta.url);
    const startPair = async (fsync) => {
      const ports = await freePorts(2);
      const files = await initCluster({ dir: join(dir, fsync), id: 'bench', shards: SHARDS, nodes: ['a', 'b'], ports });
      const { readFile, writeFile } = await import('node:fs/promises');
      for (const f of files.values()) {
        const cfg = JSON.parse(await readFile(f, 'utf8'));
        await writeFile(
          f,
          JSON.stringify({
            ...cfg,
            fsync,
            ...(STREAMS ? { wire: { streamCap: STREAMS } } : {}),
            ...(LANES ? { journalLanes: LANES } : {}),
          }),
        );
      }
      const env = THREADS ? { ...process.env, UV_THREADPOOL_SIZE: THREADS } : process.env;
      const a = new Proc([...NODE_ARGS, self, '--node', root, files.get('a')], env);
      const b = new Proc([...NODE_ARGS, self, '--node', root, files.get('b')], env);
      procs.push(a, b);
      for (const p of [a, b]) await p.wait((l) => l.ev === 'held' && l.held.length > 0);
      for (let i = 0; ; i++) {
        const st = await a.cmd({ cmd: 'status' });
        if (st.leases.length === SHARDS) break;
        if (i > 200) throw new Error('the shards were not all leased');
        await new Promise((r) => setTimeout(r, 50));
      }
      return { a, b };
    };
    const server = new Proc([self, '--moleculer', String(ma), String(mb)]);
    procs.push(server);
    await server.wait((l) => l.ev === 'ready');
    const { ServiceBroker } = await import('moleculer');
    broker = new ServiceBroker(moleculerOptions('ma', [ma, mb]));
    await broker.start();
    await broker.waitForServices(['counter'], 20_000);
    // The durable floor's serving process, with node certificates of a cluster CA of its own.
    const { createClusterCa, issueNodeCertificate } = await import(
      pathToFileURL(resolve(root, 'dist/net/index.js')).href
    );
    const floorCa = await createClusterCa('bench');
    const creds = { a: await issueNodeCertificate(floorCa, 'a'), b: await issueNodeCertificate(floorCa, 'b') };
    const { writeFile: writeCreds } = await import('node:fs/promises');
    await writeCreds(join(dir, 'floor-creds.json'), JSON.stringify(creds));
    const floorServing = new Proc([self, '--floor', join(dir, 'floor-creds.json'), join(dir, 'floor.log')]);
    procs.push(floorServing);
    const { port: floorPort } = await floorServing.wait((l) => l.ev === 'ready');
    floor = await floorClient(floorPort, creds);
    const floorCpu = new Map();
    const res = new Map();
    const push = (k, v) => res.set(k, [...(res.get(k) ?? []), v]);
    // Durable (group-commit fsync) first, then the same path without fsync.
    const durable = await startPair('batch');
    const rates = new Map();
    const cpu = new Map();
    await plexusCase(durable, 'oneway', 16, rates);
    await plexusCase(durable, 'rr', 16, rates);
    await moleculerCase(broker, 16);
    await floorCase(floor, floorServing, 16, new Map());
    for (let rep = 0; rep < REPEATS; rep++) {
      for (const n of PAIRS) {
        push(`oneway/${n}`, await plexusCase(durable, 'oneway', n, rates, cpu));
        push(`rr/${n}`, await plexusCase(durable, 'rr', n, rates, cpu));
      }
      push('moleculer/16', await moleculerCase(broker, 16));
      push('floor/16', await floorCase(floor, floorServing, 16, floorCpu));
    }
    await durable.a.stop();
    await durable.b.stop();
    const nofsync = await startPair('never');
    const rates2 = new Map();
    const cpu2 = new Map();
    await plexusCase(nofsync, 'rr', 16, rates2);
    for (let rep = 0; rep < REPEATS; rep++) {
      push('nofsync-oneway/16', await plexusCase(nofsync, 'oneway', 16, rates2, cpu2));
      push('nofsync-rr/16', await plexusCase(nofsync, 'rr', 16, rates2, cpu2));
      push('moleculer/16', await moleculerCase(broker, 16));
    }
    const cpuOf = (m, key) => (m.has(key) ? median(m.get(key)).toFixed(0).padStart(7) : '      -');
    const mol = median(res.get('moleculer/16'));
    const entries = [];
    const lines = [
      `cluster actors: durable 100-byte actor messages/s between 2 node processes on loopback (median of ${REPEATS})`,
      `${'actor pairs'.padEnd(12)} ${'one-way'.padStart(9)} ${'request/reply'.padStart(14)} ${'rr / moleculer'.padStart(15)}  CPU µs/msg (both processes): one-way, rr`,
    ];
    for (const n of PAIRS) {
      const ow = median(res.get(`oneway/${n}`));
      const rr = median(res.get(`rr/${n}`));
      lines.push(
        `${String(n).padEnd(12)} ${ow.toFixed(0).padStart(9)} ${rr.toFixed(0).padStart(14)} ${(rr / mol).toFixed(2).padStart(15)}  ${cpuOf(cpu, `oneway/${n}`)} ${cpuOf(cpu, `rr/${n}`)}`,
      );
      entries.push({
        suite: 'cluster-actors',
        case: `durable actor message 100B one-way, ${n} pairs`,
        impl: 'plexus cluster (Http2Wire, journaled macrostep)',
        opsPerSec: ow,
        bytesPerSec: ow * 100,
      });
      entries.push({
        suite: 'cluster-actors',
        case: `durable actor message 100B request/reply, ${n} pairs`,
        impl: 'plexus cluster (Http2Wire, journaled macrostep)',
        opsPerSec: rr,
        bytesPerSec: rr * 100,
      });
    }
    const nfo = median(res.get('nofsync-oneway/16'));
    const nfr = median(res.get('nofsync-rr/16'));
    lines.push(
      `${'16, no fsync'.padEnd(12)} ${nfo.toFixed(0).padStart(9)} ${nfr.toFixed(0).padStart(14)} ${(nfr / mol).toFixed(2).padStart(15)}  ${cpuOf(cpu2, 'oneway/16')} ${cpuOf(cpu2, 'rr/16')}`,
    );
    lines.push(`moleculer 0.15.2 TCP transporter, request/reply, 16 in flight (not persisted): ${mol.toFixed(0)}/s`);
    const fl = median(res.get('floor/16'));
    const rr16 = median(res.get('rr/16'));
    lines.push(
      `durable floor (bare node:http2 + mutual TLS 1.3, O_DSYNC group commit, no plexus code), request/reply, 16 in flight: ` +
        `${fl.toFixed(0)}/s = ${(fl / mol).toFixed(2)}x moleculer, ${cpuOf(floorCpu, 'floor/16').trim()} µs CPU/request; ` +
        `plexus durable request/reply at 16 pairs = ${(rr16 / fl).toFixed(2)}x the floor`,
    );
    entries.push({
      suite: 'cluster-actors',
      case: 'durable request/reply 100B, 16 in flight',
      impl: 'bare node:http2 + O_DSYNC group commit (the durable floor, no plexus code)',
      opsPerSec: fl,
      bytesPerSec: fl * 100,
    });
    entries.push({
      suite: 'cluster-actors',
      case: 'actor message 100B one-way, 16 pairs, journaled without fsync',
      impl: 'plexus cluster (Http2Wire, journaled macrostep, fsync never)',
      opsPerSec: nfo,
      bytesPerSec: nfo * 100,
    });
    entries.push({
      suite: 'cluster-actors',
      case: 'actor message 100B request/reply, 16 pairs, journaled without fsync',
      impl: 'plexus cluster (Http2Wire, journaled macrostep, fsync never)',
      opsPerSec: nfr,
      bytesPerSec: nfr * 100,
    });
    entries.push({
      suite: 'cluster-actors',
      case: 'request/reply 100B, 16 in flight',
      impl: 'moleculer 0.15.2 TCP transporter',
      opsPerSec: mol,
      bytesPerSec: mol * 100,
    });
    const ow16 = median(res.get('oneway/16'));
    const targets = [
      { name: 'durable actor request/reply vs moleculer, 16 pairs', ratio: rr16 / mol, want: 1, ok: rr16 / mol >= 1 },
      { name: 'durable actor one-way vs moleculer, 16 pairs', ratio: ow16 / mol, want: 1, ok: ow16 / mol >= 1 },
      {
        name: 'actor request/reply without fsync vs moleculer, 16 pairs',
        ratio: nfr / mol,
        want: 1,
        ok: nfr / mol >= 1,
      },
    ];
    const table = lines.join('\n');
    log?.(table);
    return { entries, targets, table };
  } finally {
    floor?.close();
    await broker?.stop().catch(() => {});
    for (const p of procs) await p.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const argv = process.argv.slice(2);
if (argv[0] === '--node') {
  await plexusNode(argv[1], argv[2]);
} else if (argv[0] === '--floor') {
  await floorServer(argv[1], argv[2]);
} else if (argv[0] === '--moleculer') {
  await moleculerServer([Number(argv[1]), Number(argv[2])]);
} else if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const r = await runClusterActorsSuite();
  for (const t of r.targets)
    console.log(`${t.ok ? 'ok  ' : 'MISS'} ${t.name}: ${t.ratio.toFixed(2)} (want >= ${t.want})`);
  process.exit(0);
}
