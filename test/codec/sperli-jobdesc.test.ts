import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeJobDescription,
  decodeJobLine,
  encodeJobDescription,
  encodeJobLine,
  type JobDescription,
} from '../../ts/codec/sperli-jobdesc.js';
import { assembleJoinToken, encodeJoinTokenMessage } from '../../ts/codec/sperli-payloads.js';
import { isPlexusError, type PlexusError } from '../../ts/core/index.js';
import { thrownRefusal } from '../helpers/refusal.js';
import { vectors, verdictOf } from '../helpers/sperli-vectors.js';

const enc = new TextEncoder();
const JOB = Uint8Array.from({ length: 16 }, (_, i) => i * 17);
const RESERVED = new Set(['host-a.invalid', 'host-b.invalid']);
/** The reserved names and any domain below them, in any letter case. */
const opts = {
  isRefused: (h: string) => [...RESERVED].some((r) => h.toLowerCase() === r || h.toLowerCase().endsWith(`.${r}`)),
};
const TOKEN = assembleJoinToken(
  encodeJoinTokenMessage({ jobId: JOB, rank: 0, size: 2, incarnation: 1, host: 'n0.example', expiry: 1n << 42n }),
  new Uint8Array(2484).fill(0xaa),
);

function desc(patch: Partial<JobDescription> = {}): JobDescription {
  return {
    jobId: JOB,
    size: 2,
    rank: 0,
    incarnation: 1,
    hosts: [
      { name: 'n0.example', port: 7000 },
      { name: '10.0.0.2', port: 65535 },
    ],
    caCert: enc.encode('-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n'),
    rankCert: enc.encode('-----BEGIN CERTIFICATE-----\nR0\n-----END CERTIFICATE-----\n'),
    rankKey: enc.encode('-----BEGIN PRIVATE KEY-----\nK0\n-----END PRIVATE KEY-----\n'),
    joinToken: TOKEN,
    jobSecretKey: new Uint8Array(64).fill(0x5a),
    jobPublicKey: new Uint8Array(1344).fill(0x33),
    ...patch,
  };
}

function refused(f: () => unknown, field: string): PlexusError {
  const e = thrownRefusal(f);
  expect(e.code).toBe('H1610');
  expect(e.details.reason).toBe('job-description');
  expect(e.details.field).toBe(field);
  return e;
}

/** Hand-built bytes of the layout, to pin the encoder. */
function layout(d: JobDescription): Uint8Array {
  const parts: number[] = [...d.jobId];
  const u16 = (v: number) => parts.push(v & 255, v >> 8);
  const u32 = (v: number) => parts.push(v & 255, (v >> 8) & 255, (v >> 16) & 255, v >>> 24);
  u32(d.size);
  u32(d.rank);
  u32(d.incarnation);
  for (const h of d.hosts) {
    parts.push(h.name.length, ...enc.encode(h.name));
    u16(h.port);
  }
  for (const b of [d.caCert, d.rankCert, d.rankKey]) {
    u32(b.length);
    parts.push(...b);
  }
  u16(d.joinToken.length);
  parts.push(...d.joinToken);
  const s = d.jobSecretKey ?? new Uint8Array(0);
  u16(s.length);
  parts.push(...s, ...d.jobPublicKey);
  return Uint8Array.from(parts);
}

/** Offset of the u16 secret-key length in a description. */
function secretAt(b: Uint8Array, d: JobDescription): number {
  return b.length - 1344 - (d.jobSecretKey?.length ?? 0) - 2;
}

