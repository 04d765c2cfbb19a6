// The cluster transport benchmark (b): `node bench/cluster.mjs` (uses dist/: build first with
// `npx tsc -p tsconfig.build.json`). Two processes on loopback: this one sends, a child
// receives. It measures acknowledged 100-byte frames per second at 1, 16 and 256 in flight for
//
// - plexus Http2Wire (HTTP/2 over mutual TLS 1.3, Ed25519 node certificates of a cluster CA):
//   each frame is a full cluster frame (40-byte header, sender and target IRIs, 100-byte
//   payload) stored into an in-memory bounded mailbox (a consumer empties it) and
//   acknowledged (ACK runs on the connection's ACK stream); no journal;
// - the ceiling: one raw node:tls TLS 1.3 socket between the same two processes with the same
//   certificates, carrying length-prefixed frames (4-byte length, 16-byte id, 100 bytes) and a
//   16-byte acknowledgement per frame;
// - bare node:http2 over the same mutual TLS 1.3: one long-lived stream per pair carrying the
//   same length-prefixed frames and 16-byte acknowledgements, nothing else (no cluster frame,
//   no mailbox): the floor of any transport built on node:http2, as the cluster wire is;
// - moleculer 0.15 with its TCP transporter between the same two processes: request/reply
//   (a 100-character string parameter, a number back) at 16 in flight.
//
// Every case runs REPEATS times alternating the implementations; the table gives medians and
// the ratio plexus / ceiling. Targets: >= 0.5x the ceiling at 256 in flight, >= 5x moleculer
// at 16 in flight. `runClusterSuite` is the hook for
// bench/run.mjs (it returns { entries, targets, table } like the other suites).
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import * as tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { clientTls, connectH2, serverTls } from './mtls.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
// CLUSTER_BENCH_ROOT points at another checkout's build (its dist/ and build/) to compare builds.
const ROOT = resolve(process.env.CLUSTER_BENCH_ROOT ?? resolve(HERE, '..'));
const INFLIGHT = (process.env.CLUSTER_BENCH_INFLIGHT ?? '1,16,256').split(',').map(Number);
const PAYLOAD = 100;
const REPEATS = Number(process.env.CLUSTER_BENCH_REPEATS ?? 3);
const CASE_MS = Number(process.env.CLUSTER_BENCH_MS ?? 2000);
const MOLECULER_INFLIGHT = 16;
// The polling window of the second pair of wires (Http2Wire `spinMs`; the default is 0, off).
const POLL_MS = Number(process.env.CLUSTER_BENCH_POLL_MS ?? 1);
// Optional wire tuning for experiments (the defaults of Http2Wire otherwise).
const TUNING = {
  ...(process.env.CLUSTER_BENCH_STREAM_CAP ? { streamCap: Number(process.env.CLUSTER_BENCH_STREAM_CAP) } : {}),
  ...(process.env.CLUSTER_BENCH_POOL ? { poolSize: Number(process.env.CLUSTER_BENCH_POOL) } : {}),
};
const SKIP_ONE_PAIR = process.env.CLUSTER_BENCH_ONE_PAIR === '0';
/** Only the Http2Wire cases (for profiling with `node --cpu-prof`). */
const ONLY_WIRE = process.env.CLUSTER_BENCH_ONLY_WIRE === '1';

const median = (xs) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// ------------------------------------------------------------------------------------------
// The receiving process

