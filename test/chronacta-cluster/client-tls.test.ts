/**
 * The client port of `serve --cluster` members secured with mutual TLS and bearer tokens,
 * with three real `node dist/cli/main.js chronacta serve --cluster` processes on loopback
 * (build first: `npm run build`): a client that dials a follower follows the leader redirect
 * over TLS with the same certificate and token (keyed appends, `leader` reads, the CLI); a
 * follower serves `follower` reads, for which it asks its leader's client port with its own
 * certificate and the first token of its tokens file; clients without a certificate or a
 * token are refused by every member.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient, type ClientOptions } from '../../ts/chronacta/client.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { createJobCa, issueRankCertificate } from '../../ts/crypto/x509.js';
import { until } from '../helpers/until.js';
import { cli, initCluster, spawnServe, stopAll } from './helpers.js';

describe('serve --cluster with a secured client port', () => {
  const children = new Set<ChildProcess>();
  const clients: ChronactaClient[] = [];
  let root = '';
  let addresses: string[] = [];
  let secure: ClientOptions;
  let flags: { ca: string; cert: string; key: string; token: string };
  const token = `tok-${randomBytes(24).toString('hex')}`;

  const client = (address: string, opts: ClientOptions = {}) => {
    const c = new ChronactaClient(address, { deadlineMs: 10_000, ...opts });
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    const init = await initCluster('plexus-client-tls-');
    root = init.root;
    if (init.init.code !== 0) throw new Error(`cluster init failed: ${init.init.stderr}`);
    const jobId = randomBytes(16);
    const ca = await createJobCa({ jobId });
    // One certificate naming 127.0.0.1 serves every member (all on loopback), and is what a
    // member presents when it calls the leader; clients get certificates of the same CA.
    const member = await issueRankCertificate(ca, { jobId, rank: 0, host: '127.0.0.1' });
    const user = await issueRankCertificate(ca, { jobId, rank: 1, host: '127.0.0.1' });
    const write = (name: string, text: string) => {
      const p = join(root, name);
      writeFileSync(p, text, { mode: 0o600 });
      return p;
    };
    const memberFlags = [
      '--cert-file',
      write('member-cert.pem', member.cert),
      '--key-file',
      write('member-key.pem', member.key),
      '--trusted-ca-file',
      write('ca.pem', ca.cert),
      '--client-cert-auth',
      '--auth-tokens-file',
      write('tokens', `${token}\n`),
      '--tick-ms',
      '50',
    ];
    flags = {
      ca: join(root, 'ca.pem'),
      cert: write('user-cert.pem', user.cert),
      key: write('user-key.pem', user.key),
      token: write('user-token', `${token}\n`),
    };
    secure = { tls: { ca: ca.cert, cert: user.cert, key: user.key }, token };
    const started = await Promise.all(
      [1, 2, 3].map((id) => spawnServe(id, join(root, `node-${id}`), memberFlags, children)),
    );
    addresses = started.map((s) => s.address);
  }, 120_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    await stopAll(children);
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it('follows leader redirects over TLS, serves follower reads, and refuses the unauthenticated', async () => {
    const members = addresses.map((a) => client(a, secure));
    const leaderAt = await until(
      async () => {
        for (const [i, c] of members.entries()) {
          const s = await c.clusterStatus().catch(() => undefined);
          if (s?.acceptingWrites) return i;
        }
        return undefined;
      },
      { timeoutMs: 30_000, what: 'a leader', intervalMs: 25 },
    );
    const leader = addresses[leaderAt] as string;
    const followerAt = leaderAt === 0 ? 1 : 0;
    const follower = addresses[followerAt] as string;

    // A keyed append sent to a follower lands at the leader, dialled with the same TLS and token.
    const viaFollower = client(follower, { ...secure, appendAttempts: 5 });
    const r = await viaFollower.append('orders-1', [{ type: 'placed' }], { idempotencyKey: 'k-1' });
    expect(r.firstVersion).toBe(0n);
    // A linearizable read on the follower is redirected to the leader.
    const read = await viaFollower.readStream('orders-1');
    expect(read.events.map((e) => e.type)).toEqual(['placed']);
    expect(read.read).toMatchObject({ servedBy: 'leader', address: leader });
    // A follower read: the follower asks its leader's (secured) client port how far it committed.
    const followerRead = await until(
      async () => {
        const x = await viaFollower.readStream('orders-1', { readConsistency: 'follower' });
        return x.read?.servedBy === 'follower' && x.events.length === 1 ? x : undefined;
      },
      { timeoutMs: 20_000, what: 'a follower read served by the follower', intervalMs: 25 },
    );
    expect(followerRead.read?.address).toBe(follower);

    // The CLI: status of the follower, and an append through it, with the certificate and token files.
    const tlsFlags = ['--cacert', flags.ca, '--cert', flags.cert, '--key', flags.key, '--token-file', flags.token];
    const status = await cli('cluster', 'status', '--server', follower, ...tlsFlags);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ mode: 'cluster', role: 'follower' });
    const appended = await cli(
      'append',
      'orders-1',
      '--type',
      'paid',
      '--idempotency-key',
      'k-2',
      '--server',
      follower,
      ...tlsFlags,
    );
    expect(appended.code, appended.stderr).toBe(0);
    expect(status.stderr + appended.stderr).not.toContain(token);

    // Every member refuses a client without a token, and one without a certificate.
    for (const a of addresses) {
      const noToken = client(a, { tls: secure.tls as NonNullable<ClientOptions['tls']> });
      const err = await noToken.readAll().catch((e: unknown) => e);
      expect(isPlexusError(err, 'PLX_CHRONACTA_UNAUTHENTICATED'), String(err)).toBe(true);
      const noCert = client(a, { tls: { ca: (secure.tls as { ca: string }).ca }, token });
      const err2 = await noCert.readAll().catch((e: unknown) => e);
      expect(isPlexusError(err2, 'PLX_CHRONACTA_UNAVAILABLE'), String(err2)).toBe(true);
    }
    const all = await client(leader, secure).readStream('orders-1');
    expect(all.events.map((e) => e.type)).toEqual(['placed', 'paid']);
  }, 120_000);
});
