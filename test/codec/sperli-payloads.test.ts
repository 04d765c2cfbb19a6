import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Verify } from '../../ts/codec/sperli-errors.js';
import {
  AbortReason,
  assembleJoinToken,
  CAP_V1_FRAMING,
  ChunkReceiver,
  type CkptData,
  CkptDataKind,
  CollectiveOp,
  CollectivePhase,
  checkJoinToken,
  decodeAbort,
  decodeCkptAck,
  decodeCkptBegin,
  decodeCkptData,
  decodeCollective,
  decodeHeartbeat,
  decodeHello,
  decodeJoinToken,
  decodeResume,
  encodeAbort,
  encodeCkptAck,
  encodeCkptBegin,
  encodeCkptData,
  encodeCollective,
  encodeCollectiveHeader,
  encodeHeartbeat,
  encodeHello,
  encodeJoinTokenMessage,
  encodeResume,
  type JoinExpectations,
  type JoinTokenFields,
  MAX_CHUNK,
  matchCollective,
  ResumeStatus,
  SIGNATURE_LENGTH,
} from '../../ts/codec/sperli-payloads.js';
import { isPlexusError, type PlexusError, sha256 } from '../../ts/core/index.js';
import { thrownRefusal } from '../helpers/refusal.js';
import { type VectorRecord, vectors, verdictOf } from '../helpers/sperli-vectors.js';

const JOB = Uint8Array.from({ length: 16 }, (_, i) => 0x10 + i);
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));

/** A stand-in signature: SHA-256 of the message, then 0xaa (the vectors' placeholder byte). */
function fakeSign(message: Uint8Array): Uint8Array {
  const s = new Uint8Array(SIGNATURE_LENGTH).fill(0xaa);
  s.set(sha256(message));
  return s;
}
const verify: Verify = (m, s) => hex(s.subarray(0, 32)) === hex(sha256(m)) && s.subarray(32).every((x) => x === 0xaa);

function refused(f: () => unknown, code: string, reason: string, rule?: string): PlexusError {
  const e = thrownRefusal(f);
  expect(e.code).toBe(code);
  expect(e.details.reason).toBe(reason);
  if (rule !== undefined) expect(e.details.rule).toBe(rule);
  return e;
}

const TOKEN_FIELDS: JoinTokenFields = {
  jobId: JOB,
  rank: 2,
  size: 4,
  incarnation: 3,
  host: 'node-2.example',
  expiry: 1_700_000_000_000n,
};

function token(f: Partial<JoinTokenFields> = {}): Uint8Array {
  const m = encodeJoinTokenMessage({ ...TOKEN_FIELDS, ...f });
  return assembleJoinToken(m, fakeSign(m));
}

const EXPECT: JoinExpectations = {
  jobId: JOB,
  headerRank: 2,
  certificateRank: 2,
  size: 4,
  incarnation: 3,
  hosts: ['node-0.example', 'node-1.example', 'node-2.example', '10.0.0.4'],
  now: 1_699_999_999_999,
};

describe('HELLO', () => {
  it('lays out version, capabilities, token length and token', () => {
    const p = encodeHello(Uint8Array.of(9, 8, 7));
    expect(hex(p)).toBe('01000000' + '01000000' + '0300' + '090807');
    expect(decodeHello(p)).toEqual({ version: 1, capabilities: 1, token: Uint8Array.of(9, 8, 7) });
    expect(decodeHello(encodeHello(new Uint8Array(0))).token.length).toBe(0);
  });

  it('accepts other capability bits next to bit 0', () => {
    expect(decodeHello(encodeHello(new Uint8Array(1), 0b101)).capabilities).toBe(5);
  });

  it('refuses a version other than 1, bit 0 missing, a long, cut or followed token', () => {
    const ok = encodeHello(Uint8Array.of(1, 2));
    const v2 = ok.slice();
    v2[0] = 2;
    refused(() => decodeHello(v2), 'H1610', 'hello', 'version');
    const noBit = ok.slice();
    noBit[4] = 2;
    refused(() => decodeHello(noBit), 'H1610', 'hello', 'capabilities');
    refused(() => decodeHello(ok.subarray(0, ok.length - 1)), 'H1610', 'hello', 'cut');
    refused(() => decodeHello(ok.subarray(0, 9)), 'H1610', 'hello', 'cut');
    refused(() => decodeHello(Buffer.concat([ok, Uint8Array.of(0)])), 'H1610', 'hello', 'trailing');
    const long = new Uint8Array(10 + 4097);
    long.set(unhex('01000000 01000000 0110'));
    refused(() => decodeHello(long), 'H1610', 'hello', 'token-length');
    expect(() => encodeHello(new Uint8Array(4097))).toThrow(RangeError);
    expect(() => encodeHello(new Uint8Array(1), 2)).toThrow(RangeError);
  });
});

