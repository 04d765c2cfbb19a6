import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Verify } from '../../ts/codec/sperli-errors.js';
import {
  assembleCommit,
  decodeRankFile,
  encodeCommitSigned,
  encodeRankFile,
  parseCommit,
  rankFileDigest,
  verifyCommit,
} from '../../ts/codec/sperli-files.js';
import { isPlexusError, type PlexusError, sha256 } from '../../ts/core/index.js';
import { thrownRefusal } from '../helpers/refusal.js';
import { vectors, verdictOf } from '../helpers/sperli-vectors.js';

const JOB = Uint8Array.from({ length: 16 }, (_, i) => 0xf0 - i);
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const ID = { jobId: JOB, epoch: 3n, rank: 1, size: 4 };

function fakeSign(message: Uint8Array): Uint8Array {
  const s = new Uint8Array(2484).fill(0xaa);
  s.set(sha256(message));
  return s;
}
const verify: Verify = (m, s) => hex(s.subarray(0, 32)) === hex(sha256(m)) && s.subarray(32).every((x) => x === 0xaa);

function refused(f: () => unknown, code: string, reason: string): PlexusError {
  const e = thrownRefusal(f);
  expect(e.code).toBe(code);
  expect(e.details.reason).toBe(reason);
  return e;
}

describe('rank file', () => {
  const state = new TextEncoder().encode('state bytes');

  it('lays out the 80-byte header, then the state', () => {
    const f = encodeRankFile(ID, state);
    expect(f.length).toBe(80 + state.length);
    expect(hex(f.subarray(0, 48))).toBe(
      '5350434b' + // SPCK
        '0100' + // version
        '0000' +
        hex(JOB) +
        '0300000000000000' + // epoch
        '01000000' + // rank
        '04000000' + // size
        '0b00000000000000', // payload length
    );
    expect(f.subarray(48, 80)).toEqual(sha256(state));
    expect(f.subarray(80)).toEqual(state);
    const d = decodeRankFile(f, { ...ID, fileSha256: rankFileDigest(f) });
    expect(d).toEqual({ ...ID, state, stateSha256: sha256(state) });
    expect(rankFileDigest(f)).toEqual(sha256(f));
    expect(decodeRankFile(encodeRankFile(ID, new Uint8Array(0)), ID).state.length).toBe(0);
    expect(() => encodeRankFile({ ...ID, epoch: 0n }, state)).toThrow(RangeError);
  });

  it('refuses a file that is not the one expected (H1619), in order', () => {
    const f = encodeRankFile(ID, state);
    const patched = (at: number, v: number) => {
      const q = f.slice();
      q[at] = v;
      return q;
    };
    refused(() => decodeRankFile(f.subarray(0, 79), ID), 'H1619', 'length');
    refused(() => decodeRankFile(patched(3, 0x4d), ID), 'H1619', 'magic');
    refused(() => decodeRankFile(patched(4, 2), ID), 'H1619', 'version');
    refused(() => decodeRankFile(patched(6, 1), ID), 'H1619', 'reserved');
    refused(() => decodeRankFile(f, { ...ID, jobId: new Uint8Array(16) }), 'H1619', 'job-id');
    refused(() => decodeRankFile(f, { ...ID, epoch: 2n }), 'H1619', 'epoch');
    refused(() => decodeRankFile(f, { ...ID, rank: 2 }), 'H1619', 'rank');
    refused(() => decodeRankFile(f, { ...ID, size: 5 }), 'H1619', 'size');
    refused(() => decodeRankFile(f.subarray(0, f.length - 1), ID), 'H1619', 'length');
    refused(() => decodeRankFile(Buffer.concat([f, Uint8Array.of(0)]), ID), 'H1619', 'length');
    refused(() => decodeRankFile(patched(47, 0x80), ID), 'H1619', 'length');
    // earlier checks win: another magic and another rank is a magic refusal
    refused(() => decodeRankFile(patched(0, 0), { ...ID, rank: 9 }), 'H1619', 'magic');
  });

  it('refuses a SHA-256 that does not match the header or the COMMIT entry (H1620)', () => {
    const f = encodeRankFile(ID, state);
    const flipped = f.slice();
    flipped[85] = (flipped[85] as number) ^ 1;
    refused(() => decodeRankFile(flipped, ID), 'H1620', 'sha256');
    const badDigest = f.slice();
    badDigest[48] = (badDigest[48] as number) ^ 1;
    refused(() => decodeRankFile(badDigest, ID), 'H1620', 'sha256');
    refused(() => decodeRankFile(f, { ...ID, fileSha256: new Uint8Array(32) }), 'H1620', 'commit-entry');
  });

  it('decodes every file it encodes, and one-byte changes are refused with H1619 or H1620 (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 300 }),
        fc.bigInt({ min: 1n, max: (1n << 64n) - 1n }),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        (s, epoch, at, x) => {
          const id = { ...ID, epoch };
          const f = encodeRankFile(id, s);
          expect(decodeRankFile(f, { ...id, fileSha256: sha256(f) }).state).toEqual(s);
          const q = f.slice();
          const i = at % q.length;
          q[i] = (q[i] as number) ^ x;
          try {
            decodeRankFile(q, id);
            throw new Error(`a change at ${i} was not noticed`);
          } catch (e) {
            expect(isPlexusError(e, 'H1619') || isPlexusError(e, 'H1620')).toBe(true);
          }
        },
      ),
      { numRuns: 300, seed: 13 },
    );
  });
});

