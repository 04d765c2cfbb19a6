/**
 * Crash safety with real processes and real files (fsync on): a child node
 * (fixtures/crash-node.mjs) takes messages from eight concurrent loops and is killed with
 * SIGKILL at a seeded moment, twice per seed on the same directory. After each kill this
 * process opens the journal, checks what the crash left, then runs a node on it (which
 * replays every actor and sends again what the journal does not show as completed) and
 * stops it, and checks:
 * - every acknowledged message was processed exactly once by its target;
 * - every message id, the resent local sends included, appears once in its actor's history;
 * - every relay's local send reached its target exactly once;
 * - replay ran no transition of the journal again, and the only effects sent again were
 *   those journaled after the last completion mark (at least once, never a completed one).
 *
 * The child runs the runtime module of the build in dist/ (`npm run build` first).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ActorEvent, type Chart, Node, type Outgoing, openJournal } from '../../ts/runtime/index.js';
import { ROOT } from '../helpers/paths.js';
import { distFile, startNode, stopStarted } from '../helpers/processes.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

const SEEDS = 4;
const ACTORS = Array.from({ length: 16 }, (_, i) => `vt:acc/${i}`);
const CHILD = join(ROOT, 'test/runtime/fixtures/crash-node.mjs');

let moduleUrl = '';
let work = '';

beforeAll(async () => {
  moduleUrl = pathToFileURL(distFile('runtime/index.js')).href;
  work = await mkdtemp(join(tmpdir(), 'plexus-rt-crash-'));
});

afterAll(async () => {
  await stopStarted();
  if (work) await rm(work, { recursive: true, force: true });
});

interface State {
  readonly count: number;
  readonly seen: string[];
}

/** The chart of the child (fixtures/crash-node.mjs), counting its transitions. */
function crashChart(): Chart<State> & { calls: number } {
  const c = {
    calls: 0,
    initial: (): State => ({ count: 0, seen: [] }),
    transition(st: State, e: ActorEvent, ctx: { messageId: string }) {
      c.calls++;
      const seen = [...st.seen, ctx.messageId];
      if (e.name === 'relay') {
        const to = (e.data as { to: string }).to;
        return {
          state: { count: st.count, seen },
          sends: [
            { target: to, event: 'inc' },
            { type: 'fx', target: 'vt:fx/1', event: 'effect' },
          ],
        };
      }
      return { state: { count: st.count + 1, seen } };
    },
  };
  return c;
}

interface RunOutput {
  readonly acks: { id: string; target: string; result: string }[];
  readonly dups: { id: string; result: string }[];
  readonly fx: string[];
}

async function crashRun(dir: string, seed: number, tag: string, killAfterMs: number): Promise<RunOutput> {
  const child = startNode(CHILD, [moduleUrl, dir, String(seed), tag]);
  await until(() => child.stdout().includes('ready\n') || !child.running(), {
    timeoutMs: 15_000,
    what: 'the node to be ready',
  });
  // The kill comes at a seeded moment of the sends: this wait is the crash point.
  await new Promise((r) => setTimeout(r, killAfterMs));
  await child.stop('SIGKILL');
  const { signal } = await child.ended;
  const out = child.stdout();
  expect(signal, `child failed before the kill: ${child.stderr()}`).toBe('SIGKILL');
  const acks: RunOutput['acks'] = [];
  const dups: RunOutput['dups'] = [];
  const fx: string[] = [];
  for (const line of out.split('\n')) {
    const p = line.split(' ');
    if (p[0] === 'ack' && p.length === 4)
      acks.push({ id: p[1] as string, target: p[2] as string, result: p[3] as string });
    else if (p[0] === 'dup' && p.length === 4) dups.push({ id: p[1] as string, result: p[3] as string });
    else if (p[0] === 'fx' && p.length === 2) fx.push(p[1] as string);
  }
  return { acks, dups, fx };
}

