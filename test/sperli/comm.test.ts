import { describe, expect, it } from 'vitest';
import { FrameType, MAX_PAYLOAD } from '../../ts/codec/sperli-frame.js';
import { isPlexusError, PlexusError } from '../../ts/core/errors.js';
import { allocShared, backend } from '../../ts/core/index.js';
import { ANY_SOURCE, ANY_TAG, type Comm, type Message } from '../../ts/sperli/comm.js';
import { memoryJob, runJob, runOn, TRANSPORTS } from '../helpers/comm-memory.js';
import { thrownRefusal } from '../helpers/refusal.js';
import { randomBytes, rng } from '../helpers/rng.js';

const text = (s: string) => new TextEncoder().encode(s);
const str = (m: Message) => new TextDecoder().decode(m.data);

async function rejection(p: Promise<unknown> | (() => unknown)): Promise<PlexusError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('nothing was refused');
}

/** Lets every queued frame be delivered. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('point to point: matching', () => {
  it('delivers by (source, tag) in arrival order and queues unexpected messages', async () => {
    const { comms } = memoryJob(2);
    const [a, b] = comms as [Comm, Comm];
    await a.send(1, 7, text('first 7'));
    await a.send(1, 8, text('first 8'));
    await a.send(1, 7, text('second 7'));
    await settle();
    expect(str(await b.recv(0, 8))).toBe('first 8');
    const m = await b.recv(0, 7);
    expect(m).toMatchObject({ source: 0, tag: 7 });
    expect(str(m)).toBe('first 7');
    expect(str(await b.recv(0, 7))).toBe('second 7');
    await Promise.all(comms.map((c) => c.finalize()));
  });

  it('matches posted receives in the order they were posted', async () => {
    const { comms } = memoryJob(3);
    const [a, b, c] = comms as [Comm, Comm, Comm];
    const anyAny = a.irecv();
    const from2 = a.irecv(2, ANY_TAG);
    const tag5 = a.irecv(ANY_SOURCE, 5);
    const exact = a.irecv(1, 5);
    expect(anyAny.done).toBe(false);
    await c.send(0, 9, text('c9'));
    await c.send(0, 5, text('c5'));
    await b.send(0, 5, text('b5'));
    await b.send(0, 5, text('b5 again'));
    expect(str(await anyAny.wait())).toBe('c9');
    expect(anyAny.done).toBe(true);
    expect(str(await from2.wait())).toBe('c5');
    expect(await tag5.wait()).toMatchObject({ source: 1, tag: 5 });
    expect(str(await exact.wait())).toBe('b5 again');
    expect(a.openRequests).toBe(0);
  });

  it('a message to this rank is delivered locally and copied', async () => {
    const { job, comms } = memoryJob(2);
    const a = comms[0] as Comm;
    const buf = text('self');
    await a.send(0, 3, buf);
    buf[0] = 0x58;
    const m = await a.recv(ANY_SOURCE, 3);
    expect(m.source).toBe(0);
    expect(str(m)).toBe('self');
    const big = new Uint8Array(MAX_PAYLOAD + 5).fill(4);
    await a.send(0, 1, big);
    expect((await a.recv(0, 1)).data.length).toBe(MAX_PAYLOAD + 5);
    expect(job.sent).toHaveLength(0);
  });

  it('an empty message is one empty DATA frame', async () => {
    const { job } = await runJob(2, async (comm) => {
      if (comm.rank === 0) await comm.send(1, 0, new Uint8Array(0));
      else expect((await comm.recv(0, 0)).data.length).toBe(0);
    });
    expect(job.frames(0, 1, FrameType.DATA).map((f) => f.payload.length)).toEqual([0]);
  });

  it('isend and irecv report done and give the message', async () => {
    const { comms } = memoryJob(2);
    const [a, b] = comms as [Comm, Comm];
    const r = b.irecv(0, 1);
    const s = a.isend(1, 1, new Float64Array([1.5, -2]));
    expect(a.openRequests + b.openRequests).toBe(2);
    await s.wait();
    expect(s.done).toBe(true);
    const m = await r.wait();
    expect(r.done).toBe(true);
    expect(Array.from(new Float64Array(m.data.slice().buffer))).toEqual([1.5, -2]);
  });
});

describe.each(TRANSPORTS)('point to point on %s', (kind) => {
  it('matches by (source, tag) in arrival order; posted receives in the order posted', async () => {
    await runOn(kind, 3, async (comm) => {
      if (comm.rank !== 0) {
        await comm.send(0, 7, text(`${comm.rank}: first 7`));
        await comm.send(0, 8, text(`${comm.rank}: first 8`));
        await comm.send(0, 7, text(`${comm.rank}: second 7`));
        return;
      }
      const fromTwo = comm.irecv(2, ANY_TAG);
      expect(str(await comm.recv(1, 8))).toBe('1: first 8');
      expect(str(await comm.recv(1, 7))).toBe('1: first 7');
      expect(str(await comm.recv(1, ANY_TAG))).toBe('1: second 7');
      expect(str(await fromTwo.wait())).toBe('2: first 7');
      expect(str(await comm.recv(ANY_SOURCE, 7))).toBe('2: second 7');
      expect(await comm.recv()).toMatchObject({ source: 2, tag: 8 });
    });
  });

  it('ANY_SOURCE and ANY_TAG take the earliest arrival that matches', async () => {
    await runOn(kind, 4, async (comm) => {
      if (comm.rank === 0) return;
      if (comm.rank !== 3) {
        for (let i = 0; i < 3; i++) await comm.send(3, comm.rank * 10 + i, text(`${comm.rank}:${i}`));
        return;
      }
      await new Promise((r) => setImmediate(r));
      const got: string[] = [];
      for (let i = 0; i < 6; i++) got.push(str(await comm.recv(ANY_SOURCE, ANY_TAG)));
      // Arrival order is send order per sender; rank 1 sent all three before rank 2 ran.
      expect(got.filter((s) => s.startsWith('1:'))).toEqual(['1:0', '1:1', '1:2']);
      expect(got.filter((s) => s.startsWith('2:'))).toEqual(['2:0', '2:1', '2:2']);
    });
  });

  it('messages of 16 MiB, 16 MiB + 1 and 40 MiB arrive whole, and so do empty ones and one to itself', async () => {
    const sizes = [MAX_PAYLOAD, MAX_PAYLOAD + 1, 40 * 1024 * 1024, 0];
    const data = sizes.map((n, i) => new Uint8Array(n).map((_, j) => (j * 7 + i) & 0xff));
    await runOn(kind, 2, async (comm) => {
      if (comm.rank === 0) {
        for (let i = 0; i < sizes.length; i++) await comm.send(1, i, data[i] as Uint8Array);
        await comm.send(0, 5, text('self'));
        expect(str(await comm.recv(ANY_SOURCE, 5))).toBe('self');
        return;
      }
      for (let i = sizes.length - 1; i >= 0; i--) {
        const m = await comm.recv(0, i);
        expect(Buffer.compare(m.data, data[i] as Uint8Array)).toBe(0);
      }
    });
  });

  it('a rank in a collective keeps the DATA frames that came before for recv', async () => {
    await runOn(kind, 3, async (comm) => {
      if (comm.rank === 0) {
        await comm.send(1, 5, text('before bcast'));
        const out = await comm.bcast(0, text('payload'));
        await comm.send(1, 5, text('after bcast'));
        expect(new TextDecoder().decode(out)).toBe('payload');
      } else {
        if (comm.rank === 1) await new Promise((r) => setImmediate(r));
        expect(new TextDecoder().decode(await comm.bcast(0))).toBe('payload');
        if (comm.rank === 1) {
          expect(str(await comm.recv(0, 5))).toBe('before bcast');
          expect(str(await comm.recv(0, 5))).toBe('after bcast');
        }
      }
    });
  });

  it('a rank waiting for DATA keeps the collective frames that came before', async () => {
    await runOn(kind, 2, async (comm) => {
      if (comm.rank === 0) {
        await comm.bcast(0, text('B'));
        await comm.send(1, 9, text('data'));
        const sum = comm.allreduce(new Int32Array([1, 2]), 'sum');
        await comm.send(1, 9, text('during allreduce'));
        expect(Array.from(await sum)).toEqual([11, 22]);
      } else {
        expect(str(await comm.recv(0, 9))).toBe('data');
        expect(new TextDecoder().decode(await comm.bcast(0))).toBe('B');
        const pending = comm.irecv(0, 9);
        expect(Array.from(await comm.allreduce(new Int32Array([10, 20]), 'sum'))).toEqual([11, 22]);
        expect(str(await pending.wait())).toBe('during allreduce');
      }
    });
  });
});

describe('point to point: messages larger than one frame', () => {
  const cases: [string, number, number[]][] = [
    ['one byte under 16 MiB', MAX_PAYLOAD - 1, [MAX_PAYLOAD - 1]],
    ['exactly 16 MiB (a full frame and an empty one)', MAX_PAYLOAD, [MAX_PAYLOAD, 0]],
    ['16 MiB + 1', MAX_PAYLOAD + 1, [MAX_PAYLOAD, 1]],
    ['40 MiB', 40 * 1024 * 1024, [MAX_PAYLOAD, MAX_PAYLOAD, 40 * 1024 * 1024 - 2 * MAX_PAYLOAD]],
  ];
  it.each(cases)('%s', async (_name, n, frames) => {
    const data = randomBytes(rng(n), 4096);
    const big = new Uint8Array(n);
    for (let at = 0; at < n; at += data.length) big.set(data.subarray(0, Math.min(data.length, n - at)), at);
    big[n - 1] = 0xee;
    const { job } = await runJob(2, async (comm) => {
      if (comm.rank === 0) {
        await comm.send(1, 42, big);
        await comm.send(1, 42, text('after'));
      } else {
        const m = await comm.recv(0, 42);
        expect(m.data.length).toBe(n);
        expect(Buffer.compare(m.data, big)).toBe(0);
        expect(str(await comm.recv(0, 42))).toBe('after');
      }
    });
    expect(job.frames(0, 1, FrameType.DATA).map((f) => f.payload.length)).toEqual([...frames, 5]);
  });

  it('reassembles frames per (source, tag) even when another sender interleaves them', async () => {
    const { job, comms } = memoryJob(2);
    const b = comms[1] as Comm;
    const t = job.transports[1]!;
    const full = (v: number) => new Uint8Array(MAX_PAYLOAD).fill(v);
    t.inject(0, { type: FrameType.DATA, tag: 1, epoch: 0n, payload: full(1) });
    t.inject(0, { type: FrameType.DATA, tag: 2, epoch: 0n, payload: full(2) });
    t.inject(0, { type: FrameType.DATA, tag: 2, epoch: 0n, payload: new Uint8Array([22]) });
    t.inject(0, { type: FrameType.DATA, tag: 1, epoch: 0n, payload: new Uint8Array([11]) });
    const first = await b.recv(0, ANY_TAG);
    expect(first.tag).toBe(2);
    expect(first.data.length).toBe(MAX_PAYLOAD + 1);
    expect(first.data[MAX_PAYLOAD]).toBe(22);
    const second = await b.recv(0, ANY_TAG);
    expect(second.tag).toBe(1);
    expect(second.data[0]).toBe(1);
    expect(second.data[MAX_PAYLOAD]).toBe(11);
  });
});

describe('point to point: the order of frames on the wire', () => {
  it('the frames of one message stay together; a collective sends when it runs', async () => {
    const { job } = await runJob(2, async (comm) => {
      if (comm.rank === 0) {
        const s1 = comm.isend(1, 1, new Uint8Array(MAX_PAYLOAD + 3));
        await comm.gather(1, text('g'));
        const s2 = comm.isend(1, 2, text('x'));
        await Promise.all([s1.wait(), s2.wait()]);
      } else {
        await comm.gather(1, text('h'));
        await comm.recv(0, 1);
        await comm.recv(0, 2);
      }
    });
    expect(job.sent.filter((f) => f.from === 0).map((f) => [f.type, f.tag, f.payload.length])).toEqual([
      [FrameType.DATA, 1, MAX_PAYLOAD],
      [FrameType.DATA, 1, 3],
      [FrameType.COLLECTIVE, 0, 17],
      [FrameType.DATA, 2, 1],
    ]);
  });
});

describe('point to point: refused arguments', () => {
  it('refuses tags, ranks and data with PLX_SPERLI_BAD_ARGUMENT', async () => {
    const { comms } = memoryJob(2);
    const a = comms[0] as Comm;
    const bytes = new Uint8Array(1);
    for (const tag of [-1, 2 ** 31, 2 ** 32, 1.5, Number.NaN, '1' as unknown as number]) {
      const e = await rejection(a.send(1, tag, bytes));
      expect(e.code).toBe('PLX_SPERLI_BAD_ARGUMENT');
      expect(e.details.reason).toBe('tag');
      expect(thrownRefusal(() => a.isend(1, tag, bytes)).code).toBe('PLX_SPERLI_BAD_ARGUMENT');
    }
    for (const tag of [-2, 2 ** 31]) {
      expect((await rejection(a.recv(1, tag))).code).toBe('PLX_SPERLI_BAD_ARGUMENT');
      expect(thrownRefusal(() => a.irecv(1, tag)).details.reason).toBe('tag');
    }
    for (const dest of [-1, 2, 0.5, ANY_SOURCE]) {
      expect((await rejection(a.send(dest, 0, bytes))).details.reason).toBe('rank');
    }
    for (const src of [-2, 2, 1.5]) expect((await rejection(a.recv(src, 0))).details.reason).toBe('rank');
    for (const data of [undefined, null, 'text', [1, 2], new ArrayBuffer(2)]) {
      const e = await rejection(a.send(1, 0, data as unknown as Uint8Array));
      expect(e.details.reason).toBe('data');
    }
    // The largest user tag is fine.
    await a.send(0, 2 ** 31 - 1, bytes);
    expect((await a.recv(0, 2 ** 31 - 1)).tag).toBe(2 ** 31 - 1);
  });
});

describe('finalize and failures', () => {
  it('finalize hands pending sends to the transport, then closes; later calls are refused', async () => {
    const { job, comms } = memoryJob(2);
    const [a, b] = comms as [Comm, Comm];
    const waiting = b.recv(0, 77);
    const s = a.isend(1, 1, new Uint8Array(MAX_PAYLOAD * 2 + 1));
    const done = a.finalize();
    expect(a.finalize()).toBe(done);
    await done;
    expect(s.done).toBe(true);
    expect(job.frames(0, 1, FrameType.DATA)).toHaveLength(3);
    expect(job.closed).toEqual([0]);
    expect((await b.recv(0, 1)).data.length).toBe(MAX_PAYLOAD * 2 + 1);
    await b.finalize();
    expect((await rejection(waiting)).code).toBe('PLX_SPERLI_CLOSED');
    expect((await rejection(a.send(1, 0, new Uint8Array(1)))).code).toBe('PLX_SPERLI_CLOSED');
    expect((await rejection(a.recv())).code).toBe('PLX_SPERLI_CLOSED');
    expect((await rejection(a.barrier())).code).toBe('PLX_SPERLI_CLOSED');
    expect(job.closed).toEqual([0, 1]);
  });

  it('finalize ends a collective still waiting, and is refused after a failure', async () => {
    const { job, comms } = memoryJob(2);
    const a = comms[0] as Comm;
    const waiting = rejection(a.barrier());
    const pendingRecv = rejection(a.irecv(1, 0).wait());
    await a.finalize();
    expect((await waiting).code).toBe('PLX_SPERLI_CLOSED');
    expect((await pendingRecv).code).toBe('PLX_SPERLI_CLOSED');
    expect(job.closed).toEqual([0]);
  });

  it('after a failure every pending and later call rejects with the failure', async () => {
    const { job, comms } = memoryJob(3);
    const [a, b, c] = comms as [Comm, Comm, Comm];
    const pendingRecv = rejection(a.recv(1, 0));
    const pendingReq = a.irecv(ANY_SOURCE, ANY_TAG);
    const pendingWait = rejection(pendingReq.wait());
    const pendingBcast = rejection(a.bcast(2));
    const cause = new PlexusError('H1610', 'a refused frame');
    await job.transports[2]!.abort(2, cause);
    await settle();
    const failure = a.failed;
    expect(failure?.code).toBe('H1612');
    expect(await pendingRecv).toBe(failure);
    expect(await pendingWait).toBe(failure);
    expect(pendingReq.done).toBe(true);
    expect(await pendingBcast).toBe(failure);
    expect(await rejection(a.send(1, 0, new Uint8Array(1)))).toBe(failure);
    expect(await rejection(a.send(0, 0, new Uint8Array(1)))).toBe(failure);
    expect(await rejection(a.recv())).toBe(failure);
    expect(await rejection(a.allreduce(new Float64Array(1), 'sum'))).toBe(failure);
    expect(await rejection(a.isend(1, 0, new Uint8Array(1)).wait())).toBe(failure);
    expect(await rejection(a.finalize())).toBe(failure);
    expect(b.failed?.code).toBe('H1612');
    expect(c.failed).toBe(cause);
    expect(await rejection(c.barrier())).toBe(cause);
  });

  it('a frame that arrives after the failure is dropped', async () => {
    const { job, comms } = memoryJob(2);
    const b = comms[1] as Comm;
    await job.transports[0]!.abort(1, new PlexusError('H1610', 'x'));
    await settle();
    job.transports[1]!.receive(0, { type: FrameType.DATA, tag: 0, epoch: 0n, payload: new Uint8Array(1) });
    expect((await rejection(b.recv(0, 0))).code).toBe('H1612');
  });
});

describe('checkpoint frames', () => {
  it('travel in the per-destination send queue and wait in a queue of their own', async () => {
    const { comms } = memoryJob(2);
    const [a, b] = comms as [Comm, Comm];
    await a.send(1, 3, text('data first'));
    await a.sendCheckpointFrame(1, FrameType.CKPT_ACK, new Uint8Array(32).fill(7), 4n);
    const frame = await b.nextCheckpointFrame(0);
    expect(frame).toMatchObject({ type: FrameType.CKPT_ACK, tag: 0, epoch: 4n });
    expect(frame.payload).toEqual(new Uint8Array(32).fill(7));
    expect(str(await b.recv(0, 3))).toBe('data first');
    expect(thrownRefusal(() => a.sendCheckpointFrame(1, FrameType.DATA, new Uint8Array(0), 0n)).details.reason).toBe(
      'type',
    );
    expect(thrownRefusal(() => a.sendCheckpointFrame(0, FrameType.CKPT_ACK, new Uint8Array(32), 0n)).code).toBe(
      'PLX_SPERLI_BAD_ARGUMENT',
    );
  });
});

describe('bytes given to a pending call', () => {
  it('a buffer transferred away before its send ran is refused (detached)', async () => {
    const { comms } = memoryJob(2);
    const a = comms[0] as Comm;
    const buf = new Uint8Array(10);
    const first = a.isend(1, 0, new Uint8Array(1));
    const s = a.isend(1, 1, buf);
    structuredClone(buf.buffer, { transfer: [buf.buffer] });
    await first.wait();
    const e = await rejection(s.wait());
    expect([e.code, e.details.reason]).toEqual(['PLX_SPERLI_BAD_ARGUMENT', 'detached']);
  });
});

describe('bytes in the shared arena', () => {
  it.runIf(backend().name === 'wasm')(
    'a send of an arena view survives memory growth before the frame leaves',
    async () => {
      const { comms } = memoryJob(2);
      const [a, b] = comms as [Comm, Comm];
      const block = allocShared(1000);
      block.u8.set(randomBytes(rng(5), 1000));
      const expected = block.u8.slice();
      const first = a.isend(1, 0, new Uint8Array(10));
      const s = a.isend(1, 1, block.u8);
      const grow = allocShared(256 * 1024 * 1024);
      await first.wait();
      await s.wait();
      expect(Buffer.compare((await b.recv(0, 1)).data, expected)).toBe(0);
      grow.free();
      block.free();
    },
  );
});
