/**
 * Real processes on loopback: three cluster nodes (dist/cluster/node-process.js), each with
 * its own HTTP/2 mutual-TLS wire; node a hosts the MemoryAuthority. Build first with
 * `npm run build`.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { DIST, type Started, startNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { nodeCreds } from '../net/helpers.js';

const NODE_MAIN = 'cluster/node-process.js';
const META = { id: 'c1', shardCount: 16, hashVersion: 1, replicationFactor: 1 };
const LEASE = { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 };
const DETECTOR = { suspectAfterMs: 500, failedAfterMs: 1500 };

type Event = Record<string, unknown> & { ev: string };

class Proc {
  readonly events: Event[] = [];
  constructor(
    readonly id: string,
    readonly proc: Started,
  ) {
    const rl = createInterface({ input: proc.child.stdout! });
    rl.on('line', (l) => {
      try {
        this.events.push(JSON.parse(l) as Event);
      } catch {
        // not an event line
      }
    });
  }
  get pid(): number {
    return this.proc.pid;
  }
  send(cmd: Record<string, unknown>): void {
    this.proc.child.stdin?.write(`${JSON.stringify(cmd)}\n`);
  }
  last(ev: string): Event | undefined {
    return [...this.events].reverse().find((e) => e.ev === ev);
  }
  view():
    | {
        version: number;
        members: { id: string; status: string }[];
        leases: { shard: number; owner: string; epoch: string }[];
      }
    | undefined {
    return this.last('view') as never;
  }
}

const procs: Proc[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.proc.running()) {
      try {
        process.kill(p.pid, 'SIGCONT'); // a paused node first resumes, then is killed
      } catch {
        // already gone
      }
    }
  }
  await stopStarted();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function start(id: string, authorityAddress?: string): Promise<Proc> {
  const dir = await mkdtemp(join(tmpdir(), `plexus-node-${id}-`));
  dirs.push(dir);
  const creds = await nodeCreds(id);
  const cfg = {
    meta: META,
    self: id,
    members: ['a', 'b', 'c'].map((m) => ({ id: m, address: '' })),
    authority: 'a',
    ...(authorityAddress ? { authorityAddress } : {}),
    tls: { cert: creds.cert, key: creds.key, ca: creds.ca },
    dataDir: dir,
    lease: LEASE,
    detector: DETECTOR,
    heartbeatEveryMs: 100,
  };
  const file = join(dir, 'config.json');
  await writeFile(file, JSON.stringify(cfg));
  const p = new Proc(id, startNode(NODE_MAIN, [file]));
  procs.push(p);
  await until(() => p.events.some((e) => e.ev === 'joined' || e.ev === 'fatal'), {
    timeoutMs: 15_000,
    what: `${id} to join`,
    intervalMs: 20,
  });
  expect(p.last('fatal')).toBeUndefined();
  return p;
}

async function threeNodes(): Promise<Record<'a' | 'b' | 'c', Proc>> {
  const a = await start('a');
  const address = a.last('listening')?.address as string;
  const b = await start('b', address);
  const c = await start('c', address);
  await until(() => a.view()?.members.length === 3 && a.view()?.leases.length === 16, {
    timeoutMs: 15_000,
    what: 'three members, all shards leased',
    intervalMs: 20,
  });
  // a joined alone first and took every shard: revoking spreads them by rendezvous rank.
  for (let s = 0; s < 16; s++) a.send({ cmd: 'revoke', shard: s });
  await until(() => new Set(a.view()?.leases.map((l) => l.owner)).size === 3 && a.view()?.leases.length === 16, {
    timeoutMs: 15_000,
    what: 'shards spread',
    intervalMs: 20,
  });
  return { a, b, c };
}

describe.skipIf(!existsSync(join(DIST, NODE_MAIN)))('cluster nodes as processes (build dist first)', () => {
  it('three nodes join; each shard has one owner; a killed node’s shards move only after its leases expire', async () => {
    const { a, b, c } = await threeNodes();
    await until(() => [b, c].every((p) => (p.view()?.version ?? 0) >= (a.view()?.version ?? 0) - 2), {
      timeoutMs: 15_000,
      what: 'views to spread',
      intervalMs: 20,
    });
    const before = a.view()!;
    expect(before.members.map((m) => m.id)).toEqual(['a', 'b', 'c']);
    const owned = (p: Proc) => ((p.last('held')?.held as string[]) ?? []).length;
    await until(() => owned(a) + owned(b) + owned(c) === 16, {
      timeoutMs: 15_000,
      what: 'every lease to be held by exactly its owner',
      intervalMs: 20,
    });
    const cShards = before.leases.filter((l) => l.owner === 'c');
    const killedAt = Date.now();
    process.kill(c.pid, 'SIGKILL');
    await until(() => a.view()!.leases.length === 16 && a.view()!.leases.every((l) => l.owner !== 'c'), {
      timeoutMs: 15_000,
      what: 'c’s shards to move',
      intervalMs: 20,
    });
    const movedAfter = Date.now() - killedAt;
    // Never before the lease (1.5 s after c's last renewal) could have ended.
    expect(movedAfter).toBeGreaterThanOrEqual(LEASE.ttlMs - LEASE.renewEveryMs - 150);
    for (const l of cShards) {
      const now = a.view()!.leases.find((x) => x.shard === l.shard)!;
      expect(BigInt(now.epoch)).toBeGreaterThan(BigInt(l.epoch));
    }
    expect(a.view()!.members.find((m) => m.id === 'c')?.status).toBe('failed');
  });

  it('SIGSTOP past the lease: another node takes the shard at a greater epoch; the paused node’s frame is dead-lettered', async () => {
    const { a, b, c } = await threeNodes();
    const victim = [b, c].find((p) => a.view()!.leases.some((l) => l.owner === p.id)) as Proc;
    const shard = a.view()!.leases.find((l) => l.owner === victim.id)!.shard;
    await until(() => ((victim.last('held')?.held as string[]) ?? []).some((h) => h.startsWith(`${shard}@`)), {
      timeoutMs: 15_000,
      what: 'victim holds it',
      intervalMs: 20,
    });
    // The victim prepares a frame of its current epoch, to go out 1.5 s later; then it is paused.
    victim.send({ cmd: 'send', to: 'a', shard, target: 'vt:late', delayMs: 1500 });
    await until(() => victim.last('prepared') !== undefined, {
      timeoutMs: 15_000,
      what: 'the frame to be prepared',
      intervalMs: 20,
    });
    const oldEpoch = BigInt(victim.last('prepared')!.epoch as string);
    expect(oldEpoch).toBeGreaterThan(0n);
    process.kill(victim.pid, 'SIGSTOP');
    await until(
      () => {
        const l = a.view()?.leases.find((x) => x.shard === shard);
        return l !== undefined && l.owner !== victim.id && BigInt(l.epoch) > oldEpoch;
      },
      { timeoutMs: 15_000, what: 'the shard to move to another node', intervalMs: 20 },
    );
    const newEpoch = BigInt(a.view()!.leases.find((x) => x.shard === shard)!.epoch);
    process.kill(victim.pid, 'SIGCONT');
    await until(() => victim.last('sent') !== undefined, {
      timeoutMs: 10_000,
      what: 'the stale frame to be answered',
      intervalMs: 20,
    });
    expect(victim.last('sent')).toMatchObject({ verdict: 'stale', shard });
    const dead = a.last('dead')!;
    expect(dead).toMatchObject({ from: victim.id, shard, epoch: `${oldEpoch}` });
    expect(BigInt(dead.current as string)).toBeGreaterThanOrEqual(newEpoch);
    expect(a.events.some((e) => e.ev === 'frame' && e.target === 'vt:late')).toBe(false);
    // The resumed node learns it lost the lease.
    await until(() => !((victim.last('held')?.held as string[]) ?? []).some((h) => h === `${shard}@${oldEpoch}`), {
      timeoutMs: 15_000,
      what: 'the victim to drop its lost lease',
      intervalMs: 20,
    });
  });
});
