// Failure detection, side by side in one run (imports dist/: build first; etcd on PATH for the
// lease row). Five member processes on loopback; in each round one is SIGKILLed (or, in the
// next round, SIGSTOPped) and the time from the signal to EVERY other member marking it failed
// is measured:
//
// - plexus gossip (bench/cluster/gossip-member.mjs: Swim + driveSwim + wireGossipTransport
//   over an Http2Wire with mutual TLS 1.3) with the timings `gossipConfigFor` maps from the
//   default DetectorConfig (suspect after 3 s, failed after 10 s);
// - the same processes with hashicorp/memberlist's DefaultLANConfig (config.go: ProbeInterval
//   1 s, ProbeTimeout 500 ms, IndirectChecks 3, RetransmitMult 4, SuspicionMult 4,
//   SuspicionMaxTimeoutMult 6, AwarenessMaxMultiplier 8, GossipNodes 3, GossipInterval
//   200 ms, PushPullInterval 30 s), printed next to the window its formula gives;
// - etcd lease expiry (bench/cluster/lease-holder.mjs): five processes each holding one
//   shard lease through an EtcdAuthority on a real 3-member etcd (default LeaseConfig); the
//   time until another process's grant of the signalled one's shard succeeds;
// - Kubernetes Lease expiry: the same with a KubeAuthority through @kubernetes/client-node on
//   the Lease-API stand-in of the tests (bench/cluster/kube-stand-in.mjs, its own process),
//   which keeps the Lease objects in the same etcd. Expiry by observation: the taker's grant
//   succeeds once it has seen the victim's Lease unchanged for a lease length on its own
//   clock, so about a lease length after the victim's last renewal, plus up to one
//   observation (the taker's heartbeats and grant tries read the Leases).
//
// After each round the signalled process is killed by its PID and started again (but after the
// last), and the next round waits until every member sees all five alive again (gossip) or it holds a new shard
// (etcd, Kubernetes). Every process is stopped by its PID, also on failure and on SIGINT.
//
// node bench/cluster/failure-detection.mjs [--rounds N] [--quick] [--only gossip|memberlist|etcd|kube] [--json FILE]
//   --only ROWS  one row, or several separated by commas (default all)
//   --rounds N   rounds per signal and row (default 3; --quick: 1)
//   --json FILE  also write the rows as JSON
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { etcdAvailable, startEtcd } from './etcd-cluster.mjs';
import { STAND_IN_SCRIPT } from './kube-stand-in.mjs';
import { Child, dist, HERE, median, onInterrupt, removeDir, sleep, tempDir, writeCertificates } from './procs.mjs';

