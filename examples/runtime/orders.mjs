// An order actor (an XState machine) and a billing actor (a plain chart) on one node,
// journaled in a data directory; the node is then stopped and started again, and the
// order's state comes back from the journal by replay.
//   npx tsc -p tsconfig.build.json && node examples/runtime/orders.mjs [DATA_DIR]
// (with the package installed, import from 'plexus/runtime' instead of ../../dist/runtime)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assign, setup } from 'xstate';
import { Node, openJournal, sendEvent, xstateChart } from '../../dist/runtime/index.js';

const dir = process.argv[2] ?? mkdtempSync(join(tmpdir(), 'plexus-orders-'));
const keep = process.argv[2] !== undefined;

const order = setup({}).createMachine({
  id: 'order',
  initial: 'open',
  context: { items: 0, total: 0, reason: '' },
  states: {
    open: {
      on: {
        add: {
          actions: assign({
            items: ({ context }) => context.items + 1,
            total: ({ context, event }) => context.total + Number(event.data?.price ?? 0),
          }),
        },
        checkout: {
          target: 'charging',
          actions: sendEvent(({ context, event }) => ({
            id: 'charge',
            target: 'vt:billing/main',
            event: 'charge',
            data: { amount: context.total, order: event.origin ?? 'unknown' },
          })),
        },
      },
    },
    charging: {
      on: {
        charged: 'paid',
        'error.communication': {
          target: 'failed',
          actions: assign({ reason: ({ event }) => event.data.reason }),
        },
      },
    },
    paid: { type: 'final' },
    failed: { type: 'final' },
  },
});

// Billing: keeps a running total and answers every charge to the sender.
const billing = {
  initial: () => ({ charged: 0, count: 0 }),
  transition: (state, event) =>
    event.name === 'charge'
      ? {
          state: { charged: state.charged + event.data.amount, count: state.count + 1 },
          sends: [{ target: event.origin, event: 'charged' }],
        }
      : { state },
};

function build(storage) {
  return Node.builder(storage)
    .chart('vt:orders/', xstateChart(order))
    .chart('vt:billing/', billing)
    .config({ snapshotEvery: 50 })
    .build();
}

let storage = await openJournal(dir, { shardCount: 16 });
let node = build(storage);
await node.send('vt:orders/1234', 'add', { id: 'o1-add-1', data: { price: 30 } });
await node.send('vt:orders/1234', 'add', { id: 'o1-add-2', data: { price: 12 } });
await node.send('vt:orders/1234', 'add', { id: 'o1-add-2', data: { price: 12 } }); // a retry: deduplicated
await node.send('vt:orders/1234', 'checkout', { id: 'o1-checkout' });
await node.stop(); // drains: billing's reply reaches the order before the node stops
await storage.close();

storage = await openJournal(dir);
node = build(storage);
const reply = await node.send('vt:orders/1234', 'add', { id: 'o1-add-2', data: { price: 12 } });
const state = node.activation('vt:orders/1234')?.currentState;
console.log(`data directory: ${dir}${keep ? '' : ' (removed at the end)'}`);
console.log(`order vt:orders/1234 after restart: ${JSON.stringify(state)} (redelivered add: ${reply})`);
await node.send('vt:billing/main', 'noop', { id: 'peek' });
console.log(`billing: ${JSON.stringify(node.activation('vt:billing/main')?.currentState)}`);
await node.stop();
await storage.close();
if (!keep) rmSync(dir, { recursive: true, force: true });
if (state?.value !== 'paid' || state.context.total !== 42) {
  console.error('unexpected order state');
  process.exit(1);
}
