/**
 * The compliance suite of the Raft transport seam (ts/raft-io/transport.ts). Every
 * implementation runs it with a `SuiteFactory` (test/compliance/_kit.ts) that opens three
 * members, ids 1, 2 and 3, each knowing the others, and a teardown that closes them:
 * `RaftTcpTransport` on loopback (plain TCP and mutual TLS 1.3) in
 * test/raft/transport-compliance.test.ts, `SimRaftTransport` on the simulated network in
 * test/sim/transport-compliance.test.ts.
 *
 * What every transport does: it delivers what is sent to the member addressed, unchanged; it
 * never throws on send, and drops and counts a message to an unknown member or sent after
 * close; after close it delivers nothing; `onMessage` replaces the handler. What some promise
 * (`caps`): order per peer (TCP), and refusing bytes that are no Raft message (a byte
 * transport closes the connection and counts the refusal, with PLX_RAFT_TRANSPORT_REFUSED).
 */
import { describe, expect, it } from 'vitest';
import type { Entry, Message } from '../../ts/raft/types.js';
import type { RaftTransport } from '../../ts/raft-io/transport.js';
import { eachTest, type SuiteFactory } from './_kit.js';

export interface RaftTransportHarness {
  /** Members 1, 2 and 3 at indexes 0, 1, 2, each able to reach the others. */
  readonly transports: readonly RaftTransport[];
  /** Lets what was sent arrive: waits on real time, moves the clock on simulated time. */
  settle(): Promise<void>;
  /** Refusals logged so far (their codes), for transports that log them. */
  readonly refusals: { readonly code: unknown }[];
  /**
   * Opens a connection to member `to` as member `from` (authenticated as it, when the
   * transport authenticates), writes `bytes` after a correct greeting, and resolves once the
   * member closed the connection. Only for transports that carry bytes (`caps.bytes`).
   */
  raw?(from: number, to: number, bytes: Uint8Array): Promise<void>;
  /** The largest message body the members take (their `maxMessageBytes`). */
  readonly maxMessageBytes?: number;
}

export interface RaftTransportCaps {
  /** Messages from one member to another arrive in the order sent. */
  readonly ordered: boolean;
  /** The transport carries bytes (and so must refuse bad ones): `raw` is given. */
  readonly bytes: boolean;
}

const enc = new TextEncoder();

function msg(from: number, to: number, term: number, entries: readonly Entry[] = []): Message {
  return {
    type: entries.length > 0 ? 'MsgApp' : 'MsgHeartbeat',
    from,
    to,
    term,
    logTerm: entries.length > 0 ? term : 0,
    index: entries.length > 0 ? (entries[0] as Entry).index - 1 : 0,
    commit: 0,
    reject: false,
    rejectHint: 0,
    entries,
  };
}

function inbox(t: RaftTransport): Message[] {
  const got: Message[] = [];
  t.onMessage((m) => got.push(m));
  return got;
}

async function until(h: RaftTransportHarness, cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await h.settle();
  }
}