describe('COMMIT file', () => {
  const hashes = [sha256('r0'), sha256('r1'), sha256('r2'), sha256('r3')];
  const fields = { jobId: JOB, epoch: 3n, hashes };
  const signed = encodeCommitSigned(fields);
  const file = assembleCommit(signed, fakeSign(signed));
  const EXPECT = { jobId: JOB, epoch: 3n, size: 4 };

  it('lays out the signed part, the signature length and the signature', () => {
    expect(signed.length).toBe(40 + 32 * 4);
    // magic, version 1, 0, job id, epoch 3, size 4, 0
    expect(hex(signed.subarray(0, 40))).toBe(
      `5350434d 0100 0000 ${hex(JOB)} 0300000000000000 04000000 00000000`.replace(/ /g, ''),
    );
    expect(signed.subarray(40 + 32, 40 + 64)).toEqual(hashes[1]);
    expect(file.length).toBe(40 + 128 + 2 + 2484);
    expect(hex(file.subarray(168, 170))).toBe('b409');
    const c = parseCommit(file);
    expect(c).toEqual({ ...fields, size: 4, signed, signature: fakeSign(signed) });
    expect(verifyCommit(file, EXPECT, verify).hashes[3]).toEqual(hashes[3]);
    expect(verifyCommit(c, { jobId: JOB, size: 4 }, verify).epoch).toBe(3n);
  });

  it('refuses a malformed COMMIT (H1621)', () => {
    const patched = (at: number, v: number) => {
      const q = file.slice();
      q[at] = v;
      return () => parseCommit(q);
    };
    refused(patched(3, 0x4b), 'H1621', 'magic');
    refused(patched(4, 2), 'H1621', 'version');
    refused(patched(7, 1), 'H1621', 'reserved');
    refused(patched(39, 1), 'H1621', 'reserved');
    refused(patched(168, 0xb3), 'H1621', 'signature-length');
    refused(patched(32, 5), 'H1621', 'cut');
    refused(patched(32, 0xff), 'H1621', 'cut');
    refused(patched(32, 3), 'H1621', 'trailing');
    for (const n of [0, 3, 39, 40, 167, 169, file.length - 1]) {
      refused(() => parseCommit(file.subarray(0, n)), 'H1621', 'cut');
    }
    refused(() => parseCommit(Buffer.concat([file, Uint8Array.of(0)])), 'H1621', 'trailing');
  });

  it('refuses a bad signature, another job or epoch (H1621), and a signed COMMIT of another size (H1623)', () => {
    const forged = file.slice();
    forged[40] = (forged[40] as number) ^ 1;
    refused(() => verifyCommit(forged, EXPECT, verify), 'H1621', 'signature');
    refused(
      () =>
        verifyCommit(file, EXPECT, () => {
          throw new Error('no key');
        }),
      'H1621',
      'signature',
    );
    refused(() => verifyCommit(file, { ...EXPECT, jobId: new Uint8Array(16) }, verify), 'H1621', 'job-id');
    refused(() => verifyCommit(file, { ...EXPECT, epoch: 4n }, verify), 'H1621', 'epoch');
    refused(() => verifyCommit(file, { ...EXPECT, size: 5 }, verify), 'H1623', 'size');
    // a forged COMMIT of another size is a signature failure, not H1623
    refused(() => verifyCommit(forged, { ...EXPECT, size: 5 }, verify), 'H1621', 'signature');
    const empty = encodeCommitSigned({ jobId: JOB, epoch: 3n, hashes: [] });
    refused(() => verifyCommit(assembleCommit(empty, fakeSign(empty)), EXPECT, verify), 'H1623', 'size');
  });

  it('never reads hashes by a declared size before the length agrees (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), fc.nat(), (garbage, s) => {
        const q = new Uint8Array(Math.max(garbage.length, 40));
        q.set(signed.subarray(0, 32));
        q.set(garbage.subarray(0, q.length - 40), 40);
        new DataView(q.buffer).setUint32(32, s, true);
        try {
          parseCommit(q);
        } catch (e) {
          expect(isPlexusError(e, 'H1621')).toBe(true);
        }
      }),
      { numRuns: 500, seed: 17 },
    );
  });
});

