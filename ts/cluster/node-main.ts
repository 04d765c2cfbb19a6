/**
 * Runs one cluster node in this process until SIGTERM or SIGINT, or until an operator's
 * `plexus cluster leave` asks it to leave. Either way it leaves with a drain first
 * (ts/cluster/leave.ts: no new activations, running macrosteps finish, outboxes flush, each
 * shard is handed over and released, held messages go to the next owners), bounded, with a
 * `{"ev":"leaving","step":...}` line per step; a node that cannot hand its shards over
 * (per-node stores, replication factor 1) prints `{"ev":"leave-refused",...}` on SIGTERM and
 * stops without leaving (its shards wait for it). It prints what happens as JSON lines on stdout. With `control`, it also takes JSON commands on
 * stdin, one per line, each answered by a line with the same `q`:
 *
 *   {"cmd":"send","q":1,"target":iri,"event":name,"data":json,"id":msgid}   -> {"ev":"sent","q":1,"result"|"error"}
 *   {"cmd":"ask","q":2,"target":iri,"event":name,"data":json}               -> {"ev":"asked","q":2,"data"|"error"}
 *   {"cmd":"status","q":3}                                                   -> {"ev":"status",...}
 *   {"cmd":"route","q":4,"shard":n,"owner":node,"epoch":"e"}                -> a redirect, as if told
 *   {"cmd":"load","q":5,"pairs":n,"count":n,"mode":"oneway"|"rr","prefix":p} -> {"ev":"load","q":5,"ms",...}
 *   {"cmd":"release","q":6,"shard":n,"ms":n}   -> gives up the lease on shard n, not claimed again for ms (5000)
 *   {"cmd":"grant","q":7,"shard":n}            -> asks the authority for shard n's lease
 *   {"cmd":"stop"}                                                           -> drains and exits
 */
import { createInterface } from 'node:readline';
import { WIRE_SPIN_VARIABLE, wireSpinMs } from '../net/http2-wire-shared.js';
import type { JsonValue } from '../runtime/types.js';
import type { LeaveStep } from './leave.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from './node.js';
import { ownerOf } from './types.js';
import { loadChartModule } from './user-charts.js';

/** Whether standard output still has a reader (a node outlives the reader of its log). */
let stdoutOpen = true;
const out = (o: Record<string, unknown>) => {
  if (stdoutOpen) process.stdout.write(`${JSON.stringify(o, (_k, v) => (typeof v === 'bigint' ? `${v}` : v))}\n`);
};

/** Status of a running node: view, held leases, epochs, redirects and traffic counters. */
export function nodeStatus(cn: ClusterNode): Record<string, unknown> {
  const v = cn.membership.view();
  return {
    self: cn.self,
    version: v.version,
    members: v.members.map((m) => ({ id: m.id, address: m.address, status: m.status })),
    leases: v.leases.map((l) => ({ shard: l.shard, owner: l.owner, epoch: `${l.epoch}` })),
    held: cn.membership
      .held()
      .filter((l) => cn.membership.leaseFor(l.shard) !== undefined)
      .map((l) => ({ shard: l.shard, epoch: `${l.epoch}` })),
    redirects: [...cn.placement.redirectTable()].map(([shard, r]) => ({ shard, owner: r.owner, epoch: `${r.epoch}` })),
    stats: cn.processor.stats,
    activations: cn.node.stats.activations,
    heldMessages: cn.node.heldCount,
    communicationErrors: cn.node.stats.communicationErrors,
  };
}

