/**
 * Raft snapshots of the replicated log and catch-up below them (docs/chronacta-ha.md,
 * "Snapshots and catch-up"): members compact their Raft log every few entries; a member that
 * was down, a new member, a member whose transfer is cut, and a member killed (SIGKILL, a real
 * process) in the middle of an install all end with the same records as the others. Also the
 * catch-up stream's decoder (length first, CRC-32C, fuzzed, split at every offset) and the
 * snapshot descriptor's checks.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { HaMember } from '../../ts/chronacta/cluster-config.js';
import { openClusterLog, type ReplicatedLog, type ReplicatedLogOptions } from '../../ts/chronacta/cluster-log.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { crc32c } from '../../ts/core/index.js';
import { RaftTcpTransport } from '../../ts/raft-io/tcp-transport.js';
import type { LogRecord } from '../../ts/storage/types.js';
import { FaultProxy } from '../helpers/fault-proxy.js';
import { ROOT } from '../helpers/paths.js';
import { type Started, startNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import {
  CATCH_UP_HEADER_BYTES,
  CATCH_UP_MAX_BODY,
  CatchUpStream,
  decodeCatchUp,
  decodeDescriptor,
  encodeDescriptor,
  encodeFetch,
  encodeHolding,
  encodeQuery,
  encodeRecords,
  encodeRefused,
  queryHolding,
} from './ha-codes.js';
import { type Cluster, quiet, snapshot, startCluster, TICK_MS, text } from './helpers.js';

let cluster: Cluster | undefined;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await cluster?.close();
  cluster = undefined;
});

/** Compact often: a snapshot once 40 entries were applied past the last one, 8 kept below. */
const SNAP: Partial<ReplicatedLogOptions> = { snapshotEvery: 40, snapshotRetain: 8 };

function idOf(c: Cluster, log: ReplicatedLog): number {
  return [...c.logs].find(([, l]) => l === log)?.[0] as number;
}

/** `n` appends of two records, one Raft entry each (awaited in turn: concurrent ones would share entries). */
async function appendMany(log: ReplicatedLog, n: number, tag: string): Promise<void> {
  for (let i = 0; i < n; i++) await log.append([text(`${tag}${i}`), text(`${tag}${i}+`)]);
}

async function sameEverywhere(logs: ReplicatedLog[]): Promise<string[]> {
  const top = logs[0] as ReplicatedLog;
  await until(() => logs.every((l) => l.last === top.last), { timeoutMs: 15_000, what: 'convergence' });
  const snaps = await Promise.all(logs.map((l) => snapshot(l)));
  for (const s of snaps) expect(s).toEqual(snaps[0]);
  return snaps[0] as string[];
}

/** Options of a member that joins a running cluster, dialling the others at `dial`. */
function joiner(
  dir: string,
  existing: readonly HaMember[],
  dial: Map<number, string>,
  extra = {},
): ReplicatedLogOptions {
  return {
    id: 4,
    dir,
    join: true,
    members: [...existing, { id: 4, raftAddress: '127.0.0.1:0', advertise: '127.0.0.1:9004' }],
    dial,
    listen: { host: '127.0.0.1', port: 0 },
    tickMs: TICK_MS,
    timeoutMs: 2000,
    localFsync: 'never',
    segmentBytes: 64 * 1024,
    logger: quiet,
    ...SNAP,
    ...extra,
  };
}

