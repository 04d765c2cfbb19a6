import { describe, expect, it } from 'vitest';
import { combine, isPlexusError, kernels, useBackend } from '../../ts/core/index.js';
import { vectors } from '../helpers/sperli-vectors.js';

// The reduce records of vectors/sperli-vectors.txt: two arrays, a type and an operation,
// and the result or a refusal, computed by the independent Python implementation.
const REFUSALS = new Set([
  'PLX_CORE_BAD_OP',
  'PLX_CORE_BAD_TYPE',
  'PLX_CORE_OP_NOT_ALLOWED',
  'PLX_CORE_BAD_LENGTH',
  'PLX_CORE_LENGTH_MISMATCH',
]);
const unhex = (s: string) => Uint8Array.from(Buffer.from(s, 'hex'));
const records = vectors('reduce');

describe.each(kernels().map((k) => k.name))('reduce vectors (%s backend)', (name) => {
  it('cover the cases the seed asks for', () => {
    expect(records.length).toBeGreaterThanOrEqual(50);
    expect(records.some((r) => r.f.refused === 'H1618')).toBe(true);
  });

  it.each(records.map((r) => [r.name, r] as const))('%s', (_n, r) => {
    useBackend(name);
    try {
      const a = unhex(r.f.a as string);
      const b = unhex(r.f.b as string);
      let refusal: string | undefined;
      try {
        combine(a, b, Number(r.f.op), Number(r.f.type));
      } catch (e) {
        if (!isPlexusError(e)) throw e;
        refusal = e.code;
      }
      if (r.f.refused !== undefined) {
        // Every refusal of plexus/core maps to SPERLI's H1618 (a refused collective call).
        expect(r.f.refused).toBe('H1618');
        expect(REFUSALS.has(refusal ?? 'none'), `refusal ${refusal}`).toBe(true);
      } else {
        expect(refusal).toBeUndefined();
        expect(Buffer.from(a).toString('hex')).toBe(r.f.result);
      }
    } finally {
      useBackend('wasm');
    }
  });
});
