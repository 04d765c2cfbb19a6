/** The XState v5 adapter: a machine run as a chart with pure transitions, sends as effects. */

import { afterAll, describe, expect, it } from 'vitest';
import { assign, raise, setup } from 'xstate';
import { type ActorEvent, type Chart, Node, openJournal, sendEvent, xstateChart } from '../../ts/runtime/index.js';
import { loopTurns } from '../helpers/clock.js';
import { until } from '../helpers/until.js';
import { cleanup, ManualClock, probe, stateOf, tempDir } from './helpers.js';

afterAll(cleanup);

type Ctx = { total: number; reason: string; reminders: number };

const orderMachine = setup({
  types: { context: {} as Ctx, events: {} as { type: string; data?: unknown; origin?: string } },
}).createMachine({
  id: 'order',
  initial: 'open',
  context: { total: 0, reason: '', reminders: 0 },
  states: {
    open: {
      on: {
        add: { actions: assign({ total: ({ context, event }) => context.total + Number(event.data) }) },
        pay: {
          target: 'paying',
          actions: [
            sendEvent(({ context }) => ({
              id: 'charge-1',
              target: 'vt:billing/1',
              event: 'charge',
              data: context.total,
            })),
            raise({ type: 'remind' }, { delay: 1000 }),
          ],
        },
      },
    },
    paying: {
      on: {
        charged: {
          target: 'paid',
          actions: sendEvent({ id: 'ship-1', processor: 'ship', target: 'vt:ship/1', event: 'ship' }),
        },
        remind: { actions: assign({ reminders: ({ context }) => context.reminders + 1 }) },
      },
    },
    paid: {
      on: {
        'error.communication': {
          target: 'shipFailed',
          actions: assign({ reason: ({ event }) => String((event.data as { reason: string }).reason) }),
        },
      },
    },
    shipFailed: { type: 'final' },
  },
});

/** A billing actor that answers `charge` with `charged` to the sender. */
const billing: Chart<number> = {
  initial: () => 0,
  transition: (s, e: ActorEvent) =>
    e.name === 'charge' && e.origin
      ? { state: s + Number(e.data), sends: [{ target: e.origin, event: 'charged' }] }
      : { state: s },
};

describe('xstateChart', () => {
  it('runs a machine as a chart: persisted snapshot as state, emitted sends and delayed raises as sends', async () => {
    const dir = await tempDir();
    let storage = await openJournal(dir, { shardCount: 2 });
    const clock = new ManualClock();
    const ship = probe('ship', [], async () => {
      throw new Error('no carrier answers');
    });
    const node = Node.builder(storage)
      .chart('vt:orders/', xstateChart(orderMachine))
      .chart('vt:billing/', billing)
      .processor(ship)
      .clock(clock)
      .build();
    await node.send('vt:orders/1', 'add', { data: 3 });
    await node.send('vt:orders/1', 'add', { data: 4 });
    await node.send('vt:orders/1', 'pay');
    await until(() => node.stats.communicationErrors === 1, {
      timeoutMs: 5_000,
      what: 'node.stats.communicationErrors === 1',
      intervalMs: 2,
    });
    await until(() => stateOf<{ value: string }>(node, 'vt:orders/1').value === 'shipFailed', {
      timeoutMs: 5_000,
      what: "stateOf<{ value: string }>(node, 'vt:orders/1').value === 'shipFailed'",
      intervalMs: 2,
    });
    const st = node.activation('vt:orders/1')?.currentState;
    expect(st).toEqual({
      value: 'shipFailed',
      status: 'done',
      context: { total: 7, reason: 'no carrier answers', reminders: 0 },
    });
    expect(node.activation('vt:billing/1')?.currentState).toBe(7);
    expect(ship.sent[0]?.envelope.event).toMatchObject({ name: 'ship', sendid: 'ship-1', origin: 'vt:orders/1' });
    const h = await storage.history('vt:orders/1');
    const pay = h.records.find((r) => r.event.name === 'pay');
    expect(pay?.sends).toEqual([
      { id: 'charge-1', target: 'vt:billing/1', event: 'charge', data: 7 },
      { event: 'remind', delay: 1000 },
    ]);
    expect(pay?.state).toMatchObject({ value: 'paying' });
    await node.stop();
    await storage.close();

    // replay: the same state, no send made again
    storage = await openJournal(dir);
    const ship2 = probe('ship');
    const node2 = Node.builder(storage)
      .chart('vt:orders/', xstateChart(orderMachine))
      .processor(ship2)
      .clock(clock)
      .build();
    await node2.send('vt:orders/1', 'noop');
    expect(node2.activation('vt:orders/1')?.currentState).toEqual(st);
    expect(ship2.sent).toEqual([]);
    await node2.stop();
    await storage.close();
  });

  it('delivers a delayed raise when the injected clock reaches it', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 1 });
    const clock = new ManualClock();
    const node = Node.builder(storage)
      .chart('vt:orders/', xstateChart(orderMachine))
      .clock(clock)
      .config({ idleAfter: 0 })
      .build();
    await node.send('vt:orders/2', 'pay'); // billing has no chart here: error.communication, ignored in `paying`
    const timers = clock.pending; // the raise's among them
    expect(timers).toBeGreaterThan(0);
    clock.advance(999);
    // No timer of the node's clock fired: the raise is still held on its own, not sent.
    expect(clock.pending).toBe(timers);
    await loopTurns();
    const ctx = () => stateOf<{ context: Ctx }>(node, 'vt:orders/2').context ?? { total: 0, reason: '', reminders: -1 };
    expect(ctx().reminders).toBe(0);
    clock.advance(1);
    await until(() => ctx().reminders === 1, { timeoutMs: 5_000, what: 'ctx().reminders === 1', intervalMs: 2 });
    await node.stop();
    await storage.close();
  });
});
