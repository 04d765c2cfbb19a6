import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import * as js from '../../ts/core/js/sha256.js';
import type { Sha256Stream } from '../../ts/core/types.js';
import { wasmRuntime } from '../../ts/core/wasm/runtime.js';
import * as wasm from '../../ts/core/wasm/sha256.js';
import { randomBytes, rng } from '../helpers/rng.js';

interface Impl {
  name: string;
  sha256(data: Uint8Array): Uint8Array;
  stream(): Sha256Stream;
  sha256Batch(data: Uint8Array, offsets: Uint32Array): Uint8Array;
}

const impls: Impl[] = [
  { name: 'js', sha256: js.sha256, stream: () => new js.Sha256Js(), sha256Batch: js.sha256Batch },
  { name: 'wasm', sha256: wasm.sha256, stream: () => new wasm.Sha256Wasm(), sha256Batch: wasm.sha256Batch },
];

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
const ascii = (s: string): Uint8Array => new TextEncoder().encode(s);
const nodeSha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** FIPS 180-4 examples (NIST CSRC "Examples with Intermediate Values") and the long-message test. */
const KNOWN: { label: string; input: () => Uint8Array; want: string }[] = [
  {
    label: 'empty',
    input: () => new Uint8Array(0),
    want: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  },
  {
    label: '"abc"',
    input: () => ascii('abc'),
    want: 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
  },
  {
    label: '448-bit message',
    input: () => ascii('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'),
    want: '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
  },
  {
    label: '896-bit message',
    input: () =>
      ascii(
        'abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu',
      ),
    want: 'cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1',
  },
  {
    label: 'one million "a"',
    input: () => new Uint8Array(1_000_000).fill(0x61),
    want: 'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0',
  },
];

/** Packs messages back to back; offsets start at `base` (bytes before it are filler). */
function pack(messages: Uint8Array[], base = 0): { data: Uint8Array; offsets: Uint32Array } {
  const total = messages.reduce((s, m) => s + m.length, base);
  const data = new Uint8Array(total).fill(0xee);
  const offsets = new Uint32Array(messages.length + 1);
  let o = base;
  offsets[0] = o;
  messages.forEach((m, i) => {
    data.set(m, o);
    o += m.length;
    offsets[i + 1] = o;
  });
  return { data, offsets };
}

/** A copy of `bytes` at byte offset `shift` inside a larger buffer. */
function shifted(bytes: Uint8Array, shift: number): Uint8Array {
  const b = new Uint8Array(bytes.length + shift + 3).fill(0xa5);
  b.set(bytes, shift);
  return b.subarray(shift, shift + bytes.length);
}

/** A view of a fresh arena block holding `bytes` (the block is returned for release). */
function inArena(bytes: Uint8Array, shift = 0): { view: Uint8Array; ptr: number; size: number } {
  const arena = wasmRuntime().arena;
  const size = bytes.length + shift;
  const ptr = arena.alloc(size);
  const view = new Uint8Array(arena.buffer, ptr + shift, bytes.length);
  view.set(bytes);
  return { view, ptr, size };
}

function streamDigest(impl: Impl, data: Uint8Array, cuts: number[]): string {
  const s = impl.stream();
  let prev = 0;
  for (const c of [...cuts, data.length]) {
    s.update(data.subarray(prev, c));
    prev = c;
  }
  return hex(s.digest());
}

const EDGE_LENGTHS = [0, 55, 56, 63, 64, 65, 119, 120, 1000];

