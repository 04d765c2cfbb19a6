/**
 * The compliance suite of the RankTransport seam (ts/sperli/transport.ts). Every
 * implementation runs it with a factory that opens a whole job of `size` ranks and a
 * teardown that closes whatever the test left open.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { FrameType, MAX_PAYLOAD } from '../../ts/codec/sperli-frame.js';
import { PlexusError } from '../../ts/core/errors.js';
import type { RankTransport, TransportFrame } from '../../ts/sperli/transport.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

export interface TransportHarness {
  /** One transport per rank, rank `i` at index `i`, every peer connected. */
  readonly transports: readonly RankTransport[];
  /** Closes everything the job opened. */
  teardown(): Promise<void>;
}

export type TransportFactory = (size: number) => Promise<TransportHarness>;

/**
 * For a transport without the optional `framesWaiting`, `closedLinks` and `lossesPending`
 * nothing shows "frames arrived and wait for a receiver" or "a link that closed after a BYE
 * was handled, and no loss is coming": those tests give it this long first. A slow machine
 * makes such a check weaker, never false.
 */
const graceFor = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Received {
  readonly peer: number;
  readonly frame: TransportFrame;
}

/** Records what a transport delivers and how it fails. */
function watch(t: RankTransport) {
  const frames: Received[] = [];
  const failures: PlexusError[] = [];
  let framesAtFailure = -1;
  t.onFrame((peer, frame) => frames.push({ peer, frame }));
  t.onFailure((e) => {
    if (framesAtFailure < 0) framesAtFailure = frames.length;
    failures.push(e);
  });
  return {
    frames,
    failures,
    get framesAtFailure() {
      return framesAtFailure;
    },
    from: (peer: number) => frames.filter((r) => r.peer === peer).map((r) => r.frame),
  };
}

/** Deterministic bytes of message `i` from `src` to `dst`. */
function body(src: number, dst: number, i: number, n: number): Uint8Array {
  const b = new Uint8Array(n);
  let x = (src * 7919 + dst * 104_729 + i * 1_299_709) >>> 0;
  for (let k = 0; k < n; k++) {
    x = (Math.imul(x, 1_103_515_245) + 12_345) >>> 0;
    b[k] = x >>> 24;
  }
  return b;
}

/** Sizes of the messages of the ordering test: empty, tiny, odd, 64 KiB, 1 MiB. */
function sizeOf(i: number): number {
  if (i === 7) return 1 << 20;
  if (i % 10 === 3) return 65_536 + i;
  return (i * 37) % 300;
}