describe('replicated log: Raft snapshots and catch-up', () => {
  it('a member that was down while the others compacted their Raft log catches up via snapshot', async () => {
    const c = (cluster = await startCluster(3, SNAP));
    let leader = await c.waitLeader();
    await appendMany(leader, 20, 'a');
    const down = c.ids.find((id) => id !== idOf(c, leader)) as number;
    await until(() => c.logs.get(down)?.last === leader.last, {
      timeoutMs: 5000,
      what: 'the follower to have the first appends',
    });
    const before = c.logs.get(down)?.status().applied as number;
    await c.stop(down);
    await appendMany(leader, 150, 'b');
    const up = c.ids.filter((id) => id !== down).map((id) => c.logs.get(id) as ReplicatedLog);
    await until(() => up.every((l) => l.status().snapshotsTaken >= 2), {
      timeoutMs: 10_000,
      what: 'the others to compact',
    });
    // The entries the stopped member lacks are gone from every Raft log: only a snapshot helps it.
    for (const l of up) expect(l.status().snapshotIndex).toBeGreaterThan(before + 1);
    const back = await c.restart(down);
    leader = await c.waitLeader();
    await leader.append([text('after')]);
    const all = await sameEverywhere(c.ids.map((id) => c.logs.get(id) as ReplicatedLog));
    expect(all).toHaveLength(2 * 170 + 1);
    expect(all[all.length - 1]?.split('|')[3]).toBe('after');
    const st = back.status();
    expect(st.snapshotsInstalled).toBeGreaterThanOrEqual(1);
    expect(st.recordsCaughtUp).toBeGreaterThan(0);
    expect(st.recordsCaughtUp).toBeLessThanOrEqual(2 * 150 + 1);
    expect(up.reduce((n, l) => n + l.status().recordsServed, 0)).toBe(st.recordsCaughtUp);
    expect(st.failure).toBeUndefined();

    // Every member restarts from its own snapshot (not from index 1) and keeps its records.
    for (const id of c.ids) {
      await c.stop(id);
      const again = await c.restart(id);
      expect(again.status().applied).toBeGreaterThan(1);
    }
    leader = await c.waitLeader();
    await leader.append([text('after restarts')]);
    const again = await sameEverywhere(c.ids.map((id) => c.logs.get(id) as ReplicatedLog));
    expect(again.slice(0, all.length)).toEqual(all);
  });

  it('a member added after compaction gets every record', async () => {
    const c = (cluster = await startCluster(3, SNAP));
    const leader = await c.waitLeader();
    await appendMany(leader, 120, 'x');
    await until(() => leader.status().snapshotsTaken >= 2, { timeoutMs: 5000, what: 'compaction' });
    expect(leader.status().snapshotIndex).toBeGreaterThan(60);
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-snap-join-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const fourth = await openClusterLog(
      joiner(dir, leader.status().members, new Map(c.ids.map((id) => [id, `127.0.0.1:${c.ports.get(id)}`]))),
    );
    cleanups.push(() => fourth.close());
    await leader.addMember({ id: 4, raftAddress: `127.0.0.1:${fourth.raftPort}`, advertise: '127.0.0.1:9004' });
    await leader.append([text('joined')]);
    const all = await sameEverywhere([leader, fourth, ...c.ids.map((id) => c.logs.get(id) as ReplicatedLog)]);
    expect(all).toHaveLength(241);
    expect(fourth.status().snapshotsInstalled).toBe(1);
    // The records below the snapshot came over the catch-up stream, the rest as Raft entries.
    expect(fourth.status().snapshotPosition).toBeGreaterThan(100n);
    expect(fourth.status().recordsCaughtUp).toBe(Number(fourth.status().snapshotPosition));
    expect(leader.status().voters).toEqual([1, 2, 3, 4]);
  });

  it('a transfer cut halfway resumes where it stopped, without fetching a record twice', async () => {
    const c = (cluster = await startCluster(3, SNAP));
    const leader = await c.waitLeader();
    await appendMany(leader, 150, 'y');
    await until(() => c.ids.every((id) => (c.logs.get(id)?.status().snapshotsTaken ?? 0) >= 2), {
      timeoutMs: 5000,
      what: 'compaction',
    });
    // The new member reaches every member through a slow proxy, in small chunks.
    const proxies = new Map<number, FaultProxy>();
    for (const id of c.ids) {
      const p = await FaultProxy.start({ port: c.ports.get(id) as number });
      p.delay(15);
      proxies.set(id, p);
      cleanups.push(() => p.close());
    }
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-snap-cut-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const fourth = await openClusterLog(
      joiner(dir, leader.status().members, new Map([...proxies].map(([id, p]) => [id, p.address])), {
        catchUpChunkBytes: 64,
      }),
    );
    cleanups.push(() => fourth.close());
    await leader.addMember(
      { id: 4, raftAddress: `127.0.0.1:${fourth.raftPort}`, advertise: '127.0.0.1:9004' },
      { voter: false },
    );
    await until(() => fourth.status().recordsCaughtUp >= 20, { timeoutMs: 10_000, what: 'the transfer to start' });
    const target = fourth.status().catchUpTarget as bigint;
    expect(target).toBeGreaterThan(150n);
    // Cut every connection the new member has, twice, while the transfer runs.
    for (const p of proxies.values()) p.cut();
    const cutAt = fourth.last;
    expect(cutAt).toBeLessThan(target - 40n);
    await until(() => fourth.last > cutAt + 20n, { timeoutMs: 10_000, what: 'the transfer to resume' });
    for (const p of proxies.values()) p.cut();
    for (const p of proxies.values()) p.heal();
    await until(() => fourth.status().catchUpTarget === undefined, {
      timeoutMs: 20_000,
      what: 'the install to finish',
    });
    await leader.append([text('later')]);
    const all = await sameEverywhere([leader, fourth]);
    expect(all).toHaveLength(301);
    const resets = [...proxies.values()].reduce((n, p) => n + p.stats.resets, 0);
    expect(resets).toBeGreaterThanOrEqual(2);
    // Resumed, not restarted: each record below the snapshot crossed once.
    expect(fourth.status().recordsCaughtUp).toBe(Number(target));
    expect(fourth.status().snapshotsInstalled).toBe(1);
  });

  it('a member closed in the middle of an install resumes it when it opens again', async () => {
    const c = (cluster = await startCluster(3, SNAP));
    const leader = await c.waitLeader();
    await appendMany(leader, 150, 'z');
    await until(() => leader.status().snapshotsTaken >= 2, { timeoutMs: 5000, what: 'compaction' });
    const proxy = await FaultProxy.start({ port: c.ports.get(idOf(c, leader)) as number });
    cleanups.push(() => proxy.close());
    proxy.delay(15);
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-snap-close-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const lid = idOf(c, leader);
    const opts = joiner(dir, leader.status().members, new Map([[lid, proxy.address]]), { catchUpChunkBytes: 64 });
    let fourth = await openClusterLog(opts);
    await leader.addMember(
      { id: 4, raftAddress: `127.0.0.1:${fourth.raftPort}`, advertise: '127.0.0.1:9004' },
      { voter: false },
    );
    await until(() => fourth.status().recordsCaughtUp >= 10, { timeoutMs: 10_000, what: 'the transfer to start' });
    await fourth.close();
    proxy.heal();
    fourth = await openClusterLog({ ...opts, listen: { host: '127.0.0.1', port: 0 } });
    cleanups.push(() => fourth.close());
    expect(fourth.last).toBeGreaterThan(0n);
    expect(fourth.last).toBeLessThan(300n);
    leader.setDialAddress(4, `127.0.0.1:${fourth.raftPort}`);
    expect(fourth.last).toBeLessThan(fourth.status().snapshotPosition);
    await until(() => fourth.last >= 300n, { timeoutMs: 15_000, what: 'the resumed install' });
    await leader.append([text('end')]);
    const all = await sameEverywhere([leader, fourth]);
    expect(all).toHaveLength(301);
  });

  const DIST = resolve(ROOT, 'dist/chronacta/cluster-log.js');
  it.skipIf(!existsSync(DIST))(
    'a member SIGKILLed during a snapshot install is consistent on restart and completes it',
    async () => {
      const c = (cluster = await startCluster(3, SNAP));
      const leader = await c.waitLeader();
      await appendMany(leader, 150, 'k');
      await until(() => leader.status().snapshotsTaken >= 2, { timeoutMs: 5000, what: 'compaction' });
      const proxy = await FaultProxy.start({ port: c.ports.get(idOf(c, leader)) as number });
      cleanups.push(() => proxy.close());
      proxy.delay(15);
      const lid = idOf(c, leader);
      const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-snap-kill-'));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      const opts = joiner(dir, leader.status().members, new Map([[lid, proxy.address]]), { catchUpChunkBytes: 64 });
      const child = spawnMember(opts);
      cleanups.push(async () => {
        await child.started.stop('SIGKILL');
      });
      const port = await child.port;
      await leader.addMember(
        { id: 4, raftAddress: `127.0.0.1:${port}`, advertise: '127.0.0.1:9004' },
        { voter: false },
      );
      await until(() => child.caughtUp() >= 10, { timeoutMs: 10_000, what: 'the transfer to start in the child' });
      await child.started.stop('SIGKILL');
      expect(child.started.child.signalCode).toBe('SIGKILL');
      proxy.heal();
      const fourth = await openClusterLog({ ...opts, dial: new Map([[lid, proxy.address]]) });
      cleanups.push(() => fourth.close());
      // The Raft log holds the snapshot; the local log holds a prefix of the records below it.
      expect(fourth.status().snapshotIndex).toBeGreaterThan(60);
      expect(fourth.last).toBeLessThan(fourth.status().snapshotPosition);
      leader.setDialAddress(4, `127.0.0.1:${fourth.raftPort}`);
      await until(() => fourth.last >= 300n, { timeoutMs: 15_000, what: 'the install to complete after the restart' });
      await leader.append([text('end')]);
      const all = await sameEverywhere([leader, fourth]);
      expect(all).toHaveLength(301);
      expect(fourth.status().failure).toBeUndefined();
    },
  );
});

