/**
 * The Lease-API stand-in (test/helpers/kube-lease-server.ts) itself, over HTTPS with its test
 * CA, against a real 3-member etcd (test/helpers/etcd.ts): resourceVersion is the etcd key's
 * mod_revision, a replace with a stale one is 409 Conflict, a create of an existing name 409
 * AlreadyExists, a read of a missing one 404, a request without the bearer token 401, each a
 * Kubernetes Status object. And what `@kubernetes/client-node` sends on the wire for the
 * MicroTime fields (acquireTime, renewTime) of a Lease.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdGateway } from '../../ts/cluster/etcd-gateway.js';
import { kubeLeaseApi, parseMicroTime } from '../../ts/cluster/kube-authority.js';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { KUBE_STAND_IN_NAME, KubeLeaseServer } from '../helpers/kube-lease-server.js';

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes JSON
type Json = Record<string, any>;

const BASE = '/apis/coordination.k8s.io/v1/namespaces/ns1/leases';

describe.skipIf(!etcdAvailable)('the Lease-API stand-in on a real etcd (skipped: no etcd binary on PATH)', () => {
  let etcd: EtcdCluster | undefined;
  let server: KubeLeaseServer | undefined;
  let dir = '';

  beforeAll(async () => {
    etcd = await startEtcd();
    server = await KubeLeaseServer.start({ etcdEndpoints: etcd.clientUrls });
    dir = await mkdtemp(join(tmpdir(), 'plexus-kube-'));
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await etcd?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** One HTTPS exchange with the stand-in, trusting its CA and checking its name. */
  function http(
    method: string,
    path: string,
    body?: unknown,
    /** The bearer token sent (null: none). */
    token: string | null | undefined = server?.token,
  ): Promise<{ status: number; json: Json }> {
    const s = server as KubeLeaseServer;
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: s.port,
          path,
          method,
          ca: s.ca,
          servername: KUBE_STAND_IN_NAME,
          headers: {
            ...(token == null ? {} : { authorization: `Bearer ${token}` }),
            ...(data ? { 'content-type': 'application/json', 'content-length': data.length } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json }),
          );
        },
      );
      req.on('error', reject);
      req.end(data);
    });
  }

  const lease = (name: string, holder: string, extra: Json = {}) => ({
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, ...extra },
    spec: { holderIdentity: holder, leaseDurationSeconds: 10 },
  });

  it('gives every object the mod_revision of its etcd key as resourceVersion, and 409 on a stale one', async () => {
    const s = server as KubeLeaseServer;
    const gw = new EtcdGateway({ endpoints: (etcd as EtcdCluster).clientUrls });
    const created = await http('POST', BASE, lease('l1', 'a'));
    expect(created.status).toBe(201);
    const rv1 = created.json.metadata.resourceVersion as string;
    const key = `${s.etcdPrefix}ns1/l1`;
    const kv1 = (await gw.range(key)).kvs[0];
    expect(String(kv1?.modRevision)).toBe(rv1);
    // The object is in etcd as JSON; the resourceVersion is not stored, it is the revision.
    const stored = JSON.parse(kv1?.value.toString('utf8') ?? '{}') as Json;
    expect(stored.spec.holderIdentity).toBe('a');
    expect(stored.metadata.resourceVersion).toBeUndefined();

    const got = await http('GET', `${BASE}/l1`);
    expect(got.status).toBe(200);
    expect(got.json.metadata.resourceVersion).toBe(rv1);

    const replaced = await http('PUT', `${BASE}/l1`, lease('l1', 'b', { resourceVersion: rv1 }));
    expect(replaced.status).toBe(200);
    const rv2 = replaced.json.metadata.resourceVersion as string;
    expect(BigInt(rv2)).toBeGreaterThan(BigInt(rv1));
    expect(String((await gw.range(key)).kvs[0]?.modRevision)).toBe(rv2);
    expect(replaced.json.metadata.uid).toBe(created.json.metadata.uid);

    // A write through etcd itself moves the revision too: the read after it carries the new one.
    await gw.txn([], [{ put: `${s.etcdPrefix}ns1/unrelated`, value: '{"metadata":{"name":"unrelated"}}' }]);
    expect((await http('GET', `${BASE}/l1`)).json.metadata.resourceVersion).toBe(rv2);

    const stale = await http('PUT', `${BASE}/l1`, lease('l1', 'c', { resourceVersion: rv1 }));
    expect(stale.status).toBe(409);
    expect(stale.json).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'Conflict', code: 409 });
    expect((await http('GET', `${BASE}/l1`)).json.spec.holderIdentity).toBe('b');

    const again = await http('POST', BASE, lease('l1', 'd'));
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ kind: 'Status', reason: 'AlreadyExists', code: 409 });

    const list = await http('GET', BASE);
    expect(list.status).toBe(200);
    expect(list.json.kind).toBe('LeaseList');
    const l1 = (list.json.items as Json[]).find((o) => o.metadata.name === 'l1');
    expect(l1?.metadata.resourceVersion).toBe(rv2);
    expect(BigInt(list.json.metadata.resourceVersion)).toBeGreaterThanOrEqual(BigInt(rv2));
  });

  it('answers 404 for a missing Lease and 401 without the bearer token, as Status objects', async () => {
    const missing = await http('GET', `${BASE}/nope`);
    expect(missing.status).toBe(404);
    expect(missing.json).toMatchObject({ kind: 'Status', reason: 'NotFound', code: 404 });
    const putMissing = await http('PUT', `${BASE}/nope`, lease('nope', 'a', { resourceVersion: '5' }));
    expect(putMissing.status).toBe(404);
    for (const token of [null, 'wrong']) {
      const denied = await http('GET', BASE, undefined, token);
      expect(denied.status).toBe(401);
      expect(denied.json).toMatchObject({ kind: 'Status', reason: 'Unauthorized', code: 401 });
      const write = await http('POST', BASE, lease('sneaky', 'x'), token);
      expect(write.status).toBe(401);
    }
    expect((await http('GET', `${BASE}/sneaky`)).status).toBe(404);
    // Only the Lease endpoints are served.
    expect((await http('GET', '/api/v1/namespaces/ns1/configmaps')).status).toBe(404);
    expect((await http('DELETE', `${BASE}/l1`)).status).toBe(405);
  });

  it('shows what @kubernetes/client-node sends for MicroTime fields: a Date goes out with 3 digits, a string as given', async () => {
    const s = server as KubeLeaseServer;
    const k8s = await import('@kubernetes/client-node');
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(await s.writeKubeconfig(join(dir, 'kubeconfig')));
    const api = kc.makeApiClient(k8s.CoordinationV1Api);
    const when = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    const sent = (name: string) => {
      const r = [...s.requests].reverse().find((x) => x.method === 'POST' && x.body?.includes(`"${name}"`));
      return JSON.parse(r?.body ?? '{}') as Json;
    };
    // A plain Date: JSON.stringify gives milliseconds, 3 digits (not a MicroTime).
    await api.createNamespacedLease({
      namespace: 'ns1',
      body: { metadata: { name: 'wire-date' }, spec: { acquireTime: when as never, renewTime: when as never } },
    });
    expect(sent('wire-date').spec.acquireTime).toBe('2026-01-02T03:04:05.678Z');
    // The client's V1MicroTime pads the milliseconds with three zeros.
    await api.createNamespacedLease({
      namespace: 'ns1',
      body: { metadata: { name: 'wire-micro' }, spec: { renewTime: new k8s.V1MicroTime(when.getTime()) } },
    });
    expect(sent('wire-micro').spec.renewTime).toBe('2026-01-02T03:04:05.678000Z');
    // A string goes out unchanged: the authority writes its own 6-digit MicroTime.
    await api.createNamespacedLease({
      namespace: 'ns1',
      body: { metadata: { name: 'wire-text' }, spec: { renewTime: '2026-01-02T03:04:05.678901Z' as never } },
    });
    expect(sent('wire-text').spec.renewTime).toBe('2026-01-02T03:04:05.678901Z');
    // Read back, the client leaves a MicroTime as the string it got (no Date: no precision lost).
    const back = await api.readNamespacedLease({ namespace: 'ns1', name: 'wire-text' });
    expect(back.spec?.renewTime as unknown).toBe('2026-01-02T03:04:05.678901Z');
    expect(parseMicroTime(back.spec?.renewTime as unknown as string)).toBeCloseTo(when.getTime() + 0.901, 6);
  });

  it('reaches the stand-in through the client only with its token and CA: 401 is PLX_CLUSTER_KUBE_RESPONSE', async () => {
    const s = server as KubeLeaseServer;
    const good = await kubeLeaseApi(await s.writeKubeconfig(join(dir, 'good')), 5000);
    expect((await good.list('ns1')).some((o) => o.metadata.name === 'l1')).toBe(true);
    const bad = await kubeLeaseApi(await s.writeKubeconfig(join(dir, 'bad'), 'not-the-token'), 5000);
    const e = await bad.list('ns1').then(
      () => undefined,
      (err: unknown) => err as { code: string; details: Json },
    );
    expect(e?.code).toBe('PLX_CLUSTER_KUBE_RESPONSE');
    expect(e?.details.status).toBe(401);
    // Every request the clients made is one the stand-in serves.
    for (const r of s.requests)
      expect(r.path.split('?')[0]).toMatch(
        /^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/[^/]+\/leases(\/[^/]+)?$|^\/api\/v1\//,
      );
  });
});
