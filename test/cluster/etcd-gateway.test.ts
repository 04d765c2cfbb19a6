/**
 * The etcd JSON-gateway client without etcd: its reply decoders under fast-check (any bytes
 * either decode or are refused with PLX_CLUSTER_ETCD_RESPONSE, and well-formed replies decode
 * to what they carry), and its timeouts, size bound, retries and endpoint failover against
 * real HTTP servers on loopback that misbehave on purpose.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  decodeKeepAlive,
  decodeLeaseGrant,
  decodeRange,
  decodeTxn,
  decodeWatchResult,
  EtcdGateway,
  prefixEnd,
} from '../../ts/cluster/etcd-gateway.js';
import { PlexusError } from '../../ts/core/errors.js';
import { RetryPolicy } from '../../ts/core/retry.js';

const decoders = [decodeRange, decodeTxn, decodeLeaseGrant, decodeKeepAlive, decodeWatchResult];
const enc = (v: unknown) => Buffer.from(JSON.stringify(v));
const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');

/** Runs `f`; it must return or throw PLX_CLUSTER_ETCD_RESPONSE, nothing else. */
function decodesOrRefuses(f: () => unknown): void {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(PlexusError);
    expect((e as PlexusError).code).toBe('PLX_CLUSTER_ETCD_RESPONSE');
  }
}

describe('etcd gateway reply decoders', () => {
  it('refuse any bytes they cannot read with PLX_CLUSTER_ETCD_RESPONSE, never another error', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        for (const d of decoders) decodesOrRefuses(() => d(bytes));
      }),
      { numRuns: 500 },
    );
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (v) => {
        for (const d of decoders) decodesOrRefuses(() => d(enc(v)));
      }),
      { numRuns: 500 },
    );
  });

  const kvArb = fc.record({
    key: fc.uint8Array({ minLength: 1, maxLength: 20 }),
    value: fc.uint8Array({ maxLength: 40 }),
    mod: fc.bigInt({ min: 1n, max: (1n << 63n) - 1n }),
    lease: fc.bigInt({ min: 0n, max: (1n << 63n) - 1n }),
  });

  it('decode well-formed replies to what they carry (int64 as strings, bytes as base64)', () => {
    fc.assert(
      fc.property(fc.array(kvArb, { maxLength: 5 }), fc.bigInt({ min: 1n, max: (1n << 63n) - 1n }), (kvs, rev) => {
        const wire = kvs.map((k) => ({
          key: b64(k.key),
          value: b64(k.value),
          mod_revision: k.mod.toString(),
          create_revision: '1',
          version: '1',
          ...(k.lease === 0n ? {} : { lease: k.lease.toString() }),
        }));
        const r = decodeRange(enc({ header: { revision: rev.toString() }, ...(wire.length ? { kvs: wire } : {}) }));
        expect(r.revision).toBe(rev);
        expect(r.kvs.map((k) => [k.key, b64(k.value), k.modRevision, k.lease])).toEqual(
          kvs.map((k) => [Buffer.from(k.key).toString('utf8'), b64(k.value), k.mod, k.lease]),
        );
        const t = decodeTxn(
          enc({
            header: { revision: rev.toString() },
            succeeded: true,
            responses: [{ response_range: { kvs: wire } }],
          }),
        );
        expect(t.succeeded).toBe(true);
        expect(t.ranges[0]?.kvs.length).toBe(kvs.length);
      }),
      { numRuns: 200 },
    );
  });

  it('read the gateway’s left-out defaults and refuse damaged fields, naming the reason', () => {
    expect(decodeTxn(enc({ header: { revision: '7' } }))).toEqual({ succeeded: false, revision: 7n, ranges: [] });
    expect(decodeKeepAlive(enc({ result: { header: { revision: '1' }, ID: '5' } }))).toBe(0n);
    expect(decodeKeepAlive(enc({ result: { header: { revision: '1' }, ID: '5', TTL: '9' } }))).toBe(9n);
    const refusal = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e as PlexusError;
      }
      throw new Error('decoded; a refusal was expected');
    };
    expect(refusal(() => decodeRange(enc({ header: { revision: 7 } }))).details.reason).toContain('int64');
    expect(refusal(() => decodeRange(enc({ header: { revision: '99999999999999999999' } }))).details.reason).toMatch(
      /int64/,
    );
    expect(
      refusal(() => decodeRange(enc({ header: { revision: '1' }, kvs: [{ key: 'a!' }] }))).details.reason,
    ).toContain('base64');
    expect(refusal(() => decodeLeaseGrant(enc({ header: {}, ID: '0', TTL: '5' }))).details.reason).toBe('no lease');
    expect(refusal(() => decodeRange(enc({ error: 'etcdserver: request timed out', code: 14 }))).message).toContain(
      'request timed out',
    );
    expect(refusal(() => decodeRange(Buffer.from([0xff, 0xfe]))).details.reason).toContain('UTF-8');
  });

  it('computes the range end of a prefix', () => {
    expect(Buffer.from(prefixEnd('/a/'), 'base64').toString()).toBe('/a0');
    expect(Buffer.from(prefixEnd('a\u00ff'), 'base64')).toEqual(Buffer.from([0x61, 0xc3, 0xc0]));
  });
});

