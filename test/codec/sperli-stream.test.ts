import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  encodeFrame,
  FrameContext,
  type FrameHeader,
  type FrameInit,
  FrameType,
  MAX_PAYLOAD,
  readFrameHeader,
} from '../../ts/codec/sperli-frame.js';
import {
  checkJoinToken,
  decodeAbort,
  decodeCkptAck,
  decodeCkptBegin,
  decodeCkptData,
  decodeCollective,
  decodeHeartbeat,
  decodeHello,
  decodeResume,
  encodeCkptAck,
  encodeCkptData,
  encodeCollective,
  encodeHeartbeat,
  encodeHello,
} from '../../ts/codec/sperli-payloads.js';
import { FrameStream, type StreamEvent } from '../../ts/codec/sperli-stream.js';
import { backend, isPlexusError, kernels, sha256, useBackend } from '../../ts/core/index.js';
import { type VectorRecord, vectors } from '../helpers/sperli-vectors.js';

const JOB = Uint8Array.from({ length: 16 }, (_, i) => 0x40 + i);
const EXPECT = { jobId: JOB, peerRank: 1, ownRank: 0, incarnation: 4 };
const base = { jobId: JOB, sourceRank: 1, targetRank: 0, incarnation: 4 };

const frame = (init: Partial<FrameInit> & { type: number }, payload?: Uint8Array) =>
  encodeFrame({ ...base, ...init }, payload);

const HELLO = frame({ type: FrameType.HELLO }, encodeHello(Uint8Array.of(1, 2, 3)));
const data = (n: number, tag = 0, incarnation = 4) =>
  frame(
    { type: FrameType.DATA, tag, incarnation },
    Uint8Array.from({ length: n }, (_, i) => (i * 7 + n) & 255),
  );

function stream(helloReceived = false): FrameStream {
  return new FrameStream(new FrameContext(EXPECT, { helloReceived }));
}

/** Events in a form that compares by value (errors by code, reason and message). */
function norm(events: StreamEvent[]): unknown[] {
  return events.map((e) => {
    if (e.kind === 'refuse') {
      return { kind: e.kind, code: e.error.code, reason: e.error.details.reason, message: e.error.message };
    }
    if (e.kind === 'frame') return { kind: e.kind, header: e.header, payload: Buffer.from(e.payload).toString('hex') };
    return { kind: e.kind, header: e.header };
  });
}

/** Pushes `bytes` cut at the given offsets into a fresh decoder; returns every event. */
function feed(bytes: Uint8Array, cuts: readonly number[], s: FrameStream = stream()): StreamEvent[] {
  const at = [...new Set(cuts.filter((c) => c > 0 && c < bytes.length))].sort((a, b) => a - b);
  const out: StreamEvent[] = [];
  let from = 0;
  for (const c of [...at, bytes.length]) {
    out.push(...s.push(bytes.subarray(from, c)));
    from = c;
  }
  return out;
}

function byteAtATime(bytes: Uint8Array): StreamEvent[] {
  const s = stream();
  const out: StreamEvent[] = [];
  for (let i = 0; i < bytes.length; i++) out.push(...s.push(bytes.subarray(i, i + 1)));
  return out;
}

const concat = (...parts: Uint8Array[]) => new Uint8Array(Buffer.concat(parts));

const original = backend().name;

