/**
 * The replicated log as a layer of its own (ts/replication/): its own refusal codes, the alias
 * table a product passes to keep its codes, a member identity scheme chosen by the product, and
 * the dependencies it takes from outside (randomness, Raft storage, transport and driver, clock).
 * A one-member log on real files and a real TCP transport on loopback.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openClusterLog } from '../../ts/chronacta/cluster-log.js';
import { systemClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { createCa } from '../../ts/net/ca.js';
import { freePort } from '../../ts/net/ports.js';
import {
  checkMemberCertificate,
  issueMemberCertificate,
  memberIdentity,
  memberOfCertificate,
  memberTlsOptions,
  openReplicatedLog,
  type ReplicaRaft,
  type ReplicatedLog,
  tcpRaft,
} from '../../ts/replication/index.js';

const dirs: string[] = [];
const logs: ReplicatedLog[] = [];
afterEach(async () => {
  for (const l of logs.splice(0)) await l.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'plexus-replication-'));
  dirs.push(d);
  return d;
}

const quiet = { warn: () => undefined, error: () => undefined };
const text = (s: string) => new TextEncoder().encode(s);

async function oneMember(port: number) {
  return {
    id: 1,
    dir: tempDir(),
    members: [{ id: 1, raftAddress: `127.0.0.1:${port}`, advertise: '127.0.0.1:1' }],
    tickMs: 20,
    timeoutMs: 5000,
    logger: quiet,
  };
}

async function leading(log: ReplicatedLog): Promise<void> {
  const end = Date.now() + 10_000;
  while (!log.acceptingWrites) {
    if (Date.now() > end) throw new Error('the single member did not lead');
    await log.readinessChanged({ timeoutMs: 200 });
  }
}

describe('replication layer', () => {
  it('refuses with PLX_REPLICATION_* codes, and with a product’s aliases when it passes them', async () => {
    const plain = await openReplicatedLog({ ...(await oneMember(0)), id: 0 }).catch((e: unknown) => e);
    expect(isPlexusError(plain, 'PLX_REPLICATION_BAD_CONFIG')).toBe(true);
    const aliased = await openClusterLog({ ...(await oneMember(0)), id: 0 }).catch((e: unknown) => e);
    expect(isPlexusError(aliased, 'PLX_CHRONACTA_HA_BAD_CONFIG')).toBe(true);
    expect(isPlexusError((aliased as Error).cause, 'PLX_REPLICATION_BAD_CONFIG')).toBe(true);
    expect((aliased as Error).message).toBe((plain as Error).message);

    const log = await openReplicatedLog(await oneMember(await freePort()));
    logs.push(log);
    await leading(log);
    await log.append([text('a'), text('b')]);
    const trunc = await log.truncateAfter(1n).catch((e: unknown) => e);
    expect(isPlexusError(trunc, 'PLX_REPLICATION_UNSUPPORTED')).toBe(true);
    const dup = await log
      .addMember({ id: 1, raftAddress: '127.0.0.1:1', advertise: '127.0.0.1:1' })
      .catch((e: unknown) => e);
    expect(isPlexusError(dup, 'PLX_REPLICATION_MEMBERSHIP')).toBe(true);
  });

  it('builds its Raft storage, transport and driver, and its randomness, from the dependencies given', async () => {
    const calls: string[] = [];
    const raft: ReplicaRaft = {
      openStorage: (dir, o) => {
        calls.push('openStorage');
        return tcpRaft.openStorage(dir, o);
      },
      bootstrapStorage: (dir, cs, data, o) => {
        calls.push(`bootstrap ${cs.voters.join(',')}`);
        return tcpRaft.bootstrapStorage(dir, cs, data, o);
      },
      startTransport: (o) => {
        calls.push(`transport ${o.id}`);
        return tcpRaft.startTransport(o);
      },
      startDriver: (o) => {
        calls.push(`driver ${o.tickMs}`);
        return tcpRaft.startDriver(o);
      },
    };
    let draws = 0;
    const log = await openReplicatedLog(await oneMember(await freePort()), {
      raft,
      clock: systemClock,
      random: (n) => {
        draws++;
        return n - 1;
      },
      randomBytes: (n) => new Uint8Array(n).fill(0xab),
    });
    logs.push(log);
    expect(calls).toEqual(['openStorage', 'bootstrap 1', 'transport 1', 'driver 20']);
    await leading(log);
    expect(draws).toBeGreaterThan(0);
    const r = await log.append([text('x')]);
    expect(Buffer.from(r.batchId).toString('hex')).toBe('ab'.repeat(16));
    const [rec] = await log.read(1n);
    expect(Buffer.from(rec?.batchId ?? []).toString('hex')).toBe('ab'.repeat(16));
  });

  it('names members with the identity scheme the product gives', async () => {
    const shard = memberIdentity('urn:example:shard:member:', (id) => `shard-member-${id}`);
    const chronacta = memberIdentity('urn:plexus:chronacta:member:');
    const ca = await createCa('replication test CA');
    const m3 = await issueMemberCertificate(shard, ca, 3);
    const files = { ca: ca.cert, ...m3 };
    checkMemberCertificate(shard, files, 3);
    const { X509Certificate } = await import('node:crypto');
    const san = { subjectaltname: new X509Certificate(m3.cert).subjectAltName ?? '' };
    expect(memberOfCertificate(shard, san)).toBe(3);
    expect(memberOfCertificate(chronacta, san)).toBeUndefined();
    const refused = (() => {
      try {
        checkMemberCertificate(chronacta, files, 3);
        return 'accepted';
      } catch (e) {
        return isPlexusError(e, 'PLX_REPLICATION_BAD_CERTIFICATE') ? 'refused' : String(e);
      }
    })();
    expect(refused).toBe('refused');
    const tls = memberTlsOptions(shard, files, 3);
    expect(tls.peerId(san as never)).toBe(3);
    expect(() => memberIdentity('not a uri prefix')).toThrow(
      expect.objectContaining({ code: 'PLX_REPLICATION_BAD_CONFIG' }),
    );
  });
});
