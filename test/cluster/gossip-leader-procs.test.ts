/**
 * The gossip lease leader restarted as a real process: a leader from dist/ in a process of its
 * own (test/cluster/fixtures/gossip-leader.mjs) on an Http2Wire with mutual TLS on loopback,
 * its monotonic and wall clocks and random bytes the process's own. A member calls it over the
 * wire, takes every shard, and the process is killed (SIGKILL, by PID) and started again, four
 * times: twice at once, and once with its wall clock an hour behind. No (shard, epoch) is ever
 * granted twice. Needs `npm run build` first.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import { epochRound, epochTag } from '../../ts/cluster/gossip/leader.js';
import type { AuthorityReply, AuthorityRequest } from '../../ts/cluster/lease-authority.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { freePort } from '../helpers/ports.js';
import { built, type Started, startNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { nodeCreds } from '../net/helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/gossip-leader.mjs', import.meta.url));
const META: ClusterMeta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };
const LEASE = { ttlMs: 800, safetyMarginMs: 150, renewEveryMs: 250 };

const dirs: string[] = [];
afterEach(() => stopStarted());
afterAll(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

interface Incarnation {
  readonly proc: Started;
  readonly address: string;
  readonly tag: bigint;
}

async function startLeader(dir: string, n: number, wallOffsetMs: number): Promise<Incarnation> {
  const file = join(dir, `leader-${n}.json`);
  const tls = await nodeCreds('a');
  const port = await freePort();
  await writeFile(
    file,
    JSON.stringify({
      self: 'a',
      meta: META,
      lease: LEASE,
      members: ['a', 'b'],
      port,
      tls: { cert: tls.cert, key: tls.key, ca: tls.ca },
      wallOffsetMs,
    }),
  );
  const proc = startNode(FIXTURE, [file]);
  const line = JSON.parse(await proc.line(/"ev":"listening"/, { what: `leader ${n} listening` }));
  return { proc, address: line.address, tag: BigInt(line.tag) };
}

describe.skipIf(!built)('a gossip lease leader process restarted (mutual TLS, real clocks)', () => {
  it('grants no (shard, epoch) twice across SIGKILL restarts, with the wall clock also going back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-leader-'));
    dirs.push(dir);
    const creds = await nodeCreds('b');
    const granted: { incarnation: number; shard: number; epoch: bigint }[] = [];
    const tags: bigint[] = [];
    const offsets = [0, 0, 0, -3_600_000];
    for (const [n, offset] of offsets.entries()) {
      const leader = await startLeader(dir, n, offset);
      tags.push(leader.tag);
      const wire = new Http2Wire({
        self: 'b',
        cluster: META.id,
        tls: creds,
        resolve: (p) => (p === 'a' ? leader.address : undefined),
        isMember: (p) => p === 'a',
        deliveryDeadlineMs: 5_000,
        retryBackoffMs: 20,
      });
      await wire.listen();
      const call = async (req: AuthorityRequest): Promise<AuthorityReply> =>
        decodeReply(await wire.call('a', encodeRequest(req)));
      try {
        const joined = await call({ type: 'join', node: 'b', address: '', meta: META });
        expect(joined.ok).toBe(true);
        // Grants wait for the new leader's grace period: refused until then, as a takeover.
        for (let shard = 0; shard < META.shardCount; shard++) {
          for (let twice = 0; twice < 2; twice++) {
            const r = await until(
              async () => {
                const g = await call({ type: 'grant', node: 'b', shard });
                if (!g.ok) expect(g.details).toMatchObject({ reason: 'takeover' });
                return g.ok ? g : undefined;
              },
              { what: `leader ${n} to grant shard ${shard}`, intervalMs: 50 },
            );
            const epoch = r.lease?.epoch as bigint;
            expect(epochTag(epoch)).toBe(leader.tag);
            granted.push({ incarnation: n, shard, epoch });
            expect((await call({ type: 'revoke', shard })).ok).toBe(true);
          }
        }
      } finally {
        await wire.close();
        process.kill(leader.proc.pid, 'SIGKILL');
        await leader.proc.exited;
      }
    }
    expect(granted).toHaveLength(offsets.length * META.shardCount * 2);
    const pairs = granted.map((g) => `${g.shard}/${g.epoch}`);
    expect(new Set(pairs).size).toBe(pairs.length);
    expect(new Set(tags).size).toBe(tags.length);
    // The last leader's wall clock was an hour behind: its rounds are below the others', so
    // only its tag keeps its epochs apart from theirs.
    const rounds = (n: number) => granted.filter((g) => g.incarnation === n).map((g) => epochRound(g.epoch));
    const firstStart = rounds(0)[0] as bigint;
    for (const r of rounds(3)) expect(r).toBeLessThan(firstStart);
  }, 120_000);
});