export function transportSuite(name: string, factory: TransportFactory): void {
  describe(`${name}: RankTransport compliance`, () => {
    let harness: TransportHarness | undefined;
    const job = async (size: number): Promise<readonly RankTransport[]> => {
      harness = await factory(size);
      return harness.transports;
    };
    afterEach(async () => {
      const h = harness;
      harness = undefined;
      await h?.teardown();
    });

    it('knows its rank and size and starts without a failure', async () => {
      const ts = await job(3);
      expect(ts.map((t) => [t.rank, t.size])).toEqual([
        [0, 3],
        [1, 3],
        [2, 3],
      ]);
      for (const t of ts) expect(t.failure).toBeUndefined();
    });

    for (const size of [2, 3, 4]) {
      it(`delivers each peer's frames in the order sent, every rank sending to every other at once (${size} ranks)`, async () => {
        const ts = await job(size);
        const seen = ts.map(watch);
        const count = 40;
        await Promise.all(
          ts.flatMap((t) =>
            ts
              .filter((u) => u.rank !== t.rank)
              .map(async (u) => {
                for (let i = 0; i < count; i++) {
                  await t.send(u.rank, FrameType.DATA, i, body(t.rank, u.rank, i, sizeOf(i)));
                }
              }),
          ),
        );
        await until(() => seen.every((s) => s.frames.length === count * (size - 1)), 'every frame');
        for (const t of ts) {
          for (const u of ts) {
            if (u.rank === t.rank) continue;
            const got = seen[u.rank]?.from(t.rank) ?? [];
            expect(got.map((f) => f.tag)).toEqual(Array.from({ length: count }, (_, i) => i));
            got.forEach((f, i) => {
              expect(f.type).toBe(FrameType.DATA);
              expect(f.epoch).toBe(0n);
              expect(Buffer.from(f.payload).equals(Buffer.from(body(t.rank, u.rank, i, sizeOf(i))))).toBe(true);
            });
          }
        }
        for (const s of seen) expect(s.failures).toEqual([]);
      });
    }

    it('carries maximum frames (16 MiB) both ways at once, in order with small ones', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      const sa = watch(a);
      const sb = watch(b);
      const big = (src: number) => body(src, 1 - src, 99, MAX_PAYLOAD);
      const run = async (t: RankTransport) => {
        const peer = 1 - t.rank;
        await t.send(peer, FrameType.DATA, 1, new Uint8Array([1]));
        await t.send(peer, FrameType.DATA, 2, big(t.rank));
        await t.send(peer, FrameType.DATA, 3, new Uint8Array(0));
      };
      await Promise.all([run(a), run(b)]);
      await until(() => sa.frames.length === 3 && sb.frames.length === 3, 'the frames');
      for (const [s, src] of [
        [sb, 0],
        [sa, 1],
      ] as const) {
        expect(s.frames.map((r) => [r.peer, r.frame.tag, r.frame.payload.length])).toEqual([
          [src, 1, 1],
          [src, 2, MAX_PAYLOAD],
          [src, 3, 0],
        ]);
        expect(Buffer.from(s.frames[1]?.frame.payload as Uint8Array).equals(Buffer.from(big(src)))).toBe(true);
      }
    });

    it('delivers COLLECTIVE and checkpoint frames with tag 0 and their epoch', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      watch(a);
      const sb = watch(b);
      const coll = Uint8Array.from({ length: 20 }, (_, i) => i);
      await a.send(1, FrameType.COLLECTIVE, 0, coll);
      await a.send(1, FrameType.CKPT_BEGIN, 0, new Uint8Array(8), 7n);
      await a.send(1, FrameType.CKPT_ACK, 0, new Uint8Array(32).fill(5), 0xffff_ffff_ffff_ffffn);
      await a.send(1, FrameType.CKPT_COMMIT, 0, new Uint8Array(0), 3n);
      await a.send(1, FrameType.RESUME, 0, new Uint8Array(4), 0n);
      await a.send(1, FrameType.DATA, 0x7fff_ffff, new Uint8Array(0));
      await until(() => sb.frames.length === 6, 'six frames');
      expect(sb.frames.map((r) => [r.peer, r.frame.type, r.frame.tag, r.frame.epoch, r.frame.payload.length])).toEqual([
        [0, FrameType.COLLECTIVE, 0, 0n, 20],
        [0, FrameType.CKPT_BEGIN, 0, 7n, 8],
        [0, FrameType.CKPT_ACK, 0, 0xffff_ffff_ffff_ffffn, 32],
        [0, FrameType.CKPT_COMMIT, 0, 3n, 0],
        [0, FrameType.RESUME, 0, 0n, 4],
        [0, FrameType.DATA, 0x7fff_ffff, 0n, 0],
      ]);
      expect(sb.frames[0]?.frame.payload).toEqual(coll);
    });

    it('refuses what a caller may not send (PLX_SPERLI_BAD_ARGUMENT), and nothing leaves', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      const sb = watch(b);
      const bad: [string, () => Promise<void>][] = [
        ['peer', () => a.send(0, FrameType.DATA, 0, new Uint8Array(0))],
        ['peer', () => a.send(2, FrameType.DATA, 0, new Uint8Array(0))],
        ['peer', () => a.send(-1, FrameType.DATA, 0, new Uint8Array(0))],
        ['peer', () => a.send(0.5, FrameType.DATA, 0, new Uint8Array(0))],
        ['type', () => a.send(1, FrameType.HELLO, 0, new Uint8Array(10))],
        ['type', () => a.send(1, FrameType.HEARTBEAT, 0, new Uint8Array(8))],
        ['type', () => a.send(1, FrameType.ABORT, 0, new Uint8Array(14))],
        ['type', () => a.send(1, FrameType.BYE, 0, new Uint8Array(0))],
        ['type', () => a.send(1, 0, 0, new Uint8Array(0))],
        ['type', () => a.send(1, 12, 0, new Uint8Array(0))],
        ['tag', () => a.send(1, FrameType.DATA, 0x8000_0000, new Uint8Array(0))],
        ['tag', () => a.send(1, FrameType.DATA, -1, new Uint8Array(0))],
        ['tag', () => a.send(1, FrameType.COLLECTIVE, 1, new Uint8Array(16))],
        ['epoch', () => a.send(1, FrameType.DATA, 0, new Uint8Array(0), 1n)],
        ['epoch', () => a.send(1, FrameType.COLLECTIVE, 0, new Uint8Array(16), 2n)],
        ['epoch', () => a.send(1, FrameType.CKPT_BEGIN, 0, new Uint8Array(8), -1n)],
        ['payload', () => a.send(1, FrameType.COLLECTIVE, 0, new Uint8Array(15))],
        ['payload', () => a.send(1, FrameType.CKPT_ACK, 0, new Uint8Array(31))],
        ['payload', () => a.send(1, FrameType.CKPT_BEGIN, 0, new Uint8Array(9))],
        ['payload', () => a.send(1, FrameType.DATA, 0, new Uint8Array(MAX_PAYLOAD + 1))],
        ['payload', () => a.send(1, FrameType.DATA, 0, [1, 2] as unknown as Uint8Array)],
      ];
      for (const [reason, f] of bad) {
        const e = await refusal(f());
        expect([e.code, e.details.reason]).toEqual(['PLX_SPERLI_BAD_ARGUMENT', reason]);
      }
      const e = await refusal(a.abort(0, new PlexusError('H1617', 'x')));
      expect([e.code, e.details.reason]).toEqual(['PLX_SPERLI_BAD_ARGUMENT', 'abort-reason']);
      await a.send(1, FrameType.DATA, 5, new Uint8Array([9]));
      await until(() => sb.frames.length === 1, 'the one good frame');
      expect(sb.frames[0]?.frame.tag).toBe(5);
      expect(a.failure).toBeUndefined();
      expect(b.failure).toBeUndefined();
    });

    it('keeps the frames that arrive before a receiver is installed, in order', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      for (let i = 0; i < 5; i++) await a.send(1, FrameType.DATA, i, new Uint8Array([i]));
      // The frames arrive before the receiver is installed.
      if (b.framesWaiting !== undefined) await until(() => b.framesWaiting === 5, 'the frames kept at b');
      else await graceFor(100);
      const sb = watch(b);
      await until(() => sb.frames.length === 5, 'the early frames');
      expect(sb.frames.map((r) => r.frame.tag)).toEqual([0, 1, 2, 3, 4]);
      await a.send(1, FrameType.DATA, 5, new Uint8Array(0));
      await until(() => sb.frames.length === 6, 'a later frame');
    });

    it('abort: the aborting rank fails with its error, every other with H1612 naming it, after the frames sent before', async () => {
      const ts = await job(3);
      const seen = ts.map(watch);
      const [a, b, c] = ts as [RankTransport, RankTransport, RankTransport];
      const error = new PlexusError('H1617', 'collective frame differs from the call it answers', {
        reason: 'sequence',
      });
      await a.send(1, FrameType.DATA, 1, new Uint8Array([1, 2, 3]));
      await a.abort(3, error);
      expect(a.failure).toBe(error);
      expect(seen[0]?.failures).toEqual([error]);
      await until(() => b.failure !== undefined && c.failure !== undefined, 'the others to fail');
      for (const t of [b, c]) {
        const f = t.failure as PlexusError;
        expect(f.code).toBe('H1612');
        expect(f.details).toMatchObject({ reason: 'abort', peer: 0, abortReason: 3, abortCode: 1617, rank: 0 });
        expect(f.details.text).toBe(error.message);
        expect(seen[t.rank]?.failures).toEqual([f]);
      }
      expect(seen[1]?.framesAtFailure).toBe(1);
      expect(seen[1]?.frames[0]?.frame.payload).toEqual(new Uint8Array([1, 2, 3]));
      expect(await refusal(a.send(1, FrameType.DATA, 0, new Uint8Array(0)))).toBe(error);
      expect(await refusal(b.send(2, FrameType.DATA, 0, new Uint8Array(0)))).toBe(b.failure);
      // Nothing is delivered after the failure, and a second abort changes nothing.
      await c.abort(2, new PlexusError('H1610', 'late'));
      expect(seen[2]?.failures.length).toBe(1);
      expect(c.failure?.code).toBe('H1612');
    });

    it('abort with a code that is not an H-code sends code 0', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      watch(b);
      await a.abort(5, new PlexusError('PLX_SPERLI_CHECKPOINT_IO', 'disk full'));
      await until(() => b.failure !== undefined, 'the failure');
      expect(b.failure?.details).toMatchObject({
        reason: 'abort',
        abortReason: 5,
        abortCode: 0,
        rank: 0,
        text: 'disk full',
      });
    });

    it('both ends aborting at once fail exactly once each', async () => {
      const ts = await job(3);
      const seen = ts.map(watch);
      const e0 = new PlexusError('H1618', 'bad scatter at the root');
      const e1 = new PlexusError('H1617', 'mismatch');
      await Promise.all([ts[0]?.abort(4, e0), ts[1]?.abort(3, e1)]);
      await until(() => ts.every((t) => t.failure !== undefined), 'every failure');
      // The other rank's ABORT comes before its link ends; close() on a failed rank resolves
      // once every link of it has ended: nothing more arrives, and no second failure came.
      await Promise.all(ts.map((t) => t.close()));
      expect(ts[0]?.failure).toBe(e0);
      expect(ts[1]?.failure).toBe(e1);
      expect(ts[2]?.failure?.code).toBe('H1612');
      for (const s of seen) expect(s.failures.length).toBe(1);
    });

    it('close sends BYE: no rank fails, and nothing can be sent afterwards', async () => {
      const ts = await job(3);
      const seen = ts.map(watch);
      await ts[0]?.send(1, FrameType.DATA, 0, new Uint8Array([7]));
      await until(() => seen[1]?.frames.length === 1, 'the frame');
      // close() resolves once every link of the rank has closed (the BYEs came first), and a
      // closed rank reports no failure after it: what the BYEs and the closes did is done.
      await Promise.all(ts.map((t) => t.close()));
      for (const t of ts) expect(t.failure).toBeUndefined();
      for (const s of seen) expect(s.failures).toEqual([]);
      const e = await refusal(ts[0]?.send(1, FrameType.DATA, 0, new Uint8Array(0)) as Promise<void>);
      expect(e.code).toBe('PLX_SPERLI_CLOSED');
      // After close, an abort is no failure and close again is harmless.
      await ts[1]?.abort(2, new PlexusError('H1610', 'late'));
      await ts[1]?.close();
      expect(ts[1]?.failure).toBeUndefined();
      expect(seen[1]?.failures).toEqual([]);
    });

    it('a rank that leaves with BYE first is no loss; the others go on, then leave', async () => {
      const ts = await job(3);
      const seen = ts.map(watch);
      const [a, b, c] = ts as [RankTransport, RankTransport, RankTransport];
      await c.close();
      const left = (t: RankTransport) =>
        until(
          () =>
            t.send(2, FrameType.DATA, 0, new Uint8Array(0)).then(
              () => undefined,
              (e: unknown) => e as PlexusError,
            ),
          { what: 'a send to the closed rank to be refused', intervalMs: 10 },
        );
      for (const t of [a, b]) {
        const e = await left(t);
        expect([e.code, e.details.peer]).toEqual(['PLX_SPERLI_CLOSED', 2]);
      }
      // Rank 2's links close at a and b; a close after a BYE starts no loss.
      if (a.closedLinks !== undefined && b.closedLinks !== undefined) {
        await until(() => a.closedLinks === 1 && b.closedLinks === 1, "rank 2's links closed at a and b");
        expect([a.lossesPending, b.lossesPending]).toEqual([0, 0]);
      } else await graceFor(300);
      await a.send(1, FrameType.DATA, 4, new Uint8Array([4]));
      await b.send(0, FrameType.DATA, 5, new Uint8Array([5]));
      await until(() => (seen[1]?.from(0).length ?? 0) >= 1 && (seen[0]?.from(1).length ?? 0) >= 1, 'frames');
      for (const t of ts) expect(t.failure).toBeUndefined();
      await Promise.all([a.close(), b.close()]);
      for (const s of seen) expect(s.failures).toEqual([]);
    });

    it('reports a failure once, also to a handler installed after it, and keeps it through close', async () => {
      const [a, b] = (await job(2)) as [RankTransport, RankTransport];
      watch(a);
      const error = new PlexusError('H1618', 'root out of range');
      await b.abort(4, error);
      await until(() => a.failure !== undefined, 'the failure');
      const late: PlexusError[] = [];
      b.onFailure((e) => late.push(e));
      await until(() => late.length === 1, 'the late handler');
      expect(late).toEqual([error]);
      await b.close();
      await a.close();
      expect(b.failure).toBe(error);
      expect(a.failure?.code).toBe('H1612');
      expect(late.length).toBe(1);
    });
  });
}
