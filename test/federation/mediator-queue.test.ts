/**
 * The mediator's queue and routing table on the log engine: the record codec (round trip, and
 * refusal of random, cut and altered bytes, length first), the index rebuilt on reopen with
 * received markers applied, caps, and compaction of segments below the oldest queued message.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeRecord, encodeMessage, encodeReceived } from '../../ts/codec/mediator-queue.js';
import { PlexusError } from '../../ts/core/errors.js';
import { MessageQueue } from '../../ts/federation/mediator/queue.js';
import { RouteTable } from '../../ts/federation/mediator/routes.js';
import { openLog } from '../../ts/storage/file-log.js';
import { MemoryLog, MemoryLogState } from '../../ts/storage/memory-log.js';
import { expectCode } from './fixtures.js';
import { tempDir } from './mediator-fixtures.js';

const seed = process.env.PLEXUS_FUZZ_SEED === 'random' ? undefined : Number(process.env.PLEXUS_FUZZ_SEED ?? 7);
const params = { numRuns: 400, ...(seed !== undefined ? { seed } : {}) };
const te = new TextEncoder();

let tmp: { dir: string; remove: () => Promise<void> };
beforeAll(async () => {
  tmp = await tempDir('queue');
});
afterAll(async () => {
  await tmp?.remove();
});

describe('queue records', () => {
  it('round-trip (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        fc.integer({ min: 0, max: 2 ** 52 }),
        fc.string({ maxLength: 40 }),
        fc.string({ maxLength: 40 }),
        fc.uint8Array({ maxLength: 300 }),
        (id, at, owner, rcpt, body) => {
          const d = decodeRecord(encodeMessage(id, at, owner, rcpt, body), 1n);
          expect(d.kind).toBe('message');
          if (d.kind !== 'message') return;
          expect(d).toMatchObject({
            id: Buffer.from(id).toString('hex'),
            receivedAt: at,
            owner,
            recipient: rcpt,
            bodyLength: body.length,
          });
          const ids = [id, id];
          expect(decodeRecord(encodeReceived(ids), 2n)).toEqual({
            kind: 'received',
            ids: ids.map((x) => Buffer.from(x).toString('hex')),
          });
        },
      ),
      params,
    );
  });

  it('refuse random bytes, every cut and a changed length with PLX_MEDIATOR_CORRUPT only', () => {
    const valid = encodeMessage(
      new Uint8Array(16).fill(7),
      5,
      'did:peer:2.owner',
      'did:peer:2.r',
      te.encode('{"ciphertext":"x"}'),
    );
    for (let n = 0; n < valid.length; n++) {
      expect(() => decodeRecord(valid.subarray(0, n), 3n)).toThrow(PlexusError);
    }
    const longer = new Uint8Array([...valid, 0]);
    expect(() => decodeRecord(longer, 3n)).toThrow(/body length/);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (b) => {
        try {
          decodeRecord(b, 9n);
        } catch (e) {
          expect((e as PlexusError).code).toBe('PLX_MEDIATOR_CORRUPT');
        }
      }),
      params,
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: valid.length - 1 }), fc.integer({ min: 0, max: 255 }), (at, v) => {
        const b = Uint8Array.from(valid);
        b[at] = v;
        try {
          decodeRecord(b, 9n);
        } catch (e) {
          expect((e as PlexusError).code).toBe('PLX_MEDIATOR_CORRUPT');
        }
      }),
      params,
    );
  });
});

describe('MessageQueue', () => {
  it('rebuilds its index on reopen, with received messages gone for good', async () => {
    const state = new MemoryLogState();
    let q = await MessageQueue.open(new MemoryLog(state));
    const a = await q.enqueue('did:ex:bob', 'did:ex:bob', te.encode('one'));
    const b = await q.enqueue('did:ex:bob', 'did:ex:bob#k', te.encode('two'));
    await q.enqueue('did:ex:carol', 'did:ex:carol', te.encode('three'));
    expect(await q.received('did:ex:carol', [a.id])).toEqual([]);
    expect(await q.received('did:ex:bob', [a.id, a.id, 'zz'])).toEqual([a.id]);
    await q.close();
    q = await MessageQueue.open(new MemoryLog(state));
    expect(q.size).toBe(2);
    expect(q.list('did:ex:bob').map((m) => m.id)).toEqual([b.id]);
    expect(q.list('did:ex:bob', 'did:ex:bob')).toEqual([]);
    expect(new TextDecoder().decode(await q.body(q.get(b.id)!))).toBe('two');
    expect(q.stats('did:ex:bob')).toMatchObject({ count: 1, bytes: 3 });
    await q.close();
  });

  it('refuses past its caps with PLX_MEDIATOR_QUEUE_FULL and PLX_MEDIATOR_TOO_LARGE', async () => {
    const q = await MessageQueue.open(new MemoryLog(), { maxMessages: 2, maxBytes: 10, maxMessageBytes: 8 });
    await q.enqueue('o', 'o', new Uint8Array(4));
    await expectCode(q.enqueue('o', 'o', new Uint8Array(9)), 'PLX_MEDIATOR_TOO_LARGE');
    await expectCode(q.enqueue('o', 'o', new Uint8Array(7)), 'PLX_MEDIATOR_QUEUE_FULL');
    await q.enqueue('o', 'o', new Uint8Array(6));
    await expectCode(q.enqueue('o', 'o', new Uint8Array(0)), 'PLX_MEDIATOR_QUEUE_FULL');
    await q.enqueue('other', 'other', new Uint8Array(8));
    await q.close();
  });

  it('compacts whole segments below the oldest queued message', async () => {
    const dir = join(tmp.dir, 'compact');
    const log = await openLog(dir, { segmentBytes: 1024, fsync: 'never' });
    const q = await MessageQueue.open(log);
    const ms = [];
    for (let i = 0; i < 30; i++) ms.push(await q.enqueue('did:ex:bob', 'did:ex:bob', new Uint8Array(200).fill(i)));
    const before = (await readdir(dir)).filter((f) => f.endsWith('.seg')).length;
    expect(before).toBeGreaterThan(5);
    await q.received(
      'did:ex:bob',
      ms.slice(0, 25).map((m) => m.id),
    );
    await q.close();
    const after = (await readdir(dir)).filter((f) => f.endsWith('.seg')).length;
    expect(after).toBeLessThan(before);
    const q2 = await MessageQueue.open(await openLog(dir, { segmentBytes: 1024, fsync: 'never' }));
    expect(q2.list('did:ex:bob').map((m) => m.id)).toEqual(ms.slice(25).map((m) => m.id));
    expect((await q2.body(q2.get(ms[29]!.id)!))[0]).toBe(29);
    await q2.close();
  });
});

describe('RouteTable', () => {
  it('keeps grants and keys across reopen, one owner per key', async () => {
    const state = new MemoryLogState();
    let t = await RouteTable.open(new MemoryLog(state), { maxKeysPerClient: 2 });
    expect(await t.add('did:ex:a', 'did:ex:a')).toBe('client_error');
    await t.grant('did:ex:a');
    await t.grant('did:ex:b');
    expect(await t.add('did:ex:a', 'did:ex:a')).toBe('success');
    expect(await t.add('did:ex:a', 'did:ex:a#k2')).toBe('success');
    expect(await t.add('did:ex:a', 'did:ex:a#k3')).toBe('client_error');
    expect(await t.add('did:ex:b', 'did:ex:a')).toBe('client_error');
    expect(await t.remove('did:ex:a', 'did:ex:a#k2')).toBe('success');
    await t.close();
    t = await RouteTable.open(new MemoryLog(state));
    expect(t.isGranted('did:ex:b')).toBe(true);
    expect(t.keys('did:ex:a')).toEqual(['did:ex:a']);
    expect(t.route('did:ex:a')).toEqual({ client: 'did:ex:a', recipient: 'did:ex:a' });
    expect(t.route('did:ex:a#key-2')).toEqual({ client: 'did:ex:a', recipient: 'did:ex:a' });
    expect(t.route('did:ex:a#k2')).toEqual({ client: 'did:ex:a', recipient: 'did:ex:a' });
    expect(t.route('did:ex:r2')).toBeUndefined();
    await t.close();
  });
});