const CATCH_UP_MEMBER = resolve(ROOT, 'test/chronacta-ha/fixtures/catch-up-member.mjs');

/** Runs a member in a child process (the compiled dist/); it prints its port, then its catch-up progress. */
function spawnMember(opts: ReplicatedLogOptions): {
  started: Started;
  port: Promise<number>;
  caughtUp(): number;
} {
  const { logger: _l, dial, ...rest } = opts;
  const started = startNode(CATCH_UP_MEMBER, [JSON.stringify({ ...rest, dial: [...(dial ?? [])] })]);
  let caught = 0;
  createInterface({ input: started.child.stdout as Readable }).on('line', (line) => {
    const v = JSON.parse(line) as { caughtUp?: number };
    if (v.caughtUp !== undefined) caught = v.caughtUp;
  });
  const port = started
    .line((l) => l.startsWith('{"port":'), { what: 'the member process to print its Raft port' })
    .then((l) => (JSON.parse(l) as { port: number }).port);
  return { started, port, caughtUp: () => caught };
}

describe('side streams on the Raft port', () => {
  it('refuses side streams where none are served, and closes a catch-up stream that sends garbage', async () => {
    const plain = await RaftTcpTransport.start({ id: 1, onMessage: () => undefined });
    cleanups.push(() => plain.close());
    const dialer = await RaftTcpTransport.start({ id: 2, onMessage: () => undefined });
    cleanups.push(() => dialer.close());
    dialer.setPeer(1, plain.address);
    const s1 = await dialer.openStream(1, 2000);
    await new Promise((r) => s1.once('close', r));
    expect(plain.stats.refused).toBe(1);
    const unknown = await dialer.openStream(9, 100).catch((e) => e);
    expect(isPlexusError(unknown, 'PLX_RAFT_TRANSPORT_UNREACHABLE')).toBe(true);

    // A member serves catch-up streams; garbage on one closes it and the member goes on.
    const c = (cluster = await startCluster(3, SNAP));
    const leader = await c.waitLeader();
    await leader.append([text('one')]);
    dialer.setPeer(idOf(c, leader), `127.0.0.1:${c.ports.get(idOf(c, leader))}`);
    const s2 = await dialer.openStream(idOf(c, leader), 2000);
    const closed = new Promise((r) => s2.once('close', r));
    s2.write(Buffer.from('PXCU but not really a frame at all'));
    await closed;
    // A good request on a fresh stream is answered.
    const s3 = await dialer.openStream(idOf(c, leader), 2000);
    cleanups.push(() => {
      s3.destroy();
    });
    const got = new Promise<Buffer>((r) => s3.once('data', r));
    s3.write(encodeFetch(1, 1, 1024));
    const frames = new CatchUpStream().push(await got);
    expect(frames[0]).toMatchObject({ type: 'records', sourceLast: 1 });
    await leader.append([text('two')]);
    expect(leader.last).toBe(2n);
  });

  it('large appends: a snapshot by bytes before snapshotEvery appends, keeping at most snapshotRetainBytes', async () => {
    // 4 KiB appends: 1,000 appends would be 4 MiB; the byte limits decide long before.
    const c = (cluster = await startCluster(3, {
      snapshotEvery: 1000,
      snapshotRetain: 500,
      snapshotEveryBytes: 64 * 1024,
      snapshotRetainBytes: 16 * 1024,
      localWritebackMs: 20,
    }));
    const leader = await c.waitLeader();
    const big = new Uint8Array(4096).fill(7);
    let n = 0;
    while (leader.status().snapshotsTaken === 0 && n < 200) {
      await leader.append([big]);
      n++;
    }
    await until(() => leader.status().snapshotsTaken >= 1, { timeoutMs: 5000, what: 'a snapshot' });
    // 64 KiB of entries is 16 of these appends: far fewer than snapshotEvery (1,000).
    expect(n).toBeLessThan(40);
    const st = leader.status();
    // At most 16 KiB (3 appends) kept below the index the snapshot was computed at, not
    // snapshotRetain (500, more than all there are); a few appends landed while it was taken.
    expect(st.applied - st.snapshotIndex).toBeLessThanOrEqual(12);
    expect(st.snapshotIndex).toBeGreaterThan(0);
    // The others compact the same way, and every member still holds every record.
    await until(() => c.ids.every((id) => (c.logs.get(id)?.status().snapshotsTaken ?? 0) >= 1), {
      timeoutMs: 5000,
      what: 'compaction',
    });
    await leader.append([text('after')]);
    const all = await sameEverywhere(c.ids.map((id) => c.logs.get(id) as ReplicatedLog));
    expect(all).toHaveLength(n + 1);
  });

  it('checks the snapshot options', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-snap-opts-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const base = {
      id: 1,
      dir,
      members: [{ id: 1, raftAddress: '127.0.0.1:0', advertise: '127.0.0.1:1' }],
      logger: quiet,
    };
    for (const bad of [
      { snapshotEvery: -1 },
      { snapshotRetain: 50_001 },
      { catchUpChunkBytes: 0 },
      { snapshotRetainBytes: -1 },
      { snapshotEveryBytes: 1.5 },
      { localWritebackMs: -5 },
    ]) {
      const e = await openClusterLog({ ...base, ...bad }).catch((x) => x);
      expect(isPlexusError(e, 'PLX_CHRONACTA_HA_BAD_CONFIG')).toBe(true);
    }
  });
});

