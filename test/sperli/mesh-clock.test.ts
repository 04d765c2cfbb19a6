/**
 * The SPERLI mesh takes its setup's time from the timers it is given: over real mutual TLS 1.3
 * on loopback, the pause before a rank tries again to reach a peer that does not listen yet,
 * and the connect timeout, run on a ManualClock, not on wall time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { type MeshOptions, openMesh } from '../../ts/sperli/mesh.js';
import type { RankTransport } from '../../ts/sperli/transport.js';
import { makeTestJob } from '../helpers/sperli-job.js';
import { until } from '../helpers/until.js';

const LOOP: MeshOptions = { silenceMs: 1500, heartbeatMs: 300, connectTimeoutMs: 5000, retryMs: 50 };

const turns = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

/** Whether the one timer on `clock` is a pause between tries (a try's handshake timeout is due much later). */
const pausing = (clock: ManualClock) =>
  clock.pending() === 1 && (clock.nextDue() ?? Number.POSITIVE_INFINITY) <= clock.now() + (LOOP.retryMs as number);

const opened: RankTransport[] = [];
afterEach(async () => {
  for (const t of opened.splice(0)) await t.close();
});

describe('SPERLI mesh setup on a manual clock', () => {
  it('tries a peer again only when the clock reaches the pause', async () => {
    const job = await makeTestJob({ size: 2 });
    const clock = new ManualClock(0);
    let rank0: RankTransport | PlexusError | undefined;
    const first = openMesh(job.descriptions[0]!, { ...LOOP, timers: clock }).then(
      (t) => {
        opened.push(t);
        rank0 = t;
      },
      (e: PlexusError) => {
        rank0 = e;
      },
    );
    // Rank 1 does not listen yet: rank 0's first try fails and its pause waits on the clock.
    await until(() => pausing(clock), { what: "rank 0's pause on the manual clock" });
    const second = openMesh(job.descriptions[1]!, LOOP);
    let rank1: RankTransport | undefined;
    void second.then((t) => {
      opened.push(t);
      rank1 = t;
    });
    await turns(20);
    expect(rank0).toBeUndefined();
    expect(rank1).toBeUndefined();
    expect(pausing(clock)).toBe(true);
    // The pause is 25-50 ms (equal jitter): 50 ms of the clock sends rank 0 to rank 1 again.
    clock.advance(50);
    await first;
    await second;
    expect(isPlexusError(rank0)).toBe(false);
    expect((rank0 as RankTransport).failure).toBeUndefined();
    expect(rank1?.failure).toBeUndefined();
  });

  it('gives up on a peer at the connect timeout of the clock (H1612 connect)', async () => {
    const job = await makeTestJob({ size: 2 });
    const clock = new ManualClock(0);
    let outcome: unknown;
    const setup = openMesh(job.descriptions[0]!, { ...LOOP, connectTimeoutMs: 1000, timers: clock }).then(
      (t) => {
        opened.push(t);
        outcome = t;
      },
      (e) => {
        outcome = e;
      },
    );
    await until(() => pausing(clock), { what: 'the first pause' });
    for (let t = 0; t < 18; t++) {
      clock.advance(50);
      await until(() => pausing(clock), { what: 'the next pause' });
    }
    // 900 ms of the clock: still within the connect timeout, whatever wall time has passed.
    expect(outcome).toBeUndefined();
    for (let t = 0; t < 5 && outcome === undefined; t++) {
      clock.advance(50);
      await until(() => outcome !== undefined || pausing(clock), { what: 'a pause or the failure' });
    }
    await setup;
    expect(isPlexusError(outcome, 'H1612')).toBe(true);
    expect((outcome as PlexusError).details).toMatchObject({ peer: 1 });
    expect(clock.now()).toBeGreaterThanOrEqual(950);
    expect(clock.now()).toBeLessThanOrEqual(1000);
  });
});