async function serve(credsFile) {
  const { readFileSync } = await import('node:fs');
  const creds = JSON.parse(readFileSync(credsFile, 'utf8'));
  const { Http2Wire } = await import(resolve(ROOT, 'dist/net/index.js'));
  const { BoundedMailbox } = await import(resolve(ROOT, 'dist/cluster/index.js'));
  const mailbox = new BoundedMailbox(1024);
  (async () => {
    for (;;) await mailbox.next();
  })();
  /** A listening wire of node b whose frames go into the mailbox. */
  const listening = async (extra) => {
    const w = new Http2Wire({
      ...TUNING,
      ...extra,
      self: 'b',
      cluster: 'bench',
      tls: creds.b,
      resolve: () => undefined,
      isMember: (n) => n === 'a' || n === 'b',
    });
    w.onFrame(async (_from, f) => {
      await mailbox.put(f);
      return 'stored';
    });
    return w.listen();
  };
  const wireAddress = await listening({});
  // The same, polling for POLL_MS while frames and ACKs are due (docs/cluster.md, "Polling").
  const pollingAddress = await listening({ spinMs: POLL_MS });

  const serving = serverTls(creds);
  /** Reads length-prefixed frames from a duplex and answers each with its 16-byte id. */
  const acknowledge = (duplex) => {
    let buf = Buffer.alloc(0);
    duplex.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      const acks = [];
      let at = 0;
      while (buf.length - at >= 4) {
        const len = buf.readUInt32LE(at);
        if (len > 1 << 20) {
          duplex.destroy();
          return;
        }
        if (buf.length - at < 4 + len) break;
        acks.push(buf.subarray(at + 4, at + 20));
        at += 4 + len;
      }
      buf = buf.subarray(at);
      if (acks.length) duplex.write(Buffer.concat(acks));
    });
    duplex.on('error', () => {});
  };
  const raw = tls.createServer(serving, (sock) => {
    sock.setNoDelay(true);
    acknowledge(sock);
  });
  await new Promise((r) => raw.listen(0, '127.0.0.1', r));
  const bare = http2.createSecureServer(serving);
  bare.prependListener('secureConnection', (socket) => socket.setNoDelay(true));
  bare.on('stream', (stream) => {
    stream.respond({ ':status': 200 });
    acknowledge(stream);
  });
  bare.on('sessionError', () => {});
  await new Promise((r) => bare.listen(0, '127.0.0.1', r));

  // moleculer 0.15 with its TCP transporter (no UDP discovery, the peer given by address).
  const molPort = await freePort();
  const { ServiceBroker } = (await import('moleculer')).default;
  const broker = new ServiceBroker({
    nodeID: 'mol-b',
    logger: false,
    transporter: { type: 'TCP', options: { udpDiscovery: false, port: molPort, urls: [] } },
  });
  broker.createService({ name: 'bench', actions: { frame: (ctx) => ctx.params.p.length } });
  await broker.start();
  process.send({ wireAddress, pollingAddress, rawPort: raw.address().port, bareH2Port: bare.address().port, molPort });
  process.on('message', (m) => {
    if (m === 'cpu') process.send({ cpu: process.cpuUsage() });
  });
  process.on('disconnect', () => process.exit(0));
}

/** A free port below the ephemeral range, from the one port picker (ts/net/ports.ts). */
async function freePort() {
  const { freePort: pick } = await import(resolve(ROOT, 'dist/net/ports.js'));
  return pick();
}

// ------------------------------------------------------------------------------------------
// The sending process

async function moleculerClient(port) {
  const { ServiceBroker } = (await import('moleculer')).default;
  const broker = new ServiceBroker({
    nodeID: 'mol-a',
    logger: false,
    transporter: { type: 'TCP', options: { udpDiscovery: false, urls: [`127.0.0.1:${port}/mol-b`] } },
  });
  await broker.start();
  await broker.waitForServices('bench', 10_000);
  const params = { p: 'x'.repeat(PAYLOAD) };
  return { send: () => broker.call('bench.frame', params), close: () => broker.stop() };
}

/** CPU time (user + system, microseconds) of both processes per frame of the last `pump`. */
let lastCpuPerFrame = Number.NaN;
let cpuProbe = async () => 0;

async function pump(inflight, ms, sendOne) {
  const cpu0 = await cpuProbe();
  let done = 0;
  let stop = false;
  const end = Date.now() + ms;
  const worker = async () => {
    while (!stop) {
      await sendOne();
      done++;
      if (Date.now() >= end) stop = true;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inflight }, worker));
  const rate = (done * 1000) / (performance.now() - t0);
  lastCpuPerFrame = ((await cpuProbe()) - cpu0) / done;
  return rate;
}

/** A length-prefixed frame: 4-byte length, a 16-byte id from a counter (no random bytes per frame: this is the ceiling), the payload. */
function rawFrame(seq) {
  const frame = Buffer.allocUnsafe(4 + 16 + PAYLOAD);
  frame.writeUInt32LE(16 + PAYLOAD, 0);
  frame.writeDoubleLE(seq, 4);
  frame.writeDoubleLE(0, 12);
  frame.fill(7, 20);
  return frame;
}