describe.each(impls)('SHA-256 ($name)', (impl) => {
  it.each(KNOWN)('matches FIPS 180-4 for the $label', ({ input, want }) => {
    const data = input();
    expect(hex(impl.sha256(data))).toBe(want);
    expect(streamDigest(impl, data, [])).toBe(want);
    expect(streamDigest(impl, data, [Math.floor(data.length / 3), Math.floor(data.length / 2)])).toBe(want);
    const { data: packed, offsets } = pack([data]);
    expect(hex(impl.sha256Batch(packed, offsets))).toBe(want);
  });

  it('agrees with node:crypto at every length 0..300', () => {
    const next = rng(0x5a256);
    for (let n = 0; n <= 300; n++) {
      const data = randomBytes(next, n);
      expect(hex(impl.sha256(data)), `length ${n}`).toBe(nodeSha(data));
    }
  });

  it('agrees with node:crypto on 1 MiB and on inputs larger than the 1 MiB copy chunk', () => {
    const next = rng(77);
    for (const n of [1 << 20, (1 << 20) + 1, 2 * (1 << 20) + 13]) {
      const data = randomBytes(next, n);
      expect(hex(impl.sha256(data)), `length ${n}`).toBe(nodeSha(data));
      const s = impl.stream();
      s.update(data.subarray(0, 5));
      s.update(data.subarray(5));
      expect(hex(s.digest()), `stream, length ${n}`).toBe(nodeSha(data));
    }
  });

  it('streams with every split point of a 200-byte message', () => {
    const data = randomBytes(rng(200), 200);
    const want = nodeSha(data);
    for (let c = 0; c <= 200; c++) expect(streamDigest(impl, data, [c]), `split at ${c}`).toBe(want);
    for (let c = 0; c <= 200; c += 7) {
      for (let d = c; d <= 200; d += 13) expect(streamDigest(impl, data, [c, d]), `splits ${c}, ${d}`).toBe(want);
    }
  });

  it('streams with random chunkings, including empty updates', () => {
    const next = rng(31337);
    for (let round = 0; round < 60; round++) {
      const n = next() % 3000;
      const data = randomBytes(next, n);
      const cuts: number[] = [];
      let at = 0;
      while (at < n) {
        at = Math.min(n, at + (next() % 4 === 0 ? 0 : next() % 150));
        cuts.push(at);
      }
      expect(streamDigest(impl, data, cuts), `round ${round}`).toBe(nodeSha(data));
    }
  });

  it('refuses a stream that was already digested', () => {
    const s = impl.stream();
    s.update(ascii('abc'));
    expect(hex(s.digest())).toBe(KNOWN[1]?.want);
    const code = (f: () => unknown): string | undefined => {
      try {
        f();
      } catch (e) {
        return isPlexusError(e) ? e.code : 'other';
      }
      return undefined;
    };
    expect(code(() => s.digest())).toBe('PLX_CORE_DIGESTED');
    expect(code(() => s.update(ascii('x')))).toBe('PLX_CORE_DIGESTED');
  });

  it('hashes batches of equal and mixed lengths like one message at a time', () => {
    const next = rng(4096);
    const check = (messages: Uint8Array[], label: string, base = 0): void => {
      const { data, offsets } = pack(messages, base);
      const out = impl.sha256Batch(data, offsets);
      expect(out.length, label).toBe(messages.length * 32);
      messages.forEach((m, i) => {
        const want = nodeSha(m);
        expect(hex(out.subarray(i * 32, i * 32 + 32)), `${label}, message ${i}`).toBe(want);
        expect(hex(impl.sha256(m)), `${label}, one-shot ${i}`).toBe(want);
      });
    };
    for (const count of [0, 1, 3, 4, 5, 8, 17]) {
      for (const len of EDGE_LENGTHS) {
        check(
          Array.from({ length: count }, () => randomBytes(next, len)),
          `count ${count}, all of length ${len}`,
        );
      }
      check(
        Array.from({ length: count }, () => randomBytes(next, EDGE_LENGTHS[next() % EDGE_LENGTHS.length] as number)),
        `count ${count}, mixed lengths`,
      );
      // Runs of equal lengths that do not start at a multiple of four.
      check(
        Array.from({ length: count }, (_, i) => randomBytes(next, i === 0 ? 7 : i < 6 ? 64 : 120)),
        `count ${count}, runs`,
        13,
      );
    }
    // Four-lane groups broken by one different length at each position.
    for (const [same, other] of [
      [64, 65],
      [0, 1],
      [120, 119],
      [56, 55],
    ] as const) {
      for (let at = 0; at < 5; at++) {
        check(
          Array.from({ length: 5 }, (_, i) => randomBytes(next, i === at ? other : same)),
          `length ${other} at ${at} among ${same}`,
        );
      }
    }
    expect(impl.sha256Batch(new Uint8Array(0), new Uint32Array(1)).length).toBe(0);
    expect(impl.sha256Batch(new Uint8Array(0), new Uint32Array(0)).length).toBe(0);
  });

  it('hashes many 64-byte messages (the four-lane path) like node:crypto', () => {
    const next = rng(64);
    const messages = Array.from({ length: 203 }, () => randomBytes(next, 64));
    const { data, offsets } = pack(messages);
    const out = impl.sha256Batch(data, offsets);
    messages.forEach((m, i) => {
      expect(hex(out.subarray(i * 32, i * 32 + 32)), `message ${i}`).toBe(nodeSha(m));
    });
  });

  it('reads inputs at unaligned byte offsets', () => {
    const next = rng(9);
    for (const shift of [1, 2, 3, 5, 7]) {
      for (const n of [0, 3, 55, 64, 65, 130, 1000]) {
        const data = randomBytes(next, n);
        const view = shifted(data, shift);
        expect(hex(impl.sha256(view)), `shift ${shift}, length ${n}`).toBe(nodeSha(data));
        expect(streamDigest(impl, view, [Math.floor(n / 2)]), `stream, shift ${shift}, length ${n}`).toBe(
          nodeSha(data),
        );
      }
      const messages = Array.from({ length: 9 }, (_, i) => randomBytes(next, i < 8 ? 64 : 33));
      const { data, offsets } = pack(messages);
      const out = impl.sha256Batch(shifted(data, shift), offsets);
      messages.forEach((m, i) => {
        expect(hex(out.subarray(i * 32, i * 32 + 32)), `batch, shift ${shift}, message ${i}`).toBe(nodeSha(m));
      });
    }
  });

  it('hashes inputs that live in the WebAssembly arena', () => {
    const arena = wasmRuntime().arena;
    const next = rng(1234);
    for (const [n, shift] of [
      [0, 0],
      [64, 0],
      [100, 3],
      [5000, 1],
      [(1 << 20) + 77, 0],
    ] as const) {
      const data = randomBytes(next, n);
      const block = inArena(data, shift);
      expect(hex(impl.sha256(block.view)), `length ${n}`).toBe(nodeSha(data));
      // The view may be detached by growth during the call; take a fresh one.
      const again = new Uint8Array(arena.buffer, block.ptr + shift, n);
      expect(streamDigest(impl, again, [Math.floor(n / 3)]), `stream, length ${n}`).toBe(nodeSha(data));
      arena.release(block.ptr, block.size);
    }
    const messages = Array.from({ length: 11 }, (_, i) => randomBytes(next, i < 8 ? 64 : 200 + i));
    const { data, offsets } = pack(messages, 5);
    const d = inArena(data, 1);
    const oPtr = arena.alloc(offsets.byteLength);
    new Uint32Array(arena.buffer, oPtr, offsets.length).set(offsets);
    const out = impl.sha256Batch(
      new Uint8Array(arena.buffer, d.ptr + 1, data.length),
      new Uint32Array(arena.buffer, oPtr, offsets.length),
    );
    messages.forEach((m, i) => {
      expect(hex(out.subarray(i * 32, i * 32 + 32)), `batch message ${i}`).toBe(nodeSha(m));
    });
    arena.release(d.ptr, d.size);
    arena.release(oPtr, offsets.byteLength);
  });

  it('keeps a stream intact when linear memory grows between updates', () => {
    const arena = wasmRuntime().arena;
    const next = rng(555);
    const part1 = randomBytes(next, 1000);
    const part2 = randomBytes(next, 3000);
    const part3 = randomBytes(next, 77);
    const s = impl.stream();
    s.update(part1);
    const before = arena.memory.buffer.byteLength;
    const bigSize = before + (8 << 20);
    const big = arena.alloc(bigSize);
    expect(arena.memory.buffer.byteLength).toBeGreaterThan(before);
    const inside = inArena(part2);
    s.update(inside.view);
    s.update(part3);
    const all = new Uint8Array(part1.length + part2.length + part3.length);
    all.set(part1);
    all.set(part2, part1.length);
    all.set(part3, part1.length + part2.length);
    expect(hex(s.digest())).toBe(nodeSha(all));
    arena.release(inside.ptr, inside.size);
    arena.release(big, bigSize);
  });
});

describe('SHA-256 twins', () => {
  it('give bit-identical results on random batches', () => {
    const next = rng(2024);
    for (let round = 0; round < 20; round++) {
      const count = next() % 40;
      const same = next() % 2 === 0 ? next() % 300 : -1;
      const messages = Array.from({ length: count }, () => randomBytes(next, same >= 0 ? same : next() % 300));
      const { data, offsets } = pack(messages, next() % 4);
      expect(hex(wasm.sha256Batch(data, offsets)), `round ${round}`).toBe(hex(js.sha256Batch(data, offsets)));
    }
  });
});
