/**
 * The node config schema (ts/cluster/node-config.ts) and the small validator under it
 * (ts/cluster/schema.ts): every key a node takes is accepted, the first bad value is named by
 * its path, unknown keys are refused. The same refusals from the command line are in
 * cli-refusals.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { checkNodeConfig } from '../../ts/cluster/node-config.js';
import { firstProblem, type Schema } from '../../ts/cluster/schema.js';
import { thrownRefusal } from '../helpers/refusal.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON
type Json = Record<string, any>;

const GOOD: Json = {
  meta: { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 },
  clusterMeta: '../../cluster.meta',
  self: 'a',
  members: [
    { id: 'a', address: '127.0.0.1:7400' },
    { id: 'b', address: 'node-b.example:7401' },
    { id: 'c', address: '[::1]:7402' },
  ],
  authority: 'a',
  dataDir: 'data',
  tls: { cert: 'cert.pem', key: 'key.pem', ca: '../../ca.pem' },
  journal: 'shared',
  sharedDir: '../../shared',
  storeHost: 'a',
  cluster: {
    hopLimit: 4,
    mailboxBound: 1024,
    dedupCapacity: 65536,
    deliveryDeadlineMs: 30000,
    retryBackoffMs: 50,
    maxFrameBytes: 1048576,
  },
  lease: { ttlMs: 10000, safetyMarginMs: 2000, renewEveryMs: 3000 },
  detector: { suspectAfterMs: 3000, failedAfterMs: 10000 },
  heartbeatEveryMs: 100,
  runtime: { mailboxBound: 1024, dedupWindow: 1024, snapshotEvery: 100, idleAfter: 60000 },
  fsync: 'batch',
  wire: { streamCap: 64, poolSize: 2 },
  journalLanes: 4,
  leaseClockRate: 0.1,
};

function problem(change: (c: Json) => void): { code: string; path: unknown; message: string } {
  const c = structuredClone(GOOD);
  change(c);
  const e = thrownRefusal(() => checkNodeConfig(c, 'node.json'));
  return { code: e.code, path: e.details.path, message: e.message };
}

describe('the node config schema', () => {
  it('accepts every key a node takes', () => {
    expect(() => checkNodeConfig(structuredClone(GOOD), 'node.json')).not.toThrow();
    const minimal = structuredClone(GOOD);
    for (const k of ['clusterMeta', 'journal', 'sharedDir', 'storeHost', 'cluster', 'lease', 'detector']) {
      delete minimal[k];
    }
    for (const k of ['heartbeatEveryMs', 'runtime', 'fsync', 'wire', 'journalLanes', 'leaseClockRate'])
      delete minimal[k];
    expect(() => checkNodeConfig(minimal, 'node.json')).not.toThrow();
  });

  it('names the path of the first bad value', () => {
    const cases: [(c: Json) => void, string, RegExp][] = [
      [(c) => (c.extra = true), 'extra', /not a known key/],
      [(c) => (c.wire.streamcap = 1), 'wire.streamcap', /not a known key/],
      [(c) => (c.members[2].address = '[::1]:65536'), 'members[2].address', /port 65536/],
      [(c) => (c.members[1].address = 'b:7401:1'), 'members[1].address', /host:port/],
      [(c) => (c.members[1].id = 'B'), 'members[1].id', /DNS label/],
      [(c) => (c.members[1] = 'b'), 'members[1]', /JSON object/],
      [(c) => (c.members = []), 'members', /at least 1/],
      [(c) => (c.members[2].id = 'b'), 'members[2].id', /repeats the id "b" of members\[1\]/],
      [(c) => (c.storeHost = 'zz'), 'storeHost', /members does not list/],
      [(c) => (c.lease.ttlMs = -1), 'lease.ttlMs', /whole number from 0/],
      [(c) => (c.lease.ttlMs = 1.5), 'lease.ttlMs', /whole number/],
      [(c) => (c.detector = { suspectAfterMs: 10, failedAfterMs: 5 }), 'detector.failedAfterMs', /suspectAfterMs/],
      [(c) => (c.fsync = 'sometimes'), 'fsync', /one of "batch", "always", "never"/],
      [(c) => (c.tls = { cert: 'a', key: 'b' }), 'tls.ca', /is required/],
      [(c) => (c.dataDir = ''), 'dataDir', /not be empty/],
      [(c) => (c.meta.shardCount = 2 ** 21), 'meta.shardCount', /from 1 to 1048576/],
      [(c) => (c.journalLanes = 0), 'journalLanes', /from 1 to 1024/],
      [(c) => (c.leaseClockRate = Number.NaN), 'leaseClockRate', /above 0/],
    ];
    for (const [change, path, says] of cases) {
      const p = problem(change);
      expect(p, path).toMatchObject({ code: 'PLX_CLUSTER_BAD_CONFIG', path });
      expect(p.message, path).toMatch(says);
      expect(p.message, path).toContain('node.json');
    }
    expect(thrownRefusal(() => checkNodeConfig([], 'node.json')).details.path).toBe('');
    expect(problem((c) => (c.meta.replicationFactor = 2)).code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    expect(problem((c) => (c.meta.shardCount = 12)).code).toBe('PLX_CLUSTER_BAD_META');
  });

  it('the validator on its own: nested objects and arrays, types, ranges', () => {
    const s: Schema = {
      type: 'object',
      required: ['xs'],
      properties: {
        xs: {
          type: 'array',
          maxItems: 2,
          items: { type: 'object', properties: { n: { type: 'integer', min: 0, max: 9 } } },
        },
        b: { type: 'boolean' },
      },
    };
    expect(firstProblem(s, { xs: [{ n: 1 }, {}] })).toBeUndefined();
    expect(firstProblem(s, { xs: [{ n: 1 }, { n: 10 }] })).toMatchObject({ path: 'xs[1].n' });
    expect(firstProblem(s, { xs: [{}, {}, {}] })).toMatchObject({
      path: 'xs',
      message: expect.stringMatching(/at most 2/),
    });
    expect(firstProblem(s, { xs: [], b: 'yes' })).toMatchObject({
      path: 'b',
      message: expect.stringMatching(/true or false/),
    });
    expect(firstProblem(s, {})).toMatchObject({ path: 'xs', message: 'is required' });
    expect(firstProblem(s, null)).toMatchObject({ path: '', message: expect.stringMatching(/got null/) });
    expect(firstProblem(s, { xs: [], __proto__x: 1 })).toMatchObject({ path: '__proto__x' });
  });
});
