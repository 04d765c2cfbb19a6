import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { Condition, Watermark } from '../../ts/core/watermark.js';

afterEach(() => {
  vi.useRealTimers();
});

/** What settled so far, in settle order. */
function track(p: Promise<boolean>, label: string, log: string[]): Promise<void> {
  return p.then(
    (v) => {
      log.push(`${label}:${v}`);
    },
    (e: unknown) => {
      log.push(`${label}:err:${e instanceof Error ? e.message : String(e)}`);
    },
  );
}

/** Fake only the clock and timers the watermark uses; setImmediate stays real for flush. */
const fake = () => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });

const flush = () => new Promise<void>((r) => setImmediate(r));

describe('Watermark', () => {
  it('resolves at once when the value is already reached', async () => {
    const w = new Watermark(5n);
    await expect(w.wait(5n)).resolves.toBe(true);
    await expect(w.wait(1n)).resolves.toBe(true);
    expect(w.waiting).toBe(0);
  });

  it('releases waiters in target order, then arrival order, and only those reached', async () => {
    const w = new Watermark();
    const log: string[] = [];
    const all = [
      track(w.wait(7n), 'a7', log),
      track(w.wait(3n), 'b3', log),
      track(w.wait(5n), 'c5', log),
      track(w.wait(3n), 'd3', log),
      track(w.wait(9n), 'e9', log),
    ];
    w.advance(5n);
    await flush();
    expect(log).toEqual(['b3:true', 'd3:true', 'c5:true']);
    expect(w.waiting).toBe(2);
    w.advance(4n); // never backwards
    expect(w.value).toBe(5n);
    w.advance(100n);
    await Promise.all(all);
    expect(log).toEqual(['b3:true', 'd3:true', 'c5:true', 'a7:true', 'e9:true']);
    expect(w.waiting).toBe(0);
  });

  it('settles false on timeout and leaves no timer behind', async () => {
    fake();
    const w = new Watermark();
    const log: string[] = [];
    const t = track(w.wait(10n, { timeoutMs: 50 }), 'slow', log);
    const r = track(w.wait(2n, { timeoutMs: 1_000 }), 'fast', log);
    expect(vi.getTimerCount()).toBe(2);
    await vi.advanceTimersByTimeAsync(49);
    expect(log).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(log).toEqual(['slow:false']);
    w.advance(2n);
    await Promise.all([t, r]);
    expect(log).toEqual(['slow:false', 'fast:true']);
    expect(vi.getTimerCount()).toBe(0);
    // The timed-out waiter is not released later.
    w.advance(10n);
    await flush();
    expect(log).toHaveLength(2);
    expect(w.waiting).toBe(0);
  });

  it('rejects with the abort reason, at once when already aborted', async () => {
    fake();
    const w = new Watermark();
    const ac = new AbortController();
    const p = w.wait(3n, { signal: ac.signal, timeoutMs: 10_000 });
    ac.abort(new Error('gone'));
    await expect(p).rejects.toThrow('gone');
    expect(vi.getTimerCount()).toBe(0);
    await expect(w.wait(9n, { signal: ac.signal })).rejects.toThrow('gone');
    await expect(w.wait(0n, { signal: ac.signal })).rejects.toThrow('gone');
    expect(w.waiting).toBe(0);
  });

  it('close rejects every waiter and every later wait', async () => {
    fake();
    const w = new Watermark();
    const a = w.wait(1n, { timeoutMs: 100 });
    const b = w.wait(2n);
    w.close(new Error('closed'));
    await expect(a).rejects.toThrow('closed');
    await expect(b).rejects.toThrow('closed');
    await expect(w.wait(1n)).rejects.toThrow('closed');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('many waiters, most timing out, are released in order and the heap is compacted', async () => {
    fake();
    const w = new Watermark();
    const released: bigint[] = [];
    const ps: Promise<unknown>[] = [];
    for (let i = 0; i < 2_000; i++) {
      const target = BigInt((i * 7919) % 1000) + 1n;
      const p = w.wait(target, i % 4 === 0 ? {} : { timeoutMs: 10 });
      ps.push(
        p.then((ok) => {
          if (ok) released.push(target);
        }),
      );
    }
    await vi.advanceTimersByTimeAsync(10);
    expect(w.waiting).toBe(500);
    w.advance(1000n);
    await Promise.all(ps);
    expect(released).toHaveLength(500);
    expect([...released].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))).toEqual(released);
    expect(w.waiting).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('agrees with a linearly scanned list on any sequence of waits, advances, timeouts and aborts', async () => {
    const op = fc.oneof(
      fc.record({
        k: fc.constant('wait' as const),
        target: fc.integer({ min: 0, max: 40 }),
        timeout: fc.option(fc.integer({ min: 0, max: 30 }), { nil: undefined }),
        abortable: fc.boolean(),
      }),
      fc.record({ k: fc.constant('advance' as const), v: fc.integer({ min: 0, max: 40 }) }),
      fc.record({ k: fc.constant('time' as const), ms: fc.integer({ min: 0, max: 20 }) }),
      fc.record({ k: fc.constant('abort' as const), which: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 60 }), async (ops) => {
        fake();
        try {
          const w = new Watermark();
          const got: string[] = [];
          // Reference: a plain array scanned linearly, stable by arrival.
          let value = 0;
          let now = 0;
          const ref: { id: number; target: number; deadline?: number; live: boolean }[] = [];
          const want: string[] = [];
          const controllers: { id: number; ac: AbortController }[] = [];
          const refTime = (to: number) => {
            // Timeouts fire in deadline order, then arrival order.
            const due = ref
              .filter((r) => r.live && r.deadline !== undefined && r.deadline <= to)
              .sort((a, b) => (a.deadline as number) - (b.deadline as number) || a.id - b.id);
            for (const r of due) {
              r.live = false;
              want.push(`${r.id}:false`);
            }
            now = to;
          };
          let id = 0;
          for (const o of ops) {
            if (o.k === 'wait') {
              const me = id++;
              const ac = o.abortable ? new AbortController() : undefined;
              if (ac) controllers.push({ id: me, ac });
              void track(w.wait(BigInt(o.target), { timeoutMs: o.timeout, signal: ac?.signal }), String(me), got);
              if (o.target <= value) want.push(`${me}:true`);
              else
                ref.push({
                  id: me,
                  target: o.target,
                  deadline: o.timeout === undefined ? undefined : now + o.timeout,
                  live: true,
                });
            } else if (o.k === 'advance') {
              w.advance(BigInt(o.v));
              if (o.v > value) {
                value = o.v;
                const due = ref
                  .filter((r) => r.live && r.target <= value)
                  .sort((a, b) => a.target - b.target || a.id - b.id);
                for (const r of due) {
                  r.live = false;
                  want.push(`${r.id}:true`);
                }
              }
            } else if (o.k === 'time') {
              await vi.advanceTimersByTimeAsync(o.ms);
              refTime(now + o.ms);
            } else if (controllers.length > 0) {
              const c = controllers[o.which % controllers.length] as { id: number; ac: AbortController };
              c.ac.abort(new Error('x'));
              const r = ref.find((x) => x.id === c.id);
              if (r?.live) {
                r.live = false;
                want.push(`${r.id}:err:x`);
              }
            }
            await flush();
          }
          expect(got).toEqual(want);
          expect(w.waiting).toBe(ref.filter((r) => r.live).length);
          w.close(new Error('end'));
          await flush();
          expect(vi.getTimerCount()).toBe(0);
        } finally {
          vi.useRealTimers();
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('Condition', () => {
  it('wakes every waiter at notify, and only those waiting then', async () => {
    const c = new Condition();
    const log: string[] = [];
    const a = track(c.wait(), 'a', log);
    const b = track(c.wait(), 'b', log);
    c.notify();
    await Promise.all([a, b]);
    expect(log).toEqual(['a:true', 'b:true']);
    const later = track(c.wait({ timeoutMs: 5 }), 'later', log);
    await later;
    expect(log).toEqual(['a:true', 'b:true', 'later:false']);
    expect(c.waiting).toBe(0);
  });

  it('until re-tests the predicate at each notify and gives up at its timeout', async () => {
    fake();
    const c = new Condition();
    let ready = false;
    const log: string[] = [];
    const p = track(
      c.until(() => ready, { timeoutMs: 100 }),
      'u',
      log,
    );
    c.notify(); // not ready yet: waits again
    await vi.advanceTimersByTimeAsync(10);
    expect(log).toEqual([]);
    ready = true;
    c.notify();
    await p;
    expect(log).toEqual(['u:true']);
    const q = track(
      c.until(() => false, { timeoutMs: 100 }),
      'never',
      log,
    );
    await vi.advanceTimersByTimeAsync(100);
    await q;
    expect(log).toEqual(['u:true', 'never:false']);
    expect(vi.getTimerCount()).toBe(0);
    await expect(
      c.until(() => {
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
  });

  it('abort rejects a waiting until', async () => {
    const c = new Condition();
    const ac = new AbortController();
    const p = c.until(() => false, { signal: ac.signal });
    ac.abort(new Error('stop'));
    await expect(p).rejects.toThrow('stop');
    expect(c.waiting).toBe(0);
  });
});

describe('Watermark and Condition on a manual clock', () => {
  it('time out when the clock they are given says so, never on wall time', async () => {
    const clock = new ManualClock(0);
    const w = new Watermark(0n, clock);
    const c = new Condition(clock);
    const log: string[] = [];
    const done = Promise.all([
      track(w.wait(3n, { timeoutMs: 100 }), 'w', log),
      track(c.wait({ timeoutMs: 200 }), 'c', log),
    ]);
    expect(clock.pending()).toBe(2);
    await flush();
    expect(log).toEqual([]);
    clock.advance(99);
    await flush();
    expect(log).toEqual([]);
    clock.advance(1);
    await flush();
    expect(log).toEqual(['w:false']);
    clock.advance(100);
    await done;
    expect(log).toEqual(['w:false', 'c:false']);
    expect(clock.pending()).toBe(0);
  });

  it("Condition.until counts what is left of its timeout on the clock's time", async () => {
    const clock = new ManualClock(1000);
    const c = new Condition(clock);
    let ready = false;
    const log: string[] = [];
    const done = track(
      c.until(() => ready, { timeoutMs: 100 }),
      'u',
      log,
    );
    clock.advance(60);
    c.notify();
    await flush();
    // Woken but not ready: it waits again for what is left (40 ms of the clock).
    expect(log).toEqual([]);
    clock.advance(39);
    await flush();
    expect(log).toEqual([]);
    clock.advance(1);
    await done;
    expect(log).toEqual(['u:false']);
    ready = true;
    await expect(c.until(() => ready, { timeoutMs: 1 })).resolves.toBe(true);
  });
});
