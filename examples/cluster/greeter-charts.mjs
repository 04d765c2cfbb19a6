// @ts-check
// A chart module: your own actors for a cluster node. Every node of the cluster loads the same
// module, by its config (`"charts": "path/to/greeter-charts.mjs"`, relative to the config file)
// or on the command line:
//
//   plexus cluster node --config nodes/a/node.json --charts ./greeter-charts.mjs
//
// It exports `charts`: IRI prefix -> chart. A chart is deterministic and pure: `transition`
// reads only its arguments and its effects are sends (docs/runtime.md). The node keeps the
// built-in charts (vt:counter/, vt:relay/) next to these; `export const replaces = [...]`
// would redefine a built-in prefix on purpose, `export const builtins = false` drops them.

/**
 * @typedef {{ readonly greeted: number }} GreeterState
 * @typedef {{ readonly names: readonly string[] }} GuestbookState
 */

/**
 * `vt:greeter/<name>`: on `greet` with `{ who }` answers the sender with `greeted` and signs
 * the guestbook `vt:guestbook/main`, which may live on another node: the cluster routes it.
 * @type {import('plexus/runtime').Chart<GreeterState>}
 */
const greeter = {
  initial: () => ({ greeted: 0 }),
  transition(state, event, ctx) {
    if (event.name !== 'greet') return { state };
    const d = /** @type {{ who?: unknown } | undefined} */ (event.data);
    const who = String(d?.who ?? 'stranger');
    const greeted = state.greeted + 1;
    /** @type {import('plexus/runtime').Send[]} */
    const sends = [{ target: 'vt:guestbook/main', event: 'sign', data: { who, by: ctx.self } }];
    if (event.origin !== undefined) {
      sends.push({ target: event.origin, event: 'greeted', data: { text: `Hello, ${who}!`, by: ctx.self, greeted } });
    }
    return { state: { greeted }, sends };
  },
};

/**
 * `vt:guestbook/<name>`: keeps who signed (`sign`, `{ who, by }`) and answers `read` with the list.
 * @type {import('plexus/runtime').Chart<GuestbookState>}
 */
const guestbook = {
  initial: () => ({ names: [] }),
  transition(state, event) {
    if (event.name === 'sign') {
      const d = /** @type {{ who?: unknown, by?: unknown }} */ (event.data ?? {});
      return { state: { names: [...state.names, `${d.who} (at ${d.by})`].slice(-1000) } };
    }
    if (event.name === 'read' && event.origin !== undefined) {
      return { state, sends: [{ target: event.origin, event: 'signed', data: { names: [...state.names] } }] };
    }
    return { state };
  },
};

export const charts = {
  'vt:greeter/': greeter,
  'vt:guestbook/': guestbook,
};