describe('runtime crash safety with SIGKILL', () => {
  it(`processes every acknowledged message exactly once and replays without effects (${SEEDS} seeds, two crashes each)`, async () => {
    let totalAcks = 0;
    let totalResent = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const next = rng(seed * 9_973);
      const dir = join(work, `seed-${seed}`);
      const acked = new Map<string, string>();
      const fxEver = new Set<string>();
      for (let round = 0; round < 2; round++) {
        const run = await crashRun(dir, seed * 10 + round, `s${seed}r${round}`, 80 + (next() % 250));
        for (const a of run.acks) {
          expect(a.result).toBe('processed');
          acked.set(a.id, a.target);
        }
        for (const d of run.dups) expect(d.result, `redelivered ${d.id}`).toBe('duplicate');
        for (const f of run.fx) fxEver.add(f);
        totalAcks += run.acks.length;

        // What the crash left, before any node runs on it.
        const storage = await openJournal(dir);
        const completedThrough = new Map<string, number>();
        const journaledFx = new Map<string, string[]>();
        for (const iri of ACTORS) {
          const h = await storage.history(iri);
          let w = h.snapshot?.dispatchedThrough ?? 0;
          const fx: string[] = [];
          for (const p of h.snapshot?.pending ?? []) if (p.send.type === 'fx') fx.push(`${iri}#${p.seq}.${p.index}`);
          for (const r of h.records) {
            w = Math.max(w, r.dispatchedThrough);
            r.sends.forEach((s, i) => {
              if (s.type === 'fx') fx.push(`${iri}#${r.seq}.${i}`);
            });
          }
          completedThrough.set(iri, w);
          journaledFx.set(iri, fx);
        }

        // Recover: replay every actor, let outboxes drain, stop.
        const chart = crashChart();
        const resent: Outgoing[] = [];
        const node = Node.builder(storage)
          .chart('vt:acc/', chart)
          .processor({
            type: 'fx',
            send: async (o) => {
              resent.push(o);
            },
          })
          .config({ snapshotEvery: 25, dedupWindow: 100_000, idleAfter: 0 })
          .build();
        for (const iri of ACTORS) await node.send(iri, 'probe', { id: `probe-${seed}-${round}-${iri}` });
        await node.stop();
        // replay ran no transition: only the probes and the local sends resent (all new to their targets)
        const resentLocal = chart.calls - ACTORS.length;
        expect(resentLocal).toBeGreaterThanOrEqual(0);

        const seenBy = new Map<string, string[]>();
        for (const iri of ACTORS) {
          const h = await storage.history(iri);
          const st = (h.records.at(-1)?.state ?? h.snapshot?.state ?? { seen: [] }) as unknown as State;
          seenBy.set(iri, st.seen);
          // exactly once: no message id twice in an actor's consumed list
          expect(new Set(st.seen).size, `${iri} consumed an id twice`).toBe(st.seen.length);
        }
        await storage.close();

        // every acknowledged message is in its target's list (once, by the check above)
        const wrong: string[] = [];
        for (const [id, target] of acked)
          if (!seenBy.get(target)?.includes(id)) wrong.push(`${id} missing at ${target}`);
        // every relay consumed made one local send, consumed once by its target
        for (const iri of ACTORS) {
          const seen = seenBy.get(iri) ?? [];
          seen.forEach((id, i) => {
            if (!id.startsWith('R-')) return;
            const sendId = `${iri}#${i + 1}.0`;
            const holders = ACTORS.filter((a) => seenBy.get(a)?.includes(sendId));
            if (holders.length !== 1) wrong.push(`${sendId} consumed by ${holders.length} actors`);
          });
        }
        // effects: only those journaled after the actor's completion mark were sent again,
        // and every journaled effect has been sent at least once by now
        for (const o of resent) {
          const [iri, rest] = o.envelope.id.split('#') as [string, string];
          const seq = Number(rest.split('.')[0]);
          if (seq <= (completedThrough.get(iri) ?? 0)) wrong.push(`completed effect ${o.envelope.id} sent again`);
          fxEver.add(o.envelope.id);
        }
        for (const fx of journaledFx.values())
          for (const id of fx) if (!fxEver.has(id)) wrong.push(`effect ${id} never sent`);
        expect(wrong.slice(0, 10)).toEqual([]);
        totalResent += resent.length + resentLocal;
      }
    }
    expect(totalAcks).toBeGreaterThan(SEEDS * 20);
    // report for the log: how much the crashes left to resend
    console.log(`runtime crash test: ${totalAcks} acknowledged messages, ${totalResent} sends resent after crashes`);
  });
});
