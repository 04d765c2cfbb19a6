/**
 * The Chronacta API through the real gRPC server on loopback: appends with expected
 * versions and idempotency keys, stream and $all reads with filters and paging, deletion,
 * truncation, the errors as gRPC statuses and back, restarts, the data directory.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { definitions } from '../../ts/chronacta/proto.js';
import type { RecordedEvent } from '../../ts/chronacta/types.js';
import type { PlexusError } from '../../ts/core/errors.js';
import { ManualClock } from '../helpers/clock.js';
import { type Running, serve, tempDir } from './helpers.js';

let tmp: { dir: string; remove: () => Promise<void> };
let run: Running;
let c: ChronactaClient;
let dataDir = '';
/** The store's wall time: it moves when a test says so (truncation by age). */
const clock = new ManualClock(Date.now());

beforeAll(async () => {
  tmp = await tempDir('api');
  dataDir = join(tmp.dir, 'data');
  run = await serve(dataDir, { segmentBytes: 64 * 1024, clock });
  c = run.client;
});

afterAll(async () => {
  await run?.stop();
  await tmp?.remove();
});

async function refusal(p: Promise<unknown>): Promise<PlexusError> {
  try {
    await p;
  } catch (e) {
    return e as PlexusError;
  }
  throw new Error('expected a refusal');
}

const text = (e: RecordedEvent) => Buffer.from(e.data).toString('utf8');

describe('append and read a stream', () => {
  it('appends a batch with versions from 0 and consecutive global positions', async () => {
    const r = await c.append(
      'order-1',
      [
        { type: 'placed', data: '{"n":1}', metadata: 'm1' },
        { type: 'paid', data: new Uint8Array([1, 2, 3]) },
      ],
      { expectedVersion: 'no_stream' },
    );
    expect(r).toMatchObject({ stream: 'order-1', firstVersion: 0n, lastVersion: 1n, duplicate: false });
    expect(r.lastPosition - r.firstPosition).toBe(1n);
    expect(r.batchId).toMatch(/^[0-9a-f-]{36}$/);
    const read = await c.readStream('order-1');
    expect(read.events.map((e) => [e.version, e.type])).toEqual([
      [0n, 'placed'],
      [1n, 'paid'],
    ]);
    expect(text(read.events[0]!)).toBe('{"n":1}');
    expect(Buffer.from(read.events[0]!.metadata).toString()).toBe('m1');
    expect([...read.events[1]!.data]).toEqual([1, 2, 3]);
    expect(read.events.every((e) => e.batchId === r.batchId)).toBe(true);
    expect(read.events[0]!.position).toBe(r.firstPosition);
    expect(read).toMatchObject({ lastVersion: 1n, end: true, deleted: false });
    expect(read.events[0]!.recordedMs).toBeGreaterThan(Date.now() - 60_000);
  });

  it('keeps the event id the caller gives', async () => {
    const id = '8d1f5b0e-3c4a-4b7e-9f2a-1a2b3c4d5e6f';
    await c.append('ids', [{ id, type: 't' }]);
    expect((await c.readStream('ids')).events[0]!.id).toBe(id);
  });

  it('reads forwards and backwards from a version, with a maximum count and a type filter', async () => {
    const events = Array.from({ length: 25 }, (_, i) => ({ type: i % 3 === 0 ? 'three' : 'other', data: `e${i}` }));
    await c.append('paged', events);
    const page1 = await c.readStream('paged', { maxCount: 10 });
    expect(page1.events.map(text)).toEqual(events.slice(0, 10).map((e) => e.data));
    expect(page1).toMatchObject({ end: false, nextVersion: 10n });
    const page2 = await c.readStream('paged', { fromVersion: page1.nextVersion!, maxCount: 100 });
    expect(page2.events.map((e) => Number(e.version))).toEqual(Array.from({ length: 15 }, (_, i) => 10 + i));
    expect(page2.end).toBe(true);
    const back = await c.readStream('paged', { direction: 'backwards', maxCount: 3 });
    expect(back.events.map((e) => e.version)).toEqual([24n, 23n, 22n]);
    expect(back.nextVersion).toBe(21n);
    const backFrom = await c.readStream('paged', { direction: 'backwards', fromVersion: 2n });
    expect(backFrom.events.map((e) => e.version)).toEqual([2n, 1n, 0n]);
    expect(backFrom.end).toBe(true);
    const threes = await c.readStream('paged', { types: ['three'] });
    expect(threes.events.map((e) => Number(e.version))).toEqual([0, 3, 6, 9, 12, 15, 18, 21, 24]);
  });

  it('bounds a read by bytes: large events come a few at a time, and paging goes on', async () => {
    const big = new Uint8Array(3 * 1024 * 1024).fill(7);
    await c.append('large', [
      { type: 'b', data: big },
      { type: 'b', data: big },
      { type: 'b', data: big },
    ]);
    const first = await c.readStream('large');
    expect(first.events.map((e) => e.version)).toEqual([0n, 1n]);
    expect(first.nextVersion).toBe(2n);
    const rest = await c.readStream('large', { fromVersion: first.nextVersion! });
    expect(rest.events.map((e) => e.version)).toEqual([2n]);
    expect(rest.events[0]!.data.length).toBe(big.length);
    const back = await c.readStream('large', { direction: 'backwards' });
    expect(back.events.map((e) => e.version)).toEqual([2n, 1n]);
    const all = await c.readAll({ streamPrefix: 'large' });
    expect(all.events).toHaveLength(2);
    expect(all.end).toBe(false);
  });

  it('reads a stream never written as empty, version -1', async () => {
    expect(await c.readStream('nobody')).toMatchObject({ events: [], lastVersion: -1n, end: true });
  });
});