const { values: o } = parseArgs({
  options: {
    rounds: { type: 'string' },
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    json: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (o.help) {
  console.log(
    'node bench/cluster/failure-detection.mjs [--rounds N] [--quick] [--only gossip|memberlist|etcd|kube] [--json FILE]',
  );
  process.exit(0);
}
onInterrupt();
const ROUNDS = Number(o.rounds ?? (o.quick ? 1 : 3));
const N = 5;
const IDS = Array.from({ length: N }, (_, i) => `m${i}`);
const SIGNALS = ['SIGKILL', 'SIGSTOP'];

const [
  { gossipConfig, gossipConfigFor },
  { suspicionMinMs, suspicionConfirmations },
  { DEFAULT_DETECTOR_CONFIG },
  { freePorts },
] = await Promise.all([
  dist('cluster/gossip/config.js'),
  dist('cluster/gossip/suspicion.js'),
  dist('cluster/config.js'),
  dist('net/ports.js'),
]);

/** hashicorp/memberlist DefaultLANConfig (config.go), in GossipConfig's names. */
const MEMBERLIST_LAN = {
  probeIntervalMs: 1000,
  probeTimeoutMs: 500,
  indirectChecks: 3,
  retransmitMult: 4,
  suspicionMult: 4,
  suspicionMaxTimeoutMult: 6,
  awarenessMaxMultiplier: 8,
  gossipIntervalMs: 200,
  gossipNodes: 3,
  pushPullIntervalMs: 30_000,
};

/**
 * What the formula gives for `n` members: the suspicion timeout from its maximum (no
 * confirmation) down to its minimum (k confirmations), and the detection window: the earliest
 * a member can be failed (probed at once: one interval, then the minimum) to the latest
 * without a raised health score (the last probe of a reshuffled round-robin order, one
 * interval, then the maximum).
 */
function expected(config, n) {
  const min = suspicionMinMs(config.suspicionMult, n, config.probeIntervalMs);
  const k = config.lifeguard === false ? 0 : suspicionConfirmations(config.suspicionMult, n);
  const max = k === 0 ? min : config.suspicionMaxTimeoutMult * min;
  const I = config.probeIntervalMs;
  return {
    suspicionMinMs: min,
    suspicionMaxMs: max,
    k,
    earliestMs: I + min,
    latestMs: (2 * (n - 1) - 1) * I + I + max,
  };
}

const MEMBER = join(HERE, 'gossip-member.mjs');
const HOLDER = join(HERE, 'lease-holder.mjs');

async function gossipRow(label, config) {
  const dir = tempDir('plexus-bench-fd-');
  const members = [];
  try {
    await writeCertificates(dir, 'bench', IDS);
    const ports = await freePorts(N);
    const peers = IDS.map((id, i) => `${id}=127.0.0.1:${ports[i]}`).join(',');
    const names = IDS.map((id, i) => `${id}@127.0.0.1:${ports[i]}`);
    const start = (i) =>
      new Child(
        MEMBER,
        [
          ...['--id', IDS[i], '--port', String(ports[i]), '--certs', dir, '--peers', peers],
          ...['--seeds', i === 0 ? 'm1' : 'm0', '--config', JSON.stringify(config)],
        ],
        { name: `${label} ${IDS[i]}` },
      );
    for (let i = 0; i < N; i++) members[i] = start(i);
    await Promise.all(members.map((m) => m.waitFor((l) => l.ev === 'ready', 30_000, 'ready')));
    /** Waits until every member holds every other alive (last change about it is to alive). */
    const converged = async (timeoutMs) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const ok = members.every((m, i) =>
          names.every((n, j) => {
            if (i === j) return true;
            const last = m.lines.findLast((l) => l.ev === 'change' && l.member === n);
            return last?.to === 'alive';
          }),
        );
        if (ok) return;
        if (Date.now() > deadline)
          throw new Error(`${label}: the members did not all see each other alive in ${timeoutMs} ms`);
        await sleep(100);
      }
    };
    await converged(60_000);
    const rounds = [];
    for (let r = 0; r < ROUNDS * SIGNALS.length; r++) {
      const signal = SIGNALS[r % SIGNALS.length];
      const v = (r + 2) % N;
      const victim = names[v];
      await sleep(1000 + Math.floor(Math.random() * 1000));
      const marks = members.map((m) => m.lines.length);
      const t0 = Date.now();
      members[v].signal(signal);
      const others = members.filter((_, i) => i !== v);
      const times = await Promise.all(
        others.map((m) =>
          m
            .waitFor(
              (l) =>
                l.ev === 'change' &&
                l.member === victim &&
                l.to === 'dead' &&
                m.lines.indexOf(l) >= marks[members.indexOf(m)],
              120_000,
              `${victim} dead`,
            )
            .then((l) => l.at - t0),
        ),
      );
      const suspects = others.map((m) => {
        const l = m.lines
          .slice(marks[members.indexOf(m)])
          .find((x) => x.ev === 'change' && x.member === victim && x.to === 'suspect');
        return l === undefined ? undefined : l.at - t0;
      });
      const firstSuspect = Math.min(...suspects.filter((x) => x !== undefined));
      const allMs = Math.max(...times);
      rounds.push({
        signal,
        victim: IDS[v],
        allFailedMs: allMs,
        firstFailedMs: Math.min(...times),
        firstSuspectMs: firstSuspect,
      });
      console.log(
        `  ${label.padEnd(22)} round ${r + 1} ${signal.padEnd(7)} ${IDS[v]}: every member failed it after ${allMs} ms (first suspect ${firstSuspect} ms)`,
      );
      await members[v].stop();
      if (r === ROUNDS * SIGNALS.length - 1) break;
      members[v] = start(v);
      await members[v].waitFor((l) => l.ev === 'ready', 30_000, 'ready');
      await converged(60_000);
    }
    return rounds;
  } finally {
    for (const m of members) await m?.stop();
    removeDir(dir);
  }
}

/**
 * Lease expiry: five lease-holder processes, each holding one shard lease through an
 * EtcdAuthority (`store` 'etcd') or a KubeAuthority on the Lease-API stand-in (`store` 'kube',
 * its own process, kube-stand-in.mjs) on the same real etcd `etcd`.
 */
async function leaseRow(store, etcd) {
  const label = store === 'etcd' ? 'etcd lease' : 'Kubernetes Lease';
  const holders = [];
  let standIn;
  const dir = tempDir('plexus-bench-fd-lease-');
  try {
    let where;
    if (store === 'etcd') {
      where = ['--etcd', etcd.clientUrls.join(','), '--prefix', `/plexus-bench/fd-${process.pid}/`];
    } else {
      const kubeconfig = join(dir, 'kubeconfig');
      standIn = new Child(
        STAND_IN_SCRIPT,
        [
          '--etcd',
          etcd.clientUrls.join(','),
          '--kubeconfig',
          kubeconfig,
          '--prefix',
          `/plexus-bench/kube-fd-${process.pid}/`,
        ],
        { name: 'Lease-API stand-in' },
      );
      await standIn.waitFor((l) => l.ev === 'ready', 60_000, 'ready');
      where = ['--kubeconfig', kubeconfig, '--namespace', 'plexus-bench', '--prefix', `fd-${process.pid}`];
    }
    let nextShard = 0;
    const start = (i) => {
      const shard = nextShard++;
      const c = new Child(HOLDER, ['--id', IDS[i], ...where, '--shard', String(shard), '--members', IDS.join(',')], {
        name: `${label} ${IDS[i]}`,
      });
      c.shard = shard;
      return c;
    };
    for (let i = 0; i < N; i++) holders[i] = start(i);
    const ready = await Promise.all(holders.map((h) => h.waitFor((l) => l.ev === 'ready', 60_000, 'ready')));
    const lease = ready[0].lease;
    const rounds = [];
    for (let r = 0; r < ROUNDS * SIGNALS.length; r++) {
      const signal = SIGNALS[r % SIGNALS.length];
      const v = (r + 2) % N;
      const taker = holders[(v + 1) % N];
      const shard = holders[v].shard;
      // A random phase against the victim's renewals (every renewEveryMs).
      await sleep(1000 + Math.floor(Math.random() * lease.renewEveryMs));
      const t0 = Date.now();
      holders[v].signal(signal);
      taker.send({ cmd: 'take', shard });
      const g = await taker.waitFor(
        (l) => l.ev === 'granted' && l.shard === shard && l.at >= t0,
        120_000,
        `a grant of shard ${shard}`,
      );
      const ms = g.at - t0;
      rounds.push({ signal, victim: IDS[v], allFailedMs: ms, epoch: g.epoch });
      console.log(
        `  ${label.padEnd(22)} round ${r + 1} ${signal.padEnd(7)} ${IDS[v]}: shard ${shard} granted to ${IDS[(v + 1) % N]} (epoch ${g.epoch}) after ${ms} ms`,
      );
      await holders[v].stop();
      if (r === ROUNDS * SIGNALS.length - 1) break;
      holders[v] = start(v);
      await holders[v].waitFor((l) => l.ev === 'ready', 60_000, 'ready');
    }
    return { rounds, lease, standInPid: standIn?.pid };
  } finally {
    for (const h of holders) await h?.stop();
    await standIn?.stop();
    removeDir(dir);
  }
}

const rows = [];
const plexus = gossipConfigFor(DEFAULT_DETECTOR_CONFIG);
const memberlist = gossipConfig(MEMBERLIST_LAN);
const want = (name) => o.only === undefined || o.only.split(',').includes(name);
console.log(
  `failure detection: ${N} processes on loopback, ${ROUNDS} round(s) per signal (${new Date().toISOString()})`,
);
if (want('gossip')) {
  const rounds = await gossipRow('plexus gossip', plexus);
  rows.push({ row: 'plexus gossip (gossipConfigFor defaults)', config: plexus, expected: expected(plexus, N), rounds });
}
if (want('memberlist')) {
  const rounds = await gossipRow('memberlist LAN', memberlist);
  rows.push({
    row: 'same core, memberlist LAN defaults',
    config: memberlist,
    expected: expected(memberlist, N),
    rounds,
  });
}
const LEASE_ROWS = [
  { store: 'etcd', row: 'etcd lease expiry (default LeaseConfig)' },
  { store: 'kube', row: 'Kubernetes Lease expiry (default LeaseConfig, stand-in)' },
].filter((x) => want(x.store));
if (LEASE_ROWS.length > 0 && !etcdAvailable) {
  for (const { row } of LEASE_ROWS) {
    console.log(`  ${row}: skipped, no etcd on PATH`);
    rows.push({ row, skipped: 'no etcd on PATH', rounds: [] });
  }
} else if (LEASE_ROWS.length > 0) {
  // One real 3-member etcd under both rows: the etcd authority's keys and the stand-in's Lease objects.
  const etcd = await startEtcd();
  try {
    for (const { store, row } of LEASE_ROWS) {
      const { rounds, lease, standInPid } = await leaseRow(store, etcd);
      rows.push({ row, store, config: lease, rounds, ...(standInPid === undefined ? {} : { standInPid }) });
    }
  } finally {
    await etcd.stop();
  }
}

const s = (ms) => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : '-');
const W = Math.max(42, ...rows.map((r) => r.row.length + 2));
console.log(`\n${'row'.padEnd(W)}signal   median   rounds (s)                 formula window`);
for (const row of rows) {
  row.medians = {};
  for (const signal of SIGNALS) {
    const xs = row.rounds.filter((x) => x.signal === signal).map((x) => x.allFailedMs);
    row.medians[signal] = median(xs);
    const e = row.expected;
    const win = e
      ? `${s(e.earliestMs)} .. ${s(e.latestMs)} (suspicion ${s(e.suspicionMinMs)}..${s(e.suspicionMaxMs)}, k=${e.k})`
      : row.config?.ttlMs
        ? `ttl ${s(row.config.ttlMs)}, renew every ${s(row.config.renewEveryMs)}`
        : '';
    console.log(
      `${row.row.padEnd(W)}${signal.padEnd(9)}${s(median(xs)).padStart(7)}   ${xs
        .map((x) => (x / 1000).toFixed(2))
        .join(', ')
        .padEnd(26)} ${win}`,
    );
  }
}
if (o.json) writeFileSync(o.json, `${JSON.stringify({ bench: 'failure-detection', n: N, rows }, null, 2)}\n`);
process.exit(0);