describe.each(kernels().map((k) => k.name))('SPERLI frame stream (%s)', (name) => {
  beforeAll(() => useBackend(name));
  afterAll(() => useBackend(original));

  const session = concat(
    HELLO,
    data(0, 9),
    data(5, 2 ** 31 - 1),
    data(70, 3, 2), // an older incarnation: dropped
    frame(
      { type: FrameType.COLLECTIVE },
      encodeCollective({ op: 2, elementType: 0, reduceOp: 0, phase: 1, root: 0, sequence: 1n }),
    ),
    frame({ type: FrameType.HEARTBEAT }, encodeHeartbeat(1n)),
    frame({ type: FrameType.CKPT_ACK, epoch: 2n }, encodeCkptAck(sha256('f'))),
    frame(
      { type: FrameType.CKPT_DATA, epoch: 2n },
      encodeCkptData({ kind: 0, rank: 1, offset: 0n, total: 3n, chunk: Uint8Array.of(1, 2, 3) }),
    ),
    frame({ type: FrameType.HELLO, incarnation: 1 }, encodeHello(new Uint8Array(0))), // old: dropped, not a second HELLO
    frame({ type: FrameType.BYE }),
  );

  it('emits frames and drops in order, payloads whole', () => {
    const ev = stream().push(session);
    expect(ev.map((e) => e.kind)).toEqual([
      'frame',
      'frame',
      'frame',
      'drop',
      'frame',
      'frame',
      'frame',
      'frame',
      'drop',
      'frame',
    ]);
    const frames = ev.filter((e) => e.kind === 'frame');
    expect(decodeHello(frames[0]?.payload as Uint8Array).token).toEqual(Uint8Array.of(1, 2, 3));
    expect(frames[1]?.header.tag).toBe(9);
    expect(frames[1]?.payload.length).toBe(0);
    expect(frames[2]?.payload).toEqual(data(5).subarray(52));
    expect(decodeCkptData(frames[6]?.payload as Uint8Array).chunk).toEqual(Uint8Array.of(1, 2, 3));
    expect(ev[3]?.kind === 'drop' && ev[3].header.length).toBe(70);
  });

  it('gives the same events one byte at a time and split at every offset', () => {
    const whole = norm(stream().push(session));
    expect(norm(byteAtATime(session))).toEqual(whole);
    for (let i = 1; i < session.length; i++) expect(norm(feed(session, [i])), `split at ${i}`).toEqual(whole);
  });

  it('gives the same events for any random split of random sessions (property)', () => {
    const item = fc.oneof(
      fc
        .record({ n: fc.nat(300), tag: fc.nat(2 ** 31 - 1), old: fc.boolean() })
        .map(({ n, tag, old }) => data(n, tag, old ? 3 : 4)),
      fc.constant(frame({ type: FrameType.HEARTBEAT }, encodeHeartbeat(7n))),
      fc.constant(frame({ type: FrameType.BYE })),
      fc
        .uint8Array({ maxLength: 40 })
        .map((d) =>
          frame(
            { type: FrameType.COLLECTIVE },
            encodeCollective({ op: 1, elementType: 0, reduceOp: 0, phase: 2, root: 0, sequence: 3n }, d),
          ),
        ),
    );
    const tail = fc.oneof(
      fc.constant(new Uint8Array(0)),
      fc.constant(frame({ type: FrameType.DATA, tag: 2 ** 31 }, Uint8Array.of(1))), // refused
      fc.constant(HELLO), // a second HELLO: refused
      fc.uint8Array({ maxLength: 100 }), // garbage
    );
    fc.assert(
      fc.property(
        fc.array(item, { maxLength: 8 }),
        tail,
        fc.array(fc.nat(4000), { maxLength: 12 }),
        (items, t, cuts) => {
          const bytes = concat(HELLO, ...items, t);
          const whole = norm(stream().push(bytes));
          expect(norm(feed(bytes, cuts))).toEqual(whole);
          expect(norm(byteAtATime(bytes))).toEqual(whole);
        },
      ),
      { numRuns: 200, seed: 19 },
    );
  });

  it('refuses once, then takes nothing more', () => {
    const s = stream();
    const ev = s.push(concat(HELLO, data(1, 2 ** 31), data(1)));
    expect(norm(ev).map((e) => (e as { kind: string }).kind)).toEqual(['frame', 'refuse']);
    expect(ev[1]?.kind === 'refuse' && ev[1].error.details.reason).toBe('tag-reserved');
    expect(s.refused).toBe(true);
    expect(s.push(HELLO)).toEqual([]);
    expect(s.push(data(1))).toEqual([]);
    expect(s.buffered).toBe(0);
  });

  it('takes HELLO first and only once', () => {
    const first = stream().push(data(1));
    expect(first).toHaveLength(1);
    expect(first[0]?.kind === 'refuse' && first[0].error.details.reason).toBe('hello-order');
    const twice = stream().push(concat(HELLO, HELLO));
    expect(twice[1]?.kind === 'refuse' && twice[1].error.details.reason).toBe('hello-order');
  });

  it('refuses from the header alone: a long length, a short COLLECTIVE, a fixed size, before any payload byte', () => {
    const cases: [Uint8Array, string][] = [
      [frame({ type: FrameType.DATA }), 'length'],
      [frame({ type: FrameType.COLLECTIVE }, new Uint8Array(15)), 'collective-short'],
      [frame({ type: FrameType.HEARTBEAT }, new Uint8Array(9)), 'payload-size'],
      [frame({ type: FrameType.CKPT_ACK, epoch: 1n }, new Uint8Array(31)), 'payload-size'],
      [frame({ type: FrameType.BYE }, new Uint8Array(1)), 'payload-size'],
    ];
    for (const [f, reason] of cases) {
      const head = f.subarray(0, 52).slice();
      if (reason === 'length') new DataView(head.buffer).setUint32(0, MAX_PAYLOAD + 1, true);
      const s = stream(true);
      const ev = s.push(head);
      expect(ev.length, reason).toBe(1);
      expect(ev[0]?.kind === 'refuse' && ev[0].error.details.reason).toBe(reason);
      expect(ev[0]?.kind === 'refuse' && ev[0].error.code).toBe('H1610');
    }
  });

  // ARCHITECTURE.md: bad input "never allocates by an attacker-chosen length".
  it('holds only the bytes received: a 16 MiB frame followed by 10 bytes', () => {
    const s = stream(true);
    const head = frame({ type: FrameType.DATA }).slice();
    new DataView(head.buffer).setUint32(0, MAX_PAYLOAD, true);
    expect(s.push(head)).toEqual([]);
    expect(s.push(new Uint8Array(10))).toEqual([]);
    expect(s.buffered).toBe(10);
    expect(s.midFrame).toBe(true);
    let ev: StreamEvent[] = [];
    for (let got = 10; got < MAX_PAYLOAD; got += 1 << 20)
      ev = s.push(new Uint8Array(Math.min(1 << 20, MAX_PAYLOAD - got)));
    expect(ev).toHaveLength(1);
    expect(ev[0]?.kind === 'frame' && ev[0].payload.length).toBe(MAX_PAYLOAD);
    expect(s.buffered).toBe(0);
    expect(s.midFrame).toBe(false);
  });

  // docs/sperli.md: "lower than the receiver's: dropped (payload read and discarded, nothing else)".
  it('skips the payload of a dropped frame as it arrives, holding none of it', () => {
    const s = stream(true);
    const head = frame({ type: FrameType.DATA, incarnation: 3 }).slice();
    new DataView(head.buffer).setUint32(0, 5 << 20, true);
    const ev = s.push(head);
    expect(ev.map((e) => e.kind)).toEqual(['drop']);
    for (let i = 0; i < 5; i++) {
      expect(s.push(new Uint8Array(1 << 20).fill(0xff))).toEqual([]);
      expect(s.buffered).toBe(0);
    }
    expect(s.midFrame).toBe(false);
    expect(s.push(data(3)).map((e) => e.kind)).toEqual(['frame']);
  });

  it('never throws on garbage, refuses at most once and last, and never holds more than it received (property)', () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        fc.uint8Array({ maxLength: 400 }),
        fc.array(fc.nat(400), { maxLength: 8 }),
        (helloFirst, garbage, cuts) => {
          const bytes = helloFirst ? concat(HELLO, garbage) : garbage;
          const s = stream();
          const at = [...new Set(cuts.filter((c) => c > 0 && c < bytes.length))].sort((a, b) => a - b);
          let from = 0;
          const ev: StreamEvent[] = [];
          for (const c of [...at, bytes.length]) {
            ev.push(...s.push(bytes.subarray(from, c)));
            from = c;
            expect(s.buffered).toBeLessThanOrEqual(c);
            expect(s.buffered).toBeLessThanOrEqual(52 + 400);
          }
          const refusals = ev.filter((e) => e.kind === 'refuse');
          expect(refusals.length).toBeLessThanOrEqual(1);
          if (refusals.length === 1) {
            expect(ev[ev.length - 1]?.kind).toBe('refuse');
            expect(refusals[0]?.kind === 'refuse' && refusals[0].error.code).toBe('H1610');
          }
        },
      ),
      { numRuns: 2000, seed: 23 },
    );
  });

  it('holds a header declaring 16 MiB plus garbage as only the garbage (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 64 }), fc.nat(MAX_PAYLOAD), (tail, len) => {
        const s = stream(true);
        const head = frame({ type: FrameType.DATA }).slice();
        new DataView(head.buffer).setUint32(0, Math.max(len, tail.length + 1), true);
        expect(s.push(concat(head, tail))).toEqual([]);
        expect(s.buffered).toBe(tail.length);
      }),
      { numRuns: 200, seed: 29 },
    );
  });

  it('refuses a Uint8Array-less push as misuse', () => {
    expect(() => stream().push('x' as unknown as Uint8Array)).toThrow(TypeError);
  });
});