describe('join token', () => {
  it('lays out the signed message, the signature length 2484 and the signature', () => {
    const m = encodeJoinTokenMessage({ ...TOKEN_FIELDS, host: 'h' });
    // job id, rank 2, size 4, incarnation 3, host length 1, "h", expiry 1700000000000 (0x18bcfe56800)
    expect(hex(m)).toBe(`${hex(JOB)} 02000000 04000000 03000000 01 68 0068e5cf8b010000`.replace(/ /g, ''));
    expect(m.length).toBe(29 + 1 + 8);
    const t = assembleJoinToken(m, fakeSign(m));
    expect(t.length).toBe(m.length + 2 + 2484);
    expect(hex(t.subarray(m.length, m.length + 2))).toBe('b409');
    const d = decodeJoinToken(t);
    expect(d).toEqual({ ...TOKEN_FIELDS, host: 'h', message: m, signature: fakeSign(m) });
  });

  it('refuses a cut token at every length, trailing bytes, a bad signature length or host', () => {
    const t = token();
    for (let n = 0; n < t.length; n++) refused(() => decodeJoinToken(t.subarray(0, n)), 'H1610', 'join-token', 'cut');
    refused(() => decodeJoinToken(Buffer.concat([t, Uint8Array.of(0)])), 'H1610', 'join-token', 'trailing');
    const badLen = t.slice();
    const at = 37 + TOKEN_FIELDS.host.length;
    badLen[at] = 0xb3;
    refused(() => decodeJoinToken(badLen), 'H1610', 'join-token', 'signature-length');
    const emptyHost = t.slice();
    emptyHost[28] = 0;
    refused(() => decodeJoinToken(emptyHost), 'H1610', 'join-token', 'host-length');
    const longHost = t.slice();
    longHost[28] = 254;
    refused(() => decodeJoinToken(longHost), 'H1610', 'join-token', 'host-length');
    // the structure holds any host bytes; such a host never matches the host list
    const nonAscii = t.slice();
    nonAscii[29] = 0xc3;
    expect(decodeJoinToken(nonAscii).host).toBe('\u00c3ode-2.example');
    refused(() => checkJoinToken(nonAscii, EXPECT, () => true), 'H1610', 'join-token', 'host');
    expect(() => encodeJoinTokenMessage({ ...TOKEN_FIELDS, host: '' })).toThrow(RangeError);
    expect(() => encodeJoinTokenMessage({ ...TOKEN_FIELDS, host: 'ä' })).toThrow(RangeError);
    expect(() => encodeJoinTokenMessage({ ...TOKEN_FIELDS, host: 'a b' })).toThrow(RangeError);
    expect(() => encodeJoinTokenMessage({ ...TOKEN_FIELDS, host: `${'a'.repeat(63)}.`.repeat(4) })).toThrow(RangeError);
  });

  it('checks the token against the job, rule by rule in order', () => {
    expect(checkJoinToken(token(), EXPECT, verify).rank).toBe(2);
    expect(checkJoinToken(decodeJoinToken(token()), EXPECT, verify).host).toBe('node-2.example');
    const forged = token().slice();
    forged[forged.length - 1] = (forged[forged.length - 1] as number) ^ 1;
    refused(() => checkJoinToken(forged, EXPECT, verify), 'H1610', 'join-token', 'signature');
    // a signature failure wins over every other fault
    const signedElse = token({ rank: 1 }).slice();
    signedElse[signedElse.length - 1] = (signedElse[signedElse.length - 1] as number) ^ 1;
    refused(() => checkJoinToken(signedElse, EXPECT, verify), 'H1610', 'join-token', 'signature');
    const thrown = refused(
      () =>
        checkJoinToken(token(), EXPECT, () => {
          throw new Error('bad key');
        }),
      'H1610',
      'join-token',
      'signature',
    );
    expect((thrown.cause as Error).message).toBe('bad key');
    refused(
      () => checkJoinToken(token({ jobId: new Uint8Array(16) }), EXPECT, verify),
      'H1610',
      'join-token',
      'job-id',
    );
    const e1 = refused(() => checkJoinToken(token({ rank: 1 }), EXPECT, verify), 'H1610', 'join-token', 'rank');
    expect(e1.message).toMatch(/header's source rank 2/);
    const e2 = refused(
      () => checkJoinToken(token(), { ...EXPECT, certificateRank: 1 }, verify),
      'H1610',
      'join-token',
      'rank',
    );
    expect(e2.message).toMatch(/certificate/);
    refused(() => checkJoinToken(token({ size: 5 }), EXPECT, verify), 'H1610', 'join-token', 'size');
    refused(() => checkJoinToken(token({ incarnation: 2 }), EXPECT, verify), 'H1610', 'join-token', 'incarnation');
    refused(() => checkJoinToken(token({ host: 'node-3.example' }), EXPECT, verify), 'H1610', 'join-token', 'host');
    // DNS names compare without regard to letter case, IPv4 addresses byte for byte
    expect(checkJoinToken(token({ host: 'NODE-2.Example' }), EXPECT, verify).host).toBe('NODE-2.Example');
    const ipv4 = { ...EXPECT, hosts: ['a', 'b', '10.0.0.3', 'd'] };
    expect(checkJoinToken(token({ host: '10.0.0.3' }), ipv4, verify).host).toBe('10.0.0.3');
    refused(() => checkJoinToken(token({ host: '10.0.0.03' }), ipv4, verify), 'H1610', 'join-token', 'host');
    refused(
      () => checkJoinToken(token({ rank: 7 }), { ...EXPECT, headerRank: 7, certificateRank: 7 }, verify),
      'H1610',
      'join-token',
      'host',
    );
    refused(
      () => checkJoinToken(token(), { ...EXPECT, now: Number(TOKEN_FIELDS.expiry) }, verify),
      'H1610',
      'join-token',
      'expiry',
    );
    refused(() => checkJoinToken(token(), { ...EXPECT, now: Number.NaN }, verify), 'H1610', 'join-token', 'expiry');
  });
});

describe('collective header', () => {
  const h = { op: CollectiveOp.allreduce, elementType: 6, reduceOp: 1, phase: 1, root: 0x0102, sequence: 0x0304n };

  it('lays out 16 bytes, then the data', () => {
    expect(hex(encodeCollectiveHeader(h))).toBe('05060101' + '02010000' + '0403000000000000');
    const p = encodeCollective(h, Uint8Array.of(1, 2, 3));
    expect(decodeCollective(p)).toEqual({ header: h, data: Uint8Array.of(1, 2, 3) });
    const barrier = { op: CollectiveOp.barrier, elementType: 0, reduceOp: 0, phase: 2, root: 0, sequence: 1n };
    expect(decodeCollective(encodeCollective(barrier)).data.length).toBe(0);
  });

  it('refuses a short payload (H1610) and codes no call can send (H1617)', () => {
    refused(() => decodeCollective(new Uint8Array(15)), 'H1610', 'collective-short');
    const bad = (patch: Record<number, number>) => {
      const p = encodeCollective(h);
      for (const [i, v] of Object.entries(patch)) p[Number(i)] = v;
      return () => decodeCollective(p);
    };
    refused(bad({ 0: 0 }), 'H1617', 'collective-header');
    refused(bad({ 0: 8 }), 'H1617', 'collective-header');
    refused(bad({ 3: 0 }), 'H1617', 'collective-header');
    refused(bad({ 3: 3 }), 'H1617', 'collective-header');
    refused(bad({ 1: 7 }), 'H1617', 'collective-header');
    refused(bad({ 2: 0 }), 'H1617', 'collective-header');
    refused(bad({ 2: 11 }), 'H1617', 'collective-header');
    refused(bad({ 2: 8 }), 'H1617', 'collective-header'); // band on f64
    refused(bad({ 1: 0, 2: 1 }), 'H1617', 'collective-header'); // sum on bytes
    refused(bad({ 0: 3 }), 'H1617', 'collective-header'); // bcast with a type
    expect(decodeCollective(encodeCollective({ ...h, elementType: 0, reduceOp: 10 })).header.reduceOp).toBe(10);
    expect(() => encodeCollectiveHeader({ ...h, op: 9 })).toThrow(RangeError);
    expect(() => encodeCollectiveHeader({ ...h, sequence: -1n })).toThrow(RangeError);
  });

  it('names the field that differs from the call', () => {
    matchCollective(h, { ...h });
    const fields: [keyof typeof h, unknown, string][] = [
      ['op', CollectiveOp.reduce, 'operation'],
      ['elementType', 5, 'element-type'],
      ['reduceOp', 2, 'reduce-op'],
      ['phase', CollectivePhase.fromRoot, 'phase'],
      ['root', 1, 'root'],
      ['sequence', 2n, 'sequence'],
    ];
    for (const [k, v, reason] of fields) {
      refused(() => matchCollective({ ...h, [k]: v }, h), 'H1617', reason);
    }
  });
});

describe('HEARTBEAT, CKPT_BEGIN, CKPT_ACK', () => {
  it('HEARTBEAT is a u64 counter, exactly 8 bytes', () => {
    expect(hex(encodeHeartbeat(0x0102n))).toBe('0201000000000000');
    expect(decodeHeartbeat(encodeHeartbeat((1n << 64n) - 1n))).toBe((1n << 64n) - 1n);
    refused(() => decodeHeartbeat(new Uint8Array(7)), 'H1610', 'payload-size');
    refused(() => decodeHeartbeat(new Uint8Array(9)), 'H1610', 'payload-size');
  });

  it('CKPT_BEGIN is version 1 and the size of the job', () => {
    expect(hex(encodeCkptBegin(4))).toBe('0100000004000000');
    expect(decodeCkptBegin(encodeCkptBegin(4), 4)).toEqual({ version: 1, size: 4 });
    refused(() => decodeCkptBegin(encodeCkptBegin(5), 4), 'H1610', 'ckpt-begin', 'size');
    refused(() => decodeCkptBegin(unhex('0200000004000000'), 4), 'H1610', 'ckpt-begin', 'version');
    refused(() => decodeCkptBegin(new Uint8Array(7), 4), 'H1610', 'payload-size');
    refused(() => decodeCkptBegin(new Uint8Array(9), 4), 'H1610', 'payload-size');
  });

  it('CKPT_ACK is a 32-byte SHA-256', () => {
    const d = sha256('file');
    expect(encodeCkptAck(d)).toEqual(d);
    expect(decodeCkptAck(d)).toEqual(d);
    refused(() => decodeCkptAck(new Uint8Array(31)), 'H1610', 'payload-size');
    refused(() => decodeCkptAck(new Uint8Array(33)), 'H1610', 'payload-size');
    expect(() => encodeCkptAck(new Uint8Array(31))).toThrow(RangeError);
  });
});

describe('ABORT', () => {
  it('lays out reason, zeros, code, rank, text', () => {
    const a = { reason: AbortReason.collectiveMismatch, code: 1617, rank: 2, text: 'né' };
    const p = encodeAbort(a);
    expect(hex(p)).toBe('03000000' + '51060000' + '02000000' + '0300' + '6ec3a9');
    expect(decodeAbort(p)).toEqual(a);
  });

  it('refuses a reason outside 1..5, reserved bytes, a long, cut or followed text', () => {
    const p = encodeAbort({ reason: 1, code: 0, rank: 0, text: 'ab' });
    const at = (i: number, v: number) => {
      const q = p.slice();
      q[i] = v;
      return () => decodeAbort(q);
    };
    refused(at(0, 0), 'H1610', 'payload-size', 'abort-reason');
    refused(at(0, 6), 'H1610', 'payload-size', 'abort-reason');
    refused(at(2, 1), 'H1610', 'payload-size', 'reserved');
    refused(() => decodeAbort(p.subarray(0, p.length - 1)), 'H1610', 'payload-size', 'cut');
    refused(() => decodeAbort(p.subarray(0, 13)), 'H1610', 'payload-size', 'cut');
    refused(() => decodeAbort(Buffer.concat([p, Uint8Array.of(0)])), 'H1610', 'payload-size', 'trailing');
    const long = new Uint8Array(14 + 1025);
    long.set(unhex('01000000 00000000 00000000 0104'));
    refused(() => decodeAbort(long), 'H1610', 'payload-size', 'text-length');
    expect(decodeAbort(encodeAbort({ reason: 5, code: 0, rank: 0, text: 'x'.repeat(1024) })).text.length).toBe(1024);
    expect(() => encodeAbort({ reason: 5, code: 0, rank: 0, text: 'x'.repeat(1025) })).toThrow(RangeError);
  });

  it('shows invalid UTF-8 as U+FFFD (the abort still counts)', () => {
    const p = unhex('02000000 00000000 01000000 0100 ff');
    expect(decodeAbort(p).text).toBe('\ufffd');
  });
});

describe('CKPT_DATA', () => {
  const chunk = (offset: bigint, n: number, total: bigint, kind = 0, rank = 1): CkptData => ({
    kind,
    rank,
    offset,
    total,
    chunk: new Uint8Array(n).fill(7),
  });

  it('lays out kind, zeros, rank, offset, total, chunk', () => {
    const p = encodeCkptData(chunk(2n, 2, 5n));
    expect(hex(p)).toBe('00000000' + '01000000' + '0200000000000000' + '0500000000000000' + '0707');
    expect(decodeCkptData(p)).toEqual(chunk(2n, 2, 5n));
    const req = { kind: CkptDataKind.request, rank: 3, offset: 0n, total: 0n, chunk: new Uint8Array(0) };
    expect(decodeCkptData(encodeCkptData(req))).toEqual(req);
  });

  it('refuses a bad kind, reserved bytes, an oversized chunk, chunks on kinds 1, 3, 4, a chunk past its total', () => {
    const p = encodeCkptData(chunk(0n, 2, 5n));
    const at = (i: number, v: number) => {
      const q = p.slice();
      q[i] = v;
      return () => decodeCkptData(q);
    };
    refused(at(0, 5), 'H1610', 'ckpt-data', 'kind');
    refused(at(3, 1), 'H1610', 'ckpt-data', 'reserved');
    refused(() => decodeCkptData(p.subarray(0, 23)), 'H1610', 'ckpt-data', 'cut');
    for (const kind of [1, 3, 4]) {
      refused(at(0, kind), 'H1610', 'ckpt-data', 'no-chunk');
      const z = encodeCkptData({ kind, rank: 0, offset: 0n, total: 0n, chunk: new Uint8Array(0) });
      z[8] = 1;
      refused(() => decodeCkptData(z), 'H1610', 'ckpt-data', 'no-chunk');
    }
    refused(() => decodeCkptData(Buffer.concat([p, new Uint8Array(4)])), 'H1610', 'ckpt-data', 'past-total');
    const big = new Uint8Array(24 + MAX_CHUNK + 1);
    new DataView(big.buffer).setBigUint64(16, 1n << 40n, true);
    refused(() => decodeCkptData(big), 'H1610', 'ckpt-data', 'chunk-size');
    expect(decodeCkptData(big.subarray(0, 24 + MAX_CHUNK)).chunk.length).toBe(MAX_CHUNK);
    expect(() => encodeCkptData(chunk(4n, 2, 5n))).toThrow(RangeError);
  });

  it('receives chunks in order with a fixed total and no overrun', () => {
    const r = new ChunkReceiver();
    expect(r.accept(chunk(0n, 4, 10n))).toBe(false);
    expect(r.accept(chunk(4n, 4, 10n))).toBe(false);
    expect(r.accept(chunk(8n, 2, 10n))).toBe(true);
    expect(r.complete).toBe(true);
    expect(r.received).toBe(10n);
    expect(r.total).toBe(10n);
    refused(() => r.accept(chunk(10n, 0, 10n)), 'H1610', 'ckpt-data', 'past-total');

    const fresh = () => {
      const x = new ChunkReceiver();
      x.accept(chunk(0n, 4, 10n));
      return x;
    };
    refused(() => fresh().accept(chunk(5n, 1, 10n)), 'H1610', 'ckpt-data', 'order');
    refused(() => fresh().accept(chunk(0n, 4, 10n)), 'H1610', 'ckpt-data', 'order');
    refused(() => fresh().accept(chunk(4n, 1, 11n)), 'H1610', 'ckpt-data', 'total');
    refused(() => fresh().accept(chunk(4n, 7, 10n)), 'H1610', 'ckpt-data', 'past-total');
    refused(() => fresh().accept(chunk(4n, 1, 10n, 0, 2)), 'H1610', 'ckpt-data', 'rank');
    refused(() => fresh().accept(chunk(4n, 1, 10n, 2)), 'H1610', 'ckpt-data', 'kind');
    refused(() => new ChunkReceiver().accept(chunk(0n, 0, 0n, 1)), 'H1610', 'ckpt-data', 'kind');
    refused(() => new ChunkReceiver().accept(chunk(1n, 1, 10n)), 'H1610', 'ckpt-data', 'order');
    const empty = new ChunkReceiver();
    expect(empty.complete).toBe(false);
    expect(empty.accept(chunk(0n, 0, 0n, 2))).toBe(true);
  });
});

describe('RESUME', () => {
  it('lays out the status, zeros and an optional COMMIT file', () => {
    expect(hex(encodeResume(ResumeStatus.fresh))).toBe('01000000');
    expect(decodeResume(encodeResume(1))).toEqual({ status: 1, commit: null });
    const c = Uint8Array.of(1, 2, 3);
    expect(decodeResume(encodeResume(ResumeStatus.offer, c))).toEqual({ status: 3, commit: c });
    expect(decodeResume(encodeResume(ResumeStatus.go, c))).toEqual({ status: 0, commit: c });
    expect(decodeResume(encodeResume(ResumeStatus.offer))).toEqual({ status: 3, commit: null });
  });

  it('refuses fewer than 4 bytes, a status above 3, nonzero bytes 1..3 (payload-size)', () => {
    refused(() => decodeResume(unhex('04000000')), 'H1610', 'payload-size', 'status');
    refused(() => decodeResume(unhex('00000100')), 'H1610', 'payload-size', 'reserved');
    refused(() => decodeResume(unhex('000000')), 'H1610', 'payload-size', 'cut');
    // bytes after status 1 or 2 are no refusal of the layout; they come back for the caller to ignore
    expect(decodeResume(unhex('0100000001'))).toEqual({ status: 1, commit: Uint8Array.of(1) });
    expect(() => encodeResume(2, Uint8Array.of(1))).toThrow(RangeError);
  });
});

describe('every payload decoder (properties)', () => {
  const samples: [string, Uint8Array, (p: Uint8Array) => unknown, boolean][] = [
    ['HELLO', encodeHello(token()), decodeHello, true],
    ['join token', token(), decodeJoinToken, true],
    ['HEARTBEAT', encodeHeartbeat(5n), decodeHeartbeat, true],
    ['ABORT', encodeAbort({ reason: 2, code: 1610, rank: 1, text: 'refused frame' }), decodeAbort, true],
    ['CKPT_BEGIN', encodeCkptBegin(4), (p) => decodeCkptBegin(p, 4), true],
    ['CKPT_ACK', encodeCkptAck(sha256('x')), decodeCkptAck, true],
    [
      'CKPT_DATA',
      encodeCkptData({ kind: 0, rank: 0, offset: 0n, total: 9n, chunk: Uint8Array.of(1) }),
      decodeCkptData,
      false,
    ],
    [
      'COLLECTIVE',
      encodeCollective({ op: 2, elementType: 0, reduceOp: 0, phase: 1, root: 0, sequence: 1n }),
      decodeCollective,
      false,
    ],
    ['RESUME', encodeResume(1), decodeResume, false],
  ];

  it('refuse every cut and (where the layout ends) every longer input with a PlexusError', () => {
    for (const [name, p, decode, closed] of samples) {
      expect(() => decode(p), name).not.toThrow();
      for (let n = 0; n < p.length; n++) {
        // the data of COLLECTIVE and the chunk of CKPT_DATA run to the end of the payload
        if ((name === 'COLLECTIVE' && n >= 16) || (name === 'CKPT_DATA' && n >= 24)) continue;
        expect(isPlexusError(thrownRefusal(() => decode(p.subarray(0, n)))), `${name} cut at ${n}`).toBe(true);
      }
      if (closed) expect(thrownRefusal(() => decode(Buffer.concat([p, Uint8Array.of(0)]))).code, name).toBe('H1610');
    }
  });

  it('throw nothing but PlexusError on random bytes or random mutations', () => {
    fc.assert(
      fc.property(
        fc.nat(samples.length - 1),
        fc.uint8Array({ maxLength: 80 }),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        (i, garbage, muts) => {
          const [, sample, decode] = samples[i] as (typeof samples)[number];
          const m = sample.slice();
          for (const [at, v] of muts) m[at % m.length] = v;
          for (const input of [garbage, m]) {
            try {
              decode(input);
            } catch (e) {
              expect(isPlexusError(e)).toBe(true);
            }
          }
        },
      ),
      { numRuns: 2000, seed: 3 },
    );
  });

  it('round-trip random values', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        fc.integer({ min: 1, max: 5 }),
        fc.nat(),
        fc.string({ maxLength: 200 }),
        (n, reason, code, text) => {
          expect(decodeHeartbeat(encodeHeartbeat(n))).toBe(n);
          const a = { reason, code, rank: code % 4096, text };
          if (new TextEncoder().encode(text).length <= 1024) {
            expect(decodeAbort(encodeAbort(a)).reason).toBe(reason);
          }
          const c = { op: 5, elementType: 3, reduceOp: 1 + (code % 10), phase: 2, root: code, sequence: n };
          expect(decodeCollective(encodeCollective(c)).header).toEqual(c);
          expect(CAP_V1_FRAMING).toBe(1);
        },
      ),
      { numRuns: 300, seed: 5 },
    );
  });
});