function rawClient(port, creds) {
  return new Promise((resolveConn, reject) => {
    const sock = tls.connect({ host: '127.0.0.1', port, ...clientTls(creds) });
    sock.setNoDelay(true);
    const waiting = new Map();
    let seq = 0;
    let buf = Buffer.alloc(0);
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let at = 0;
      while (buf.length - at >= 16) {
        const id = buf.subarray(at, at + 16).toString('latin1');
        waiting.get(id)?.();
        waiting.delete(id);
        at += 16;
      }
      buf = buf.subarray(at);
    });
    sock.on('error', reject);
    sock.on('secureConnect', () =>
      resolveConn({
        send() {
          const frame = rawFrame(++seq);
          return new Promise((r) => {
            waiting.set(frame.subarray(4, 20).toString('latin1'), r);
            sock.write(frame);
          });
        },
        close: () => sock.destroy(),
      }),
    );
  });
}

/** Bare node:http2 over mutual TLS 1.3: `send(i)` writes one frame on long-lived stream i. */
async function bareH2Client(port, creds, streams) {
  const session = await connectH2(port, creds);
  let seq = 0;
  const lanes = Array.from({ length: streams }, () => {
    const stream = session.request({ ':method': 'POST', ':path': '/frames' }, { endStream: false });
    const waiting = [];
    let buf = Buffer.alloc(0);
    stream.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let at = 0;
      while (buf.length - at >= 16) {
        waiting.shift()?.();
        at += 16;
      }
      buf = buf.subarray(at);
    });
    stream.on('error', () => {});
    return { stream, waiting };
  });
  return {
    send(i) {
      const lane = lanes[i % streams];
      const frame = rawFrame(++seq);
      return new Promise((r) => {
        lane.waiting.push(r);
        lane.stream.write(frame);
      });
    },
    close: () => session.destroy(),
  };
}

