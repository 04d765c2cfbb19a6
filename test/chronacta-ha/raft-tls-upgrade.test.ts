/**
 * Moving a plaintext Chronacta cluster to mutual TLS between members with a rolling restart
 * (docs/chronacta-ha.md, "From plaintext to TLS"), while appends flow:
 *
 *   0. three members speak plaintext Raft, as every `serve --cluster` did before member
 *      certificates (here: `startServer` in this process without TLS, the same wire);
 *   1. `plexus chronacta cluster certs --ca-dir ROOT --data ...` gives each one its certificate;
 *   2. one at a time, each member is restarted as `serve --cluster --raft-tls permissive`
 *      (takes plaintext and TLS, dials TLS and falls back to plaintext);
 *   3. one at a time, each is restarted as `serve --cluster` (TLS required).
 *
 * At the end every member refuses plaintext on its Raft port, and every member holds every
 * acknowledged event, once, at its position. Also: a member whose node stops for good (a
 * term that cannot be persisted) exits with PLX_CHRONACTA_HA_STOPPED instead of running on.
 * Build first (`npm run build`).
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { type ChronactaServer, startServer } from '../../ts/chronacta/server.js';
import {
  cli,
  initCluster,
  initOneMember,
  isRunning,
  MAIN,
  spawnServe,
  stopAll,
  stopChild,
} from '../chronacta-cluster/helpers.js';
import { until } from '../helpers/until.js';
import { pace } from './helpers.js';

const TICK = '50';
const quiet = { warn: () => undefined, error: () => undefined };
const children = new Set<ChildProcess>();
const roots: string[] = [];

afterAll(async () => {
  await stopAll(children);
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

type Member =
  | { kind: 'old'; server: ChronactaServer; address: string }
  | { kind: 'process'; child: ChildProcess; address: string; output(): string };

describe.skipIf(!existsSync(MAIN))('chronacta cluster: from plaintext Raft to mutual TLS, rolling', () => {
  it('moves three members to TLS one at a time while appends flow, losing nothing', async () => {
    const { root, ports, init } = await initCluster('plexus-raft-tls-upgrade-');
    roots.push(root);
    expect(init.code, init.stderr).toBe(0);
    // A cluster made before member certificates: no CA, no cluster/tls/.
    rmSync(join(root, 'ca.pem'));
    rmSync(join(root, 'ca-key.pem'));
    const dirs = [1, 2, 3].map((id) => join(root, `node-${id}`));
    for (const d of dirs) rmSync(join(d, 'cluster', 'tls'), { recursive: true });
    // Such a member does not start with this plexus (no certificate) until it gets one.
    const refused = await cli('serve', '--cluster', '--data', dirs[0] as string, '--metrics-port', '0');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('PLX_CHRONACTA_HA_NO_CERTIFICATE');

    const members = new Map<number, Member>();
    for (const id of [1, 2, 3]) {
      const server = await startServer({
        dataDir: dirs[id - 1] as string,
        cluster: true,
        metricsPort: 0,
        replication: { tickMs: Number(TICK) },
        logger: quiet,
      });
      members.set(id, { kind: 'old', server, address: server.address });
    }
    const clients = new Map<number, ChronactaClient>();
    const clientFor = (id: number) => {
      clients.get(id)?.close();
      const c = new ChronactaClient((members.get(id) as Member).address, { deadlineMs: 3000, appendAttempts: 1 });
      clients.set(id, c);
    };
    for (const id of [1, 2, 3]) clientFor(id);

    // One writer, keyed appends, tried on each member in turn until one acknowledges.
    const acked: { key: string; position: bigint }[] = [];
    let running = true;
    let n = 0;
    const writer = (async () => {
      while (running) {
        const key = `k${n++}`;
        let done = false;
        for (let attempt = 0; !done && running && attempt < 400; attempt++) {
          const c = clients.get((attempt % 3) + 1) as ChronactaClient;
          try {
            const r = await c.append('rolling', [{ type: 't', data: key }], { idempotencyKey: key });
            acked.push({ key, position: r.firstPosition });
            done = true;
          } catch {
            await pace(20);
          }
        }
        if (!done && running) throw new Error(`no member acknowledged ${key}`);
      }
    })();
    const more = (k: number, what: string) => {
      const want = acked.length + k;
      return until(async () => (acked.length >= want ? true : undefined), {
        timeoutMs: 30_000,
        what: what,
        intervalMs: 25,
      });
    };
    try {
      await more(20, 'appends on the plaintext cluster');

      // 1. Certificates for the running members (a CA made in ROOT on the way).
      const certs = await cli('cluster', 'certs', '--ca-dir', root, ...dirs.flatMap((d) => ['--data', d]));
      expect(certs.code, certs.stderr).toBe(0);
      expect(certs.stdout).toContain('"caCreated":true');
      const again = await cli('cluster', 'certs', '--ca-dir', root, '--data', dirs[0] as string);
      expect(again.code).toBe(2); // has one already: --force to replace it

      const restart = async (id: number, flags: string[]) => {
        const m = members.get(id) as Member;
        if (m.kind === 'old') await m.server.close();
        else await stopChild(m.child);
        await more(5, `appends while member ${id} is down`);
        const s = await spawnServe(id, dirs[id - 1] as string, ['--tick-ms', TICK, ...flags], children);
        members.set(id, { kind: 'process', child: s.child, address: s.address, output: s.output });
        clientFor(id);
        // Caught up: it serves the latest acknowledged event as a follower read.
        const target = acked[acked.length - 1] as { key: string; position: bigint };
        await until(
          async () => {
            const st = await (clients.get(id) as ChronactaClient).clusterStatus();
            return (st.lastPosition ?? 0n) >= target.position ? true : undefined;
          },
          { timeoutMs: 20_000, what: `member ${id} to catch up`, intervalMs: 25 },
        );
        await more(5, `appends after member ${id} came back`);
      };
      // 2. Permissive, one at a time: each speaks TLS to those that do, plaintext to the others.
      for (const id of [1, 2, 3]) await restart(id, ['--raft-tls', 'permissive']);
      // 3. TLS required, one at a time.
      for (const id of [1, 2, 3]) await restart(id, []);
      await more(20, 'appends on the TLS cluster');
      running = false;
      await writer;

      // Plaintext is refused on every member's Raft port now.
      for (const id of [1, 2, 3]) {
        await new Promise<void>((resolve) => {
          const s = connect(ports[2 + id] as number, '127.0.0.1', () => s.write(Buffer.alloc(24, 0x50)));
          s.on('error', () => undefined);
          s.on('close', () => resolve());
        });
        const m = members.get(id) as Member & { kind: 'process' };
        await until(async () => (m.output().includes('a plaintext connection on a TLS port') ? true : undefined), {
          timeoutMs: 5000,
          what: `member ${id} to refuse plaintext`,
          intervalMs: 25,
        });
        expect(m.output()).toContain('"raftTls":"required"');
      }

      // Every member holds every acknowledged event once, at its position.
      const last = acked[acked.length - 1]?.position as bigint;
      for (const id of [1, 2, 3]) {
        const c = clients.get(id) as ChronactaClient;
        await until(async () => (((await c.clusterStatus()).lastPosition ?? 0n) >= last ? true : undefined), {
          timeoutMs: 20_000,
          what: `member ${id} at ${last}`,
          intervalMs: 25,
        });
        const r = await cli(
          'read',
          'rolling',
          '--max-count',
          '100000',
          '--consistency',
          'follower',
          '--server',
          members.get(id)?.address as string,
        );
        expect(r.code, r.stderr).toBe(0);
        const events = r.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as { data?: string; position?: number })
          .filter((e) => e.data !== undefined);
        const at = new Map<string, number[]>();
        for (const e of events) at.set(e.data as string, [...(at.get(e.data as string) ?? []), e.position as number]);
        for (const a of acked) expect(at.get(a.key)).toEqual([Number(a.position)]);
        for (const ps of at.values()) expect(ps).toHaveLength(1);
      }
    } finally {
      running = false;
      await writer.catch(() => undefined);
      for (const c of clients.values()) c.close();
      for (const m of members.values()) if (m.kind === 'old') await m.server.close().catch(() => undefined);
    }
  }, 240_000);

  it('a member whose node stops for good exits with PLX_CHRONACTA_HA_STOPPED instead of running on', async () => {
    // A one-member cluster whose Raft log lives on a small tmpfs that the test fills: the next
    // Raft write fails with ENOSPC and the node stops for good (mounting needs root).
    const root = mkdtempSync(join(tmpdir(), 'plexus-raft-tls-stop-'));
    roots.push(root);
    const { init, data: dir } = await initOneMember(root);
    expect(init.code, init.stderr).toBe(0);
    const raftDir = join(dir, 'replica', 'raft');
    mkdirSync(raftDir, { recursive: true });
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', raftDir], { stdio: 'pipe' });
    } catch (e) {
      console.warn(`cannot mount a tmpfs here (${(e as Error).message.split('\n')[0]}); this test needs root`);
      return;
    }
    try {
      const s = await spawnServe(1, dir, ['--tick-ms', '20'], children);
      const client = new ChronactaClient(s.address, { deadlineMs: 3000, appendAttempts: 1 });
      try {
        await until(async () => ((await client.clusterStatus()).acceptingWrites ? true : undefined), {
          timeoutMs: 20_000,
          what: 'member 1 to lead',
          intervalMs: 25,
        });
        await client.append('s', [{ type: 't', data: 'before' }]);
        // Take every free byte of the Raft log's file system.
        const fh = await open(join(raftDir, 'fill'), 'w');
        const chunk = Buffer.alloc(64 * 1024);
        try {
          for (;;) await fh.write(chunk);
        } catch {
          // ENOSPC: full
        } finally {
          await fh.close();
        }
        const big = 'x'.repeat(200_000);
        for (let i = 0; i < 20 && isRunning(s.child); i++) {
          await client.append('s', [{ type: 't', data: big }]).catch(() => undefined);
        }
      } finally {
        client.close();
      }
      const code = await until(async () => (isRunning(s.child) ? undefined : (s.child.exitCode ?? -1)), {
        timeoutMs: 20_000,
        what: 'member 1 to exit',
        intervalMs: 25,
      });
      expect(code).toBe(1);
      expect(s.output()).toContain('PLX_CHRONACTA_HA_STOPPED');
      expect(s.output()).toContain('"event":"failed"');
    } finally {
      await stopAll(children);
      execFileSync('umount', [raftDir]);
    }
  }, 90_000);
});
