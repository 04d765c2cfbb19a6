// The failover probe of the Chronacta HA suite (bench/chronacta-ha.mjs starts it as a
// child process, once for Chronacta and once for etcd). A writer appends through a client
// addressed to a follower (Chronacta: keyed appends, the client follows NOT_LEADER
// redirects to the leader; etcd: puts, which a follower forwards to its leader); once it
// has had a few appends acknowledged, this process SIGKILLs the leader by its PID and
// times, from just before the kill, the first acknowledged append sent after the kill.
// It prints one `FAILOVER {json}` line: { impl, failoverMs, before, attempts, error }.
//
// argv[2] is a JSON object:
//   { root, impl: 'chronacta' | 'etcd', target: 'host:port' (a follower), leaderPid,
//     eventBytes, timeoutMs }
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const cfg = JSON.parse(process.argv[2]);
const require = createRequire(join(cfg.root, 'package.json'));
const payload = Buffer.alloc(cfg.eventBytes ?? 100, 0x61);
const timeoutMs = cfg.timeoutMs ?? 20_000;
/** Per-call deadline: a call to a member with no leader yet fails and is sent again. */
const CALL_MS = 250;

function emit(o) {
  process.stdout.write(`FAILOVER ${JSON.stringify(o)}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An append function `(seq) => Promise` for the implementation, and a close. */
async function makeClient() {
  if (cfg.impl === 'chronacta') {
    const { ChronactaClient } = await import(pathToFileURL(resolve(cfg.root, 'dist/chronacta/client.js')).href);
    const c = new ChronactaClient(cfg.target, { deadlineMs: 1000, appendAttempts: 100, retryDelayMs: 10 });
    return {
      append: (seq) =>
        c.append('failover', [{ type: 'bench', data: payload }], { idempotencyKey: `failover-${process.pid}-${seq}` }),
      close: () => c.close(),
    };
  }
  const grpc = require('@grpc/grpc-js');
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync(join(cfg.root, 'bench/chronacta/etcd.proto'), {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const KV = grpc.loadPackageDefinition(def).etcdserverpb.KV;
  const c = new KV(cfg.target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  return {
    append: (seq) =>
      new Promise((res, rej) => {
        c.put(
          { key: Buffer.from(`failover/${String(seq).padStart(10, '0')}`), value: payload },
          { deadline: Date.now() + CALL_MS },
          (err, r) => (err ? rej(err) : res(r)),
        );
      }),
    close: () => c.close(),
  };
}

const client = await makeClient();
let seq = 0;
let before = 0;
try {
  // The writer before the kill: a few acknowledged appends, so the client is connected
  // (and, for Chronacta, knows the leader).
  const warmEnd = performance.now() + timeoutMs;
  while (before < 20) {
    try {
      await client.append(seq++);
      before++;
    } catch (e) {
      if (performance.now() > warmEnd) throw new Error(`no append acknowledged before the kill: ${e.message}`);
      await sleep(20);
    }
  }
  const killedAt = performance.now();
  process.kill(cfg.leaderPid, 'SIGKILL');
  let attempts = 0;
  let failoverMs;
  let lastError = '';
  while (failoverMs === undefined) {
    attempts++;
    try {
      await client.append(seq++);
      failoverMs = performance.now() - killedAt;
    } catch (e) {
      lastError = e.message;
      if (performance.now() - killedAt > timeoutMs) break;
      await sleep(5);
    }
  }
  emit({
    impl: cfg.impl,
    failoverMs: failoverMs ?? null,
    before,
    attempts,
    error: failoverMs === undefined ? lastError.slice(0, 300) : undefined,
  });
} catch (e) {
  emit({ impl: cfg.impl, failoverMs: null, before, attempts: 0, error: String(e.message).slice(0, 300) });
} finally {
  client.close();
}
process.exit(0);
