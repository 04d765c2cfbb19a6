import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Arena } from '../../ts/core/arena.js';
import {
  allocShared,
  backend,
  combine,
  crc32c,
  createSha256,
  isPlexusError,
  kernels,
  sha256,
} from '../../ts/core/index.js';
import { wasmRuntime } from '../../ts/core/wasm/runtime.js';
import { ROOT } from '../helpers/paths.js';
import { runNode } from '../helpers/processes.js';

describe('the shared-memory arena', () => {
  it('hands out aligned, disjoint blocks and reuses released ones', () => {
    const { arena } = wasmRuntime();
    const a = arena.alloc(100);
    const b = arena.alloc(100);
    expect(a % 64).toBe(0);
    expect(b % 64).toBe(0);
    expect(Math.abs(a - b)).toBeGreaterThanOrEqual(128);
    arena.release(b, 100);
    expect(arena.alloc(120)).toBe(b);
  });

  it('survives memory growth: views are refreshed, never detached, and data stays', () => {
    const s = allocShared(1000);
    s.u8.fill(7);
    const before = wasmRuntime().arena.buffer.byteLength;
    const big = allocShared(64 << 20); // forces linear memory to grow
    expect(wasmRuntime().arena.buffer.byteLength).toBeGreaterThan(before);
    expect(s.u8.byteLength).toBe(1000);
    expect(s.u8.every((x) => x === 7)).toBe(true);
    // kernels still see the block in place after growth
    const f = allocShared(16);
    f.view(Float64Array).set([1, 2]);
    const g = allocShared(16);
    g.view(Float64Array).set([0.5, 0.25]);
    combine(f.view(Float64Array), g.view(Float64Array), 'sum');
    expect(Array.from(f.view(Float64Array))).toEqual([1.5, 2.25]);
    for (const x of [s, big, f, g]) x.free();
  });

  it('refuses sizes it cannot honour, without attempting them', () => {
    const arena = new Arena(new WebAssembly.Memory({ initial: 1, maximum: 2 }), 0);
    expect(() => arena.alloc(-1)).toThrow(expect.objectContaining({ code: 'PLX_CORE_ALLOC_SIZE' }));
    expect(() => arena.alloc(2 ** 31)).toThrow(expect.objectContaining({ code: 'PLX_CORE_ALLOC_SIZE' }));
    expect(() => arena.alloc(1 << 20)).toThrow(expect.objectContaining({ code: 'PLX_CORE_OUT_OF_MEMORY' }));
    expect(arena.alloc(100)).toBe(0);
    expect(() => allocShared(1.5)).toThrow(expect.objectContaining({ code: 'PLX_CORE_ALLOC_SIZE' }));
  });

  it('refuses use after free and views of the wrong element size', () => {
    const s = allocShared(12);
    expect(() => s.view(Float64Array)).toThrow(expect.objectContaining({ code: 'PLX_CORE_BAD_LENGTH' }));
    s.free();
    expect(() => s.u8).toThrow(expect.objectContaining({ code: 'PLX_CORE_FREED' }));
  });

  it('bulk kernels read shared blocks in place (no copy): a kernel sees later writes', () => {
    const s = allocShared(64);
    s.u8.fill(1);
    const c1 = crc32c(s.u8);
    s.u8[10] = 2;
    expect(crc32c(s.u8)).not.toBe(c1);
    expect(s.u8.buffer).toBe(wasmRuntime().arena.buffer);
    s.free();
  });
});

describe('backend selection', () => {
  it('defaults to wasm and offers both kernel sets', () => {
    expect(backend().name).toBe(process.env.PLEXUS_BACKEND === 'js' ? 'js' : 'wasm');
    expect(kernels().map((k) => k.name)).toEqual(['wasm', 'js']);
  });

  const run = (env: Record<string, string>) =>
    runNode(join(ROOT, 'test/fixtures/core/backend-sha256.mjs'), [], { env: { ...process.env, ...env } });

  it('PLEXUS_BACKEND=js|wasm selects for the whole process; anything else is refused clearly', async () => {
    expect((await run({ PLEXUS_BACKEND: 'js' })).stdout.trim()).toBe('js ba7816bf');
    expect((await run({ PLEXUS_BACKEND: 'wasm' })).stdout.trim()).toBe('wasm ba7816bf');
    const bad = await run({ PLEXUS_BACKEND: 'gpu' });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('PLX_CORE_BAD_BACKEND');
    expect(bad.stderr).toContain('use "wasm"');
  });

  it('sha256() agrees with the kernels at the node:crypto threshold and either side of it', async () => {
    for (const n of [0, 511, 512, 513, 100_000]) {
      const d = new Uint8Array(n).fill(n & 0xff);
      const want = Buffer.from(kernels()[1]!.sha256(d)).toString('hex');
      expect(Buffer.from(sha256(d)).toString('hex')).toBe(want);
    }
    expect((await runNode(join(ROOT, 'test/fixtures/core/print-ok.mjs'))).stdout).toBe('ok');
  });

  it('isPlexusError matches by code', () => {
    try {
      combine(new Float64Array(1), new Float64Array(1), 'bxor');
    } catch (e) {
      expect(isPlexusError(e)).toBe(true);
      expect(isPlexusError(e, 'PLX_CORE_OP_NOT_ALLOWED')).toBe(true);
      expect(isPlexusError(e, 'OTHER')).toBe(false);
      return;
    }
    throw new Error('expected a refusal');
  });
});

describe('createSha256 (public API)', () => {
  it('gives the kernels digest for streams below, at and above the node:crypto threshold, in any pieces', () => {
    const ref = kernels()[1]!;
    for (const n of [0, 1, 100, 511, 512, 513, 5000, 100_000]) {
      const d = new Uint8Array(n).map((_, i) => (i * 7 + n) & 0xff);
      const want = Buffer.from(ref.sha256(d)).toString('hex');
      for (const piece of [1, 97, 511, 4096]) {
        const s = createSha256();
        for (let i = 0; i < n; i += piece) s.update(d.subarray(i, i + piece));
        expect(Buffer.from(s.digest()).toString('hex'), `${n} bytes in pieces of ${piece}`).toBe(want);
      }
    }
    const s = createSha256();
    s.digest();
    expect(() => s.update(new Uint8Array(1))).toThrow(expect.objectContaining({ code: 'PLX_CORE_DIGESTED' }));
  });
});
