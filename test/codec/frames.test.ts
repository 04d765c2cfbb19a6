/**
 * The frame assembler of plexus/codec: any chunking yields the frames one chunk yields, a length
 * above the maximum is refused before any payload byte is held, and cut or damaged input is a
 * coded refusal, never a RangeError.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ByteReader, ByteWriter } from '../../ts/codec/bytes.js';
import { FrameAssembler, type FrameFormat } from '../../ts/codec/frames.js';
import { isPlexusError, PlexusError } from '../../ts/core/errors.js';

/** A test format: u32 payload length, u8 tag, then the payload; tag 0xff is refused by the header decoder. */
const HEADER = 5;
function format(maxFrame: number): FrameFormat {
  return {
    headerBytes: HEADER,
    maxFrame,
    frameLength(h) {
      const r = new ByteReader(h);
      const len = r.u32('length');
      if (r.u8('tag') === 0xff) throw new PlexusError('PLX_CODEC_BAD_FORMAT', 'tag 0xff');
      return HEADER + len;
    },
  };
}
function frame(tag: number, payload: Uint8Array): Uint8Array {
  return new ByteWriter().u32(payload.length).u8(tag).bytes(payload).finish().slice();
}
function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
/** Splits `all` at the sorted cut points. */
function chunked(all: Uint8Array, cuts: number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((c) => c % (all.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let from = 0;
  for (const c of [...at, all.length]) {
    out.push(all.slice(from, c));
    from = c;
  }
  return out;
}

const frames = fc.array(
  fc.record({ tag: fc.integer({ min: 0, max: 0xfe }), payload: fc.uint8Array({ maxLength: 40 }) }),
  { maxLength: 12 },
);

describe('FrameAssembler', () => {
  it('yields the same frames for any chunking as for one chunk', () => {
    fc.assert(
      fc.property(frames, fc.array(fc.nat(), { maxLength: 30 }), (fs, cuts) => {
        const wire = fs.map((f) => frame(f.tag, f.payload));
        const all = concat(wire);
        const one = new FrameAssembler(format(1024)).push(all);
        expect(one).toEqual(wire);
        const a = new FrameAssembler(format(1024));
        const got = chunked(all, cuts).flatMap((c) => a.push(c));
        expect(got).toEqual(wire);
        expect(a.buffered).toBe(0);
        expect(a.midFrame).toBe(false);
      }),
      { numRuns: 1000 },
    );
  });

  it('yields the same frames fed one byte at a time', () => {
    const wire = [frame(1, Uint8Array.of(1, 2, 3)), frame(2, new Uint8Array(0)), frame(3, new Uint8Array(100))];
    const a = new FrameAssembler(format(1024));
    const got: Uint8Array[] = [];
    for (const b of concat(wire)) got.push(...a.push(Uint8Array.of(b)));
    expect(got).toEqual(wire);
  });

  it('hands on a frame lying in one chunk as a view, not a copy', () => {
    const all = concat([frame(1, Uint8Array.of(9, 9)), frame(2, Uint8Array.of(8))]);
    const [f1, f2] = new FrameAssembler(format(64)).push(all);
    expect(f1!.buffer).toBe(all.buffer);
    expect(f2!.byteOffset).toBe(all.byteOffset + 7);
  });

  it('refuses a length above the maximum from the header alone, holding no payload byte', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 32 - 1 - HEADER }), fc.integer({ min: 0, max: 4 }), (len, extra) => {
        const max = 64;
        const header = new ByteWriter().u32(len).u8(1).finish();
        const a = new FrameAssembler(format(max));
        // Feed the header in two pieces and a few payload bytes after it.
        const bytes = concat([header, new Uint8Array(extra)]);
        const run = () => [...a.push(bytes.subarray(0, 2)), ...a.push(bytes.subarray(2))];
        if (HEADER + len > max) {
          expect(run).toThrowError(expect.objectContaining({ code: 'PLX_CODEC_FRAME_TOO_LARGE' }));
          expect(a.buffered).toBe(0);
          expect(a.refused).toBe(true);
          // Every later push throws the same refusal.
          expect(() => a.push(Uint8Array.of(0))).toThrowError(
            expect.objectContaining({ code: 'PLX_CODEC_FRAME_TOO_LARGE' }),
          );
        } else {
          expect(run()).toEqual(extra >= len ? [bytes.subarray(0, HEADER + len)] : []);
          expect(a.buffered).toBeLessThanOrEqual(bytes.length);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('holds only the bytes received of a frame that announces more', () => {
    const a = new FrameAssembler(format(16 * 1024 * 1024));
    expect(
      a.push(
        new ByteWriter()
          .u32(16 * 1024 * 1024 - HEADER)
          .u8(1)
          .bytes(new Uint8Array(10))
          .finish(),
      ),
    ).toEqual([]);
    expect(a.buffered).toBe(HEADER + 10);
  });

  it('passes on the header decoder refusal and a length shorter than the header', () => {
    const a = new FrameAssembler(format(64));
    expect(() => a.push(frame(0xff, Uint8Array.of(1)))).toThrowError(
      expect.objectContaining({ code: 'PLX_CODEC_BAD_FORMAT' }),
    );
    const b = new FrameAssembler({ ...format(64), frameLength: () => 2 });
    expect(() => b.push(new Uint8Array(8))).toThrowError(expect.objectContaining({ code: 'PLX_CODEC_BAD_LENGTH' }));
  });

  it('answers random bytes in random chunks with frames or a coded refusal, never anything else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.array(fc.nat(), { maxLength: 10 }), (all, cuts) => {
        const a = new FrameAssembler(format(128));
        try {
          for (const c of chunked(all, cuts)) for (const f of a.push(c)) expect(f.length).toBeLessThanOrEqual(128);
        } catch (e) {
          expect(e).toBeInstanceOf(PlexusError);
          expect(['PLX_CODEC_FRAME_TOO_LARGE', 'PLX_CODEC_BAD_FORMAT']).toContain((e as PlexusError).code);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('ByteReader and ByteWriter', () => {
  it('read back what was written, little-endian', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 255 }),
        fc.integer({ min: 0, max: 0xffff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.maxSafeNat(),
        fc.uint8Array({ maxLength: 50 }),
        (a, b, c, d, e) => {
          const w = new ByteWriter(1).u8(a).u16(b).u32(c).u64(d).lenBytes(e);
          const bytes = w.finish();
          expect(bytes[3]).toBe(c & 0xff);
          const r = new ByteReader(bytes);
          expect([r.u8(), r.u16(), r.u32(), r.u64(), r.lenBytes()]).toEqual([a, b, c, d, e]);
          r.end();
        },
      ),
      { numRuns: 500 },
    );
  });

  it('a fixed writer refuses to run past its buffer', () => {
    const w = new ByteWriter(new Uint8Array(6), 2);
    w.u32(1);
    expect(() => w.u8(1)).toThrowError(expect.objectContaining({ code: 'PLX_CODEC_OVERFLOW' }));
  });

  it('refuses every truncation with a coded error, never a RangeError', () => {
    const full = new ByteWriter()
      .u8(1)
      .u16(2)
      .u32(3)
      .u64(2 ** 40)
      .lenBytes(Uint8Array.of(5, 6, 7))
      .bytes(new Uint8Array(8))
      .finish();
    fc.assert(
      fc.property(fc.integer({ min: 0, max: full.length - 1 }), (cut) => {
        const r = new ByteReader(full.subarray(0, cut));
        try {
          r.u8();
          r.u16();
          r.u32();
          r.u64();
          r.lenBytes();
          r.u64be();
          expect.unreachable();
        } catch (e) {
          expect(isPlexusError(e, 'PLX_CODEC_SHORT')).toBe(true);
        }
      }),
    );
  });

  it('refuses a u64 above 2^53 - 1 and random bytes never crash a read', () => {
    expect(() => new ByteReader(new Uint8Array(8).fill(0xff)).u64()).toThrowError(
      expect.objectContaining({ code: 'PLX_CODEC_RANGE' }),
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (b) => {
        const r = new ByteReader(b);
        try {
          while (r.left > 0) {
            r.lenBytes();
            r.u64();
            r.u64be();
          }
        } catch (e) {
          expect(e).toBeInstanceOf(PlexusError);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('FrameAssembler.feed', () => {
  /** Feeds `chunks`; frames with tag 1 are skipped, tag 2 handed on in pieces, the rest held. */
  function run(chunks: Uint8Array[], transient: boolean) {
    const a = new FrameAssembler(format(1 << 20));
    const events: string[] = [];
    let pieces: number[] = [];
    let peak = 0;
    const sink = {
      begin: (h: Uint8Array): 'hold' | 'skip' | 'pieces' => (h[4] === 1 ? 'skip' : h[4] === 2 ? 'pieces' : 'hold'),
      frame: (f: Uint8Array) => events.push(`frame ${f[4]} ${[...f.subarray(HEADER)].join(',')}`),
      piece: (c: Uint8Array, at: number, n: number) => pieces.push(...c.subarray(at, at + n)),
      end: () => {
        events.push(`pieces ${pieces.join(',')}`);
        pieces = [];
      },
    };
    for (const c of chunks) {
      const mine = c.slice();
      a.feed(mine, sink, transient);
      if (transient) mine.fill(0xee); // a reused read buffer: nothing may still point at it
      peak = Math.max(peak, a.buffered);
    }
    return { events, midFrame: a.midFrame, peak };
  }

  it('holds, skips or hands on in pieces per frame, the same for any chunking, transient or not', () => {
    fc.assert(
      fc.property(frames, fc.array(fc.nat(), { maxLength: 10 }), fc.boolean(), (fs, cuts, transient) => {
        const all = concat(fs.map((f) => frame(f.tag, f.payload)));
        const want = fs.flatMap((f) =>
          f.tag === 1
            ? []
            : f.tag === 2
              ? [`pieces ${[...f.payload].join(',')}`]
              : [`frame ${f.tag} ${[...f.payload].join(',')}`],
        );
        const got = run(chunked(all, cuts), transient);
        expect(got.events).toEqual(want);
        expect(got.midFrame).toBe(false);
        if (!transient) {
          const heldMax = Math.max(
            0,
            ...fs.filter((f) => f.tag > 2 || f.tag === 0).map((f) => HEADER + f.payload.length),
          );
          expect(got.peak).toBeLessThanOrEqual(Math.max(heldMax, HEADER));
        }
      }),
      { numRuns: 500, seed: 41 },
    );
  });

  it('skips a large frame as it arrives, holding none of it', () => {
    const a = new FrameAssembler(format(1 << 24));
    const head = frame(1, new Uint8Array(0));
    new DataView(head.buffer).setUint32(0, 1 << 22, true);
    const sink = { begin: () => 'skip' as const, frame: () => expect.unreachable() };
    a.feed(head, sink);
    for (let i = 0; i < 4; i++) {
      a.feed(new Uint8Array(1 << 20), sink);
      expect(a.buffered).toBe(0);
    }
    expect(a.midFrame).toBe(false);
  });

  it('lets a sink take whole frames by its own path, and keeps a refusal it reports', () => {
    const a = new FrameAssembler(format(64));
    const seen: number[] = [];
    const sink = {
      whole: (c: Uint8Array, pos: number): number => {
        if (c[pos + 4] === 7) a.refuse(new PlexusError('PLX_CODEC_BAD_FORMAT', 'tag 7'));
        if (c[pos + 4] !== 9) return 0;
        seen.push(-1);
        return HEADER + (c[pos] as number);
      },
      frame: (f: Uint8Array) => seen.push(f[4] as number),
    };
    a.feed(concat([frame(9, Uint8Array.of(1)), frame(3, Uint8Array.of(2)), frame(9, new Uint8Array(0))]), sink);
    expect(seen).toEqual([-1, 3, -1]);
    expect(() => a.feed(frame(7, new Uint8Array(0)), sink)).toThrow(/tag 7/);
    expect(a.refused).toBe(true);
    expect(() => a.feed(frame(3, new Uint8Array(0)), sink)).toThrow(/tag 7/);
  });
});
