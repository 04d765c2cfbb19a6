// The ceiling of the SPERLI mesh: bulk one-way throughput of ONE connection between two
// processes on loopback, as mutually authenticated TLS 1.3 with Ed25519 certificates of a
// job CA (ts/crypto/x509.ts, the same node:tls options as ts/sperli/mesh.ts), or as plain
// TCP for reference.
//
//   node bench/sperli/tls-ceiling.mjs [--proto tls|tcp] [--sample-mib N] [--samples N]
//                                     [--warmup N] [--chunk-kib N]
//
// This process receives; it starts a second process (this file with --role sender) that
// connects and writes (warmup + samples) x sample bytes as fast as backpressure allows, in
// writes of --chunk-kib. The receiver only counts bytes. Each sample is the time between
// the moments the running byte count crosses two consecutive multiples of the sample size;
// the first --warmup samples are dropped. Prints one line:
//   BENCH {"case":"ceiling","proto":...,"sampleBytes":...,"samplesMs":[...],"medianBytesPerSec":...}
//
// With --mode latency (and --rounds N), the same connection carries 8-byte round trips
// instead: this process sends 8 bytes, the other sends them back, one at a time; after
// --rounds / 10 warm-up round trips, each is timed and the median is printed:
//   BENCH {"case":"rtt","proto":...,"bytes":8,"rounds":...,"medianUs":...,"minUs":...,"cpuUsPerRound":...}
// (cpuUsPerRound: this process's CPU per timed round trip).
// That is the floor of one SPERLI message each way (an 8-byte allreduce on 2 ranks).
//
// With --mode echo (and --echo-mib N, --rounds N), the other process sends N MiB and then
// waits for N MiB back; this process takes the N MiB and then sends N MiB back, in 128 KiB
// writes behind backpressure, round after round. The median round, timed here:
//   BENCH {"case":"echo","proto":...,"bytes":...,"rounds":...,"medianUs":...,"minUs":...}
// That is the floor of a star allreduce of N MiB on 2 ranks in node:tls: the root must
// decrypt every byte of the contribution and encrypt every byte of the result, and the
// result cannot leave before the contribution is in.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, connect as netConnect } from 'node:net';
import { dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = fileURLToPath(import.meta.url);
const root = resolve(dirname(here), '..', '..');

const { values: o } = parseArgs({
  options: {
    role: { type: 'string', default: 'receiver' },
    proto: { type: 'string', default: 'tls' },
    port: { type: 'string' },
    'sample-mib': { type: 'string', default: '64' },
    samples: { type: 'string', default: '9' },
    warmup: { type: 'string', default: '2' },
    'chunk-kib': { type: 'string', default: '64' },
    mode: { type: 'string', default: 'bulk' },
    rounds: { type: 'string', default: '5000' },
    'echo-mib': { type: 'string', default: '16' },
  },
});
const latency = o.mode === 'latency';
const echo = o.mode === 'echo';
const echoBytes = Number(o['echo-mib']) * 2 ** 20;
const ECHO_PIECE = 128 * 1024;
const rounds = Number(o.rounds);
const warmRounds = Math.ceil(rounds / 10);
const RTT_BYTES = 8;
const proto = o.proto;
if (proto !== 'tls' && proto !== 'tcp') throw new Error(`--proto tls|tcp, got ${proto}`);
const sampleBytes = Number(o['sample-mib']) * 2 ** 20;
const samples = Number(o.samples);
const warmup = Number(o.warmup);
const chunkBytes = Number(o['chunk-kib']) * 1024;
const totalBytes = (samples + warmup) * sampleBytes;

function readStdin() {
  return new Promise((res, rej) => {
    let text = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (c) => {
      text += c;
    });
    process.stdin.on('end', () => res(text));
    process.stdin.on('error', rej);
  });
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

if (o.role === 'sender') {
  const creds = proto === 'tls' ? JSON.parse(await readStdin()) : undefined;
  const { serverIdentityCheck } = await import(resolve(root, 'dist/crypto/x509.js'));
  const port = Number(o.port);
  const socket =
    proto === 'tls'
      ? tls.connect({
          host: '127.0.0.1',
          port,
          ca: [creds.ca],
          cert: creds.cert,
          key: creds.key,
          minVersion: 'TLSv1.3',
          rejectUnauthorized: true,
          checkServerIdentity: serverIdentityCheck('127.0.0.1'),
        })
      : netConnect({ host: '127.0.0.1', port });
  await once(socket, proto === 'tls' ? 'secureConnect' : 'connect');
  socket.setNoDelay(true);
  if (echo) {
    const out = Buffer.alloc(echoBytes, 0x5a);
    let have = 0;
    let wake;
    socket.on('data', (buf) => {
      have += buf.length;
      if (have >= echoBytes && wake) {
        const w = wake;
        wake = undefined;
        w();
      }
    });
    const ended = once(socket, 'end');
    for (let r = 0; r < rounds + Math.ceil(rounds / 10); r++) {
      for (let at = 0; at < echoBytes; at += ECHO_PIECE) {
        if (!socket.write(out.subarray(at, at + ECHO_PIECE))) await once(socket, 'drain');
      }
      if (have < echoBytes) await new Promise((res) => (wake = res));
      have -= echoBytes;
    }
    await ended;
    socket.end();
    await once(socket, 'close');
    process.exit(0);
  }
  if (latency) {
    // Sends back every 8 bytes as they complete.
    let have = 0;
    socket.on('data', (buf) => {
      have += buf.length;
      while (have >= RTT_BYTES) {
        have -= RTT_BYTES;
        socket.write(Buffer.alloc(RTT_BYTES, 1));
      }
    });
    await once(socket, 'end');
    socket.end();
    await once(socket, 'close');
    process.exit(0);
  }
  const chunk = Buffer.alloc(chunkBytes, 0x5a);
  let sent = 0;
  while (sent < totalBytes) {
    const n = Math.min(chunkBytes, totalBytes - sent);
    const ok = socket.write(n === chunkBytes ? chunk : chunk.subarray(0, n));
    sent += n;
    if (!ok) await once(socket, 'drain');
  }
  socket.end();
  await once(socket, 'close');
} else {
  let creds;
  let serverOpts = {};
  if (proto === 'tls') {
    const { createJobCa, issueRankCertificate } = await import(resolve(root, 'dist/crypto/x509.js'));
    const { randomBytes } = await import('node:crypto');
    const jobId = new Uint8Array(randomBytes(16));
    const ca = await createJobCa({ jobId });
    const a = await issueRankCertificate(ca, { jobId, rank: 0, host: '127.0.0.1' });
    const b = await issueRankCertificate(ca, { jobId, rank: 1, host: '127.0.0.1' });
    serverOpts = {
      ca: [ca.cert],
      cert: a.cert,
      key: a.key,
      minVersion: 'TLSv1.3',
      requestCert: true,
      rejectUnauthorized: true,
    };
    creds = { ca: ca.cert, cert: b.cert, key: b.key };
  }
  let result;
  const done = new Promise((res, rej) => {
    const onSocket = (socket) => {
      const info = proto === 'tls' ? { cipher: socket.getCipher()?.name, protocol: socket.getProtocol() } : {};
      if (proto === 'tls' && !socket.authorized) rej(new Error('the sender was not authorized'));
      if (echo) {
        const warm = Math.ceil(rounds / 10);
        const out = Buffer.alloc(echoBytes, 0xa5);
        let have = 0;
        let wake;
        socket.on('data', (buf) => {
          have += buf.length;
          if (have >= echoBytes && wake) {
            const w = wake;
            wake = undefined;
            w();
          }
        });
        socket.on('error', rej);
        (async () => {
          const times = [];
          for (let r = 0; r < warm + rounds; r++) {
            const start = performance.now();
            if (have < echoBytes) await new Promise((res2) => (wake = res2));
            have -= echoBytes;
            for (let at = 0; at < echoBytes; at += ECHO_PIECE) {
              if (!socket.write(out.subarray(at, at + ECHO_PIECE))) await once(socket, 'drain');
            }
            times.push(performance.now() - start);
          }
          const kept = times.slice(warm);
          result = {
            case: 'echo',
            proto,
            ...info,
            bytes: echoBytes,
            rounds,
            medianUs: Number((median(kept) * 1000).toFixed(3)),
            minUs: Number((Math.min(...kept) * 1000).toFixed(3)),
          };
          socket.end();
          res();
        })().catch(rej);
        return;
      }
      if (latency) {
        const times = [];
        const msg = Buffer.alloc(RTT_BYTES, 2);
        let have = 0;
        let start = performance.now();
        let cpu0;
        socket.on('data', (buf) => {
          have += buf.length;
          if (have < RTT_BYTES) return;
          have -= RTT_BYTES;
          const now = performance.now();
          times.push(now - start);
          if (times.length === warmRounds) cpu0 = process.cpuUsage();
          if (times.length === warmRounds + rounds) {
            const cpu = process.cpuUsage(cpu0);
            const kept = times.slice(warmRounds);
            result = {
              case: 'rtt',
              proto,
              ...info,
              bytes: RTT_BYTES,
              rounds,
              medianUs: Number((median(kept) * 1000).toFixed(3)),
              minUs: Number((Math.min(...kept) * 1000).toFixed(3)),
              // CPU of this side (the one that times) per round trip, user + system.
              cpuUsPerRound: Number(((cpu.user + cpu.system) / rounds).toFixed(1)),
            };
            socket.end();
            res();
            return;
          }
          start = performance.now();
          socket.write(msg);
        });
        socket.on('error', rej);
        socket.write(msg);
        return;
      }
      let got = 0;
      let nextMark = sampleBytes;
      let last = performance.now();
      const times = [];
      socket.on('data', (buf) => {
        got += buf.length;
        while (got >= nextMark) {
          const now = performance.now();
          times.push(now - last);
          last = now;
          nextMark += sampleBytes;
        }
      });
      socket.on('error', rej);
      socket.on('end', () => {
        if (got !== totalBytes) rej(new Error(`received ${got} of ${totalBytes} bytes`));
        const kept = times.slice(warmup);
        const med = median(kept);
        result = {
          case: 'ceiling',
          proto,
          ...info,
          chunkBytes,
          sampleBytes,
          samplesMs: kept.map((t) => Number(t.toFixed(3))),
          medianMs: med,
          medianBytesPerSec: sampleBytes / (med / 1000),
        };
        res();
      });
    };
    const server =
      proto === 'tls'
        ? tls.createServer(serverOpts, onSocket)
        : createServer((s) => {
            s.setNoDelay(true);
            onSocket(s);
          });
    server.on('tlsClientError', rej);
    server.listen(0, '127.0.0.1', () => {
      const port = server.address().port;
      const child = spawn(process.execPath, [here, '--role', 'sender', '--port', String(port), ...passOn()], {
        stdio: ['pipe', 'inherit', 'inherit'],
      });
      child.stdin.end(creds ? JSON.stringify(creds) : '');
      child.on('exit', (code) => {
        server.close();
        if (code !== 0) rej(new Error(`the sender exited with ${code}`));
      });
    });
  });
  await done;
  console.log(`BENCH ${JSON.stringify(result)}`);
}

function passOn() {
  return [
    '--proto',
    proto,
    '--sample-mib',
    o['sample-mib'],
    '--samples',
    String(samples),
    '--warmup',
    String(warmup),
    '--chunk-kib',
    o['chunk-kib'],
    '--mode',
    o.mode,
    '--rounds',
    String(rounds),
    '--echo-mib',
    o['echo-mib'],
  ];
}
