// One plexus process holding shard leases through an EtcdAuthority on a real etcd, or with
// --kubeconfig through a KubeAuthority on Kubernetes Lease objects (the benches give it the
// Lease-API stand-in, bench/cluster/kube-stand-in.mjs) (imports dist/: build first). It joins, takes a grant of --shard, and renews what it holds with a
// heartbeat every `renewEveryMs` of the lease config (default LeaseConfig unless --lease).
// On stdin, `{"cmd":"take","shard":N}` makes it ask for a grant of shard N every 50 ms until
// one succeeds (the lease of the owner before it expired). JSON lines on stdout:
//   {ev:'ready', id, pid, lease, at}
//   {ev:'granted', shard, epoch, tries, at}    (at = Date.now())
//   {ev:'lost', shard, at}                     (a heartbeat did not renew it)
//
// node bench/cluster/lease-holder.mjs --id m0 --etcd http://127.0.0.1:2379,... --shard 0 \
//   --members m0,m1,m2,m3,m4 [--prefix /plexus-bench/x/] [--lease '{"ttlMs":2000}']
// node bench/cluster/lease-holder.mjs --id m0 --kubeconfig FILE --namespace NS --prefix LABEL \
//   --shard 0 --members m0,m1,m2,m3,m4 [--lease '{"ttlMs":2000}']
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { dist } from './procs.mjs';

const { values: o } = parseArgs({
  options: {
    id: { type: 'string' },
    etcd: { type: 'string' },
    kubeconfig: { type: 'string' },
    namespace: { type: 'string', default: 'plexus-bench' },
    shard: { type: 'string' },
    members: { type: 'string' },
    prefix: { type: 'string', default: '/plexus-bench/leases/' },
    lease: { type: 'string', default: '{}' },
  },
});
const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
const meta = { id: 'bench', shardCount: 64, hashVersion: 1, replicationFactor: 1 };
const members = o.members.split(',').map((id, i) => ({ id, address: `127.0.0.1:${10_000 + i}` }));
const authority =
  o.kubeconfig === undefined
    ? await (await dist('cluster/etcd-authority.js')).EtcdAuthority.open({
        etcd: { endpoints: o.etcd.split(',') },
        prefix: o.prefix,
        meta,
        members,
        lease: JSON.parse(o.lease),
      })
    : await (await dist('cluster/kube-authority.js')).KubeAuthority.open({
        kubeconfig: o.kubeconfig,
        namespace: o.namespace,
        prefix: o.prefix,
        meta,
        members,
        lease: JSON.parse(o.lease),
      });
const self = members.find((m) => m.id === o.id);
const joined = await authority.call({ type: 'join', node: o.id, address: self.address, meta });
if (!joined.ok) throw new Error(`join refused: ${joined.code} ${joined.message}`);

/** shard -> epoch of every lease held. */
const held = new Map();

async function take(shard) {
  for (let tries = 1; ; tries++) {
    let r;
    try {
      r = await authority.call({ type: 'grant', node: o.id, shard });
    } catch (e) {
      r = { ok: false, code: e.code, message: e.message };
    }
    if (r.ok && r.lease) {
      held.set(shard, r.lease.epoch);
      out({ ev: 'granted', shard, epoch: String(r.lease.epoch), tries, at: Date.now() });
      return;
    }
    await new Promise((res) => setTimeout(res, 50));
  }
}

const renew = async () => {
  const list = [...held].map(([shard, epoch]) => ({ shard, epoch }));
  try {
    const r = await authority.call({ type: 'heartbeat', node: o.id, held: list });
    if (!r.ok) return;
    const renewed = new Set(r.renewed ?? []);
    for (const { shard } of list) {
      if (renewed.has(shard) || !held.has(shard)) continue;
      held.delete(shard);
      out({ ev: 'lost', shard, at: Date.now() });
    }
  } catch {
    // etcd did not answer this time; the next heartbeat tries again
  }
};
const beat = async () => {
  await renew();
  setTimeout(beat, authority.lease.renewEveryMs);
};

await take(Number(o.shard));
setTimeout(beat, authority.lease.renewEveryMs);
out({ ev: 'ready', id: o.id, pid: process.pid, lease: authority.lease, at: Date.now() });

createInterface({ input: process.stdin }).on('line', (text) => {
  const cmd = JSON.parse(text);
  if (cmd.cmd === 'take') take(cmd.shard);
});
const stop = () => {
  authority.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
