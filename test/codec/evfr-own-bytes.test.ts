/**
 * decodeEvfr's `ownBytes`: the body checksum is skipped (for bytes the process encoded and kept
 * in memory), while the header's checksum and every length are still checked.
 */
import { describe, expect, it } from 'vitest';
import { decodeEvfr, encodeEvfr } from '../../ts/codec/evfr.js';
import { isPlexusError } from '../../ts/core/errors.js';

const frame = () =>
  encodeEvfr({
    batchId: new Uint8Array(16).fill(7),
    first: 42,
    epoch: 3n,
    records: [Uint8Array.of(1, 2, 3), new TextEncoder().encode('second record')],
  });

const reason = (f: () => unknown): unknown => {
  try {
    f();
    return 'decoded';
  } catch (e) {
    return isPlexusError(e, 'PLX_EVFR_BAD_FRAME') ? e.details.reason : e;
  }
};

describe('decodeEvfr ownBytes', () => {
  it('decodes the same frame with and without the body checksum', () => {
    const b = frame();
    const a = decodeEvfr(b);
    const o = decodeEvfr(b, { ownBytes: true });
    expect(o).toEqual(a);
    expect(o.kind === 'frame' && o.frame.first === 42 && o.frame.last === 43).toBe(true);
  });

  it('skips only the body checksum: header damage and bad lengths are still refused', () => {
    const body = frame();
    body[body.length - 1] = (body[body.length - 1] as number) ^ 0xff; // a payload byte: only the body checksum sees it
    expect(reason(() => decodeEvfr(body))).toBe('body-crc');
    expect(reason(() => decodeEvfr(body, { ownBytes: true }))).toBe('decoded');

    const header = frame();
    header[20] = (header[20] as number) ^ 0x01; // inside `first`: the header checksum sees it
    expect(reason(() => decodeEvfr(header, { ownBytes: true }))).toBe('header-crc');

    const length = frame();
    length[56] = 0xff; // the first record's length runs past the body
    expect(reason(() => decodeEvfr(length))).toBe('body-crc');
    expect(reason(() => decodeEvfr(length, { ownBytes: true }))).toBe('record-length');
  });
});