describe('job description', () => {
  it('lays out every field in order and decodes to itself', () => {
    const d = desc();
    const b = encodeJobDescription(d, opts);
    expect(b).toEqual(layout(d));
    expect(decodeJobDescription(b, opts)).toEqual(d);
    const r1 = desc({ rank: 1, jobSecretKey: null });
    expect(r1.joinToken.length).toBe(2484 + 2 + 37 + 10);
    expect(decodeJobDescription(encodeJobDescription(r1), opts)).toEqual(r1);
  });

  it('writes and reads the hex line: lower-case digits and one line feed', () => {
    const d = desc();
    const line = encodeJobLine(d, opts);
    expect(line).toMatch(/^[0-9a-f]+\n$/);
    expect(line).toBe(`${Buffer.from(layout(d)).toString('hex')}\n`);
    expect(decodeJobLine(line, opts)).toEqual(d);
    refused(() => decodeJobLine(line.toUpperCase(), opts), 'line');
    refused(() => decodeJobLine(line.slice(0, -1), opts), 'line');
    refused(() => decodeJobLine(`${line.slice(0, -1)}\r\n`, opts), 'line');
    refused(() => decodeJobLine(`${line}\n`, opts), 'line');
    refused(() => decodeJobLine(`${line.slice(0, -2)}\n`, opts), 'line');
    refused(() => decodeJobLine(`0${line}`, opts), 'line');
    refused(() => decodeJobLine(`${line.slice(0, 10)}g${line.slice(11)}`, opts), 'line');
    refused(() => decodeJobLine(`${line}00`, opts), 'line');
    expect(() => decodeJobDescription(encodeJobDescription(d), {} as never)).toThrow(TypeError);
  });

  it('refuses size, rank and incarnation out of range', () => {
    const b = encodeJobDescription(desc());
    const with32 = (at: number, v: number) => {
      const q = b.slice();
      new DataView(q.buffer).setUint32(at, v, true);
      return () => decodeJobDescription(q, opts);
    };
    refused(with32(16, 0), 'size');
    refused(with32(16, 4097), 'size');
    refused(with32(20, 2), 'rank');
    refused(with32(24, 0), 'incarnation');
    refused(with32(24, 2 ** 31), 'incarnation');
    expect(decodeJobDescription(encodeJobDescription(desc({ incarnation: 2 ** 31 - 1 })), opts).incarnation).toBe(
      2 ** 31 - 1,
    );
    refused(() => encodeJobDescription(desc({ size: 0, hosts: [] })), 'size');
    refused(() => encodeJobDescription(desc({ rank: 2 })), 'rank');
    refused(() => encodeJobDescription(desc({ incarnation: 0 })), 'incarnation');
    refused(() => encodeJobDescription(desc({ hosts: [{ name: 'a', port: 1 }] })), 'hosts');
  });

  it('refuses a host that is no DNS name or dotted IPv4 address, a refused host, and a port 0', () => {
    const host = (name: string, port = 1) =>
      desc({
        hosts: [
          { name: 'ok', port: 1 },
          { name, port },
        ],
      });
    const label63 = 'a'.repeat(63);
    for (const bad of [
      '',
      'hôst',
      'a b',
      'a_b.example',
      '.example',
      'example.',
      'a..b',
      `${label63}b.example`,
      '*.x',
    ]) {
      refused(() => encodeJobDescription(host(bad)), 'hosts[1].name');
    }
    refused(() => encodeJobDescription(host(`${label63}.`.repeat(4).slice(0, 254))), 'hosts[1].name');
    const longest = `${label63}.${label63}.${label63}.${'b'.repeat(61)}`;
    expect(longest.length).toBe(253);
    for (const ok of ['a', 'A-1.example', '10.0.0.2', '999.1.1.1', longest]) {
      expect(decodeJobDescription(encodeJobDescription(host(ok)), opts).hosts[1]?.name).toBe(ok);
    }
    refused(() => encodeJobDescription(host('ok', 0)), 'hosts[1].port');
    refused(() => encodeJobDescription(host('HOST-A.invalid'), opts), 'hosts[1].name');
    refused(() => encodeJobDescription(host('x.Host-B.INVALID'), opts), 'hosts[1].name');
    expect(() => encodeJobDescription(host('HOST-A.invalid'))).not.toThrow();
    const b = encodeJobDescription(host('HOST-A.invalid'));
    const e = refused(() => decodeJobDescription(b, opts), 'hosts[1].name');
    expect(e.message).toMatch(/refused host/);
    const at = 28 + 1 + 2 + 2; // the second host's length byte
    const q = b.slice();
    q[at + 1] = 0xc3;
    refused(() => decodeJobDescription(q, { isRefused: () => false }), 'hosts[1].name');
    const blank = b.slice();
    blank[at + 1] = 0x20;
    refused(() => decodeJobDescription(blank, { isRefused: () => false }), 'hosts[1].name');
    const zeroLen = encodeJobDescription(host('x'));
    zeroLen[at] = 0;
    refused(() => decodeJobDescription(zeroLen, opts), 'hosts[1].name');
    const port0 = encodeJobDescription(host('x'));
    port0[at + 2] = 0;
    port0[at + 3] = 0;
    refused(() => decodeJobDescription(port0, opts), 'hosts[1].port');
    const long = encodeJobDescription(host('x'));
    long[at] = 254;
    refused(() => decodeJobDescription(long, opts), 'hosts[1].name');
  });

  it('refuses an empty PEM text and lengths above their bounds', () => {
    refused(() => encodeJobDescription(desc({ caCert: new Uint8Array(0) })), 'caCert');
    refused(() => encodeJobDescription(desc({ rankCert: new Uint8Array(0) })), 'rankCert');
    refused(() => encodeJobDescription(desc({ rankKey: new Uint8Array(0) })), 'rankKey');
    refused(() => encodeJobDescription(desc({ caCert: new Uint8Array(16385) })), 'caCert');
    refused(() => encodeJobDescription(desc({ rankCert: new Uint8Array(16385) })), 'rankCert');
    refused(() => encodeJobDescription(desc({ rankKey: new Uint8Array(16385) })), 'rankKey');
    refused(() => encodeJobDescription(desc({ joinToken: new Uint8Array(4097) })), 'joinToken');
    const d = desc();
    const b = encodeJobDescription(d);
    const caAt = 28 + 3 + 10 + 3 + 8;
    const q = b.slice();
    new DataView(q.buffer).setUint32(caAt, 16385, true);
    refused(() => decodeJobDescription(q, opts), 'caCert');
    const big = b.slice();
    new DataView(big.buffer).setUint32(caAt, 0xffffffff, true);
    refused(() => decodeJobDescription(big, opts), 'caCert');
    const zero = b.slice();
    new DataView(zero.buffer).setUint32(caAt, 0, true);
    refused(() => decodeJobDescription(zero, opts), 'caCert');
    expect(
      decodeJobDescription(encodeJobDescription(desc({ rankKey: new Uint8Array(16384) })), opts).rankKey.length,
    ).toBe(16384);
  });

  it('refuses a join token that is not well formed', () => {
    refused(() => encodeJobDescription(desc({ joinToken: Uint8Array.of(1, 2, 3) })), 'joinToken');
    refused(() => encodeJobDescription(desc({ joinToken: new Uint8Array(0) })), 'joinToken');
    refused(() => encodeJobDescription(desc({ joinToken: TOKEN.subarray(0, TOKEN.length - 1) })), 'joinToken');
    const b = encodeJobDescription(desc());
    const tokenAt = b.length - 1344 - 64 - 2 - TOKEN.length;
    const q = b.slice();
    q[tokenAt + 28] = 0; // host length 0
    const e = refused(() => decodeJobDescription(q, opts), 'joinToken');
    expect(e.details.rule).toBe('host-length');
  });

  it("refuses rank 0's secret key of other than 64 bytes and any secret key on another rank", () => {
    refused(() => encodeJobDescription(desc({ rank: 1 })), 'jobSecretKey');
    refused(() => encodeJobDescription(desc({ jobSecretKey: new Uint8Array(63) })), 'jobSecretKey');
    refused(() => encodeJobDescription(desc({ jobSecretKey: null })), 'jobSecretKey');
    const d = desc();
    const b = encodeJobDescription(d);
    const q = b.slice();
    new DataView(q.buffer).setUint32(20, 1, true); // rank 1 with the key
    refused(() => decodeJobDescription(q, opts), 'jobSecretKey');
    const odd = b.slice();
    new DataView(odd.buffer).setUint16(secretAt(b, d), 65, true);
    refused(() => decodeJobDescription(odd, opts), 'jobSecretKey');
  });

  it('refuses every cut and any byte after the public key', () => {
    const d = desc();
    const b = encodeJobDescription(d);
    for (let n = 0; n < b.length; n += n < 200 ? 1 : 97) {
      const e = (() => {
        try {
          decodeJobDescription(b.subarray(0, n), opts);
        } catch (x) {
          return x;
        }
        return undefined;
      })();
      expect(isPlexusError(e, 'H1610'), `cut at ${n}`).toBe(true);
      expect((e as PlexusError).message).toMatch(/cut/);
    }
    refused(() => decodeJobDescription(b.subarray(0, b.length - 1), opts), 'jobPublicKey');
    refused(() => decodeJobDescription(Buffer.concat([b, Uint8Array.of(0)]), opts), 'jobPublicKey');
  });

  it('round-trips random descriptions and refuses random mutations with H1610 only (property)', () => {
    const label = fc.stringMatching(/^[A-Za-z0-9-]{1,12}$/);
    const name = fc.array(label, { minLength: 1, maxLength: 4 }).map((l) => l.join('.'));
    const arb = fc
      .record({
        size: fc.integer({ min: 1, max: 6 }),
        rankSeed: fc.nat(),
        incarnation: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        names: fc.array(name, { minLength: 6, maxLength: 6 }),
        ports: fc.array(fc.integer({ min: 1, max: 65535 }), { minLength: 6, maxLength: 6 }),
        expiry: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
      })
      .map(
        (r): JobDescription =>
          desc({
            size: r.size,
            rank: r.rankSeed % r.size,
            incarnation: r.incarnation,
            hosts: Array.from({ length: r.size }, (_, i) => ({
              name: r.names[i] as string,
              port: r.ports[i] as number,
            })),
            joinToken: assembleJoinToken(
              encodeJoinTokenMessage({
                jobId: JOB,
                rank: r.rankSeed % r.size,
                size: r.size,
                incarnation: r.incarnation,
                host: r.names[r.rankSeed % r.size] as string,
                expiry: r.expiry,
              }),
              new Uint8Array(2484).fill(0xaa),
            ),
            jobSecretKey: r.rankSeed % r.size === 0 ? new Uint8Array(64) : null,
          }),
      );
    fc.assert(
      fc.property(arb, fc.nat(), fc.integer({ min: 0, max: 255 }), (d, at, v) => {
        const b = encodeJobDescription(d, opts);
        expect(decodeJobDescription(b, opts)).toEqual(d);
        expect(decodeJobLine(encodeJobLine(d), opts)).toEqual(d);
        const q = b.slice();
        q[at % q.length] = v;
        try {
          decodeJobDescription(q, opts);
        } catch (e) {
          expect(isPlexusError(e, 'H1610')).toBe(true);
        }
      }),
      { numRuns: 100, seed: 11 },
    );
  });
});