export function raftTransportSuite<H extends RaftTransportHarness>(
  name: string,
  factory: SuiteFactory<H>,
  caps: RaftTransportCaps,
): void {
  describe(`RaftTransport compliance: ${name}`, () => {
    const subject = eachTest(factory);

    it('delivers each message to the member addressed, unchanged, from every member to every other', async () => {
      const h = subject();
      const boxes = h.transports.map(inbox);
      const entries = (from: number, to: number): Entry[] => [
        { index: 5, term: 3, type: 'normal', data: enc.encode(`from ${from} to ${to}`) },
        { index: 6, term: 3, type: 'conf-change', data: new Uint8Array([1, 0, 0, 0, 0, 0, 0, 0, 4]) },
      ];
      for (let a = 1; a <= 3; a++) {
        for (let b = 1; b <= 3; b++) {
          if (a !== b) h.transports[a - 1]?.send([msg(a, b, 3, entries(a, b))]);
        }
      }
      await until(h, () => boxes.every((b) => b.length === 2), 'every message');
      for (let b = 1; b <= 3; b++) {
        const got = [...(boxes[b - 1] ?? [])].sort((x, y) => x.from - y.from);
        const want = [1, 2, 3].filter((a) => a !== b).map((a) => msg(a, b, 3, entries(a, b)));
        expect(got).toEqual(want);
      }
      for (const t of h.transports) {
        expect(t.stats.sent).toBeGreaterThanOrEqual(2);
        expect(t.stats.received).toBe(2);
      }
    });

    it(`carries a burst from one member to another ${caps.ordered ? 'in the order sent' : 'completely'}`, async () => {
      const h = subject();
      const [t1, , t3] = h.transports as [RaftTransport, RaftTransport, RaftTransport];
      const got = inbox(t3);
      const burst = Array.from({ length: 200 }, (_, i) => msg(1, 3, i + 1));
      t1.send(burst.slice(0, 100));
      t1.flush();
      t1.send(burst.slice(100));
      await until(h, () => got.length === burst.length, 'the burst');
      const terms = got.map((m) => m.term);
      if (caps.ordered) expect(terms).toEqual(burst.map((m) => m.term));
      else expect([...terms].sort((a, b) => a - b)).toEqual(burst.map((m) => m.term));
    });

    it('drops and counts a message to an unknown member, without throwing, and still carries the rest', async () => {
      const h = subject();
      const [t1, t2] = h.transports as [RaftTransport, RaftTransport];
      const got = inbox(t2);
      const dropped = t1.stats.dropped;
      expect(() => t1.send([msg(1, 99, 1), msg(1, 2, 7)])).not.toThrow();
      expect(t1.stats.dropped).toBe(dropped + 1);
      await until(h, () => got.length === 1, 'the message to a known member');
      expect(got[0]?.term).toBe(7);
    });

    it('onMessage replaces the handler before', async () => {
      const h = subject();
      const [t1, t2] = h.transports as [RaftTransport, RaftTransport];
      const first = inbox(t2);
      const second = inbox(t2);
      t1.send([msg(1, 2, 4)]);
      await until(h, () => second.length === 1, 'delivery');
      expect(first).toEqual([]);
    });

    it('after close: sends are dropped and counted, nothing is delivered, peers sending to it do not throw', async () => {
      const h = subject();
      const [t1, t2] = h.transports as [RaftTransport, RaftTransport];
      const got1 = inbox(t1);
      const got2 = inbox(t2);
      await t2.close();
      const dropped = t2.stats.dropped;
      expect(() => t2.send([msg(2, 1, 5)])).not.toThrow();
      expect(t2.stats.dropped).toBe(dropped + 1);
      expect(() => t1.send([msg(1, 2, 5)])).not.toThrow();
      // A message sent after it by the same member, to the third one, arrived (t2's own send
      // was dropped at once, and t2, closed, takes no connection).
      const got3 = inbox(h.transports[2] as RaftTransport);
      t1.send([msg(1, 3, 5)]);
      await until(h, () => got3.length === 1, 'a later message from 1 to 3');
      expect(got1).toEqual([]);
      expect(got2).toEqual([]);
      await t2.close(); // closing twice is harmless
    });

    describe.skipIf(!caps.bytes)(
      caps.bytes
        ? 'bytes that are no Raft message'
        : 'bytes that are no Raft message (skipped: this transport carries message objects, never bytes)',
      () => {
        it('a message longer than maxMessageBytes is refused with PLX_RAFT_TRANSPORT_REFUSED and not delivered', async () => {
          const h = subject();
          const { encodeRaftMessage } = await import('../../ts/codec/raft-wire.js');
          const t2 = h.transports[1] as RaftTransport;
          const got = inbox(t2);
          const max = h.maxMessageBytes as number;
          const big = encodeRaftMessage(
            msg(1, 2, 1, [{ index: 1, term: 1, type: 'normal', data: new Uint8Array(max + 1).fill(9) }]),
          );
          const refused = t2.stats.refused;
          await h.raw?.(1, 2, big);
          expect(t2.stats.refused).toBe(refused + 1);
          expect(h.refusals.map((r) => r.code)).toContain('PLX_RAFT_TRANSPORT_REFUSED');
          expect(got).toEqual([]);
        });

        it('garbled bytes, and a message that claims another sender, are refused and not delivered', async () => {
          const h = subject();
          const { encodeRaftMessage } = await import('../../ts/codec/raft-wire.js');
          const t2 = h.transports[1] as RaftTransport;
          const got = inbox(t2);
          const refused = t2.stats.refused;
          await h.raw?.(1, 2, new Uint8Array(96).fill(0xa5));
          const good = encodeRaftMessage(msg(1, 2, 2));
          const flipped = good.slice();
          flipped[flipped.length - 1] = (flipped[flipped.length - 1] as number) ^ 0xff;
          await h.raw?.(1, 2, flipped);
          await h.raw?.(1, 2, encodeRaftMessage(msg(3, 2, 2)));
          expect(t2.stats.refused).toBe(refused + 3);
          expect(h.refusals.filter((r) => r.code === 'PLX_RAFT_TRANSPORT_REFUSED').length).toBeGreaterThanOrEqual(3);
          expect(got).toEqual([]);
        });
      },
    );
  });
}