describe('catch-up stream frames', () => {
  const rec = (p: number, s: string, epoch = 3n): LogRecord => ({
    position: BigInt(p),
    batchId: new Uint8Array(16).fill(p & 0xff),
    epoch,
    payload: text(s),
  });

  it('round-trips FETCH, RECORDS and REFUSED, fed whole and split at every offset', () => {
    const frames = [
      encodeFetch(7, 300, 65_536),
      encodeRecords(1n, 300n, [rec(7, 'seven'), rec(8, ''), rec(9, 'nine')]),
      encodeRefused(100n, 300n, 1, 'compacted below 100'),
    ];
    const all = Buffer.concat(frames);
    for (let cut = 0; cut <= all.length; cut++) {
      const s = new CatchUpStream();
      const got = [...s.push(all.subarray(0, cut)), ...s.push(all.subarray(cut))];
      expect(got).toHaveLength(3);
      expect(got[0]).toEqual({ type: 'fetch', from: 7, to: 300, maxBytes: 65_536 });
      const r = got[1];
      if (r?.type !== 'records') throw new Error(`expected RECORDS, got ${r?.type}`);
      expect(r.sourceLast).toBe(300);
      expect(r.records.map((x) => [x.position, Buffer.from(x.payload).toString(), x.epoch, x.batchId[0]])).toEqual([
        [7n, 'seven', 3n, 7],
        [8n, '', 3n, 8],
        [9n, 'nine', 3n, 9],
      ]);
      expect(got[2]).toMatchObject({ type: 'refused', sourceFirst: 100, reason: 1, text: 'compacted below 100' });
      expect(s.buffered).toBe(0);
    }
    // One byte at a time.
    const s = new CatchUpStream();
    let n = 0;
    for (const b of all) n += s.push(Uint8Array.of(b)).length;
    expect(n).toBe(3);
  });

  it('refuses a changed byte, a bad header and an oversize length before reading the body', () => {
    const f = encodeRecords(1n, 9n, [rec(1, 'abc')]);
    for (let i = 0; i < f.length; i++) {
      const bad = f.slice();
      bad[i] = (bad[i] as number) ^ 0x01;
      let outcome: string;
      try {
        const d = decodeCatchUp(bad);
        outcome = d.kind;
      } catch (e) {
        expect(isPlexusError(e, 'PLX_CHRONACTA_HA_BAD_FRAME')).toBe(true);
        outcome = 'refused';
      }
      // A flipped length bit can only ask for more bytes; anything else is refused.
      expect(outcome === 'refused' || (i >= 8 && i < 12 && outcome === 'incomplete')).toBe(true);
    }
    const huge = new Uint8Array(CATCH_UP_HEADER_BYTES);
    const dv = new DataView(huge.buffer);
    dv.setUint32(0, 0x55435850, true);
    dv.setUint8(4, 1);
    dv.setUint8(5, 2);
    dv.setUint32(8, CATCH_UP_MAX_BODY + 1, true);
    expect(() => decodeCatchUp(huge)).toThrow(/above/);
    expect(() => new CatchUpStream().push(huge)).toThrow(/above/);
  });

  it('round-trips QUERY and HOLDING, and refuses a HOLDING whose durable position is past its last', () => {
    const all = Buffer.concat([encodeQuery(), encodeHolding(40n, 900n, 850n), encodeHolding(0n, 0n, 0n)]);
    for (let cut = 0; cut <= all.length; cut++) {
      const s = new CatchUpStream();
      const got = [...s.push(all.subarray(0, cut)), ...s.push(all.subarray(cut))];
      expect(got).toEqual([
        { type: 'query' },
        { type: 'holding', first: 40, last: 900, durable: 850 },
        { type: 'holding', first: 0, last: 0, durable: 0 },
      ]);
    }
    expect(() => encodeHolding(1n, 5n, 6n)).toThrow(/above the last/);
    // Written by hand: durable 6 past last 5, then a QUERY with a body, then a short HOLDING.
    const forged = (type: number, body: Uint8Array) => {
      const f = new Uint8Array(CATCH_UP_HEADER_BYTES + body.length);
      const dv = new DataView(f.buffer);
      dv.setUint32(0, 0x55435850, true);
      dv.setUint8(4, 1);
      dv.setUint8(5, type);
      dv.setUint32(8, body.length, true);
      f.set(body, CATCH_UP_HEADER_BYTES);
      dv.setUint32(12, crc32c(body, crc32c(f.subarray(0, 12))), true);
      return f;
    };
    const body = new Uint8Array(24);
    const bv = new DataView(body.buffer);
    bv.setBigUint64(0, 1n, true);
    bv.setBigUint64(8, 5n, true);
    bv.setBigUint64(16, 6n, true);
    expect(() => decodeCatchUp(forged(5, body))).toThrow(/durable position 6 is above the last one 5/);
    expect(() => decodeCatchUp(forged(4, Uint8Array.of(0)))).toThrow(/QUERY body is empty/);
    expect(() => decodeCatchUp(forged(5, body.subarray(0, 16)))).toThrow(/HOLDING body is 24 bytes/);
    expect(() => decodeCatchUp(forged(6, new Uint8Array(0)))).toThrow(/frame type 6 is unknown/);
  });

  it('a member answers QUERY with its local log and what of it is on disk', async () => {
    const c = (cluster = await startCluster(3, { localWritebackMs: 3_600_000, snapshotEvery: 0 }));
    const leader = await c.waitLeader();
    for (let i = 0; i < 10; i++) await leader.append([text(`h${i}`)]);
    const id = c.ids.find((x) => c.logs.get(x) !== leader) as number;
    await until(() => c.logs.get(id)?.last === 10n, { timeoutMs: 5000, what: 'replication' });
    const t = await RaftTcpTransport.start({ id: 9, host: '127.0.0.1', port: 0, onMessage: () => undefined });
    cleanups.push(() => t.close());
    t.setPeer(id, `127.0.0.1:${c.ports.get(id)}`);
    const sock = await t.openStream(id, 2000);
    cleanups.push(() => {
      sock.destroy();
    });
    // Nothing written back yet since the member opened with an empty log.
    expect(await queryHolding(sock, 2000)).toEqual({ first: 1, last: 10, durable: 0 });
  });

  it('never throws anything but PLX_CHRONACTA_HA_BAD_FRAME on arbitrary bytes (fuzzed)', () => {
    const valid = encodeRecords(1n, 5n, [rec(1, 'a'), rec(2, 'bb')]);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 300 }),
          fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 1, max: 255 })).map(([at, x]) => {
            const b = valid.slice();
            b[at] = (b[at] as number) ^ x;
            return b;
          }),
        ),
        fc.nat(300),
        (bytes, cut) => {
          const s = new CatchUpStream();
          try {
            s.push(bytes.subarray(0, Math.min(cut, bytes.length)));
            s.push(bytes.subarray(Math.min(cut, bytes.length)));
          } catch (e) {
            if (!isPlexusError(e, 'PLX_CHRONACTA_HA_BAD_FRAME')) throw e;
          }
          expect(s.buffered).toBeLessThanOrEqual(bytes.length);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('checks a snapshot descriptor', () => {
    const d = {
      index: 90,
      term: 2,
      lastPosition: 170,
      lastBatchId: 'ab'.repeat(16),
      lastEpoch: '2',
      members: [{ id: 1, raftAddress: '127.0.0.1:1', advertise: '127.0.0.1:2' }],
    };
    expect(decodeDescriptor(encodeDescriptor(d))).toEqual(d);
    expect(decodeDescriptor(new Uint8Array(0))).toBeUndefined();
    const refused = (b: Uint8Array) => {
      try {
        decodeDescriptor(b);
        return 'accepted';
      } catch (e) {
        return isPlexusError(e, 'PLX_CHRONACTA_HA_DIVERGED') ? 'refused' : String(e);
      }
    };
    expect(refused(text('{"v":1}'))).toBe('refused');
    const wrong = encodeDescriptor({ ...d, lastBatchId: 'zz' });
    expect(refused(wrong)).toBe('refused');
    expect(refused(encodeDescriptor({ ...d, lastPosition: -1 }))).toBe('refused');
    expect(refused(new Uint8Array(70_000))).toBe('refused');
  });
});
