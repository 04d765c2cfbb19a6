import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChronactaClient, startServer } from '../../chronacta/index.js';
import { runClusterDemo } from '../../cluster/demo.js';
import {
  allocShared,
  backend,
  combine,
  crc32c,
  decodeHeaders,
  defineHeader,
  encodeHeader,
  kernels,
  sha256,
  shardOf,
} from '../../core/index.js';
import { launch } from '../../sperli/launcher.js';
import { type Command, parse } from '../command.js';
import { chronactaFailoverStep } from './demo-chronacta.js';
import { actorStep } from './demo-steps.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

function rate(n: number, ms: number): string {
  const perSec = (n / ms) * 1000;
  return perSec >= 1e6 ? `${(perSec / 1e6).toFixed(1)}M/s` : `${(perSec / 1e3).toFixed(0)}k/s`;
}

function time(fn: () => void): number {
  const t = performance.now();
  fn();
  return performance.now() - t;
}

export const demo: Command = {
  name: 'demo',
  summary: 'a short guided tour of plexus on embedded defaults (no services needed)',
  help: [
    'Usage: plexus demo [--quick]',
    '',
    'Walks through what this build of plexus does, on this machine, with nothing',
    'to set up: the shard hash, SHA-256, the reduce kernels, CRC-32C and the',
    'length-first frame decoder, each run on the WebAssembly core and on its',
    'TypeScript twin, with the two results compared; then a SPERLI job, the',
    'Chronacta event store, a three-member Chronacta cluster (separate processes)',
    'whose leader is killed with SIGKILL while a client appends, journaled virtual',
    'actors and a three-node actor cluster, all on loopback and temporary',
    'directories. Exits 1 if any step fails.',
    '',
    'Options:',
    '  --quick   smaller batches (for a slow machine or emulation)',
  ].join('\n'),
  async run(args) {
    const { values } = parse('demo', { args, options: { quick: { type: 'boolean' } } });
    const n = values.quick ? 20_000 : 200_000;
    const [wasm, js] = kernels() as [ReturnType<typeof kernels>[number], ReturnType<typeof kernels>[number]];
    const out = (s = '') => process.stdout.write(`${s}\n`);
    out(
      `plexus demo: the core kernels on ${process.release?.name ?? 'this runtime'} ${process.version} ${process.arch}`,
    );
    out(`backend in use: ${backend().name} (PLEXUS_BACKEND selects; both are shown below)`);
    out();

    out('[1/10] Shard hash version 1: FNV-1a 64 of the IRI, mod the shard count (256 here)');
    for (const iri of ['vt:orders/1234', 'vt:users/ada', 'vt:sensors/β-7'])
      out(`      ${iri.padEnd(16)} -> shard ${shardOf(iri, 256)}`);
    const iris = Array.from({ length: n }, (_, i) => `vt:orders/${i.toString(36).padStart(8, '0')}-region-eu`);
    let a: Uint32Array = new Uint32Array(0);
    let b: Uint32Array = new Uint32Array(0);
    const tw = time(() => {
      a = wasm.shardBatch(iris, 256);
    });
    const tj = time(() => {
      b = js.shardBatch(iris, 256);
    });
    const same = a.every((v, i) => v === b[i]);
    out(`      ${n} IRIs in one batch: wasm ${rate(n, tw)}, TypeScript twin ${rate(n, tj)}, identical: ${same}`);
    out();

    out('[2/10] SHA-256 (FIPS 180-4)');
    const msg = new TextEncoder().encode('plexus runs software on more than one machine');
    const d1 = wasm.sha256(msg);
    const d2 = js.sha256(msg);
    out(`      wasm ${hex(d1)}`);
    out(`      twin ${hex(d2)}  identical: ${hex(d1) === hex(d2)}`);
    out(
      `      sha256() (picks node:crypto for large inputs): ${hex(sha256(msg)) === hex(d1) ? 'same digest' : 'DIFFERENT'}`,
    );
    out();

    out('[3/10] Reduce kernels: four ranks contribute a Float64Array, summed in place in shared memory');
    const len = 8;
    const acc = allocShared(len * 8);
    const accView = acc.view(Float64Array);
    for (let i = 0; i < len; i++) accView[i] = i;
    for (let r = 1; r < 4; r++) {
      const c = allocShared(len * 8);
      c.view(Float64Array).fill(r * 0.5);
      combine(acc.view(Float64Array), c.view(Float64Array), 'sum');
      c.free();
    }
    out(`      sum: [${Array.from(acc.view(Float64Array)).join(', ')}]`);
    const x = new Int32Array([0x7fffffff, -5, 7]);
    combine(x, new Int32Array([1, 3, -9]), 'sum');
    out(`      i32 sum wraps: [0x7fffffff, -5, 7] + [1, 3, -9] = [${Array.from(x).join(', ')}]`);
    acc.free();
    out();

    out('[4/10] CRC-32C (Castagnoli), the checksum of every stored record');
    out(
      `      crc32c("123456789") = 0x${crc32c(new TextEncoder().encode('123456789')).toString(16)} (check value e3069283)`,
    );
    out();

    out('[5/10] Length-first frame decoding: the length is checked before anything else');
    const schema = defineHeader({
      size: 12,
      fields: [
        { name: 'length', offset: 0, width: 4 },
        { name: 'type', offset: 4, width: 1 },
        { name: 'rank', offset: 8, width: 4 },
      ],
      length: { field: 'length', max: 1024, verdictTooLong: 1 },
      checks: [
        { field: 'type', op: 'range', min: 1, max: 11, verdict: 2 },
        { field: 'rank', op: 'range', min: 0, max: 3, verdict: 3 },
      ],
    });
    const frames = [
      { length: 4, type: 1, rank: 2 },
      { length: 0, type: 0, rank: 1 },
      { length: 2, type: 3, rank: 9 },
      { length: 0, type: 1, rank: 0 },
    ];
    const bytes = Buffer.concat(frames.map((f) => Buffer.concat([encodeHeader(schema, f), Buffer.alloc(f.length)])));
    bytes.writeUInt32LE(0xffffffff, bytes.length - 12);
    const names = ['accepted', 'length too long', 'bad type', 'rank out of range'];
    const r = decodeHeaders(schema, bytes);
    for (let i = 0; i < r.count; i++) {
      out(`      frame at ${String(r.offsets[i]).padStart(2)}: ${names[r.verdicts[i] as number]}`);
    }
    out(`      (the last frame declares 4 GiB; it is refused from its first 4 bytes, nothing is allocated)`);
    out();
    out('[6/10] A SPERLI job: 3 ranks over mutually authenticated TLS 1.3 compute pi by integration');
    out('      (plexus sperli launch -n 3 -- node examples/sperli/pi.mjs)');
    const pi = fileURLToPath(new URL('../../../examples/sperli/pi.mjs', import.meta.url));
    const job = await launch({
      size: 3,
      command: [process.execPath, pi, values.quick ? '100000' : '2000000'],
      stdout: (t) => process.stdout.write(`      ${t}`),
      stderr: (t) => process.stdout.write(`      ${t}`),
    });
    out(`      job ${job.jobId}: ${job.exitCode === 0 ? 'every rank finished' : `failed (${job.failure?.message})`}`);
    out();
    out('[7/10] Chronacta: a durable event store on a real gRPC port (a temporary data directory)');
    const dataDir = mkdtempSync(join(tmpdir(), 'plexus-demo-'));
    const server = await startServer({ dataDir, port: 0 });
    const client = new ChronactaClient(server.address);
    try {
      const a = await client.append(
        'order-1234',
        [{ type: 'OrderPlaced', data: '{"total":42}' }, { type: 'OrderPaid' }],
        {
          expectedVersion: 'no_stream',
          idempotencyKey: 'demo-1',
        },
      );
      out(
        `      appended 2 events to order-1234: versions ${a.firstVersion}..${a.lastVersion}, positions ${a.firstPosition}..${a.lastPosition}`,
      );
      const again = await client.append(
        'order-1234',
        [{ type: 'OrderPlaced', data: '{"total":42}' }, { type: 'OrderPaid' }],
        {
          expectedVersion: 'no_stream',
          idempotencyKey: 'demo-1',
        },
      );
      out(
        `      the same append retried with its idempotency key: duplicate=${again.duplicate}, nothing written twice`,
      );
      try {
        await client.append('order-1234', [{ type: 'OrderShipped' }], { expectedVersion: 0n });
      } catch (e) {
        out(
          `      an append expecting version 0 is refused: ${(e as { code?: string }).code} (${(e as Error).message.slice(0, 60)}...)`,
        );
      }
      const r = await client.readStream('order-1234');
      out(`      read back: ${r.events.map((e) => `${e.version}:${e.type}`).join(', ')}`);
    } finally {
      client.close();
      await server.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
    out();
    out('[8/10] A Chronacta cluster fails over: three serve --cluster processes on loopback, the leader killed');
    const failoverOk = await chronactaFailoverStep(out, { appends: values.quick ? 10 : 20 });
    out();
    out('[9/10] Virtual actors: macrosteps journaled on disk, rebuilt by replay after a restart');
    const actorsOk = await actorStep(out);
    out();
    out('[10/10] An actor cluster: three nodes on loopback (HTTP/2 over mutual TLS 1.3, leases, fencing)');
    let clusterOk = true;
    try {
      await runClusterDemo((line) => out(`      ${line}`), { actors: values.quick ? 500 : 3000 });
    } catch (e) {
      clusterOk = false;
      out(`      failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    out();
    out('Next: npm test runs the whole suite; npm run bench compares plexus with other libraries.');
    if (job.exitCode !== 0 || !failoverOk || !actorsOk || !clusterOk) return 1;
    return 0;
  },
};