export async function runClusterSuite({ root = ROOT, log = console.log } = {}) {
  const { createClusterCa, issueNodeCertificate, Http2Wire } = await import(resolve(root, 'dist/net/index.js'));
  const ca = await createClusterCa('bench');
  const creds = { a: await issueNodeCertificate(ca, 'a'), b: await issueNodeCertificate(ca, 'b') };
  const dir = mkdtempSync(join(tmpdir(), 'plexus-cluster-bench-'));
  const credsFile = join(dir, 'creds.json');
  writeFileSync(credsFile, JSON.stringify(creds));
  const child = fork(fileURLToPath(import.meta.url), ['--serve', credsFile], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const killChild = () => {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {}
  };
  process.once('exit', killChild);
  try {
    const ready = await new Promise((r, j) => {
      child.once('message', r);
      child.once('exit', (c) => j(new Error(`receiver exited with ${c}`)));
    });
    cpuProbe = async () => {
      const theirs = await new Promise((r) => {
        child.once('message', (m) => r(m.cpu));
        child.send('cpu');
      });
      const mine = process.cpuUsage();
      return mine.user + mine.system + theirs.user + theirs.system;
    };
    const wire = new Http2Wire({
      ...TUNING,
      self: 'a',
      cluster: 'bench',
      tls: creds.a,
      resolve: (n) => (n === 'b' ? ready.wireAddress : undefined),
      isMember: (n) => n === 'a' || n === 'b',
    });
    const polling = new Http2Wire({
      ...TUNING,
      spinMs: POLL_MS,
      self: 'a',
      cluster: 'bench',
      tls: creds.a,
      resolve: (n) => (n === 'b' ? ready.pollingAddress : undefined),
      isMember: (n) => n === 'a' || n === 'b',
    });
    const payload = new Uint8Array(PAYLOAD).fill(7);
    const raw = await rawClient(ready.rawPort, creds);
    const bareH2 = await bareH2Client(ready.bareH2Port, creds, Math.max(...INFLIGHT));
    const mol = await moleculerClient(ready.molPort);
    const results = { plexus: new Map(), onePair: new Map(), polling: new Map(), raw: new Map(), bareH2: new Map() };
    const molResults = [];
    const cpu = new Map(); // `${kind}/${n}` -> CPU microseconds per frame, both processes
    const noteCpu = (kind, n) => {
      const k = `${kind}/${n}`;
      if (!cpu.has(k)) cpu.set(k, []);
      cpu.get(k).push(lastCpuPerFrame);
    };
    for (const n of INFLIGHT) {
      results.plexus.set(n, []);
      results.onePair.set(n, []);
      results.polling.set(n, []);
      results.raw.set(n, []);
      results.bareH2.set(n, []);
    }
    // Warm up both paths.
    await pump(16, 300, () => wire.send('b', { shard: 1, epoch: 1n, sender: 'vt:s/0', target: 'vt:t/0', payload }));
    await pump(16, 300, () => polling.send('b', { shard: 1, epoch: 1n, sender: 'vt:s/0', target: 'vt:t/0', payload }));
    await pump(16, 300, () => raw.send());
    let b = 0;
    await pump(16, 300, () => bareH2.send(b++ % 16));
    await pump(16, 300, () => mol.send());
    for (let rep = 0; rep < REPEATS; rep++) {
      for (const n of INFLIGHT) {
        // One (sender, target) pair per in-flight slot, as independent actors would be.
        const sends = Array.from({ length: n }, (_, i) => ({
          shard: 1,
          epoch: 1n,
          sender: `vt:s/${i}`,
          target: `vt:t/${i}`,
          payload,
        }));
        let k = 0;
        results.plexus.get(n).push(await pump(n, CASE_MS, () => wire.send('b', sends[k++ % n])));
        noteCpu('plexus', n);
        if (!SKIP_ONE_PAIR) {
          results.onePair.get(n).push(await pump(n, CASE_MS, () => wire.send('b', sends[0])));
          noteCpu('onePair', n);
        }
        results.polling.get(n).push(await pump(n, CASE_MS, () => polling.send('b', sends[k++ % n])));
        noteCpu('polling', n);
        if (ONLY_WIRE) continue;
        results.raw.get(n).push(await pump(n, CASE_MS, () => raw.send()));
        noteCpu('raw', n);
        results.bareH2.get(n).push(await pump(n, CASE_MS, () => bareH2.send(k++ % n)));
        noteCpu('bareH2', n);
        if (n === MOLECULER_INFLIGHT) {
          molResults.push(await pump(n, CASE_MS, () => mol.send()));
          noteCpu('moleculer', n);
        }
      }
    }
    raw.close();
    bareH2.close();
    await mol.close();
    await wire.close();
    await polling.close();
    const entries = [];
    const targets = [];
    const lines = [
      `cluster transport: acknowledged 100-byte frames/s, 2 processes on loopback (median of ${REPEATS})`,
      `${'in flight'.padEnd(10)} ${'Http2Wire, n pairs'.padStart(19)} ${'ratio'.padStart(6)} ${'Http2Wire, 1 pair'.padStart(18)} ${'ratio'.padStart(6)} ${`n pairs, polling ${POLL_MS} ms`.padStart(24)} ${'raw TLS 1.3 socket'.padStart(19)} ${'bare node:http2'.padStart(16)}`,
    ];
    for (const n of INFLIGHT) {
      const p = median(results.plexus.get(n));
      const o = median(results.onePair.get(n));
      const q = median(results.polling.get(n));
      const r = median(results.raw.get(n));
      const h = median(results.bareH2.get(n));
      lines.push(
        `${String(n).padEnd(10)} ${p.toFixed(0).padStart(19)} ${(p / r).toFixed(2).padStart(6)} ${o.toFixed(0).padStart(18)} ${(o / r).toFixed(2).padStart(6)} ${q.toFixed(0).padStart(24)} ${r.toFixed(0).padStart(19)} ${h.toFixed(0).padStart(16)}`,
      );
      entries.push({
        suite: 'cluster',
        case: `frames 100B, ${n} in flight, ${n} pairs`,
        impl: `plexus Http2Wire (HTTP/2, mTLS 1.3), polling ${POLL_MS} ms`,
        opsPerSec: q,
        bytesPerSec: q * PAYLOAD,
      });
      entries.push({
        suite: 'cluster',
        case: `frames 100B, ${n} in flight, ${n} pairs`,
        impl: 'plexus Http2Wire (HTTP/2, mTLS 1.3)',
        opsPerSec: p,
        bytesPerSec: p * PAYLOAD,
      });
      entries.push({
        suite: 'cluster',
        case: `frames 100B, ${n} in flight, 1 pair`,
        impl: 'plexus Http2Wire (HTTP/2, mTLS 1.3)',
        opsPerSec: o,
        bytesPerSec: o * PAYLOAD,
      });
      entries.push({
        suite: 'cluster',
        case: `frames 100B, ${n} in flight`,
        impl: 'node:tls raw socket, length-prefixed (ceiling)',
        opsPerSec: r,
        bytesPerSec: r * PAYLOAD,
      });
      entries.push({
        suite: 'cluster',
        case: `frames 100B, ${n} in flight`,
        impl: 'bare node:http2 streams, length-prefixed',
        opsPerSec: h,
        bytesPerSec: h * PAYLOAD,
      });
      if (n === 256) {
        targets.push({
          name: 'cluster wire vs raw TLS ceiling, 256 in flight, 256 pairs',
          ratio: p / r,
          want: 0.5,
          ok: p / r >= 0.5,
        });
        targets.push({
          name: 'cluster wire vs raw TLS ceiling, 256 in flight, 1 pair',
          ratio: o / r,
          want: 0.5,
          ok: o / r >= 0.5,
        });
      }
    }
    lines.push('CPU microseconds per frame, both processes (median):');
    for (const n of INFLIGHT) {
      const c = (kind) => median(cpu.get(`${kind}/${n}`) ?? []).toFixed(1);
      lines.push(
        `${String(n).padEnd(10)} n pairs ${c('plexus')}, 1 pair ${c('onePair')}, n pairs polling ${c('polling')}, raw TLS ${c('raw')}, bare node:http2 ${c('bareH2')}` +
          (n === MOLECULER_INFLIGHT ? `, moleculer ${c('moleculer')}` : ''),
      );
    }
    const m = molResults.length ? median(molResults) : Number.NaN;
    const p16 = median(results.plexus.get(MOLECULER_INFLIGHT) ?? []);
    const o16 = median(results.onePair.get(MOLECULER_INFLIGHT) ?? []);
    const q16 = median(results.polling.get(MOLECULER_INFLIGHT) ?? []);
    const r16 = median(results.raw.get(MOLECULER_INFLIGHT) ?? []);
    const h16 = median(results.bareH2.get(MOLECULER_INFLIGHT) ?? []);
    lines.push(
      `moleculer 0.15 TCP transporter, request/reply, ${MOLECULER_INFLIGHT} in flight: ${m.toFixed(0)}/s ` +
        `(Http2Wire ${MOLECULER_INFLIGHT} pairs ${(p16 / m).toFixed(1)}x, 1 pair ${(o16 / m).toFixed(1)}x, ` +
        `${MOLECULER_INFLIGHT} pairs polling ${POLL_MS} ms ${(q16 / m).toFixed(1)}x; ` +
        `raw TLS ${(r16 / m).toFixed(1)}x, bare node:http2 ${(h16 / m).toFixed(1)}x)`,
    );
    entries.push({
      suite: 'cluster',
      case: `frames 100B, ${MOLECULER_INFLIGHT} in flight`,
      impl: 'moleculer 0.15 TCP transporter, request/reply',
      opsPerSec: m,
      bytesPerSec: m * PAYLOAD,
    });
    targets.push({
      name: `cluster wire vs moleculer, ${MOLECULER_INFLIGHT} in flight, ${MOLECULER_INFLIGHT} pairs`,
      ratio: p16 / m,
      want: 5,
      ok: p16 / m >= 5,
    });
    const table = lines.join('\n');
    log?.(table);
    return { entries, targets, table };
  } finally {
    // Let the receiver exit by itself first (so that `--cpu-prof` writes its profile).
    const exited = new Promise((r) => child.once('exit', r));
    child.disconnect?.();
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2000))]);
    killChild();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--serve') {
  await serve(process.argv[3]);
} else if (resolve(process.argv[1] ?? '') === fileURLToPath(import.meta.url)) {
  const { targets } = await runClusterSuite({});
  for (const t of targets)
    console.log(`${t.ok ? 'met ' : 'MISS'} ${t.name}: ${t.ratio.toFixed(2)}x (want >= ${t.want}x)`);
  process.exit(0);
}
