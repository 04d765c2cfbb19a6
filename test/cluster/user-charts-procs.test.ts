/**
 * Your own actors and the metrics port with real node processes (`plexus cluster node` built in
 * dist/, mutual TLS on loopback): the example in examples/cluster/ run as its README says, three
 * node processes scraped while messages flow between them, and a node refusing a chart module
 * that does not load. Every process started here is stopped by its PID.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';
import { built, startNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { CLI, freePorts, initProcCluster, NodeProc, ProcRun, patchConfig, statusWithAllLeases } from './actor-procs.js';

/** One metric's value (summed over its labels) from Prometheus text. */
function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

const scrape = async (address: string) => (await fetch(`http://${address}/metrics`)).text();

const run = new ProcRun();
const badRun = new ProcRun();
afterAll(async () => {
  await run.cleanup();
  await badRun.cleanup();
}, 120_000);

describe.skipIf(!built)('node processes with a metrics port', () => {
  it('counts messages in and out, macrosteps and journal appends as messages flow, and holds leases', async () => {
    const configs = await initProcCluster(run, 'plexus-metrics-procs-', { shards: 8, nodes: ['a', 'b', 'c'] });
    const mports = await freePorts(3);
    for (const [i, id] of ['a', 'b', 'c'].entries()) {
      await patchConfig(configs.get(id) as string, { metrics: { host: '127.0.0.1', port: mports[i] } });
    }
    const procs = ['a', 'b', 'c'].map((id) => new NodeProc(id, configs.get(id) as string));
    run.procs.push(...procs);
    const joined = await Promise.all(procs.map((p) => p.wait((l) => l.ev === 'joined', 'joined', 60_000)));
    expect(joined.map((l) => l.metrics)).toEqual(mports.map((p) => `127.0.0.1:${p}`));
    const [a] = procs as [NodeProc, NodeProc, NodeProc];
    await statusWithAllLeases(a, 8, 60_000);
    for (const l of joined) {
      expect((await fetch(`http://${l.metrics}/healthz`)).status).toBe(200);
      await until(async () => (await fetch(`http://${l.metrics}/readyz`)).status === 200, {
        timeoutMs: 30_000,
        what: `node ${l.self} ready`,
      });
    }
    const before = await Promise.all(joined.map((l) => scrape(l.metrics)));
    expect(before.reduce((n, t) => n + metric(t, 'plexus_node_leases_held'), 0)).toBe(8);
    // Request/reply from relays on a to counters on the other nodes: messages cross the wire both ways.
    const load = await a.cmd({ cmd: 'load', q: 0, pairs: 4, count: 40, mode: 'rr', prefix: 'm' }, 60_000);
    expect(load.error).toBeUndefined();
    expect(load.count).toBe(40);
    const after = await Promise.all(joined.map((l) => scrape(l.metrics)));
    const moved = (name: string, i: number) => metric(after[i] as string, name) - metric(before[i] as string, name);
    // Node a asked 40 times across the wire and got 40 replies.
    expect(moved('plexus_node_messages_out_total', 0)).toBeGreaterThanOrEqual(40);
    expect(moved('plexus_node_messages_in_total', 0)).toBeGreaterThanOrEqual(40);
    // The counters ran 40 macrosteps on b and c together, each journaled.
    expect(moved('plexus_node_macrosteps_total', 1) + moved('plexus_node_macrosteps_total', 2)).toBe(40);
    expect(
      moved('plexus_node_journal_appends_total', 1) + moved('plexus_node_journal_appends_total', 2),
    ).toBeGreaterThanOrEqual(40);
    expect(
      moved('plexus_node_messages_in_total', 1) + moved('plexus_node_messages_in_total', 2),
    ).toBeGreaterThanOrEqual(40);
    for (const t of after) {
      expect(t).toMatch(/^plexus_node_wire_retries_total \d+$/m);
      expect(t).toMatch(/^plexus_node_dead_letters_total \d+$/m);
      expect(t).toMatch(/^# TYPE plexus_node_journal_append_duration_seconds histogram$/m);
    }
    for (const p of procs) await p.stop();
    for (const p of procs) expect(p.exited).toBe(0);
  }, 180_000);

  it('refuses a chart module that does not load: the node exits 1 and names the code', async () => {
    const configs = await initProcCluster(badRun, 'plexus-charts-bad-', { shards: 4, nodes: ['a'] });
    const bad = join(badRun.dir, 'bad-charts.mjs');
    await writeFile(bad, 'export const charts = { "vt:x/": { initial: () => 0 } };\n');
    // --charts is relative to the working directory.
    const missing = startNode(CLI, ['node', '--config', configs.get('a') as string, '--charts', './none.mjs'], {
      cwd: badRun.dir,
    });
    expect((await missing.ended).code).toBe(1);
    expect(missing.stderr()).toContain(
      `PLX_CLUSTER_CHARTS_LOAD cannot load the chart module ${join(badRun.dir, 'none.mjs')}: no such file`,
    );
    const shape = startNode(CLI, ['node', '--config', configs.get('a') as string, '--charts', bad]);
    expect((await shape.ended).code).toBe(1);
    expect(shape.stderr()).toMatch(/PLX_CLUSTER_CHARTS_SHAPE .*charts\["vt:x\/"\] has no transition function/);
  }, 60_000);
});

// The example, run as its header says (`npx bun examples/cluster/three-nodes.ts`, here the bun
// binary npx finds) with ports picked here. It starts three node processes; their PIDs come from
// its output and any still running at the end is stopped here by PID.
const BUN = join(ROOT, 'node_modules/.bin/bun');
const EXAMPLE = 'examples/cluster/three-nodes.ts';
const examplePids: number[] = [];
let example: ChildProcess | undefined;
afterAll(() => {
  if (example?.pid !== undefined && example.exitCode === null) process.kill(example.pid, 'SIGKILL');
  for (const pid of examplePids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // ended already
    }
  }
});

