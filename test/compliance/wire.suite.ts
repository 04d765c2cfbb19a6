/**
 * The compliance suite of the Wire seam (ts/net/types.ts). Every implementation runs it with
 * a factory that opens one wire per node, all listening, each trusting the others.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { BoundedMailbox } from '../../ts/cluster/mailbox.js';
import type { ClusterFrame } from '../../ts/codec/cluster-frame.js';
import { MAX_CLUSTER_FRAME } from '../../ts/codec/cluster-frame.js';
import type { Wire } from '../../ts/net/types.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

export interface WireHarness {
  readonly wires: ReadonlyMap<string, Wire>;
  /** Changes whether `viewer` counts `node` as a current member. */
  setMember(viewer: string, node: string, member: boolean): void;
  teardown(): Promise<void>;
}

export type WireFactory = (nodes: readonly string[]) => Promise<WireHarness>;

const enc = new TextEncoder();
const frame = (sender: string, target: string, i: number, extra: Partial<{ shard: number; epoch: bigint }> = {}) => ({
  shard: extra.shard ?? 3,
  epoch: extra.epoch ?? 7n,
  sender,
  target,
  payload: enc.encode(`${sender}->${target}#${i}`),
});

export function wireSuite(name: string, factory: WireFactory): void {
  describe(`Wire compliance: ${name}`, () => {
    let h: WireHarness | undefined;
    afterEach(async () => {
      await h?.teardown();
      h = undefined;
    });
    const w = (id: string) => h?.wires.get(id) as Wire;

    it('delivers the frames of a pair in order, with every field, and acknowledges them as stored', async () => {
      h = await factory(['a', 'b']);
      const got: ClusterFrame[] = [];
      w('b').onFrame(async (from, f) => {
        expect(from).toBe('a');
        got.push(f);
        return 'stored';
      });
      const sends = Array.from({ length: 200 }, (_, i) => w('a').send('b', frame('vt:x', 'vt:y', i)));
      expect(await Promise.all(sends)).toEqual(new Array(200).fill('stored'));
      expect(got.map((f) => new TextDecoder().decode(f.payload))).toEqual(
        Array.from({ length: 200 }, (_, i) => `vt:x->vt:y#${i}`),
      );
      expect(got[0]).toMatchObject({ shard: 3, epoch: 7n, sender: 'vt:x', target: 'vt:y', hops: 0 });
    });

    it('keeps other pairs flowing while one pair waits for a full mailbox, with bounded memory', async () => {
      h = await factory(['a', 'b']);
      const slow = new BoundedMailbox<ClusterFrame>(8);
      const fast: ClusterFrame[] = [];
      w('b').onFrame(async (_from, f) => {
        if (f.target === 'vt:slow') await slow.put(f);
        else fast.push(f);
        return 'stored';
      });
      const slowSends = Array.from({ length: 60 }, (_, i) => w('a').send('b', frame('vt:s', 'vt:slow', i)));
      await until(() => slow.size === 8, 'the slow mailbox to fill');
      const fastVerdicts = await Promise.all(
        Array.from({ length: 100 }, (_, i) => w('a').send('b', frame('vt:f', 'vt:fast', i))),
      );
      expect(fastVerdicts.every((v) => v === 'stored')).toBe(true);
      expect(fast).toHaveLength(100);
      // The receiver holds the bound plus at most the one frame it is trying to store.
      expect(slow.size).toBe(8);
      expect(slow.waitingPuts).toBeLessThanOrEqual(1);
      const order: string[] = [];
      const drain = (async () => {
        while (order.length < 60) order.push(new TextDecoder().decode((await slow.next()).payload));
      })();
      expect(await Promise.all(slowSends)).toEqual(new Array(60).fill('stored'));
      await drain;
      expect(order).toEqual(Array.from({ length: 60 }, (_, i) => `vt:s->vt:slow#${i}`));
    });

    it('drops a repeated message id at the receiver and answers duplicate', async () => {
      h = await factory(['a', 'b']);
      let seen = 0;
      w('b').onFrame(async () => {
        seen++;
        return 'stored';
      });
      const messageId = randomBytes(16);
      expect(await w('a').send('b', { ...frame('vt:x', 'vt:y', 0), messageId })).toBe('stored');
      expect(await w('a').send('b', { ...frame('vt:x', 'vt:y', 0), messageId })).toBe('duplicate');
      expect(seen).toBe(1);
    });

    it('passes the handler verdict back: a stale frame is answered stale', async () => {
      h = await factory(['a', 'b']);
      w('b').onFrame(async (_from, f) => (f.epoch < 5n ? 'stale' : 'stored'));
      expect(await w('a').send('b', frame('vt:x', 'vt:y', 0, { epoch: 4n }))).toBe('stale');
      expect(await w('a').send('b', frame('vt:x', 'vt:y', 1, { epoch: 5n }))).toBe('stored');
    });

    it('refuses a frame above 1 MiB before sending it', async () => {
      h = await factory(['a', 'b']);
      let seen = 0;
      w('b').onFrame(async () => {
        seen++;
        return 'stored';
      });
      const big = { ...frame('vt:x', 'vt:y', 0), payload: new Uint8Array(MAX_CLUSTER_FRAME) };
      const e = await refusal(w('a').send('b', big));
      expect(e.code).toBe('PLX_WIRE_FRAME_TOO_LARGE');
      const fits = { ...frame('vt:x', 'vt:y', 1), payload: new Uint8Array(MAX_CLUSTER_FRAME - 40 - 8) };
      expect(await w('a').send('b', fits)).toBe('stored');
      expect(seen).toBe(1);
    });

    it('answers calls and carries a refusal code back', async () => {
      h = await factory(['a', 'b']);
      w('b').onCall(async (from, body) => {
        if (body.length === 0) {
          const { PlexusError } = await import('../../ts/core/errors.js');
          throw new PlexusError('PLX_CLUSTER_LEASE_HELD', 'held', { shard: 1 });
        }
        return enc.encode(`${from}:${new TextDecoder().decode(body)}`);
      });
      expect(new TextDecoder().decode(await w('a').call('b', enc.encode('hi')))).toBe('a:hi');
      const e = await refusal(w('a').call('b', new Uint8Array(0)));
      expect(e.code).toBe('PLX_CLUSTER_LEASE_HELD');
    });

    it('refuses a node that is no longer a member on its new connection', async () => {
      h = await factory(['a', 'b', 'c']);
      let seen = 0;
      w('a').onFrame(async () => {
        seen++;
        return 'stored';
      });
      h.setMember('a', 'c', false);
      const e = await refusal(w('c').send('a', frame('vt:c', 'vt:a', 0)));
      expect(['PLX_WIRE_NOT_MEMBER', 'PLX_WIRE_DEADLINE']).toContain(e.code);
      expect(seen).toBe(0);
      expect(
        w('a')
          .refusals()
          .some((r) => r.code === 'PLX_WIRE_NOT_MEMBER' && r.peer === 'c'),
      ).toBe(true);
      // b is still a member and gets through.
      expect(await w('b').send('a', frame('vt:b', 'vt:a', 0))).toBe('stored');
    });
  });
}