describe('expected versions', () => {
  it('checks any, no_stream, exists and exact versions, and writes nothing when refused', async () => {
    const before = (await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition;
    const e1 = await refusal(c.append('ev', [{ type: 't' }], { expectedVersion: 'exists' }));
    expect(e1.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
    expect(e1.details.actual).toBe(-1n);
    expect(e1.message).toContain('does not exist');
    await c.append('ev', [{ type: 't' }], { expectedVersion: 'no_stream' });
    await c.append('ev', [{ type: 't' }], { expectedVersion: 0n });
    await c.append('ev', [{ type: 't' }, { type: 't' }], { expectedVersion: 'exists' });
    await c.append('ev', [{ type: 't' }], { expectedVersion: 'any' });
    const e2 = await refusal(c.append('ev', [{ type: 't' }], { expectedVersion: 2n }));
    expect(e2.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
    expect(e2.details).toMatchObject({ stream: 'ev', expected: 2n, actual: 4n });
    expect(e2.message).toContain('last version is 4');
    const e3 = await refusal(c.append('ev', [{ type: 't' }], { expectedVersion: 'no_stream' }));
    expect(e3.details.actual).toBe(4n);
    expect((await c.readStream('ev')).lastVersion).toBe(4n);
    const after = (await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition;
    expect(after - before).toBe(5n);
  });

  it('sends FAILED_PRECONDITION with the actual version in the metadata', async () => {
    const defs = definitions();
    const raw = new defs.EventStore(run.server.address, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError>((resolve) => {
      (raw as unknown as Record<string, (...a: unknown[]) => void>).Append!(
        { stream: 'ev', events: [{ type: 't' }], expectedVersion: { exact: '0' } },
        (e: grpc.ServiceError) => resolve(e),
      );
    });
    raw.close();
    expect(err.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(err.metadata.get('actual-version')).toEqual(['4']);
    expect(err.metadata.get('plexus-code')).toEqual(['PLX_CHRONACTA_WRONG_EXPECTED_VERSION']);
  });
});

describe('idempotency keys', () => {
  it('returns the first result for a retry and writes nothing', async () => {
    const events = [{ type: 'a', data: 'x' }, { type: 'b' }];
    const first = await c.append('idem', events, { idempotencyKey: 'k-1', expectedVersion: 'no_stream' });
    const last = (await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition;
    const again = await c.append('idem', events, { idempotencyKey: 'k-1', expectedVersion: 'no_stream' });
    expect(again).toEqual({ ...first, duplicate: true });
    expect((await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition).toBe(last);
    expect((await c.readStream('idem')).events).toHaveLength(2);
  });

  it('refuses the same key with other events or another stream', async () => {
    await c.append('idem2', [{ type: 'a', data: 'x' }], { idempotencyKey: 'k-2' });
    const e1 = await refusal(c.append('idem2', [{ type: 'a', data: 'y' }], { idempotencyKey: 'k-2' }));
    expect(e1.code).toBe('PLX_CHRONACTA_IDEMPOTENCY_CONFLICT');
    expect(e1.details.grpcStatus).toBe(grpc.status.ALREADY_EXISTS);
    const e2 = await refusal(c.append('other', [{ type: 'a', data: 'x' }], { idempotencyKey: 'k-2' }));
    expect(e2.code).toBe('PLX_CHRONACTA_IDEMPOTENCY_CONFLICT');
  });

  it('concurrent retries of one key write once', async () => {
    const events = [{ type: 'c', data: 'same' }];
    const rs = await Promise.all(Array.from({ length: 8 }, () => c.append('idem3', events, { idempotencyKey: 'k-3' })));
    expect(rs.filter((r) => !r.duplicate)).toHaveLength(1);
    expect(new Set(rs.map((r) => r.firstPosition)).size).toBe(1);
    expect((await c.readStream('idem3')).events).toHaveLength(1);
  });
});

describe('$all', () => {
  it('reads every event in position order, forwards and backwards, with paging', async () => {
    const all: RecordedEvent[] = [];
    let from = 1n;
    for (;;) {
      const r = await c.readAll({ fromPosition: from, maxCount: 7 });
      all.push(...r.events);
      if (r.end) break;
      from = r.nextPosition;
    }
    const positions = all.map((e) => e.position);
    expect(positions).toEqual([...positions].sort((a, b) => (a < b ? -1 : 1)));
    expect(new Set(positions).size).toBe(positions.length);
    // No deletion yet: every position from 1 to the end is an event.
    expect(positions).toEqual(Array.from({ length: positions.length }, (_, i) => BigInt(i + 1)));
    const back = await c.readAll({ direction: 'backwards', maxCount: 5 });
    expect(back.events.map((e) => e.position)).toEqual(positions.slice(-5).reverse());
  });

  it('filters by stream prefix and event type', async () => {
    await c.append('shop-1', [{ type: 'sold' }, { type: 'kept' }]);
    await c.append('shop-2', [{ type: 'sold' }]);
    await c.append('other-1', [{ type: 'sold' }]);
    const shops = await c.readAll({ streamPrefix: 'shop-' });
    expect(shops.events.map((e) => `${e.stream}/${e.type}`)).toEqual(['shop-1/sold', 'shop-1/kept', 'shop-2/sold']);
    const sold = await c.readAll({ streamPrefix: 'shop-', types: ['sold'] });
    expect(sold.events.map((e) => e.stream)).toEqual(['shop-1', 'shop-2']);
    const soldBack = await c.readAll({ types: ['sold'], direction: 'backwards', maxCount: 2 });
    expect(soldBack.events.map((e) => e.stream)).toEqual(['other-1', 'shop-2']);
  });

  it('stays gap-free and ordered under concurrent appends', async () => {
    const start = (await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition;
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => c.append(`conc-${i % 5}`, [{ type: 't' }, { type: 't' }])),
    );
    const ranges = results.map((r) => [r.firstPosition, r.lastPosition]).sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
    let next = start + 1n;
    for (const [f, l] of ranges) {
      expect(f).toBe(next);
      expect(l).toBe(f! + 1n);
      next = l! + 1n;
    }
    for (let s = 0; s < 5; s++) {
      const r = await c.readStream(`conc-${s}`);
      expect(r.events.map((e) => Number(e.version))).toEqual(Array.from({ length: 16 }, (_, i) => i));
      const ps = r.events.map((e) => e.position);
      expect(ps).toEqual([...ps].sort((a, b) => (a < b ? -1 : 1)));
    }
  });
});

describe('deletion and truncation', () => {
  it('soft delete hides the events; an append brings the stream back with the next version', async () => {
    await c.append('soft', [{ type: 'a' }, { type: 'b' }, { type: 'c' }]);
    const d = await c.deleteStream('soft', { expectedVersion: 2n });
    expect(d.lastVersion).toBe(2n);
    const r = await c.readStream('soft');
    expect(r).toMatchObject({ events: [], lastVersion: 2n, deleted: true });
    const inAll = await c.readAll({ streamPrefix: 'soft' });
    expect(inAll.events).toEqual([]);
    const e = await refusal(c.append('soft', [{ type: 'x' }], { expectedVersion: 'exists' }));
    expect(e.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
    const again = await c.append('soft', [{ type: 'd' }], { expectedVersion: 'no_stream' });
    expect(again.firstVersion).toBe(3n);
    const after = await c.readStream('soft');
    expect(after.events.map((x) => [x.version, x.type])).toEqual([[3n, 'd']]);
    expect(after.deleted).toBe(false);
    // The deletion is an event of the metadata stream $$soft.
    const meta = await c.readStream('$$soft');
    expect(meta.events.map((x) => x.type)).toEqual(['$deleted']);
  });

  it('hard delete leaves a tombstone that refuses appends and reads', async () => {
    await c.append('hard', [{ type: 'a' }]);
    await c.deleteStream('hard', { hard: true });
    const e1 = await refusal(c.append('hard', [{ type: 'b' }]));
    expect(e1.code).toBe('PLX_CHRONACTA_STREAM_DELETED');
    expect(e1.details.grpcStatus).toBe(grpc.status.FAILED_PRECONDITION);
    expect((await refusal(c.readStream('hard'))).code).toBe('PLX_CHRONACTA_STREAM_DELETED');
    expect((await refusal(c.deleteStream('hard'))).code).toBe('PLX_CHRONACTA_STREAM_DELETED');
    expect((await c.readAll({ streamPrefix: 'hard' })).events).toEqual([]);
  });

  it('refuses a soft delete of a stream never written, and a delete at the wrong version', async () => {
    expect((await refusal(c.deleteStream('never'))).code).toBe('PLX_CHRONACTA_STREAM_NOT_FOUND');
    await c.append('dv', [{ type: 'a' }]);
    const e = await refusal(c.deleteStream('dv', { expectedVersion: 5n }));
    expect(e.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
    expect(e.details.actual).toBe(0n);
  });

  it('truncates by count, below a version and by age', async () => {
    await c.append(
      'trunc',
      Array.from({ length: 10 }, (_, i) => ({ type: 't', data: `${i}` })),
    );
    expect((await c.truncateStream('trunc', { maxCount: 4 })).truncateBefore).toBe(6n);
    expect((await c.readStream('trunc')).events.map((e) => Number(e.version))).toEqual([6, 7, 8, 9]);
    // Truncation only moves forwards.
    expect((await c.truncateStream('trunc', { beforeVersion: 2n })).truncateBefore).toBe(6n);
    expect((await c.truncateStream('trunc', { beforeVersion: 8n })).truncateBefore).toBe(8n);
    expect((await c.readStream('trunc', { direction: 'backwards' })).events.map((e) => Number(e.version))).toEqual([
      9, 8,
    ]);
    clock.advance(400);
    await c.append('trunc', [{ type: 't', data: 'new' }]);
    expect((await c.truncateStream('trunc', { maxAgeMs: 300 })).truncateBefore).toBe(10n);
    expect((await c.readStream('trunc')).events.map(text)).toEqual(['new']);
    const e = await refusal(c.truncateStream('trunc', {}));
    expect(e.code).toBe('PLX_CHRONACTA_BAD_INPUT');
  });
});

describe('bad input', () => {
  it('comes back as INVALID_ARGUMENT with the PlexusError code', async () => {
    const cases: [() => Promise<unknown>, string][] = [
      [() => c.append('', [{ type: 't' }]), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('$all', [{ type: 't' }]), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('s', []), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('s', [{ type: '' }]), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('s', [{ type: 't', id: 'not-a-uuid' }]), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('x'.repeat(600), [{ type: 't' }]), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('s', [{ type: 't' }], { idempotencyKey: 'k'.repeat(300) }), 'PLX_CHRONACTA_BAD_INPUT'],
      [() => c.append('s', [{ type: 't', data: new Uint8Array(17 * 1024 * 1024) }]), 'PLX_CHRONACTA_TOO_LARGE'],
      [() => c.readStream(''), 'PLX_CHRONACTA_BAD_INPUT'],
      [
        () => c.truncateStream('paged', { maxCount: 1, expectedVersion: 'no_stream' }),
        'PLX_CHRONACTA_WRONG_EXPECTED_VERSION',
      ],
    ];
    for (const [call, code] of cases) {
      const e = await refusal(call());
      expect(e.code, e.message).toBe(code);
      expect(e.details.grpcStatus).toBe(
        code === 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION'
          ? grpc.status.FAILED_PRECONDITION
          : grpc.status.INVALID_ARGUMENT,
      );
    }
  });

  it('refuses options that do not fit the wire before sending them', async () => {
    for (const call of [
      () => c.readStream('s', { maxCount: -1 }),
      () => c.readAll({ maxCount: 1.5 }),
      () => c.readAll({ fromPosition: -1n }),
      () => c.append('s', [{ type: 't' }], { expectedVersion: -2n }),
      () => c.truncateStream('s', { maxCount: -3 }),
    ]) {
      expect((await refusal(call())).code).toBe('PLX_CHRONACTA_BAD_INPUT');
    }
  });

  it('turns an unreachable server into PLX_CHRONACTA_UNAVAILABLE', async () => {
    const dead = new ChronactaClient('127.0.0.1:1', { deadlineMs: 2000 });
    const e = await refusal(dead.readAll());
    dead.close();
    expect(['PLX_CHRONACTA_UNAVAILABLE', 'PLX_CHRONACTA_TIMEOUT']).toContain(e.code);
  });
});

describe('the node', () => {
  it('reports standalone mode and keeps its cluster files in data/cluster', async () => {
    const s = await c.clusterStatus();
    expect(s.mode).toBe('standalone');
    expect(s.leaderId).toBe(s.nodeId);
    expect(s.members).toEqual([{ id: s.nodeId, address: run.server.address }]);
    const cluster = JSON.parse(await readFile(join(dataDir, 'cluster/cluster.json'), 'utf8'));
    const node = JSON.parse(await readFile(join(dataDir, 'cluster/node.json'), 'utf8'));
    expect(cluster).toMatchObject({ mode: 'standalone', clusterId: s.clusterId, leader: s.nodeId, epoch: 0 });
    expect(node).toMatchObject({ id: s.nodeId, advertiseAddress: run.server.address });
  });

  it('keeps everything across a restart, idempotency keys included', async () => {
    const all = await c.readAll({ maxCount: 10_000 });
    const idem = await c.append('idem', [{ type: 'a', data: 'x' }, { type: 'b' }], { idempotencyKey: 'k-1' });
    expect(idem.duplicate).toBe(true);
    const status = await c.clusterStatus();
    await run.stop();
    run = await serve(dataDir, { segmentBytes: 64 * 1024, clock });
    c = run.client;
    const after = await c.readAll({ maxCount: 10_000 });
    expect(after.events.map((e) => [e.position, e.stream, e.version, e.id])).toEqual(
      all.events.map((e) => [e.position, e.stream, e.version, e.id]),
    );
    expect(await c.append('idem', [{ type: 'a', data: 'x' }, { type: 'b' }], { idempotencyKey: 'k-1' })).toEqual(idem);
    expect((await refusal(c.append('hard', [{ type: 'b' }]))).code).toBe('PLX_CHRONACTA_STREAM_DELETED');
    expect((await c.readStream('soft')).events.map((e) => e.version)).toEqual([3n]);
    expect((await c.readStream('trunc')).events.map(text)).toEqual(['new']);
    const s2 = await c.clusterStatus();
    expect([s2.clusterId, s2.nodeId]).toEqual([status.clusterId, status.nodeId]);
  });

  it('refuses a cluster-mode cluster.json without Raft addresses', async () => {
    const other = await tempDir('mode');
    try {
      const r = await serve(join(other.dir, 'd'));
      await r.stop();
      const file = join(other.dir, 'd/cluster/cluster.json');
      const j = JSON.parse(await readFile(file, 'utf8'));
      await import('node:fs/promises').then((fs) => fs.writeFile(file, JSON.stringify({ ...j, mode: 'cluster' })));
      const e = await refusal(serve(join(other.dir, 'd')));
      expect(e.code).toBe('PLX_CHRONACTA_BAD_DATA_DIR');
      // A cluster-mode directory needs every member's Raft address, and `--cluster` to serve it.
      expect(e.message).toContain('raftAddress');
    } finally {
      await other.remove();
    }
  });

  it('refuses a second server on the same data directory', async () => {
    const e = await refusal(serve(dataDir));
    expect(e.code).toBe('PLX_CHRONACTA_LOCKED');
  });
});