/** Pairs of actors: a relay on this node and a counter on a peer, for load runs. */
async function load(
  cn: ClusterNode,
  c: { pairs: number; count: number; mode: string; prefix: string },
): Promise<Record<string, unknown>> {
  const pairs = Math.max(1, Math.min(4096, c.pairs | 0));
  const count = Math.max(1, Math.min(1_000_000, c.count | 0));
  const payload = 'x'.repeat(100);
  const remoteCounters: string[] = [];
  const shardCount = cn.placement.shardCount;
  const view = cn.membership.view();
  for (let i = 0; remoteCounters.length < pairs && i < pairs * 1000; i++) {
    const iri = `vt:counter/${c.prefix}${i}`;
    const o = ownerOf(view, cn.placement.shardOf(iri));
    if (o !== undefined && o.owner !== cn.self) remoteCounters.push(iri);
  }
  void shardCount;
  let next = 0;
  const t0 = performance.now();
  const lat: number[] = [];
  await Promise.all(
    remoteCounters.map(async (target) => {
      for (;;) {
        const i = next++;
        if (i >= count) return;
        const s = performance.now();
        if (c.mode === 'rr') {
          await cn.node.ask(target, 'inc', { reply: true, p: payload } as JsonValue, { timeoutMs: 30_000 });
        } else {
          await cn.node.send(target, 'inc', { data: { p: payload } });
        }
        lat.push(performance.now() - s);
      }
    }),
  );
  const ms = performance.now() - t0;
  lat.sort((a, b) => a - b);
  return {
    pairs: remoteCounters.length,
    count,
    ms,
    perSec: (count / ms) * 1000,
    p50: lat[Math.floor(lat.length / 2)] ?? 0,
    p99: lat[Math.floor(lat.length * 0.99)] ?? 0,
  };
}

/** A progress line per step of leaving. */
const leaveStep = (s: LeaveStep) => out({ ev: 'leaving', ...s });

