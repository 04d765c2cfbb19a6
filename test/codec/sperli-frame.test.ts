import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  carriesEpoch,
  decodeFrameHeader,
  encodeFrame,
  encodeFrameHeader,
  endsMessage,
  FRAME_HEADER_SIZE,
  FrameContext,
  type FrameHeader,
  FrameType,
  frameTypeName,
  type HeaderOutcome,
  MAX_PAYLOAD,
  payloadBounds,
  readFrameHeader,
  splitMessage,
} from '../../ts/codec/sperli-frame.js';
import { backend, isPlexusError, kernels, useBackend } from '../../ts/core/index.js';
import { vectors } from '../helpers/sperli-vectors.js';

const JOB = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);
const EXPECT = { jobId: JOB, peerRank: 3, ownRank: 5, incarnation: 7 };

/** A raw header, every field as on the wire (for writing bytes independently of the codec). */
interface Raw {
  length: number;
  type: number;
  flags: number;
  service: number;
  membershipEpoch: number;
  jobId: Uint8Array;
  sourceRank: number;
  targetRank: number;
  incarnation: number;
  tag: number;
  epoch: bigint;
}

/** Writes a header with DataView, field by field at the offsets of docs/sperli.md. */
function writeRaw(h: Raw): Uint8Array {
  const b = new Uint8Array(52);
  const dv = new DataView(b.buffer);
  dv.setUint32(0, h.length, true);
  dv.setUint8(4, h.type);
  dv.setUint8(5, h.flags);
  dv.setUint16(6, h.service, true);
  dv.setUint32(8, h.membershipEpoch, true);
  b.set(h.jobId, 12);
  dv.setUint32(28, h.sourceRank, true);
  dv.setUint32(32, h.targetRank, true);
  dv.setUint32(36, h.incarnation, true);
  dv.setBigUint64(40, h.epoch, true);
  dv.setUint32(48, h.tag, true);
  return b;
}

function good(type: number, length: number, extra: Partial<Raw> = {}): Raw {
  return {
    length,
    type,
    flags: 0,
    service: 0,
    membershipEpoch: 0,
    jobId: JOB,
    sourceRank: 3,
    targetRank: 5,
    incarnation: 7,
    tag: 0,
    epoch: carriesEpoch(type) ? 9n : 0n,
    ...extra,
  };
}

/** A length each type accepts. */
const OK_LENGTH: Record<number, number> = {
  1: 10,
  2: 5,
  3: 16,
  4: 8,
  5: 14,
  6: 8,
  7: 24,
  8: 32,
  9: 2558,
  10: 4,
  11: 0,
};

function ctx(helloReceived = true): FrameContext {
  return new FrameContext(EXPECT, { helloReceived });
}

function verdictOf(o: HeaderOutcome): string {
  if (o.kind === 'refuse') {
    expect(o.error.code).toBe('H1610');
    return String(o.error.details.reason);
  }
  return o.kind;
}

function judge(h: Raw, helloReceived = true): string {
  return verdictOf(decodeFrameHeader(ctx(helloReceived), writeRaw(h)));
}

const eqBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * The outcome docs/sperli.md predicts, written as plainly as the table reads: the header
 * checks in their order, then HELLO order, then the payload size of the type.
 */
function predict(h: Raw, helloReceived: boolean): string {
  if (h.length > 16777216) return 'length';
  if (h.type < 1 || h.type > 11) return 'type';
  if (h.flags !== 0) return 'flags';
  if (h.service !== 0) return 'service';
  if (h.membershipEpoch !== 0) return 'membership-epoch';
  if (!eqBytes(h.jobId, JOB)) return 'job-id';
  if (h.sourceRank !== 3) return 'source-rank';
  if (h.targetRank !== 5) return 'target-rank';
  if (h.incarnation > 7) return 'incarnation';
  if (h.incarnation < 7) return 'drop';
  if (!(h.type >= 6 && h.type <= 10) && h.epoch !== 0n) return 'epoch';
  if (h.type === 2 && h.tag >= 2 ** 31) return 'tag-reserved';
  if (h.type !== 2 && h.tag !== 0) return 'tag-nonzero';
  if (h.type === 1 && helloReceived) return 'hello-order';
  if (h.type !== 1 && !helloReceived) return 'hello-order';
  const n = h.length;
  switch (h.type) {
    case 1:
      return n >= 10 && n <= 10 + 4096 ? 'accept' : 'hello';
    case 3:
      return n >= 16 ? 'accept' : 'collective-short';
    case 4:
    case 6:
      return n === 8 ? 'accept' : 'payload-size';
    case 5:
      return n >= 14 && n <= 14 + 1024 ? 'accept' : 'payload-size';
    case 7:
      return n >= 24 && n <= 24 + 1048576 ? 'accept' : 'ckpt-data';
    case 8:
      return n === 32 ? 'accept' : 'payload-size';
    case 10:
      return n >= 4 ? 'accept' : 'payload-size';
    case 11:
      return n === 0 ? 'accept' : 'payload-size';
    default:
      return 'accept';
  }
}

