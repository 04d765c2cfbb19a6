// Lease operations against a real 3-member etcd on loopback (imports dist/: build first; etcd
// on PATH), side by side in one run, with 1 and with 8 concurrent clients in this process,
// for the etcd authority and the Kubernetes one:
//
// - EtcdAuthority renewals: each client (its own authority object and member) renews its one
//   shard lease in a loop (`renew`: a read of the prefix, `/v3/lease/keepalive`, a
//   compare-and-set put of the lease key, and the read that publishes the view);
// - the floor of a renewal: the same client's two etcd calls alone through the JSON gateway
//   (EtcdGateway): `/v3/lease/keepalive` and a `/v3/kv/txn` putting the key if its
//   mod_revision is unchanged;
// - EtcdAuthority grants: each client takes a grant of its shard and releases it, in a loop
//   (a grant raises the shard's epoch and writes the lease in one compare-and-set; the view
//   it changes is published by another);
// - the floor of a grant: `/v3/lease/grant` and the one txn (epoch and lease key compared and
//   written), then the delete and `/v3/lease/revoke` a release makes;
// - KubeAuthority renewals and grants (grant + release), the same loops through
//   `@kubernetes/client-node` on the Lease-API stand-in of the tests (kube-stand-in.mjs, its own
//   process, HTTPS with a test CA and a bearer token), which keeps the Lease objects in the
//   same etcd. A renewal lists the Lease objects, replaces the shard's Lease (renewTime) and
//   the member's (its sign of life), and reads again to publish the view;
// - the floor of a Kubernetes renewal: a read and a replace of one Lease object through the
//   client library's CoordinationV1Api, on the same stand-in.
// The Kubernetes rows measure the client, the stand-in and etcd, not an API server (which
// adds admission, authorization, its own etcd round trips and watch fan-out): an upper bound
// for the client side only.
//
// Rates are operations per second over each case's wall time (grants: grant-and-release
// cycles); latencies are per operation, p50 and p99. Each case runs --repeats times,
// alternating the rows; the table gives the median of the runs and every run.
//
// node bench/cluster/etcd-leases.mjs [--ms MS] [--repeats N] [--quick] [--json FILE]
//   --ms MS       each case's duration (default 5000; --quick: 1000)
//   --repeats N   runs of every case (default 3; --quick: 1)
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { etcdAvailable, startEtcd } from './etcd-cluster.mjs';
import { STAND_IN_SCRIPT } from './kube-stand-in.mjs';
import { Child, dist, median, onInterrupt, percentile, removeDir, tempDir } from './procs.mjs';

const { values: o } = parseArgs({
  options: {
    ms: { type: 'string' },
    repeats: { type: 'string' },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (o.help) {
  console.log('node bench/cluster/etcd-leases.mjs [--ms MS] [--repeats N] [--quick] [--json FILE]');
  process.exit(0);
}
onInterrupt();
const CASE_MS = Number(o.ms ?? (o.quick ? 1000 : 5000));
const REPEATS = Number(o.repeats ?? (o.quick ? 1 : 3));
const CLIENTS = [1, 8];

if (!etcdAvailable) {
  console.log('etcd leases: skipped, no etcd on PATH');
  if (o.json)
    writeFileSync(o.json, `${JSON.stringify({ bench: 'etcd-leases', skipped: 'no etcd on PATH', rows: [] })}\n`);
  process.exit(0);
}

const [{ EtcdAuthority }, { EtcdGateway }, { KubeAuthority }, k8s] = await Promise.all([
  dist('cluster/etcd-authority.js'),
  dist('cluster/etcd-gateway.js'),
  dist('cluster/kube-authority.js'),
  import('@kubernetes/client-node'),
]);

const etcd = await startEtcd();
// The Lease-API stand-in, its own process, on the same etcd; stopped by its PID.
const kubeDir = tempDir('plexus-bench-kube-leases-');
const kubeconfig = join(kubeDir, 'kubeconfig');
/**
 * A namespace of its own for each Kubernetes case (a list returns the whole namespace, so one
 * case's objects must not slow the next one's lists).
 */
const namespaceOf = (k) => `bench-${process.pid}-${k}`;
const standIn = new Child(
  STAND_IN_SCRIPT,
  ['--etcd', etcd.clientUrls.join(','), '--kubeconfig', kubeconfig, '--prefix', `/plexus-bench/kube-${process.pid}/`],
  { name: 'Lease-API stand-in' },
);
const meta = { id: 'bench', shardCount: 64, hashVersion: 1, replicationFactor: 1 };
const IDS = Array.from({ length: Math.max(...CLIENTS) }, (_, i) => `c${i}`);
const members = IDS.map((id, i) => ({ id, address: `127.0.0.1:${10_000 + i}` }));

/** Runs `op(i)` in a loop on `n` clients for CASE_MS; returns the rate and latencies. */
async function drive(n, op) {
  const lat = [];
  let errors = 0;
  const t0 = performance.now();
  const end = t0 + CASE_MS;
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      while (performance.now() < end) {
        const s = performance.now();
        try {
          await op(i);
          lat.push(performance.now() - s);
        } catch {
          errors++;
        }
      }
    }),
  );
  const wall = performance.now() - t0;
  return {
    opsPerSec: (lat.length * 1000) / wall,
    p50Ms: percentile(lat, 50),
    p99Ms: percentile(lat, 99),
    ops: lat.length,
    errors,
  };
}