describe.skipIf(!built || !existsSync(BUN))(EXAMPLE, () => {
  it('greets actors on three nodes with the chart module, reads the guestbook, scrapes metrics, stops the nodes', async () => {
    const ports = await freePorts(6);
    const out: string[] = [];
    const err: string[] = [];
    example = spawn(
      BUN,
      [EXAMPLE, '--ports', ports.slice(0, 3).join(','), '--metrics-ports', ports.slice(3).join(',')],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    example.stdout?.setEncoding('utf8').on('data', (d: string) => {
      out.push(d);
      for (const m of d.matchAll(/^node [abc]: pid (\d+)/gm)) examplePids.push(Number(m[1]));
    });
    example.stderr?.setEncoding('utf8').on('data', (d: string) => err.push(d));
    const code = await new Promise((resolve) => example?.once('exit', resolve));
    const text = out.join('');
    expect(err.join(''), text).toBe('');
    expect(code).toBe(0);
    expect(examplePids).toHaveLength(3);
    for (const who of ['Ada', 'Grace', 'Linus', 'Barbara', 'Edsger']) {
      expect(text).toMatch(
        new RegExp(`^vt:greeter/${who.toLowerCase()} \\(node [abc]\\) answered: Hello, ${who}! \\(#1\\)$`, 'm'),
      );
    }
    // Guestbook signatures crossed the cluster from every greeter, in the order they arrived.
    const book = /^vt:guestbook\/main \(node [abc]\) holds 5 names \(read (\d+) time\(s\)\): (.*)$/m.exec(text);
    expect(book, text).not.toBeNull();
    expect((book?.[2] ?? '').split(', ').sort()).toEqual(
      ['Ada', 'Barbara', 'Edsger', 'Grace', 'Linus'].map((w) => `${w} (at vt:greeter/${w.toLowerCase()})`),
    );
    const reads = Number(book?.[1]);
    expect(text).toMatch(/^built-in vt:counter\/visits answered 1$/m);
    const metrics = [
      ...text.matchAll(
        /^node ([abc]) metrics: messages_in (\d+), messages_out (\d+), macrosteps (\d+), journal_appends (\d+), leases_held (\d+)$/gm,
      ),
    ];
    expect(metrics).toHaveLength(3);
    // 5 greets, 5 signs, the guestbook's reads and 1 inc ran as macrosteps somewhere; 16 shards are held in all.
    expect(metrics.reduce((n, m) => n + Number(m[4]), 0)).toBe(11 + reads);
    expect(metrics.reduce((n, m) => n + Number(m[6]), 0)).toBe(16);
    expect(metrics.reduce((n, m) => n + Number(m[2]), 0)).toBeGreaterThan(0);
    for (const id of ['a', 'b', 'c']) expect(text).toMatch(new RegExp(`^node ${id} stopped \\(exit 0\\)$`, 'm'));
    // Every node process it started has ended.
    for (const pid of examplePids) expect(() => process.kill(pid, 0)).toThrow();
  }, 240_000);
});