const original = backend().name;

describe.each(kernels().map((k) => k.name))('SPERLI frame header (%s)', (name) => {
  beforeAll(() => useBackend(name));
  afterAll(() => useBackend(original));

  it('writes every field at its documented offset, little endian', () => {
    const f = encodeFrame(
      { type: FrameType.CKPT_DATA, jobId: JOB, sourceRank: 0x01020304, targetRank: 5, incarnation: 7, epoch: 0x1122n },
      Uint8Array.of(0xee, 0xff),
    );
    expect(f.length).toBe(54);
    const hex = Buffer.from(f).toString('hex');
    expect(hex).toBe(
      '02000000' + // length 2
        '07' + // type CKPT_DATA
        '00' + // flags
        '0000' + // service
        '00000000' + // membership epoch
        'a0a1a2a3a4a5a6a7a8a9aaabacadaeaf' + // job id
        '04030201' + // source rank
        '05000000' + // target rank
        '07000000' + // incarnation
        '2211000000000000' + // epoch
        '00000000' + // tag
        'eeff',
    );
    expect(readFrameHeader(f)).toEqual({ ...good(7, 2), sourceRank: 0x01020304, epoch: 0x1122n });
  });

  it('accepts a valid frame of every type', () => {
    for (let t = 1; t <= 11; t++) {
      expect(judge(good(t, OK_LENGTH[t] as number), t !== 1), frameTypeName(t)).toBe('accept');
    }
  });

  it('refuses each header field with its reason', () => {
    const cases: [Partial<Raw>, string][] = [
      [{ length: MAX_PAYLOAD + 1 }, 'length'],
      [{ length: 0xffffffff }, 'length'],
      [{ type: 0 }, 'type'],
      [{ type: 12 }, 'type'],
      [{ type: 255 }, 'type'],
      [{ flags: 1 }, 'flags'],
      [{ flags: 0x80 }, 'flags'],
      [{ service: 1 }, 'service'],
      [{ membershipEpoch: 1 }, 'membership-epoch'],
      [{ jobId: new Uint8Array(16) }, 'job-id'],
      [{ sourceRank: 4 }, 'source-rank'],
      [{ targetRank: 4 }, 'target-rank'],
      [{ incarnation: 8 }, 'incarnation'],
      [{ incarnation: 6 }, 'drop'],
      [{ incarnation: 0 }, 'drop'],
      [{ tag: 2 ** 31 }, 'tag-reserved'],
      [{ tag: 0xffffffff }, 'tag-reserved'],
      [{ tag: 2 ** 31 - 1 }, 'accept'],
      [{ epoch: 1n }, 'epoch'],
    ];
    for (const [patch, want] of cases) expect(judge({ ...good(2, 5), ...patch }), Object.keys(patch).join()).toBe(want);
  });

  it('gives the error H1610 with a message that names the value and what is allowed', () => {
    const o = decodeFrameHeader(ctx(), writeRaw({ ...good(2, 5), sourceRank: 9 }));
    expect(o.kind).toBe('refuse');
    if (o.kind !== 'refuse') return;
    expect(isPlexusError(o.error, 'H1610')).toBe(true);
    expect(o.error.details).toMatchObject({ reason: 'source-rank', sourceRank: 9 });
    expect(o.error.message).toMatch(/source rank 9 .* peer's rank 3/);
    expect(o.header.sourceRank).toBe(9);
  });

  // docs/sperli.md: "The two tag rules come last, after the incarnation, so a frame of an
  // older incarnation is dropped without a verdict on its tag (or its epoch)."
  it('checks epoch and tags after the incarnation: an old frame with a reserved tag is dropped', () => {
    expect(judge({ ...good(2, 5), incarnation: 6, tag: 2 ** 31 })).toBe('drop');
    expect(judge({ ...good(3, 16), incarnation: 6, tag: 1, epoch: 3n })).toBe('drop');
    expect(judge({ ...good(2, 5), incarnation: 8, tag: 2 ** 31 })).toBe('incarnation');
    expect(judge({ ...good(2, 5), tag: 2 ** 31, epoch: 1n })).toBe('epoch');
    expect(judge({ ...good(4, 8), tag: 1, epoch: 1n })).toBe('epoch');
    expect(judge({ ...good(8, 32), tag: 1, epoch: 1n })).toBe('tag-nonzero');
  });

  it('allows a tag on DATA only and an epoch on types 6..10 only, the tag rules last', () => {
    for (let t = 1; t <= 11; t++) {
      const n = OK_LENGTH[t] as number;
      const hello = t !== 1;
      expect(judge({ ...good(t, n), tag: 1 }, hello)).toBe(t === 2 ? 'accept' : 'tag-nonzero');
      expect(judge({ ...good(t, n), epoch: 1n }, hello)).toBe(t >= 6 && t <= 10 ? 'accept' : 'epoch');
      expect(judge({ ...good(t, n), epoch: 0xffff_ffff_ffff_ffffn }, hello)).toBe(carriesEpoch(t) ? 'accept' : 'epoch');
      expect(judge({ ...good(t, n), epoch: 0n }, hello)).toBe('accept');
      if (t !== 2)
        expect(judge({ ...good(t, n), tag: 1, epoch: 1n }, hello)).toBe(carriesEpoch(t) ? 'tag-nonzero' : 'epoch');
    }
  });

  it('lets the first failing check win, the length before all', () => {
    const all: Raw = {
      length: MAX_PAYLOAD + 1,
      type: 0,
      flags: 1,
      service: 1,
      membershipEpoch: 1,
      jobId: new Uint8Array(16),
      sourceRank: 0,
      targetRank: 0,
      incarnation: 99,
      tag: 2 ** 31,
      epoch: 1n,
    };
    const order = ['length', 'type', 'flags', 'service', 'membership-epoch', 'job-id', 'source-rank', 'target-rank'];
    // the fixes in the order of the checks; the last three: incarnation, epoch, tag
    const fix: Partial<Raw>[] = [
      { length: 5 },
      { type: 2 },
      { flags: 0 },
      { service: 0 },
      { membershipEpoch: 0 },
      { jobId: JOB },
      { sourceRank: 3 },
      { targetRank: 5 },
      { incarnation: 7 },
      { epoch: 0n },
      { tag: 0 },
    ];
    let h = all;
    order.forEach((reason, i) => {
      expect(judge(h)).toBe(reason);
      h = { ...h, ...fix[i] };
    });
    expect(judge(h)).toBe('incarnation');
    h = { ...h, ...fix[8] };
    expect(judge(h)).toBe('epoch');
    h = { ...h, ...fix[9] };
    expect(judge(h)).toBe('tag-reserved');
    h = { ...h, ...fix[10] };
    expect(judge(h)).toBe('accept');
  });

  it('accepts the largest payload and refuses one more, before anything else', () => {
    expect(judge(good(2, MAX_PAYLOAD))).toBe('accept');
    expect(judge({ ...good(2, MAX_PAYLOAD + 1), type: 0, jobId: new Uint8Array(16) })).toBe('length');
  });

  // docs/sperli.md: "After every header check has passed, per type, before the payload is
  // read (in this order): HELLO [...] COLLECTIVE: a length below 16 [...] HEARTBEAT: length 8;
  // CKPT_ACK: length 32; CKPT_BEGIN: length 8; BYE: length 0".
  it('refuses by type, before the payload: a short COLLECTIVE, fixed sizes, HELLO order', () => {
    expect(judge(good(3, 15))).toBe('collective-short');
    expect(judge(good(3, 0))).toBe('collective-short');
    expect(judge(good(3, MAX_PAYLOAD))).toBe('accept');
    for (const [t, n] of [
      [4, 8],
      [6, 8],
      [8, 32],
      [11, 0],
    ] as const) {
      expect(judge(good(t, n))).toBe('accept');
      expect(judge(good(t, n + 1))).toBe('payload-size');
      if (n > 0) expect(judge(good(t, n - 1))).toBe('payload-size');
    }
    expect(judge(good(1, 9), false)).toBe('hello');
    expect(judge(good(1, 4107), false)).toBe('hello');
    expect(judge(good(1, 4106), false)).toBe('accept');
    expect(judge(good(5, 13))).toBe('payload-size');
    expect(judge(good(5, 1039))).toBe('payload-size');
    expect(judge(good(7, 23))).toBe('ckpt-data');
    expect(judge(good(7, 24 + 1048577))).toBe('ckpt-data');
    expect(judge(good(9, 0))).toBe('accept'); // a COMMIT file is judged as one (H1621)
    expect(judge(good(10, 3))).toBe('payload-size');
    expect(judge(good(10, MAX_PAYLOAD))).toBe('accept');
    expect(payloadBounds(12)).toBeUndefined();
    expect(payloadBounds(4)).toEqual({ min: 8, max: 8, reason: 'payload-size' });
  });

  it('takes HELLO first and once; a dropped frame does not count', () => {
    const c = ctx(false);
    const hello = writeRaw(good(1, 10));
    expect(verdictOf(decodeFrameHeader(c, writeRaw(good(2, 5))))).toBe('hello-order');
    // HELLO order comes before the sizes of the type
    expect(verdictOf(decodeFrameHeader(c, writeRaw(good(3, 2))))).toBe('hello-order');
    expect(verdictOf(decodeFrameHeader(c, writeRaw(good(4, 2))))).toBe('hello-order');
    expect(verdictOf(decodeFrameHeader(c, writeRaw({ ...good(2, 5), incarnation: 1 })))).toBe('drop');
    expect(c.helloReceived).toBe(false);
    expect(verdictOf(decodeFrameHeader(c, writeRaw(good(1, 4200))))).toBe('hello');
    expect(c.helloReceived).toBe(false);
    expect(verdictOf(decodeFrameHeader(c, hello))).toBe('accept');
    expect(c.helloReceived).toBe(true);
    expect(verdictOf(decodeFrameHeader(c, hello))).toBe('hello-order');
    expect(verdictOf(decodeFrameHeader(c, writeRaw(good(2, 5))))).toBe('accept');
  });

  it('takes new expected values through update() (schema.set)', () => {
    const c = ctx();
    const h = writeRaw(good(2, 5));
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('accept');
    c.update({ incarnation: 8 });
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('drop');
    c.update({ incarnation: 6 });
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('incarnation');
    c.update({ incarnation: 7, peerRank: 4 });
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('source-rank');
    c.update({ peerRank: 3, ownRank: 6 });
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('target-rank');
    c.update({ ownRank: 5, jobId: new Uint8Array(16) });
    expect(verdictOf(decodeFrameHeader(c, h))).toBe('job-id');
    expect(c.expectations.jobId).toEqual(new Uint8Array(16));
  });

  it('refuses misuse: a header shorter than 52 bytes, bad expectations, an oversized payload', () => {
    expect(() => decodeFrameHeader(ctx(), new Uint8Array(51))).toThrow(RangeError);
    expect(() => readFrameHeader(new Uint8Array(10))).toThrow(RangeError);
    expect(() => new FrameContext({ ...EXPECT, jobId: new Uint8Array(15) })).toThrow(RangeError);
    expect(() => new FrameContext({ ...EXPECT, peerRank: -1 })).toThrow(RangeError);
    expect(() => encodeFrameHeader({ ...good(2, 0), length: MAX_PAYLOAD + 1 })).toThrow(/split/);
    expect(() => encodeFrameHeader({ ...good(2, 0), tag: 2 ** 32 })).toThrow(/does not fit/);
  });

  it('decodes every encoded frame to itself (property)', () => {
    const arb = fc.record({
      type: fc.integer({ min: 1, max: 11 }),
      tag: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
      epoch: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
      payload: fc.uint8Array({ maxLength: 64 }),
    });
    fc.assert(
      fc.property(arb, ({ type, tag, epoch, payload }) => {
        const n = Math.max(payloadBounds(type)?.min ?? 0, Math.min(payload.length, payloadBounds(type)?.max ?? 0));
        const body = new Uint8Array(n);
        body.set(payload.subarray(0, n));
        const init = {
          type,
          jobId: JOB,
          sourceRank: 3,
          targetRank: 5,
          incarnation: 7,
          tag: type === 2 ? tag : 0,
          epoch: carriesEpoch(type) ? epoch : 0n,
        };
        const f = encodeFrame(init, body);
        const want: FrameHeader = { ...good(type, n), tag: init.tag, epoch: init.epoch };
        expect(f.subarray(0, 52)).toEqual(writeRaw(want));
        expect(f.subarray(52)).toEqual(body);
        const o = decodeFrameHeader(ctx(type !== 1), f);
        expect(o).toEqual({ kind: 'accept', header: want });
      }),
      { numRuns: 300, seed: 1 },
    );
  });

  it('gives exactly the predicted verdict for every single-field mutation of a valid header (property)', () => {
    const field = fc.constantFrom<keyof Raw>(
      'length',
      'type',
      'flags',
      'service',
      'membershipEpoch',
      'jobId',
      'sourceRank',
      'targetRank',
      'incarnation',
      'tag',
      'epoch',
    );
    const u32 = fc.oneof(
      fc.constantFrom(
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        15,
        16,
        24,
        32,
        2 ** 31 - 1,
        2 ** 31,
        0xffffffff,
        MAX_PAYLOAD,
        MAX_PAYLOAD + 1,
      ),
      fc.integer({ min: 0, max: 0xffffffff }),
    );
    const arb = fc.record({
      type: fc.integer({ min: 1, max: 11 }),
      field,
      value: u32,
      byte: fc.integer({ min: 0, max: 255 }),
      epoch: fc.oneof(fc.constantFrom(0n, 1n, (1n << 64n) - 1n), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })),
      jobByte: fc.nat(15),
    });
    const seen = new Set<string>();
    fc.assert(
      fc.property(arb, ({ type, field, value, byte, epoch, jobByte }) => {
        const base = good(type, OK_LENGTH[type] as number);
        const helloReceived = type !== 1;
        expect(predict(base, helloReceived)).toBe('accept');
        const h: Raw = { ...base, jobId: base.jobId.slice() };
        if (field === 'type' || field === 'flags') h[field] = byte;
        else if (field === 'service') h.service = value & 0xffff;
        else if (field === 'epoch') h.epoch = epoch;
        else if (field === 'jobId') h.jobId[jobByte] = byte;
        else h[field] = value;
        const got = judge(h, helloReceived);
        seen.add(got);
        expect(got).toBe(predict(h, helloReceived));
      }),
      { numRuns: 3000, seed: 7 },
    );
    // the mutations reach every outcome of the header checks
    for (const r of [
      'accept',
      'drop',
      'length',
      'type',
      'flags',
      'service',
      'membership-epoch',
      'job-id',
      'source-rank',
      'target-rank',
      'incarnation',
      'tag-reserved',
      'tag-nonzero',
      'epoch',
      'hello-order',
      'payload-size',
    ]) {
      expect(seen, r).toContain(r);
    }
  });
});