const must = (r, what) => {
  if (!r.ok) throw new Error(`${what}: ${r.code} ${r.message}`);
  return r;
};

let run = 0;
/** Authority objects (etcd or Kubernetes), one per client, on a fresh prefix (etcd) or namespace (Kubernetes); each joined. */
async function authorities(n, store = 'etcd') {
  const k = run++;
  const prefix = store === 'etcd' ? `/plexus-bench/leases-${process.pid}-${k}/` : 'plexus-bench';
  const namespace = namespaceOf(k);
  const out = [];
  for (let i = 0; i < n; i++) {
    const a =
      store === 'etcd'
        ? await EtcdAuthority.open({ etcd: { endpoints: etcd.clientUrls }, prefix, meta, members })
        : await KubeAuthority.open({ kubeconfig, namespace, prefix, meta, members });
    must(await a.call({ type: 'join', node: IDS[i], address: members[i].address, meta }), 'join');
    out.push(a);
  }
  return { prefix, list: out };
}

const cases = {
  async 'EtcdAuthority renew'(n) {
    const { list } = await authorities(n);
    try {
      const epochs = [];
      for (let i = 0; i < n; i++)
        epochs[i] = must(await list[i].call({ type: 'grant', node: IDS[i], shard: i }), 'grant').lease.epoch;
      return await drive(n, async (i) =>
        must(await list[i].call({ type: 'renew', node: IDS[i], shard: i, epoch: epochs[i] }), 'renew'),
      );
    } finally {
      for (const a of list) a.close();
    }
  },
  async 'gateway keepalive + txn (floor)'(n) {
    const gw = Array.from({ length: n }, () => new EtcdGateway({ endpoints: etcd.clientUrls }));
    const prefix = `/plexus-bench/raw-${process.pid}-${run++}/`;
    const state = [];
    for (let i = 0; i < n; i++) {
      const { id } = await gw[i].leaseGrant(30);
      const key = `${prefix}leases/${i}`;
      const r = await gw[i].txn([], [{ put: key, value: `lease ${i}`, lease: id }]);
      state[i] = { id, key, mod: r.revision };
    }
    return drive(n, async (i) => {
      const s = state[i];
      const ttl = await gw[i].keepAlive(s.id);
      if (ttl <= 0n) throw new Error('lease gone');
      const r = await gw[i].txn(
        [{ key: s.key, target: 'MOD', modRevision: s.mod }],
        [{ put: s.key, value: `lease ${i}`, lease: s.id }],
      );
      if (!r.succeeded) throw new Error('lost the compare-and-set');
      s.mod = r.revision;
    });
  },
  async 'EtcdAuthority grant + release'(n) {
    const { list } = await authorities(n);
    try {
      return await drive(n, async (i) => {
        const g = must(await list[i].call({ type: 'grant', node: IDS[i], shard: i }), 'grant');
        must(await list[i].call({ type: 'release', node: IDS[i], shard: i, epoch: g.lease.epoch }), 'release');
      });
    } finally {
      for (const a of list) a.close();
    }
  },
  async 'gateway grant + txn + release (floor)'(n) {
    const gw = Array.from({ length: n }, () => new EtcdGateway({ endpoints: etcd.clientUrls }));
    const prefix = `/plexus-bench/raw-${process.pid}-${run++}/`;
    const mods = Array.from({ length: n }, () => ({ epoch: 0n, epochMod: 0n }));
    return drive(n, async (i) => {
      const m = mods[i];
      const { id } = await gw[i].leaseGrant(30);
      const epochKey = `${prefix}epochs/${i}`;
      const leaseKey = `${prefix}leases/${i}`;
      const r = await gw[i].txn(
        [
          { key: epochKey, target: 'MOD', modRevision: m.epochMod },
          { key: leaseKey, target: 'MOD', modRevision: 0n },
        ],
        [
          { put: epochKey, value: String(m.epoch + 1n) },
          { put: leaseKey, value: `lease ${i}`, lease: id },
        ],
      );
      if (!r.succeeded) throw new Error('lost the compare-and-set');
      m.epoch++;
      m.epochMod = r.revision;
      await gw[i].txn([], [{ del: leaseKey }]);
      await gw[i].leaseRevoke(id);
    });
  },
  async 'KubeAuthority renew'(n) {
    const { list } = await authorities(n, 'kube');
    try {
      const epochs = [];
      for (let i = 0; i < n; i++)
        epochs[i] = must(await list[i].call({ type: 'grant', node: IDS[i], shard: i }), 'grant').lease.epoch;
      return await drive(n, async (i) =>
        must(await list[i].call({ type: 'renew', node: IDS[i], shard: i, epoch: epochs[i] }), 'renew'),
      );
    } finally {
      for (const a of list) a.close();
    }
  },
  async 'Lease read + replace (floor)'(n) {
    // One client library object per client, as each plexus process has its own.
    const apis = Array.from({ length: n }, () => {
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(kubeconfig);
      return kc.makeApiClient(k8s.CoordinationV1Api);
    });
    const NS = namespaceOf(run++);
    const names = Array.from({ length: n }, (_, i) => `raw-${i}`);
    for (let i = 0; i < n; i++) {
      const now = new Date();
      await apis[i].createNamespacedLease({
        namespace: NS,
        body: {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: names[i] },
          spec: { holderIdentity: IDS[i], leaseDurationSeconds: 10, acquireTime: now, renewTime: now },
        },
      });
    }
    return drive(n, async (i) => {
      const obj = await apis[i].readNamespacedLease({ name: names[i], namespace: NS });
      if (obj.spec?.holderIdentity !== IDS[i]) throw new Error('the Lease changed holder');
      obj.spec.renewTime = new Date();
      // A replace carries the resourceVersion just read: a stale one is refused (409).
      await apis[i].replaceNamespacedLease({ name: names[i], namespace: NS, body: obj });
    });
  },
  async 'KubeAuthority grant + release'(n) {
    const { list } = await authorities(n, 'kube');
    try {
      return await drive(n, async (i) => {
        const g = must(await list[i].call({ type: 'grant', node: IDS[i], shard: i }), 'grant');
        must(await list[i].call({ type: 'release', node: IDS[i], shard: i, epoch: g.lease.epoch }), 'release');
      });
    } finally {
      for (const a of list) a.close();
    }
  },
};
/** Which store each case measures (the JSON rows carry it). */
const storeOf = (name) => (name.startsWith('Kube') || name.startsWith('Lease ') ? 'kube' : 'etcd');

