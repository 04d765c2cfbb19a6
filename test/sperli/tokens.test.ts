import { describe, expect, it } from 'vitest';
import { CompositeSig } from '../../ts/crypto/index.js';
import {
  encodeRankFile,
  type JoinExpectations,
  parseCommit,
  rankFileDigest,
  signCommit,
  signJoinToken,
  verifyCommitFile,
  verifyJoinToken,
} from '../../ts/sperli/index.js';

const jobId = Uint8Array.from({ length: 16 }, (_, i) => i * 17);
const job = CompositeSig.keygen();
const other = CompositeSig.keygen();
const hosts = ['127.0.0.1', 'node-b.example', '127.0.0.3'];
const now = Date.now();
const fields = { jobId, rank: 1, size: 3, incarnation: 2, host: 'node-b.example', expiry: BigInt(now + 60_000) };
const expect1: JoinExpectations = { jobId, headerRank: 1, certificateRank: 1, size: 3, incarnation: 2, hosts, now };

function flip(b: Uint8Array, i: number, mask: number): void {
  b[i] = (b[i] as number) ^ mask;
}
const flipBit = flip;

function rule(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    const err = e as { code: string; details: { reason: string; rule?: string } };
    return `${err.code}:${err.details.reason}${err.details.rule ? `:${err.details.rule}` : ''}`;
  }
  return 'accepted';
}

describe('join tokens signed with the job key (SPERLI-JOIN-1)', () => {
  const token = signJoinToken(job.secretKey, fields);

  it('verify with the job public key and decode to their fields', () => {
    const t = verifyJoinToken(token, expect1, job.publicKey);
    expect(t.rank).toBe(1);
    expect(t.host).toBe('node-b.example');
    expect(t.signature.length).toBe(2484);
  });

  it('are refused for every rule of the seed, each named', () => {
    const r = (token: Uint8Array, e: Partial<JoinExpectations> = {}, pk = job.publicKey) =>
      rule(() => verifyJoinToken(token, { ...expect1, ...e }, pk));
    expect(r(token, {}, other.publicKey)).toMatch(/^H1610:join-token:signature/);
    const flipped = Uint8Array.from(token);
    flip(flipped, flipped.length - 100, 1);
    expect(r(flipped)).toMatch(/^H1610:join-token:signature/);
    const msgFlip = Uint8Array.from(token);
    flip(msgFlip, 20, 1); // inside the size field of the signed message
    expect(r(msgFlip)).toMatch(/^H1610:join-token:signature/);
    expect(r(token, { jobId: new Uint8Array(16) })).toMatch(/^H1610:join-token:job/);
    expect(r(token, { headerRank: 2 })).toMatch(/^H1610:join-token:rank/);
    expect(r(token, { certificateRank: 0 })).toMatch(/^H1610:join-token:rank/);
    expect(r(token, { size: 4 })).toMatch(/^H1610:join-token:size/);
    expect(r(token, { incarnation: 3 })).toMatch(/^H1610:join-token:incarnation/);
    expect(r(token, { hosts: ['127.0.0.1', 'node-c.example', '127.0.0.3'] })).toMatch(/^H1610:join-token:host/);
    expect(r(token, { hosts: ['127.0.0.1', 'NODE-B.Example', '127.0.0.3'] })).toBe('accepted');
    expect(r(token, { now: now + 60_000 })).toMatch(/^H1610:join-token:expir/);
    const tokenFor = (host: string) => signJoinToken(job.secretKey, { ...fields, rank: 0, host });
    expect(r(tokenFor('127.0.0.1'), { headerRank: 0, certificateRank: 0 })).toBe('accepted');
  });

  it('are refused when cut or padded', () => {
    expect(rule(() => verifyJoinToken(token.subarray(0, token.length - 1), expect1, job.publicKey))).toMatch(/^H1610/);
    const padded = new Uint8Array(token.length + 1);
    padded.set(token);
    expect(rule(() => verifyJoinToken(padded, expect1, job.publicKey))).toMatch(/^H1610/);
  });
});

describe('COMMIT files signed with the job key (SPERLI-COMMIT-1)', () => {
  const files = [0, 1, 2, 3].map((rank) =>
    encodeRankFile({ jobId, epoch: 5n, rank, size: 4 }, new TextEncoder().encode(`state of ${rank}`)),
  );
  const hashes = files.map(rankFileDigest);
  const commit = signCommit(job.secretKey, { jobId, epoch: 5n, hashes });

  it('verify and list the SHA-256 of every rank file', () => {
    const c = verifyCommitFile(commit, { jobId, epoch: 5n, size: 4 }, job.publicKey);
    expect(c.hashes.map((h) => Buffer.from(h).toString('hex'))).toEqual(
      hashes.map((h) => Buffer.from(h).toString('hex')),
    );
    expect(parseCommit(commit).size).toBe(4);
  });

  it('a forged COMMIT (another key), a flipped byte, another job or epoch: H1621; another size: H1623', () => {
    const v = (c: Uint8Array, e = {}, pk = job.publicKey) =>
      rule(() => verifyCommitFile(c, { jobId, epoch: 5n, size: 4, ...e }, pk));
    expect(v(signCommit(other.secretKey, { jobId, epoch: 5n, hashes }))).toBe('H1621:signature');
    expect(v(commit, {}, other.publicKey)).toBe('H1621:signature');
    const flipped = Uint8Array.from(commit);
    flipBit(flipped, 50, 0x80);
    expect(v(flipped)).toBe('H1621:signature');
    expect(v(commit, { jobId: new Uint8Array(16) })).toMatch(/^H1621:job/);
    expect(v(commit, { epoch: 6n })).toMatch(/^H1621:epoch/);
    expect(v(commit, { size: 3 })).toBe('H1623:size');
    expect(v(commit.subarray(0, 100))).toMatch(/^H1621/);
  });
});

describe('the verifier refuses a public key of the wrong size at once', () => {
  it('throws PLX_CRYPTO_BAD_KEY', () => {
    expect(() => verifyJoinToken(new Uint8Array(10), expect1, new Uint8Array(5))).toThrow(
      expect.objectContaining({ code: 'PLX_CRYPTO_BAD_KEY' }),
    );
  });
});