// ---------------------------------------------------------------------------------------
// vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent of these codecs)

describe('vectors/sperli-vectors.txt: rankfile and commit records', () => {
  const unhex = (s: string) => Uint8Array.from(Buffer.from(s, 'hex'));
  const placeholder: Verify = (_m, s) => s.length === 2484;

  it.each(vectors('rankfile').map((r) => [r.name, r.f] as const))('rank file %s', (_n, f) => {
    const file = unhex(f.file as string);
    const id = {
      jobId: unhex(f['expect-job'] as string),
      epoch: BigInt(f['expect-epoch'] as string),
      rank: Number(f['expect-rank']),
      size: Number(f['expect-size']),
    };
    let d: ReturnType<typeof decodeRankFile> | undefined;
    expect(verdictOf(() => (d = decodeRankFile(file, id)))).toBe(f.verdict);
    if (f.verdict !== 'ok' || d === undefined) return;
    expect(`${d.state.length}`).toBe(f.length);
    expect(hex(d.stateSha256)).toBe(f.sha256);
    expect(hex(rankFileDigest(file))).toBe(f['file-sha256']);
    expect(hex(d.state)).toBe(f.payload);
    expect(encodeRankFile(id, d.state)).toEqual(file);
    expect(decodeRankFile(file, { ...id, fileSha256: unhex(f['file-sha256'] as string) }).rank).toBe(id.rank);
  });

  it.each(vectors('commit').map((r) => [r.name, r.f] as const))('COMMIT %s', (_n, f) => {
    const file = unhex(f.file as string);
    const expectation = {
      jobId: unhex(f['expect-job'] as string),
      epoch: BigInt(f['expect-epoch'] as string),
      size: Number(f['expect-size']),
    };
    let c: ReturnType<typeof verifyCommit> | undefined;
    expect(verdictOf(() => (c = verifyCommit(file, expectation, placeholder)))).toBe(f.verdict);
    if (f.verdict === 'H1623' || f.verdict === 'ok') expect(hex(parseCommit(file).signed)).toBe(f.signed);
    if (f.verdict !== 'ok' || c === undefined) return;
    expect(`${c.size}`).toBe(f.size);
    expect(c.hashes.map(hex).join('')).toBe(f.hashes);
    const signed = encodeCommitSigned(c);
    expect(hex(signed)).toBe(f.signed);
    expect(assembleCommit(signed, c.signature)).toEqual(file);
  });
});