const results = [];
try {
  await standIn.waitFor((l) => l.ev === 'ready', 60_000, 'ready');
  console.log(
    `lease operations: real 3-member etcd on loopback (Kubernetes rows: the Lease-API stand-in on it), ${CASE_MS} ms per case, ${REPEATS} run(s) (${new Date().toISOString()})`,
  );
  for (let r = 0; r < REPEATS; r++) {
    for (const n of CLIENTS) {
      for (const [name, fn] of Object.entries(cases)) {
        const x = await fn(n);
        results.push({ case: name, store: storeOf(name), clients: n, run: r + 1, ...x });
        console.log(
          `  run ${r + 1} ${name.padEnd(38)} ${String(n).padStart(2)} client(s): ${x.opsPerSec.toFixed(0).padStart(6)} ops/s  p50 ${x.p50Ms.toFixed(2)} ms  p99 ${x.p99Ms.toFixed(2)} ms${x.errors ? `  (${x.errors} errors)` : ''}`,
        );
      }
    }
  }
} finally {
  await standIn.stop();
  removeDir(kubeDir);
  await etcd.stop();
}

const rows = [];
console.log('\ncase                                    clients   ops/s (median; runs)          p50 ms   p99 ms');
for (const n of CLIENTS) {
  for (const name of Object.keys(cases)) {
    const xs = results.filter((x) => x.case === name && x.clients === n);
    const row = {
      case: name,
      store: storeOf(name),
      clients: n,
      opsPerSec: median(xs.map((x) => x.opsPerSec)),
      p50Ms: median(xs.map((x) => x.p50Ms)),
      p99Ms: median(xs.map((x) => x.p99Ms)),
      errors: xs.reduce((a, x) => a + x.errors, 0),
      runs: xs.map((x) => Math.round(x.opsPerSec)),
    };
    rows.push(row);
    console.log(
      `${name.padEnd(40)}${String(n).padStart(4)}   ${`${row.opsPerSec.toFixed(0)} (${row.runs.join(', ')})`.padEnd(28)}${row.p50Ms.toFixed(2).padStart(7)}  ${row.p99Ms.toFixed(2).padStart(7)}`,
    );
  }
}
if (o.json)
  writeFileSync(
    o.json,
    `${JSON.stringify({ bench: 'etcd-leases', caseMs: CASE_MS, repeats: REPEATS, standInPid: standIn.pid, rows, results }, null, 2)}\n`,
  );
process.exit(0);