// ---------------------------------------------------------------------------------------
// vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent of these codecs)

describe('vectors/sperli-vectors.txt: jobdesc records', () => {
  const unhex = (s: string) => Uint8Array.from(Buffer.from(s, 'hex'));
  it.each(vectors('jobdesc').map((r) => [r.name, r.f] as const))('%s', (_n, f) => {
    const bytes = unhex(f.bytes as string);
    let d: JobDescription | undefined;
    expect(verdictOf(() => (d = decodeJobDescription(bytes, opts)))).toBe(f.verdict);
    expect(verdictOf(() => decodeJobLine(`${f.bytes}\n`, opts))).toBe(f.verdict);
    if (f.verdict !== 'ok' || d === undefined) return;
    const hx = (b: Uint8Array | null) => Buffer.from(b ?? new Uint8Array(0)).toString('hex');
    expect(hx(d.jobId)).toBe(f.job);
    expect([`${d.size}`, `${d.rank}`, `${d.incarnation}`]).toEqual([f.size, f.rank, f.incarnation]);
    expect(d.hosts.map((h) => `${h.name}:${h.port}`).join(',')).toBe(f.hosts);
    expect([d.caCert, d.rankCert, d.rankKey, d.joinToken, d.jobSecretKey, d.jobPublicKey].map(hx)).toEqual(
      ['ca', 'cert', 'key', 'token', 'secret', 'public'].map((k) => f[k]),
    );
    expect(encodeJobLine(d, opts)).toBe(`${f.bytes}\n`);
  });
});
