/**
 * ActorClient (ts/cluster/client.ts) against three real cluster nodes launched in this process
 * (mutual-TLS wire on loopback, a shared journal on disk): sends and asks by IRI through one
 * member that forwards to the owners, failover past a member that does not answer, the
 * deadline, refusals that are not retried, and the trust rules: a client certificate of
 * another CA is refused at the handshake, and a client certificate can neither join nor send
 * frames. The request codec's bounds are checked first.
 */
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ActorClient,
  CLIENT_TAG,
  decodeClientRequest,
  encodeClientRequest,
  isClientDeadline,
  MAX_CLIENT_REQUEST,
} from '../../ts/cluster/client.js';
import { writeClientCertificate } from '../../ts/cluster/client-cert.js';
import { encodeRequest } from '../../ts/cluster/codec.js';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { ownerOf } from '../../ts/cluster/types.js';
import { clientOfCertificate, createClusterCa, issueClientCertificate } from '../../ts/net/ca.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { freePort, freePorts } from '../helpers/ports.js';
import { refusal, thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

const SHARDS = 8;

describe('client requests', () => {
  const ok = { op: 'send', target: 'vt:counter/x', event: 'inc', id: 'm1', waitMs: 1000 } as const;

  it('round-trips a request and refuses bad ones with PLX_CLUSTER_BAD_REQUEST', () => {
    const body = encodeClientRequest({ ...ok, data: { reply: true } });
    expect(body[0]).toBe(CLIENT_TAG);
    expect(decodeClientRequest(body)).toEqual({ ...ok, data: { reply: true } });
    const raw = (o: unknown) => new Uint8Array([CLIENT_TAG, ...Buffer.from(JSON.stringify(o))]);
    const cases: [Uint8Array, string | undefined][] = [
      [new Uint8Array([0x03, 0x7b, 0x7d]), undefined],
      [new Uint8Array([CLIENT_TAG, 0xff, 0xfe]), undefined],
      [raw({ ...ok, op: 'grant' }), 'op'],
      [raw({ ...ok, target: '' }), 'target'],
      [raw({ ...ok, event: 'x'.repeat(257) }), 'event'],
      [raw({ ...ok, id: 7 }), 'id'],
      [raw({ ...ok, waitMs: 0 }), 'waitMs'],
      [raw({ ...ok, waitMs: 300_001 }), 'waitMs'],
      [raw({ ...ok, shard: 3 }), 'shard'],
      [new Uint8Array(MAX_CLIENT_REQUEST + 1).fill(CLIENT_TAG, 0, 1), undefined],
    ];
    for (const [b, field] of cases) {
      const e = thrownRefusal(() => decodeClientRequest(b));
      expect([e.code, e.details.reason, e.details.field]).toEqual(['PLX_CLUSTER_BAD_REQUEST', 'client', field]);
    }
    const big = thrownRefusal(() => encodeClientRequest({ ...ok, data: 'x'.repeat(MAX_CLIENT_REQUEST) }));
    expect(big.code).toBe('PLX_CLUSTER_BAD_REQUEST');
  });
});

describe('client certificates', () => {
  it('writes DIR/clients/<name>/ signed by the cluster CA, and refuses bad names, no cluster and existing files', async () => {
    const d = await mkdtemp(join(tmpdir(), 'plexus-client-cert-'));
    try {
      await initCluster({ dir: d, id: 'c7', shards: 4, nodes: ['a'], ports: await freePorts(1) });
      const f = await writeClientCertificate({ dir: d, client: 'web' });
      expect(f.name).toBe('web.client.c7.plexus.internal');
      expect(f.cert).toBe(join(d, 'clients', 'web', 'cert.pem'));
      expect((await stat(f.key)).mode & 0o777).toBe(0o600);
      expect(clientOfCertificate(await readFile(f.cert, 'utf8'))).toEqual({ cluster: 'c7', client: 'web' });
      expect(await readFile(f.ca, 'utf8')).toBe(await readFile(join(d, 'ca.pem'), 'utf8'));
      // A node certificate names no client.
      expect(clientOfCertificate(await readFile(join(d, 'nodes', 'a', 'cert.pem'), 'utf8'))).toBeUndefined();
      const exists = await refusal(writeClientCertificate({ dir: d, client: 'web' }));
      expect(exists.code).toBe('PLX_CLUSTER_EXISTS');
      const first = await readFile(f.cert, 'utf8');
      await writeClientCertificate({ dir: d, client: 'web', force: true });
      expect(await readFile(f.cert, 'utf8')).not.toBe(first);
      expect((await refusal(writeClientCertificate({ dir: d, client: 'Not_A_Label' }))).code).toBe('PLX_WIRE_BAD_NAME');
      expect((await refusal(writeClientCertificate({ dir: join(d, 'nope'), client: 'web' }))).code).toMatch(
        /^PLX_CLUSTER_BAD_(PATH|META)$/,
      );
    } finally {
      await rm(d, { recursive: true, force: true });
    }
  });
});

describe('ActorClient with three nodes', () => {
  let dir = '';
  const nodes: ClusterNode[] = [];
  const addr = new Map<string, string>();
  let tls: { cert: string; key: string; ca: string };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plexus-client-'));
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: SHARDS,
      nodes: ['a', 'b', 'c'],
      ports: await freePorts(3),
      journal: 'shared',
      lease: { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 },
      heartbeatEveryMs: 100,
    });
    for (const id of ['a', 'b', 'c']) {
      const cfg = await readNodeConfig(files.get(id)!);
      addr.set(id, cfg.members.find((m) => m.id === id)!.address);
      nodes.push(await launchClusterNode(cfg));
    }
    const ca = {
      cluster: 'c1',
      cert: await readFile(join(dir, 'ca.pem'), 'utf8'),
      key: await readFile(join(dir, 'ca-key.pem'), 'utf8'),
    };
    const creds = await issueClientCertificate(ca, 'app');
    tls = { cert: creds.cert, key: creds.key, ca: creds.ca };
    const m = nodes[0]!.membership;
    await until(() => m.view().leases.length === SHARDS && new Set(m.view().leases.map((l) => l.owner)).size === 3, {
      timeoutMs: 15_000,
      what: 'every shard leased, over the three nodes',
    });
  }, 30_000);

  afterAll(async () => {
    for (const n of nodes.reverse()) await n.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 30_000);

  /** An IRI `vt:counter/<tag><i>` whose shard `owner` holds now. */
  function iriOwnedBy(owner: string, tag: string): string {
    const a = nodes[0]!;
    for (let i = 0; ; i++) {
      const iri = `vt:counter/${tag}${i}`;
      if (ownerOf(a.membership.view(), a.placement.shardOf(iri))?.owner === owner) return iri;
    }
  }

  it('sends and asks through one member, which forwards to the owners on the other nodes', async () => {
    const client = ActorClient.connect({ members: [addr.get('a')!], tls, deadlineMs: 10_000 });
    try {
      expect([client.cluster, client.client]).toEqual(['c1', 'app']);
      for (const owner of ['a', 'b', 'c']) {
        const iri = iriOwnedBy(owner, `fw-${owner}-`);
        expect(await client.send(iri, 'inc', undefined, { id: `fw-${owner}-1` })).toBe('processed');
        // The same id again: acknowledged, and taken once (the count below is 2, not 3).
        // Only the owner itself tells `duplicate`; a forwarding member answers `processed`.
        const again = await client.send(iri, 'inc', undefined, { id: `fw-${owner}-1` });
        expect(again).toBe(owner === 'a' ? 'duplicate' : 'processed');
        const r = await client.ask(iri, 'inc', { reply: true });
        expect(r).toEqual({ name: 'counted', data: { n: 2 } });
      }
      // Nothing failed over: a forwarded every message itself.
      expect(client.stats.failovers).toBe(0);
    } finally {
      client.close();
    }
  }, 30_000);

  it('fails over past a member that does not answer', async () => {
    const dead = `127.0.0.1:${await freePort()}`;
    const client = ActorClient.connect({ members: [dead, addr.get('b')!], tls, deadlineMs: 10_000 });
    try {
      const iri = iriOwnedBy('c', 'fo-');
      expect(await client.ask(iri, 'inc', { reply: true })).toEqual({ name: 'counted', data: { n: 1 } });
      expect(client.stats.failovers).toBeGreaterThanOrEqual(1);
    } finally {
      client.close();
    }
  }, 20_000);

  it('rejects with PLX_CLUSTER_DEADLINE after the deadline: no member up, or no reply', async () => {
    const dead = ActorClient.connect({ members: [`127.0.0.1:${await freePort()}`], tls, deadlineMs: 600 });
    let t0 = performance.now();
    const e1 = await refusal(dead.send('vt:counter/x', 'inc'));
    let took = performance.now() - t0;
    expect(e1.code).toBe('PLX_CLUSTER_DEADLINE');
    expect(isClientDeadline(e1)).toBe(true);
    expect(e1.details.event).toBe('error.communication');
    expect(e1.details.attempts as number).toBeGreaterThanOrEqual(2);
    expect(e1.details.last).toBe('PLX_WIRE_UNREACHABLE');
    expect(took).toBeGreaterThanOrEqual(590);
    expect(took).toBeLessThan(5000);
    dead.close();
    // The counter answers only when asked to: the member waits on the client's behalf until the deadline.
    const up = ActorClient.connect({ members: [addr.get('a')!], tls, deadlineMs: 800 });
    try {
      t0 = performance.now();
      const e2 = await refusal(up.ask(iriOwnedBy('b', 'dl-'), 'inc'));
      took = performance.now() - t0;
      expect(isClientDeadline(e2)).toBe(true);
      expect(took).toBeGreaterThanOrEqual(790);
      expect(took).toBeLessThan(5000);
    } finally {
      up.close();
    }
  }, 20_000);

  it('rejects at once what every member would refuse: an IRI without a chart', async () => {
    const client = ActorClient.connect({ members: [addr.get('a')!, addr.get('b')!], tls, deadlineMs: 10_000 });
    try {
      const t0 = performance.now();
      const e = await refusal(client.ask('vt:nochart/1', 'hello'));
      expect(e.code).toBe('PLX_RUNTIME_NO_CHART');
      expect(performance.now() - t0).toBeLessThan(5000);
      expect(client.stats.failovers).toBe(0);
    } finally {
      client.close();
    }
  });

  it('refuses bad options with stable codes', async () => {
    expect(thrownRefusal(() => ActorClient.connect({ members: [], tls })).code).toBe('PLX_CLUSTER_BAD_CONFIG');
    expect(thrownRefusal(() => ActorClient.connect({ members: ['nohost'], tls })).details.field).toBe('members[0]');
    // A node certificate is no client certificate.
    const nodeCert = await readFile(join(dir, 'nodes', 'a', 'cert.pem'), 'utf8');
    const e = thrownRefusal(() => ActorClient.connect({ members: [addr.get('a')!], tls: { ...tls, cert: nodeCert } }));
    expect([e.code, e.details.field]).toEqual(['PLX_CLUSTER_BAD_TLS', 'tls.cert']);
  });

  it('refuses a client certificate of another CA at the handshake', async () => {
    const other = await createClusterCa('c1');
    const creds = await issueClientCertificate(other, 'app');
    const client = ActorClient.connect({
      members: [addr.get('a')!],
      tls: { cert: creds.cert, key: creds.key, ca: tls.ca },
      deadlineMs: 700,
    });
    const before = nodes[0]!.wire.refusals().length;
    const e = await refusal(client.send('vt:counter/x', 'inc'));
    client.close();
    expect(e.code).toBe('PLX_CLUSTER_DEADLINE');
    const refused = nodes[0]!.wire.refusals().slice(before);
    expect(refused.some((r) => r.code === 'PLX_WIRE_UNTRUSTED')).toBe(true);
  });

  it('a client certificate can neither join, send frames nor act as a member', async () => {
    const a = nodes[0]!;
    const creds = await issueClientCertificate(
      { cluster: 'c1', cert: tls.ca, key: await readFile(join(dir, 'ca-key.pem'), 'utf8') },
      'd',
    );
    // A wire that calls itself `d` but holds the client certificate of `d`.
    const wire = new Http2Wire({
      self: 'd',
      cluster: 'c1',
      tls: { cert: creds.cert, key: creds.key, ca: tls.ca },
      port: 0,
      resolve: (n) => addr.get(n),
      isMember: () => true,
      deliveryDeadlineMs: 1500,
    });
    try {
      const join = await refusal(
        wire.call(
          'a',
          encodeRequest({
            type: 'join',
            node: 'd',
            address: '127.0.0.1:1',
            meta: { id: 'c1', shardCount: SHARDS, hashVersion: 1, replicationFactor: 1 },
          }),
        ),
      );
      expect([join.code, join.details.reason, join.details.from]).toEqual([
        'PLX_CLUSTER_BAD_REQUEST',
        'client',
        'client:d',
      ]);
      const frame = await refusal(
        wire.send('a', {
          shard: 0,
          epoch: 1n,
          sender: 'vt:counter/d',
          target: 'vt:counter/x',
          payload: new Uint8Array(4),
        }),
      );
      expect(frame.code).toMatch(/^PLX_WIRE_/);
      expect(
        a.membership
          .view()
          .members.map((m) => m.id)
          .sort(),
      ).toEqual(['a', 'b', 'c']);
      expect(a.wire.refusals().some((r) => r.peer === 'client:d' && /may only call/.test(r.message))).toBe(true);
    } finally {
      await wire.close();
    }
  }, 20_000);
});