// ---------------------------------------------------------------------------------------
// vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent of these
// codecs): every frame record, fed to a receiver in the record's position.

const unhex = (s: string) => Uint8Array.from(Buffer.from(s, 'hex'));
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** The verdict of a payload the header accepted, and its decoded fields as the vectors write them. */
function judgePayload(
  type: number,
  p: Uint8Array,
  source: number,
  c: Record<string, string>,
): [string, Record<string, string>] {
  const hosts = (c.hosts as string).split(',').map((h) => h.slice(0, h.lastIndexOf(':')));
  try {
    switch (type) {
      case FrameType.HELLO: {
        const h = decodeHello(p);
        const t = checkJoinToken(
          h.token,
          {
            jobId: unhex(c.job as string),
            headerRank: source,
            certificateRank: source,
            size: Number(c.size),
            incarnation: Number(c.incarnation),
            hosts,
            now: Number(c.now),
          },
          (_m, s) => s.length === 2484, // the vectors' placeholder signatures count as verifying
        );
        return [
          'ok',
          { version: `${h.version}`, capabilities: `${h.capabilities}`, token: hex(h.token), signed: hex(t.message) },
        ];
      }
      case FrameType.DATA:
        return ['ok', { message: hex(p) }];
      case FrameType.COLLECTIVE: {
        const { header: h, data: d } = decodeCollective(p);
        return [
          'ok',
          {
            operation: `${h.op}`,
            element: `${h.elementType}`,
            reduce: `${h.reduceOp}`,
            phase: `${h.phase}`,
            root: `${h.root}`,
            sequence: `${h.sequence}`,
            data: hex(d),
          },
        ];
      }
      case FrameType.HEARTBEAT:
        return ['ok', { counter: `${decodeHeartbeat(p)}` }];
      case FrameType.ABORT: {
        const a = decodeAbort(p);
        return [
          'ok',
          { reason: `${a.reason}`, code: `${a.code}`, rank: `${a.rank}`, text: hex(new TextEncoder().encode(a.text)) },
        ];
      }
      case FrameType.CKPT_BEGIN: {
        const b = decodeCkptBegin(p, Number(c.size));
        return ['ok', { version: `${b.version}`, size: `${b.size}` }];
      }
      case FrameType.CKPT_DATA: {
        const d = decodeCkptData(p);
        return [
          'ok',
          { kind: `${d.kind}`, rank: `${d.rank}`, offset: `${d.offset}`, total: `${d.total}`, chunk: hex(d.chunk) },
        ];
      }
      case FrameType.CKPT_ACK:
        return ['ok', { sha256: hex(decodeCkptAck(p)) }];
      case FrameType.CKPT_COMMIT:
        return ['ok', { commit: hex(p) }];
      case FrameType.RESUME: {
        const r = decodeResume(p);
        return ['ok', { status: `${r.status}`, commit: hex(r.commit ?? new Uint8Array(0)) }];
      }
      default:
        return ['ok', {}];
    }
  } catch (e) {
    if (!isPlexusError(e)) throw e;
    return [`${e.code}:${String(e.details.reason)}`, {}];
  }
}

