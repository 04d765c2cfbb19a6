// False positives of gossip failure detection, Lifeguard on and off side by side in one run
// (imports dist/: build first). Three clusters of five member processes each
// (bench/cluster/gossip-member.mjs: Swim over an Http2Wire with mutual TLS 1.3), all with the
// timings `gossipConfigFor` maps from the default DetectorConfig: one with Lifeguard on, one with
// it off (plain SWIM, whose fixed suspicion timeout is Lifeguard's minimum, 3 s), and one with it
// off and the suspicion timeout fixed at Lifeguard's maximum (6 s: `suspicionMult` x
// `suspicionMaxTimeoutMult`), which tells the health score and the buddy system apart from the
// longer first timeout. In each cluster one member is starved: SIGSTOP for a burst of 1 to 4 s,
// SIGCONT, run for 1 to 4 s, again, for the whole run; the bursts come from a seeded generator
// (the seed is printed; --seed repeats a schedule) and every starved member gets the same
// schedule at the same moments.
//
// Counted per cluster: the HEALTHY members (never stopped) that any member ever declared failed
// (dead), with the number of such declarations and who made them; the starved member's own
// failures separately (it does stop answering: those are not false positives); suspicions of
// healthy members (refuted in time, so harmless, but a sign of how close the run came); and how
// many of the starved member's declarations came within 100 ms of a resume (they fell due while
// it was stopped).
//
// node bench/cluster/false-positives.mjs [--duration S] [--quick] [--seed N] [--json FILE]
//   --duration S  seconds of starvation (default 300; --quick: 30)
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Child, dist, HERE, onInterrupt, removeDir, seeded, sleep, tempDir, writeCertificates } from './procs.mjs';