describe('etcd gateway client against misbehaving HTTP servers on loopback', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });
  const serve = async (handler: Parameters<typeof createServer>[1]): Promise<{ url: string; hits: () => number }> => {
    let hits = 0;
    const s = createServer((req, res) => {
      hits++;
      req.resume();
      handler?.(req, res);
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
    return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, hits: () => hits };
  };
  const policy = () => new RetryPolicy({ baseMs: 1, capMs: 5, maxAttempts: 3, jitter: 'none' });
  const code = (p: Promise<unknown>) =>
    p.then(
      () => 'resolved',
      (e: unknown) => (e as PlexusError).code,
    );

  it('times out a silent endpoint, retries a bounded number of times, then answers PLX_CLUSTER_UNAVAILABLE', async () => {
    const silent = await serve(() => undefined);
    const gw = new EtcdGateway({ endpoints: [silent.url], timeoutMs: 100, retry: policy() });
    const t0 = performance.now();
    expect(await code(gw.range('k'))).toBe('PLX_CLUSTER_UNAVAILABLE');
    expect(silent.hits()).toBe(4); // the first attempt and 3 retries
    expect(performance.now() - t0).toBeGreaterThanOrEqual(400 - 20);
  });

  it('passes over a failing endpoint to the next one', async () => {
    const down = await serve((_req, res) => {
      res.statusCode = 503;
      res.end('{"error":"etcdserver: no leader","code":14}');
    });
    const up = await serve((_req, res) => res.end(JSON.stringify({ header: { revision: '3' } })));
    const gw = new EtcdGateway({ endpoints: [down.url, up.url], retry: policy() });
    expect((await gw.range('k')).revision).toBe(3n);
    expect(down.hits()).toBe(1);
    expect(up.hits()).toBe(1);
  });

  it('reads a watch stream line by line, ends it on a damaged result, and passes over a silent endpoint', async () => {
    const kv = { key: b64(Buffer.from('/p/members/a')), mod_revision: '5', value: b64(Buffer.from('{}')) };
    const streaming = await serve((_req, res) => {
      res.write(`${JSON.stringify({ result: { header: { revision: '4' }, created: true } })}\n`);
      res.write(`${JSON.stringify({ result: { header: { revision: '5' }, events: [{ kv }] } })}\n`);
      res.write(
        `${JSON.stringify({ result: { header: { revision: '6' }, events: [{ type: 'DELETE', kv: { ...kv, mod_revision: '6' } }] } })}\n`,
      );
      res.write('{"result": {"header": {"revision": 7}}}\n');
    });
    const gw = new EtcdGateway({ endpoints: [streaming.url], timeoutMs: 200 });
    const seen: string[] = [];
    const ended = await new Promise<unknown>((resolve) =>
      gw.watch(
        '/p/',
        4n,
        (rev, events) => {
          for (const e of events) seen.push(`${rev}:${e.type}:${e.kv.key}`);
        },
        resolve,
      ),
    );
    expect(seen).toEqual(['5:PUT:/p/members/a', '6:DELETE:/p/members/a']);
    expect((ended as PlexusError).code).toBe('PLX_CLUSTER_ETCD_RESPONSE');

    const silent = await serve(() => undefined);
    const t0 = performance.now();
    const quiet = await new Promise<unknown>((resolve) =>
      new EtcdGateway({ endpoints: [silent.url], timeoutMs: 200 }).watch('/p/', 1n, () => undefined, resolve),
    );
    expect((quiet as PlexusError).code).toBe('PLX_CLUSTER_UNAVAILABLE');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
  });

  it('refuses a reply above the size limit and one that is not JSON, without retrying', async () => {
    const big = await serve((_req, res) => res.end(Buffer.alloc(10_000, 0x20)));
    const gw = new EtcdGateway({ endpoints: [big.url], retry: policy(), maxResponseBytes: 4096 });
    expect(await code(gw.range('k'))).toBe('PLX_CLUSTER_ETCD_RESPONSE');
    expect(big.hits()).toBe(1);
    const junk = await serve((_req, res) => res.end('<html>not etcd</html>'));
    expect(await code(new EtcdGateway({ endpoints: [junk.url], retry: policy() }).range('k'))).toBe(
      'PLX_CLUSTER_ETCD_RESPONSE',
    );
    expect(junk.hits()).toBe(1);
  });
});