const HEADER_KEYS = [
  'length',
  'type',
  'flags',
  'service',
  'membership-epoch',
  'job',
  'source',
  'target',
  'incarnation',
  'epoch',
  'tag',
];

function headerFields(h: FrameHeader): Record<string, string> {
  const v = [
    h.length,
    h.type,
    h.flags,
    h.service,
    h.membershipEpoch,
    hex(h.jobId),
    h.sourceRank,
    h.targetRank,
    h.incarnation,
    h.epoch,
    h.tag,
  ];
  return Object.fromEntries(HEADER_KEYS.map((k, i) => [k, `${v[i]}`]));
}

describe.each(kernels().map((k) => k.name))('vectors/sperli-vectors.txt frame records (%s)', (name) => {
  beforeAll(() => useBackend(name));
  afterAll(() => useBackend(original));

  const c = (vectors('context')[0] as VectorRecord).f;
  const records = vectors('frame');

  it('holds frame records', () => {
    expect(records.length).toBeGreaterThan(50);
  });

  it.each(records.map((r) => [r.name, r.f] as const))('%s', (_name, f) => {
    const bytes = unhex(f.bytes as string);
    const expected = Object.fromEntries(HEADER_KEYS.map((k) => [k, f[k]]));
    expect(headerFields(readFrameHeader(bytes))).toEqual(expected);
    for (const cut of [bytes.length, 30]) {
      const ctx = new FrameContext(
        {
          jobId: unhex(c.job as string),
          peerRank: Number(c.peer),
          ownRank: Number(c.self),
          incarnation: Number(c.incarnation),
        },
        { helloReceived: f.position === 'after-hello' },
      );
      const s = new FrameStream(ctx);
      const ev = [...s.push(bytes.subarray(0, cut)), ...s.push(bytes.subarray(cut))];
      const headerOnly = f.omitted !== undefined || f.verdict === 'H1610:length';
      let verdict: string;
      let fields: Record<string, string> = {};
      if (ev.length === 0) {
        expect(headerOnly).toBe(true);
        expect(s.midFrame).toBe(true);
        verdict = 'ok';
      } else {
        expect(ev).toHaveLength(1);
        const e = ev[0] as StreamEvent;
        if (e.kind === 'refuse') verdict = `${e.error.code}:${String(e.error.details.reason)}`;
        else if (e.kind === 'drop') verdict = 'drop';
        else {
          expect(headerFields(e.header)).toEqual(expected);
          [verdict, fields] = judgePayload(e.header.type, e.payload, e.header.sourceRank, c);
        }
      }
      expect(verdict).toBe(f.verdict);
      for (const [k, v] of Object.entries(fields)) expect(v, k).toBe(f[k]);
    }
  });
});