const { values: o } = parseArgs({
  options: {
    duration: { type: 'string' },
    quick: { type: 'boolean', default: false },
    seed: { type: 'string' },
    json: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (o.help) {
  console.log('node bench/cluster/false-positives.mjs [--duration S] [--quick] [--seed N] [--json FILE]');
  process.exit(0);
}
onInterrupt();
const DURATION_MS = 1000 * Number(o.duration ?? (o.quick ? 30 : 300));
const SEED = Number(o.seed ?? Math.floor(Math.random() * 2 ** 31));
const N = 5;
const IDS = Array.from({ length: N }, (_, i) => `m${i}`);
const STARVED = N - 1;
const MEMBER = join(HERE, 'gossip-member.mjs');

const [{ gossipConfigFor }, { DEFAULT_DETECTOR_CONFIG }, { freePorts }] = await Promise.all([
  dist('cluster/gossip/config.js'),
  dist('cluster/config.js'),
  dist('net/ports.js'),
]);

async function startCluster(label, config, dir) {
  const ports = await freePorts(N);
  const peers = IDS.map((id, i) => `${id}=127.0.0.1:${ports[i]}`).join(',');
  const names = IDS.map((id, i) => `${id}@127.0.0.1:${ports[i]}`);
  const members = IDS.map(
    (id, i) =>
      new Child(
        MEMBER,
        [
          ...['--id', id, '--port', String(ports[i]), '--certs', dir, '--peers', peers],
          ...['--seeds', i === 0 ? 'm1' : 'm0', '--config', JSON.stringify(config)],
        ],
        { name: `${label} ${id}` },
      ),
  );
  return { label, config, names, members };
}

async function converged(c, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = c.members.every((m, i) =>
      c.names.every((n, j) => i === j || m.lines.findLast((l) => l.ev === 'change' && l.member === n)?.to === 'alive'),
    );
    if (ok) return;
    if (Date.now() > deadline)
      throw new Error(`${c.label}: the members did not all see each other alive in ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** Resume times (Date.now() at SIGCONT) of the starved members. */
const resumes = [];

function count(c, from) {
  const starved = c.names[STARVED];
  const healthyDead = new Map();
  const byObserver = new Map();
  let starvedDead = 0;
  let healthySuspect = 0;
  let maxScore = 0;
  let starvedSoonAfterResume = 0;
  c.members.forEach((m, i) => {
    for (const l of m.lines.slice(from[i])) {
      if (l.ev === 'awareness') maxScore = Math.max(maxScore, l.score);
      if (l.ev !== 'change') continue;
      if (l.member === starved) {
        if (l.to === 'dead') starvedDead++;
        continue;
      }
      if (l.to === 'suspect') healthySuspect++;
      if (l.to !== 'dead') continue;
      healthyDead.set(l.member, (healthyDead.get(l.member) ?? 0) + 1);
      const who = i === STARVED ? 'the starved member' : 'a healthy member';
      // A declaration the starved member made within 100 ms of a resume: due while it was stopped.
      if (i === STARVED && resumes.some((t) => l.at >= t && l.at - t < 100)) starvedSoonAfterResume++;
      byObserver.set(who, (byObserver.get(who) ?? 0) + 1);
    }
  });
  return {
    healthyDeclaredFailed: healthyDead.size,
    healthyFailedDeclarations: [...healthyDead.values()].reduce((a, b) => a + b, 0),
    declaredBy: Object.fromEntries(byObserver),
    starvedDeclarationsWithin100msOfResume: starvedSoonAfterResume,
    starvedDeclaredFailed: starvedDead,
    healthySuspicions: healthySuspect,
    maxAwareness: maxScore,
  };
}

const base = gossipConfigFor(DEFAULT_DETECTOR_CONFIG);
const dir = tempDir('plexus-bench-fp-');
const clusters = [];
const bursts = [];
let stopped = false;
try {
  await writeCertificates(dir, 'bench', IDS);
  clusters.push(await startCluster('lifeguard on', { ...base, lifeguard: true }, dir));
  clusters.push(await startCluster('lifeguard off', { ...base, lifeguard: false }, dir));
  const longMult = base.suspicionMult * base.suspicionMaxTimeoutMult;
  clusters.push(await startCluster('lifeguard off, 6 s', { ...base, lifeguard: false, suspicionMult: longMult }, dir));
  for (const c of clusters)
    await Promise.all(c.members.map((m) => m.waitFor((l) => l.ev === 'ready', 30_000, 'ready')));
  for (const c of clusters) await converged(c, 60_000);
  const from = clusters.map((c) => c.members.map((m) => m.lines.length));
  console.log(
    `false positives: ${clusters.length} clusters x ${N} processes, ${IDS[STARVED]} starved by SIGSTOP bursts of 1-4 s (runs of 1-4 s between), ${DURATION_MS / 1000} s, seed ${SEED} (${new Date().toISOString()})`,
  );
  const rnd = seeded(SEED);
  const t0 = Date.now();
  while (Date.now() - t0 < DURATION_MS) {
    const stopMs = 1000 + Math.floor(rnd() * 3000);
    const runMs = 1000 + Math.floor(rnd() * 3000);
    for (const c of clusters) c.members[STARVED].signal('SIGSTOP');
    stopped = true;
    bursts.push(stopMs);
    await sleep(stopMs);
    for (const c of clusters) c.members[STARVED].signal('SIGCONT');
    resumes.push(Date.now());
    stopped = false;
    await sleep(runMs);
  }
  const elapsed = Date.now() - t0;
  // Let the last declarations land before counting.
  await sleep(2000);
  const rows = clusters.map((c, k) => ({ cluster: c.label, config: c.config, ...count(c, from[k]) }));
  const stoppedMs = bursts.reduce((a, b) => a + b, 0);
  console.log(
    `${bursts.length} bursts, stopped ${(stoppedMs / 1000).toFixed(1)} s of ${(elapsed / 1000).toFixed(1)} s (${((100 * stoppedMs) / elapsed).toFixed(0)}%)`,
  );
  console.log(
    '\ncluster             healthy members failed  declarations (by)                                        starved failed  healthy suspicions  max score',
  );
  for (const r of rows) {
    const by = Object.entries(r.declaredBy)
      .map(([k, v]) => `${v} by ${k}`)
      .join(', ');
    console.log(
      `${r.cluster.padEnd(20)}${String(r.healthyDeclaredFailed).padStart(6)} of ${N - 1}${String(r.healthyFailedDeclarations).padStart(16)} ${`(${by || 'none'})`.padEnd(56)}${String(r.starvedDeclaredFailed).padStart(8)}${String(r.healthySuspicions).padStart(18)}${String(r.maxAwareness).padStart(12)}`,
    );
  }
  for (const r of rows) {
    console.log(
      `${r.cluster}: ${r.starvedDeclarationsWithin100msOfResume} of the starved member's declarations of healthy members came within 100 ms of a resume`,
    );
  }
  if (o.json) {
    writeFileSync(
      o.json,
      `${JSON.stringify({ bench: 'false-positives', n: N, seed: SEED, durationMs: elapsed, bursts: bursts.length, stoppedMs, rows }, null, 2)}\n`,
    );
  }
} finally {
  if (stopped) for (const c of clusters) c.members[STARVED].signal('SIGCONT');
  for (const c of clusters) for (const m of c.members) await m.stop();
  removeDir(dir);
}
process.exit(0);
