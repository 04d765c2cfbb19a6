/**
 * Several EVFR frames laid end to end (one Chronacta Raft entry carrying several appends), and
 * decodeEvfr's `bodyChecked`: the body checksum is skipped for bytes an enclosing checksum
 * covered, while the header's checksum and every length are still checked.
 */
import { describe, expect, it } from 'vitest';
import { decodeEvfr, type EvfrFrame, encodeEvfr } from '../../ts/codec/evfr.js';
import { isPlexusError } from '../../ts/core/errors.js';

const enc = (id: number, first: number, texts: string[]) =>
  encodeEvfr({
    batchId: new Uint8Array(16).fill(id),
    first,
    epoch: 4n,
    records: texts.map((t) => new TextEncoder().encode(t)),
  });

function frames(bytes: Uint8Array, opts?: { bodyChecked?: boolean }): EvfrFrame[] {
  const out: EvfrFrame[] = [];
  let at = 0;
  while (at < bytes.length) {
    const d = decodeEvfr(bytes.subarray(at), opts);
    if (d.kind !== 'frame') throw new Error(`incomplete: need ${d.need}`);
    out.push(d.frame);
    at += d.consumed;
  }
  return out;
}

const reason = (f: () => unknown): unknown => {
  try {
    f();
    return 'decoded';
  } catch (e) {
    return isPlexusError(e, 'PLX_EVFR_BAD_FRAME') ? e.details.reason : e instanceof Error ? e.message : e;
  }
};

describe('EVFR frames end to end', () => {
  it('decodes each frame with its own batch id, positions and records', () => {
    const a = enc(1, 10, ['a', 'bb']);
    const b = enc(2, 12, ['ccc']);
    const both = new Uint8Array(a.length + b.length);
    both.set(a, 0);
    both.set(b, a.length);
    for (const opts of [undefined, { bodyChecked: true }]) {
      const got = frames(both, opts);
      expect(got.map((f) => [f.batchId[0], f.first, f.last, f.records.length])).toEqual([
        [1, 10, 11, 2],
        [2, 12, 12, 1],
      ]);
      expect(new TextDecoder().decode(got[1]?.records[0])).toBe('ccc');
    }
  });

  it('bodyChecked skips only the body checksum: header damage and cut frames are still refused', () => {
    const a = enc(1, 10, ['a', 'bb']);
    const b = enc(2, 12, ['ccc']);
    const both = new Uint8Array(a.length + b.length);
    both.set(a, 0);
    both.set(b, a.length);
    const body = both.slice();
    body[body.length - 1] = (body[body.length - 1] as number) ^ 0xff; // the second frame's last payload byte
    expect(reason(() => frames(body))).toBe('body-crc');
    expect(reason(() => frames(body, { bodyChecked: true }))).toBe('decoded');
    const header = both.slice();
    header[a.length + 20] = (header[a.length + 20] as number) ^ 0x01; // the second frame's `first`
    expect(reason(() => frames(header, { bodyChecked: true }))).toBe('header-crc');
    expect(reason(() => frames(both.subarray(0, both.length - 2), { bodyChecked: true }))).toMatch(/incomplete/);
  });
});