export async function runNodeProcess(
  configFile: string,
  opts: {
    readonly control?: boolean;
    /** A chart module (relative to the working directory); it takes the place of the config's `charts`. */
    readonly charts?: string;
  } = {},
): Promise<number> {
  process.stdout.on('error', () => {
    stdoutOpen = false;
  });
  const cfg = await readNodeConfig(configFile);
  const mine = opts.charts === undefined ? undefined : await loadChartModule(opts.charts);
  /** Stops the process after an operator's leave (set below, once the signal handlers are in). */
  let stopAfterLeave = () => {};
  const cn = await launchClusterNode(cfg, {
    ...(mine ?? {}),
    wireSpinMs: wireSpinMs(undefined, process.env[WIRE_SPIN_VARIABLE]),
    onError: (e) => out({ ev: 'error', code: (e as { code?: string }).code, message: (e as Error).message }),
    onLeaveRequest: async (node) => {
      const t0 = Date.now();
      out({ ev: 'leave-requested' });
      const left = await node.leave({ onStep: leaveStep });
      // The reply goes out first; the process stops just after.
      setTimeout(() => stopAfterLeave(), 50);
      return { node: node.self, left, ms: Date.now() - t0 };
    },
  });
  let lastHeld = '';
  const timer = setInterval(() => {
    const held = cn.membership
      .held()
      .filter((l) => cn.membership.leaseFor(l.shard) !== undefined)
      .map((l) => `${l.shard}@${l.epoch}`)
      .sort()
      .join(',');
    if (held !== lastHeld) {
      lastHeld = held;
      out({ ev: 'held', held: held ? held.split(',') : [] });
    }
  }, 50);
  timer.unref();
  let stopping = false;
  const done = new Promise<number>((resolve) => {
    const stop = () => {
      if (stopping) return;
      stopping = true;
      void (async () => {
        const t0 = Date.now();
        out({ ev: 'draining' });
        clearInterval(timer);
        if (!cn.left) {
          await cn
            .leave({ onStep: leaveStep })
            .catch((e) =>
              out({ ev: 'leave-refused', code: (e as { code?: string }).code, message: (e as Error).message }),
            );
        }
        await cn.stop().catch((e) => out({ ev: 'error', message: (e as Error).message }));
        out({ ev: 'stopped', ms: Date.now() - t0 });
        // Standard input no longer holds the process once the node has stopped.
        if (opts.control) process.stdin.destroy();
        resolve(0);
      })();
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    stopAfterLeave = stop;
    if (opts.control) {
      const rl = createInterface({ input: process.stdin });
      rl.on('line', (line) => {
        let c: Record<string, unknown>;
        try {
          c = JSON.parse(line) as Record<string, unknown>;
        } catch {
          out({ ev: 'error', code: 'PLX_CLUSTER_BAD_REQUEST', message: 'a control command that is not JSON' });
          return;
        }
        if (typeof c !== 'object' || c === null) return;
        try {
          command(c);
        } catch (e) {
          out({
            ev: 'error',
            q: c.q,
            code: (e as { code?: string }).code ?? 'PLX_CLUSTER_BAD_REQUEST',
            message: (e as Error).message,
          });
        }
      });
      const command = (c: Record<string, unknown>) => {
        const q = c.q;
        const fail = (ev: string) => (e: unknown) =>
          out({
            ev,
            q,
            error: (e as { code?: string }).code ?? 'ERROR',
            cause: ((e as Error).cause as { code?: string } | undefined)?.code,
            message: (e as Error).message,
          });
        if (c.cmd === 'send') {
          cn.node
            .send(String(c.target), String(c.event), {
              ...(c.data === undefined ? {} : { data: c.data as JsonValue }),
              ...(typeof c.id === 'string' ? { id: c.id } : {}),
            })
            .then((result) => out({ ev: 'sent', q, result }), fail('sent'));
        } else if (c.cmd === 'ask') {
          cn.node
            .ask(String(c.target), String(c.event), c.data as JsonValue, { timeoutMs: Number(c.timeoutMs ?? 10_000) })
            .then((e) => out({ ev: 'asked', q, name: e.name, data: e.data ?? null }), fail('asked'));
        } else if (c.cmd === 'status') {
          out({ ev: 'status', q, ...nodeStatus(cn) });
        } else if (c.cmd === 'route') {
          const ok = cn.placement.redirect(Number(c.shard), String(c.owner), BigInt(String(c.epoch)));
          out({ ev: 'routed', q, ok });
        } else if (c.cmd === 'load') {
          load(cn, {
            pairs: Number(c.pairs ?? 1),
            count: Number(c.count ?? 1000),
            mode: String(c.mode ?? 'oneway'),
            prefix: String(c.prefix ?? 'l'),
          }).then((r) => out({ ev: 'load', q, ...r }), fail('load'));
        } else if (c.cmd === 'frame') {
          // A raw frame stamped with the epoch this node holds (or last held) on `shard`,
          // as its actors' frames are: for fencing tests.
          const shard = Number(c.shard);
          const epoch = cn.placement.heldEpoch(shard);
          cn.wire
            .send(String(c.to), {
              shard,
              epoch,
              sender: String(c.sender ?? 'vt:relay/frame'),
              target: String(c.target),
              payload: new TextEncoder().encode(
                JSON.stringify({ node: cn.self, id: String(c.id ?? `frame-${q}`), event: { name: 'inc' } }),
              ),
            })
            .then((verdict) => out({ ev: 'framed', q, verdict, epoch: `${epoch}` }), fail('framed'));
        } else if (c.cmd === 'release') {
          // Hands a shard over (for tests of moves): another member may take it now.
          const shard = Number(c.shard);
          cn.pauseClaims(shard, Number(c.ms ?? 5000));
          const l = cn.membership.held().find((x) => x.shard === shard);
          (l === undefined ? Promise.resolve() : cn.membership.release(shard, l.epoch)).then(
            () => out({ ev: 'released', q, ok: l !== undefined }),
            fail('released'),
          );
        } else if (c.cmd === 'grant') {
          cn.membership
            .grant(Number(c.shard))
            .then((l) => out({ ev: 'granted', q, epoch: `${l.epoch}` }), fail('granted'));
        } else if (c.cmd === 'stop') {
          process.kill(process.pid, 'SIGTERM');
        }
      };
    }
  });
  // Only now, with the signal handlers in place: a supervisor may send SIGTERM as soon as it reads this.
  out({
    ev: 'joined',
    self: cfg.self,
    layout: cfg.journal ?? 'per-node',
    ...(cn.metricsAddress === undefined ? {} : { metrics: cn.metricsAddress }),
  });
  return done;
}