describe('messages larger than one frame', () => {
  it('splits into full frames and a shorter last one, possibly empty', () => {
    const sizes = (n: number, per: number) => splitMessage(new Uint8Array(n), per).map((p) => p.length);
    expect(sizes(0, 4)).toEqual([0]);
    expect(sizes(3, 4)).toEqual([3]);
    expect(sizes(4, 4)).toEqual([4, 0]);
    expect(sizes(9, 4)).toEqual([4, 4, 1]);
    expect(sizes(8, 4)).toEqual([4, 4, 0]);
    expect(splitMessage(new Uint8Array(1)).map((p) => p.length)).toEqual([1]);
    expect(endsMessage(MAX_PAYLOAD)).toBe(false);
    expect(endsMessage(MAX_PAYLOAD - 1)).toBe(true);
    expect(endsMessage(0)).toBe(true);
    expect(endsMessage(16777200, 16777200)).toBe(false);
    const m = Uint8Array.from({ length: 10 }, (_, i) => i);
    expect(Buffer.concat(splitMessage(m, 3))).toEqual(Buffer.from(m));
  });

  it('names the frame types', () => {
    expect(frameTypeName(1)).toBe('HELLO');
    expect(frameTypeName(11)).toBe('BYE');
    expect(frameTypeName(12)).toBe('type 12');
    expect(FRAME_HEADER_SIZE).toBe(52);
  });
});

// ---------------------------------------------------------------------------------------
// vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent of these codecs)

describe('vectors/sperli-vectors.txt: frame headers', () => {
  it('encodes the header of every frame record to its bytes', () => {
    const records = vectors('frame').filter((r) => Number(r.f.length) <= MAX_PAYLOAD);
    expect(records.length).toBeGreaterThan(50);
    for (const { name, f } of records) {
      const h = encodeFrameHeader({
        length: Number(f.length),
        type: Number(f.type),
        flags: Number(f.flags),
        service: Number(f.service),
        membershipEpoch: Number(f['membership-epoch']),
        jobId: Uint8Array.from(Buffer.from(f.job as string, 'hex')),
        sourceRank: Number(f.source),
        targetRank: Number(f.target),
        incarnation: Number(f.incarnation),
        epoch: BigInt(f.epoch as string),
        tag: Number(f.tag),
      });
      expect(Buffer.from(h).toString('hex'), name).toBe((f.bytes as string).slice(0, 104));
    }
  });
});
