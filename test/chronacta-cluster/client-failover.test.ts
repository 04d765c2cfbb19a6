/**
 * Two failover defects, on three real `node dist/cli/main.js chronacta serve --cluster`
 * processes: (b) a leader whose two followers are SIGSTOPped fails its pending append with
 * PLX_CHRONACTA_HA_NOT_LEADER as soon as check-quorum makes it step down (about two election
 * timeouts), not after the 10 s commit timeout, and a retry with the same idempotency key
 * lands it exactly once; (a) a client with `appendAttempts: 1` whose remembered leader was
 * SIGKILLed goes back to its seed address on the next call instead of the dead leader's.
 * Build first: `npx tsc -p tsconfig.build.json`.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { MAIN, type ServeMember, signalMember, startThree, stopMember, type ThreeMembers } from './helpers.js';

/** Raft tick of these members: an election timeout is 10 to 20 ticks, 0.5 to 1 s. */
const TICK_MS = 50;

const settle = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );

describe('failover of pending appends and of the client', () => {
  let three: ThreeMembers | undefined;
  const clients: ChronactaClient[] = [];
  const client = (address: string, o: ConstructorParameters<typeof ChronactaClient>[1] = {}) => {
    const c = new ChronactaClient(address, { deadlineMs: 15_000, ...o });
    clients.push(c);
    return c;
  };
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
    three = await startThree('plexus-chronacta-failover-', ['--tick-ms', String(TICK_MS)]);
  }, 60_000);
  afterAll(async () => {
    for (const c of clients) c.close();
    await three?.close();
  });

  it('a leader that loses its majority fails its pending append at once (NOT_LEADER, outcome unknown); the same key lands it once', async () => {
    const t = three as ThreeMembers;
    const leader = await t.leader();
    const followers = t.members.filter((m) => m !== leader);
    const once = client(leader.address);
    await once.append('pending', [{ type: 't', data: 'warm' }], { idempotencyKey: 'warm' });
    for (const f of followers) signalMember(f, 'SIGSTOP');
    let r: Awaited<ReturnType<typeof settle>>;
    let ms: number;
    try {
      const started = performance.now();
      r = await settle(once.append('pending', [{ type: 't', data: 'p' }], { idempotencyKey: 'p' }));
      ms = performance.now() - started;
    } finally {
      for (const f of followers) signalMember(f, 'SIGCONT');
    }
    expect(r.value).toBeUndefined();
    expect(r.error).toMatchObject({
      code: 'PLX_CHRONACTA_HA_NOT_LEADER',
      details: { outcomeUnknown: true, grpcStatus: 9 },
    });
    expect((r.error as Error).message).toContain('same idempotency key');
    // Check-quorum: one to two election timeouts (0.5 to 2 s here), far from the 10 s commit timeout.
    console.log(`pending append failed ${ms.toFixed(0)} ms after it was sent (leader without a majority)`);
    expect(ms).toBeLessThan(4 * 20 * TICK_MS);
    // The retry with the same key, once a leader is back, lands it exactly once.
    const retry = client(leader.address, { appendAttempts: 60, retryDelayMs: 50 });
    const again = await retry.append('pending', [{ type: 't', data: 'p' }], { idempotencyKey: 'p' });
    expect(again.lastVersion).toBe(1n);
    const next = await t.leader();
    const events = await next.client.readStream('pending');
    expect(events.events.map((e) => Buffer.from(e.data).toString())).toEqual(['warm', 'p']);
  }, 60_000);

  it('with appendAttempts 1, a call after the remembered leader died goes back to the seed address, not the dead leader', async () => {
    const t = three as ThreeMembers;
    const leader = await t.leader();
    const seed = t.members.find((m) => m !== leader) as ServeMember;
    // Seeded at a follower: the keyed append is redirected, and the leader remembered.
    const c = client(seed.address, { deadlineMs: 5000 });
    const first = await c.append('failover', [{ type: 't', data: 'a' }], { idempotencyKey: 'fa' });
    expect(first.lastVersion).toBe(0n);
    await stopMember(leader, 'SIGKILL');
    // The one attempt goes to the remembered (dead) leader and fails: it may not be retried.
    const failed = await settle(c.append('failover', [{ type: 't', data: 'b' }], { idempotencyKey: 'fb' }));
    expect(failed.value).toBeUndefined();
    expect((failed.error as { code?: string }).code).toMatch(/UNAVAILABLE|NOT_LEADER|NOT_READY/);
    // A new leader among the two left; the next call starts at the seed again, which redirects to it.
    const next = await t.leader(
      15_000,
      t.members.filter((m) => m !== leader),
    );
    const ok = await c.append('failover', [{ type: 't', data: 'b' }], { idempotencyKey: 'fb' });
    expect(ok.lastVersion).toBe(1n);
    const r = await next.client.readStream('failover');
    expect(r.events.map((e) => Buffer.from(e.data).toString())).toEqual(['a', 'b']);
  }, 60_000);
});