// ---------------------------------------------------------------------------------------
// vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent of these codecs)

describe('vectors/sperli-vectors.txt: hello, jointoken and collective records', () => {
  const c = (vectors('context')[0] as VectorRecord).f;
  const expect0: JoinExpectations = {
    jobId: unhex(c.job as string),
    headerRank: Number(c.peer),
    certificateRank: Number(c.peer),
    size: Number(c.size),
    incarnation: Number(c.incarnation),
    hosts: (c.hosts as string).split(',').map((h) => h.slice(0, h.lastIndexOf(':'))),
    now: Number(c.now),
  };
  const placeholder: Verify = (_m, s) => s.length === SIGNATURE_LENGTH;

  it.each(vectors('hello').map((r) => [r.name, r.f] as const))('hello %s', (_n, f) => {
    let got: { h: ReturnType<typeof decodeHello>; signed: Uint8Array } | undefined;
    const v = verdictOf(() => {
      const h = decodeHello(unhex(f.payload as string));
      got = { h, signed: checkJoinToken(h.token, expect0, placeholder).message };
    });
    expect(v).toBe(f.verdict);
    if (v !== 'ok' || got === undefined) return;
    expect(`${got.h.version}`).toBe(f.version);
    expect(`${got.h.capabilities}`).toBe(f.capabilities);
    expect(hex(got.h.token)).toBe(f.token);
    expect(hex(got.signed)).toBe(f.signed);
  });

  it.each(vectors('jointoken').map((r) => [r.name, r.f] as const))('join token %s', (_n, f) => {
    const token = unhex(f.token as string);
    let t: ReturnType<typeof checkJoinToken> | undefined;
    expect(verdictOf(() => (t = checkJoinToken(token, expect0, placeholder)))).toBe(f.verdict);
    if (f.verdict !== 'ok' || t === undefined) return;
    expect(hex(t.message)).toBe(f.signed);
    expect(hex(t.jobId)).toBe(f.job);
    expect([`${t.rank}`, `${t.size}`, `${t.incarnation}`, `${t.expiry}`]).toEqual([
      f.rank,
      f.size,
      f.incarnation,
      f.expiry,
    ]);
    expect(hex(new Uint8Array(Buffer.from(t.host, 'latin1')))).toBe(f.host);
    const again = encodeJoinTokenMessage(t);
    expect(hex(again)).toBe(f.signed);
    expect(hex(assembleJoinToken(again, t.signature))).toBe(f.token);
  });

  it.each(vectors('collective').map((r) => [r.name, r.f] as const))('collective %s', (_n, f) => {
    const bytes = unhex(f.bytes as string);
    const { header: h, data } = decodeCollective(bytes);
    expect(data.length).toBe(0);
    expect([h.op, h.elementType, h.reduceOp, h.phase, h.root, h.sequence].map(String)).toEqual(
      ['operation', 'element', 'reduce', 'phase', 'root', 'sequence'].map((k) => f[k]),
    );
    expect(encodeCollectiveHeader(h)).toEqual(bytes);
  });
});
