// npm run bench [-- --json FILE] [--filter NAME] [--time MS]
//
// Side-by-side throughput of the plexus kernels (WebAssembly and TypeScript twin) and
// their peers, all measured in this one process run. Each task does a fixed batch of
// operations per call; tinybench takes many samples and we report the median rate.
// Peers are dev dependencies only. Targets (README, docs/core.md) are ratios between
// rows of this same run, never absolute numbers.

import { spawnSync } from 'node:child_process';
import { createHash, hash as nodeHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as asSha from '@chainsafe/as-sha256';
import { sha256 as nobleSha256 } from '@noble/hashes/sha2.js';
import sindreFnv from '@sindresorhus/fnv1a';
import fnvPlus from 'fnv-plus';
import { createCRC32, createSHA256 } from 'hash-wasm';
import { Bench } from 'tinybench';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const core = await import(resolve(root, 'dist/core/index.js'));
const { kernels, allocShared, useBackend } = core;
const [wasm, js] = kernels();
useBackend('wasm');

const { values: opts } = parseArgs({
  options: {
    json: { type: 'string' },
    filter: { type: 'string' },
    time: { type: 'string', default: '400' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (opts.help) {
  console.log(`Usage: npm run bench [-- --json FILE] [--filter NAME] [--time MS]

  --json FILE    also write the results as JSON: [{suite, case, impl, opsPerSec, bytesPerSec}]
  --filter NAME  run only the suites or cases whose name contains NAME (fnv1a64, sha256, crc32c, reduce, header, 64KiB, sperli, checkpoint, chronacta, chronacta-ha, h2load, cluster, cluster-actors, runtime-throughput, runtime-compaction, federation, ...)
  --time MS      sampling time per task in milliseconds (default 400)

  Not in the default run (they take minutes; real processes, a real etcd):
  --filter membership          failure detection (gossip vs memberlist's LAN timings vs etcd and
                               Kubernetes lease expiry), false positives with Lifeguard on and off
                               (5 minutes), etcd and Kubernetes (Lease-API stand-in) lease
                               operations; about 15 minutes in all
  --filter failure-detection | false-positives | etcd-leases   one of them`);
  process.exit(0);
}
const TIME = Number(opts.time);

// ---------- inputs ----------
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}
const next = rng(2026);
function fill(u8) {
  for (let i = 0; i < u8.length; i += 4) {
    const r = next();
    u8[i] = r;
    u8[i + 1] = r >>> 8;
    u8[i + 2] = r >>> 16;
    u8[i + 3] = r >>> 24;
  }
  return u8;
}
const randomBytes = (n) => fill(new Uint8Array(n + 3)).subarray(0, n);

// ---------- harness ----------
const entries = [];
const suites = [];

/** Adds a case: impls is [{ impl, fn }] where fn does `ops` operations of `bytes` bytes each. */
function bcase(suite, name, ops, bytes, impls, note) {
  suites.push({ suite, name, ops, bytes, impls, note });
}

async function runCase(c) {
  const bench = new Bench({ time: TIME, warmupTime: 100, warmupIterations: 5, iterations: 10 });
  for (const i of c.impls) bench.add(i.impl, i.fn);
  await bench.run();
  const rows = [];
  for (const t of bench.tasks) {
    const r = t.result;
    if (r?.state !== 'completed') {
      console.log(`  ${t.name}: failed ${r?.error?.message ?? r?.state ?? ''}`);
      continue;
    }
    const callsPerSec = r.throughput.p50;
    const opsPerSec = callsPerSec * c.ops;
    const bytesPerSec = opsPerSec * c.bytes;
    const e = { suite: c.suite, case: c.name, impl: t.name, opsPerSec, bytesPerSec };
    entries.push(e);
    rows.push(e);
  }
  return rows;
}

function fmt(n, unit) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} G${unit}`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M${unit}`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k${unit}`;
  return `${n.toFixed(0)} ${unit}`;
}

// ---------- FNV-1a 64 ----------
const IRIS = Array.from({ length: 1000 }, (_, i) => `vt:orders/${String(i).padStart(6, '0')}-eu-west-shard-x9/line01`);
if (IRIS.some((s) => s.length !== 40)) throw new Error('IRIs must be 40 bytes');
bcase('fnv1a64', '40B IRIs x1000 (UTF-8 included)', 1000, 40, [
  { impl: 'plexus wasm (batch)', fn: () => wasm.fnv1a64Batch(IRIS) },
  { impl: 'plexus ts twin (batch)', fn: () => js.fnv1a64Batch(IRIS) },
  {
    impl: 'fnv-plus fast1a64',
    fn: () => {
      for (let i = 0; i < IRIS.length; i++) fnvPlus.fast1a64(IRIS[i]);
    },
  },
  {
    impl: 'fnv-plus fast1a64utf',
    fn: () => {
      for (let i = 0; i < IRIS.length; i++) fnvPlus.fast1a64utf(IRIS[i]);
    },
  },
  {
    impl: '@sindresorhus/fnv1a',
    fn: () => {
      for (let i = 0; i < IRIS.length; i++) sindreFnv(IRIS[i], { size: 64 });
    },
  },
]);
const KIB = randomBytes(1024);
const KIB_STR = Array.from(KIB, (b) => String.fromCharCode(32 + (b % 95))).join('');
const kibShared = allocShared(1024);
kibShared.u8.set(KIB);
bcase('fnv1a64', '1KiB buffer', 1, 1024, [
  { impl: 'plexus wasm', fn: () => wasm.fnv1a64(KIB) },
  { impl: 'plexus wasm (shared)', fn: () => wasm.fnv1a64(kibShared.u8) },
  { impl: 'plexus ts twin', fn: () => js.fnv1a64(KIB) },
  { impl: 'fnv-plus fast1a64 (1 KiB string)', fn: () => fnvPlus.fast1a64(KIB_STR) },
  { impl: '@sindresorhus/fnv1a', fn: () => sindreFnv(KIB, { size: 64 }) },
]);

// ---------- SHA-256 ----------
const hw = await createSHA256();
const nodeOneShot =
  typeof nodeHash === 'function'
    ? (d) => nodeHash('sha256', d, 'buffer')
    : (d) => createHash('sha256').update(d).digest();
for (const [label, size, reps] of [
  ['64B', 64, 200],
  ['1KiB', 1024, 50],
  ['64KiB', 65536, 1],
  ['1MiB', 1 << 20, 1],
]) {
  const d = randomBytes(size);
  const rep = (f) => () => {
    for (let i = 0; i < reps; i++) f(d);
  };
  bcase('sha256', label, reps, size, [
    { impl: 'plexus sha256()', fn: rep((x) => core.sha256(x)) },
    { impl: 'plexus wasm kernel', fn: rep((x) => wasm.sha256(x)) },
    { impl: 'plexus ts twin', fn: rep((x) => js.sha256(x)) },
    { impl: 'node:crypto', fn: rep(nodeOneShot) },
    { impl: 'hash-wasm', fn: rep((x) => hw.init().update(x).digest('binary')) },
    { impl: '@chainsafe/as-sha256', fn: rep((x) => asSha.digest(x)) },
    { impl: '@noble/hashes', fn: rep((x) => nobleSha256(x)) },
  ]);
}
{
  const N = 1024;
  const packed = allocShared(N * 64);
  fill(packed.u8);
  const offsets = Uint32Array.from({ length: N + 1 }, (_, i) => i * 64);
  const msgs = Array.from({ length: N }, (_, i) => packed.u8.slice(i * 64, i * 64 + 64));
  bcase('sha256', '64B batch x1024', N, 64, [
    { impl: 'plexus wasm batch (shared)', fn: () => wasm.sha256Batch(packed.u8, offsets) },
    { impl: 'plexus ts twin batch', fn: () => js.sha256Batch(packed.u8, offsets) },
    {
      impl: '@chainsafe/as-sha256 one at a time',
      fn: () => {
        for (let i = 0; i < N; i++) asSha.digest64(msgs[i]);
      },
    },
  ]);
}

// ---------- CRC-32C ----------
const hwCrc32c = await createCRC32(0x82f63b78);
for (const [label, size, reps] of [
  ['64B', 64, 200],
  ['1KiB', 1024, 50],
  ['18KB', 18000, 4],
  ['1MiB', 1 << 20, 1],
]) {
  const d = randomBytes(size);
  const shared = allocShared(size);
  shared.u8.set(d);
  const rep = (f) => () => {
    for (let i = 0; i < reps; i++) f();
  };
  bcase('crc32c', label, reps, size, [
    { impl: 'plexus crc32c()', fn: rep(() => core.crc32c(d)) },
    { impl: 'plexus wasm kernel (shared)', fn: rep(() => wasm.crc32c(shared.u8, 0)) },
    { impl: 'plexus ts twin', fn: rep(() => js.crc32c(d, 0)) },
    { impl: 'hash-wasm crc32 (Castagnoli)', fn: rep(() => hwCrc32c.init().update(d).digest('binary')) },
  ]);
}

// ---------- reduce ----------
const REDUCE = [
  ['f64', 'sum', Float64Array],
  ['f32', 'sum', Float32Array],
  ['i32', 'sum', Int32Array],
  ['i64', 'sum', BigInt64Array],
  ['u8', 'bxor', Uint8Array],
];
const OPCODE = { sum: 1, bxor: 10 };
const TYPECODE = { u8: 0, i32: 1, f32: 5, i64: 3, f64: 6 };
for (const [label, size] of [
  ['1KiB', 1024],
  ['64KiB', 65536],
  ['16MiB', 16 << 20],
]) {
  const reps = Math.max(1, Math.floor(65536 / size) * 4);
  const src = allocShared(size);
  const dst = allocShared(size);
  fill(src.u8);
  fill(dst.u8);
  const plainA = randomBytes(size);
  const plainB = randomBytes(size);
  const setSrc = randomBytes(size);
  const setDst = new Uint8Array(size);
  for (const [t, op, Ctor] of REDUCE) {
    // Floats: keep values finite and small so sums stay ordinary numbers.
    if (t === 'f64' || t === 'f32') {
      for (const arr of [
        new Ctor(plainA.buffer, 0, size / Ctor.BYTES_PER_ELEMENT),
        new Ctor(plainB.buffer, 0, size / Ctor.BYTES_PER_ELEMENT),
      ])
        arr.fill(1.5);
      new Ctor(dst.u8.buffer, dst.ptr, size / Ctor.BYTES_PER_ELEMENT).fill(1.5);
      new Ctor(src.u8.buffer, src.ptr, size / Ctor.BYTES_PER_ELEMENT).fill(0.25);
    }
    bcase('reduce', `${t} ${op} ${label}`, reps, size * 3, [
      {
        impl: 'plexus wasm (shared)',
        fn: () => {
          const a = dst.u8;
          const b = src.u8;
          for (let i = 0; i < reps; i++) wasm.combine(a, b, OPCODE[op], TYPECODE[t]);
        },
      },
      {
        impl: 'plexus ts twin',
        fn: () => {
          for (let i = 0; i < reps; i++) js.combine(plainA, plainB, OPCODE[op], TYPECODE[t]);
        },
      },
    ]);
  }
  bcase('reduce', `Uint8Array.set ${label}`, reps, size * 2, [
    {
      impl: 'Uint8Array.prototype.set',
      fn: () => {
        for (let i = 0; i < reps; i++) setDst.set(setSrc);
      },
    },
  ]);
}

// ---------- frame headers ----------
{
  // The SPERLI version 1 frame header (docs/sperli.md) with one connection's expected
  // values: the real schema of the rank runtime, not a stand-in.
  const sperliWire = await import(resolve(root, 'dist/sperli/index.js'));
  const jobId = new Uint8Array(16).fill(9);
  const ctx = new sperliWire.FrameContext({ jobId, peerRank: 5, ownRank: 3, incarnation: 2 });
  const schema = ctx.schema;
  const N = 100_000;
  let total = 0;
  const lens = Array.from({ length: N }, () => next() % 64);
  for (const l of lens) total += 52 + l;
  const buf = allocShared(total);
  let off = 0;
  const types = [2, 3, 4, 6, 7, 8];
  for (let i = 0; i < N; i++) {
    const type = types[i % types.length];
    const frame = sperliWire.encodeFrame(
      { type, jobId, sourceRank: 5, targetRank: 3, incarnation: 2, tag: type === 2 ? i : 0, epoch: type >= 6 ? 7 : 0 },
      new Uint8Array(lens[i]),
    );
    buf.u8.set(frame, off);
    off += frame.length;
  }
  const plain = buf.u8.slice();
  if (wasm.headerDecodeBatch(schema, buf.u8, N).verdicts.some((v) => v !== 0))
    throw new Error('bench frames must be valid');
  bcase('header', 'batch decode 100k SPERLI frames (52B headers)', N, 52, [
    { impl: 'plexus wasm (shared)', fn: () => wasm.headerDecodeBatch(schema, buf.u8, N) },
    { impl: 'plexus ts twin (DataView)', fn: () => js.headerDecodeBatch(schema, plain, N) },
  ]);
}

// ---------- run ----------
const selected = suites.filter((c) => !opts.filter || c.suite.includes(opts.filter) || c.name.includes(opts.filter));
console.log(
  `plexus bench on node ${process.version} ${process.arch}; ${selected.length} cases, ~${TIME} ms per task; medians`,
);
for (const c of selected) {
  process.stdout.write(`\n${c.suite}: ${c.name}\n`);
  const rows = await runCase(c);
  const best = Math.max(...rows.map((r) => r.opsPerSec));
  for (const r of rows) {
    console.log(
      `  ${r.impl.padEnd(38)} ${fmt(r.opsPerSec, 'op/s').padStart(13)} ${fmt(r.bytesPerSec, 'B/s').padStart(12)}  ${(r.opsPerSec / best).toFixed(2)}x of best`,
    );
  }
}

// ---------- targets ----------
const get = (suite, cs, impl) => entries.find((e) => e.suite === suite && e.case === cs && e.impl === impl);
const targets = [];
function target(name, want, num, den, field = 'opsPerSec', denScale = 1) {
  if (!num || !den) return;
  const ratio = num[field] / (den[field] * denScale);
  targets.push({ name, want, ratio, ok: ratio >= want });
}
{
  const iri = '40B IRIs x1000 (UTF-8 included)';
  target(
    'FNV 40B IRIs batch vs fnv-plus',
    1.5,
    get('fnv1a64', iri, 'plexus wasm (batch)'),
    get('fnv1a64', iri, 'fnv-plus fast1a64'),
  );
  target(
    'FNV 40B IRIs batch vs @sindresorhus/fnv1a',
    20,
    get('fnv1a64', iri, 'plexus wasm (batch)'),
    get('fnv1a64', iri, '@sindresorhus/fnv1a'),
  );
  const kib = entries.filter((e) => e.case === '1KiB buffer');
  const bestJs = kib.filter((e) => !e.impl.startsWith('plexus wasm')).sort((a, b) => b.opsPerSec - a.opsPerSec)[0];
  target(`FNV 1KiB wasm vs fastest JS (${bestJs?.impl})`, 1.8, get('fnv1a64', '1KiB buffer', 'plexus wasm'), bestJs);
  target(
    'SHA-256 wasm vs as-sha256 at 64B',
    1.0,
    get('sha256', '64B', 'plexus wasm kernel'),
    get('sha256', '64B', '@chainsafe/as-sha256'),
  );
  target(
    'SHA-256 wasm vs hash-wasm at 1MiB',
    1.0,
    get('sha256', '1MiB', 'plexus wasm kernel'),
    get('sha256', '1MiB', 'hash-wasm'),
  );
  target(
    'SHA-256 batch 64B vs as-sha256 one at a time',
    2.0,
    get('sha256', '64B batch x1024', 'plexus wasm batch (shared)'),
    get('sha256', '64B batch x1024', '@chainsafe/as-sha256 one at a time'),
  );
  for (const size of ['64B', '1KiB', '64KiB', '1MiB']) {
    const peers = entries.filter((e) => e.suite === 'sha256' && e.case === size && !e.impl.startsWith('plexus'));
    const best = peers.sort((a, b) => b.opsPerSec - a.opsPerSec)[0];
    target(
      `SHA-256 sha256() vs best peer at ${size} (${best?.impl})`,
      0.95,
      get('sha256', size, 'plexus sha256()'),
      best,
    );
  }
  for (const [t, op, want] of [
    ['u8', 'bxor', 2],
    ['i32', 'sum', 2],
    ['f32', 'sum', 2],
    ['f64', 'sum', 1],
    ['i64', 'sum', 1],
  ]) {
    const cs = `${t} ${op} 64KiB`;
    target(
      `reduce ${cs} wasm vs ts twin`,
      want,
      get('reduce', cs, 'plexus wasm (shared)'),
      get('reduce', cs, 'plexus ts twin'),
    );
  }
  const set16 = get('reduce', 'Uint8Array.set 16MiB', 'Uint8Array.prototype.set');
  for (const [t, op] of REDUCE) {
    target(
      `reduce ${t} ${op} 16MiB bytes/s vs Uint8Array.set`,
      0.8,
      get('reduce', `${t} ${op} 16MiB`, 'plexus wasm (shared)'),
      set16,
      'bytesPerSec',
    );
  }
  const hc = 'batch decode 100k SPERLI frames (52B headers)';
  target(
    'header batch decode wasm vs ts twin',
    3,
    get('header', hc, 'plexus wasm (shared)'),
    get('header', hc, 'plexus ts twin (DataView)'),
  );
}
// ---------- SPERLI (bench/sperli.mjs: jobs, Open MPI and the TLS ceiling) ----------
if (!opts.filter || 'sperli'.includes(opts.filter)) {
  const { runSperliSuite } = await import('./sperli.mjs');
  const sperliRun = await runSperliSuite({ root });
  entries.push(...sperliRun.entries);
  targets.push(...sperliRun.targets);
  console.log(sperliRun.table);
}
// ---------- checkpoints (bench/checkpoint.mjs) ----------
if (!opts.filter || 'checkpoint'.includes(opts.filter)) {
  const { runCheckpointSuite } = await import('./checkpoint.mjs');
  const run = await runCheckpointSuite({ root });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- Chronacta (bench/chronacta.mjs: durable appends vs etcd and SQLite) ----------
if (!opts.filter || 'chronacta'.includes(opts.filter)) {
  const { runChronactaSuite } = await import('./chronacta.mjs');
  const run = await runChronactaSuite({ root });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- Chronacta and etcd driven by h2load with pre-encoded gRPC bodies (bench/chronacta/h2load.mjs):
// a load generator that costs far less per call than either server. `--filter chronacta` runs it
// after the suite above, `--filter h2load` alone. ----------
if (!opts.filter || 'chronacta-h2load'.includes(opts.filter)) {
  const r = spawnSync(process.execPath, [resolve(root, 'bench/chronacta/h2load.mjs')], { stdio: 'inherit' });
  if (r.status !== 0) console.log(`chronacta-h2load: exited with ${r.status ?? r.signal}`);
}
// ---------- Chronacta HA (bench/chronacta-ha.mjs: 3-member cluster vs 3-member etcd, failover) ----------
// Its own filter: `--filter chronacta` runs only the suite above, `--filter chronacta-ha` only this one.
if (!opts.filter || ('chronacta-ha'.includes(opts.filter) && !'chronacta'.includes(opts.filter))) {
  const { runChronactaHaSuite } = await import('./chronacta-ha.mjs');
  const run = await runChronactaHaSuite({ root });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- cluster wire (bench/cluster.mjs: HTTP/2 mutual TLS vs a raw TLS socket) ----------
if (!opts.filter || 'cluster'.includes(opts.filter)) {
  const { runClusterSuite } = await import('./cluster.mjs');
  const run = await runClusterSuite({ root, log: null });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- durable actor messages between two cluster nodes (bench/cluster-actors.mjs: vs
// moleculer and the durable floor). `--filter cluster` runs it after the wire suite,
// `--filter cluster-actors` alone. ----------
if (!opts.filter || 'cluster-actors'.includes(opts.filter)) {
  const { runClusterActorsSuite } = await import('./cluster-actors.mjs');
  const run = await runClusterActorsSuite({ root, log: null });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- the actor runtime (bench/runtime.mjs): durable actor messages and the journal engine
// (`--filter runtime-throughput`), the CPU cost of journal compaction (`--filter runtime-compaction`);
// `--filter runtime` runs both. ----------
if (!opts.filter || 'runtime-throughput'.includes(opts.filter)) {
  const { runRuntimeThroughputSuite } = await import('./runtime.mjs');
  const run = await runRuntimeThroughputSuite({ root, log: null });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
if (!opts.filter || 'runtime-compaction'.includes(opts.filter)) {
  const { runRuntimeCompactionSuite } = await import('./runtime.mjs');
  const run = await runRuntimeCompactionSuite({ root, log: null });
  entries.push(...run.entries);
  targets.push(...run.targets);
  console.log(run.table);
}
// ---------- federation (bench/federation.mjs: DIDComm v2 pack/unpack vs didcomm-node, then the
// mediator end to end: delivered messages/s over HTTP batches and WebSocket live, no peer) ----------
if (!opts.filter || 'federation'.includes(opts.filter)) {
  const out = join(mkdtempSync(join(tmpdir(), 'plexus-bench-fed-')), 'rows.json');
  const r = spawnSync(process.execPath, [resolve(root, 'bench/federation.mjs'), '--json', out], { stdio: 'inherit' });
  if (r.status === 0) {
    const rows = JSON.parse(readFileSync(out, 'utf8'));
    for (const row of rows) {
      if (row.kind === 'mediator') {
        const how = row.label ?? row.mode;
        entries.push({
          suite: 'federation',
          case: `mediator end-to-end, ${how}`,
          impl: 'plexus',
          opsPerSec: row.msgsPerSec,
        });
        continue;
      }
      entries.push({ suite: 'federation', case: `${row.case} ${row.op}`, impl: row.impl, opsPerSec: row.opsPerSec });
      if (row.impl === 'plexus') {
        targets.push({
          name: `DIDComm ${row.case} ${row.op} vs didcomm-node`,
          ratio: row.ratio,
          want: 1,
          ok: row.ratio >= 1,
        });
      }
    }
  } else {
    console.log(`federation suite failed (exit ${r.status})`);
  }
}
// ---------- membership (bench/cluster/: failure detection, false positives, etcd and Kubernetes lease operations).
// Minutes long, so never in the default run: `--filter membership` runs all three, or name one. ----------
const MEMBERSHIP = ['failure-detection', 'false-positives', 'etcd-leases'];
for (const name of MEMBERSHIP) {
  if (!opts.filter || (opts.filter !== 'membership' && opts.filter !== name)) continue;
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bench-membership-'));
  const out = join(dir, 'rows.json');
  const r = spawnSync(process.execPath, [resolve(root, `bench/cluster/${name}.mjs`), '--json', out], {
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.log(`${name}: exited with ${r.status ?? r.signal}`);
    rmSync(dir, { recursive: true, force: true });
    continue;
  }
  const res = JSON.parse(readFileSync(out, 'utf8'));
  rmSync(dir, { recursive: true, force: true });
  for (const row of res.rows) {
    if (name === 'failure-detection') {
      for (const [signal, ms] of Object.entries(row.medians ?? {})) {
        entries.push({ suite: 'membership', case: `failure detection after ${signal}`, impl: row.row, medianMs: ms });
      }
    } else if (name === 'false-positives') {
      entries.push({
        suite: 'membership',
        case: `healthy members declared failed, ${res.durationMs / 1000} s, one starved`,
        impl: row.cluster,
        count: row.healthyDeclaredFailed,
      });
    } else {
      entries.push({
        suite: 'membership',
        case: `${row.case}, ${row.clients} client(s)`,
        impl:
          row.store === 'kube'
            ? row.case.includes('floor')
              ? 'client-node Lease floor (stand-in)'
              : 'plexus KubeAuthority (stand-in)'
            : row.case.includes('floor')
              ? 'etcd gateway floor'
              : 'plexus EtcdAuthority',
        opsPerSec: row.opsPerSec,
        p50Ms: row.p50Ms,
        p99Ms: row.p99Ms,
      });
    }
  }
}
if (targets.length > 0) {
  console.log('\ntargets (ratios within this run):');
  for (const t of targets) {
    console.log(`  ${t.ok ? 'met ' : 'MISS'}  ${t.name.padEnd(66)} ${t.ratio.toFixed(2)}x (want >= ${t.want}x)`);
  }
  console.log(`targets: ${targets.filter((t) => t.ok).length} met, ${targets.filter((t) => !t.ok).length} missed`);
}
if (opts.json) {
  writeFileSync(opts.json, `${JSON.stringify(entries, null, 2)}\n`);
  console.log(`\nwrote ${entries.length} entries to ${opts.json}`);
}
