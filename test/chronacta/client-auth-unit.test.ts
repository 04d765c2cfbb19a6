/**
 * The pieces of the client port's security in process: the tokens file's rules, the bearer
 * check (every digest compared), loopback detection and the start warning, the checks of TLS
 * files at load, and the client's reading of its files and token (never quoted in errors).
 * The real TLS, processes and reloads are in client-auth.test.ts.
 */
import { randomBytes, X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  exposureWarning,
  isLoopback,
  loadClientPortSecurity,
  MAX_TOKEN_LENGTH,
  parseTokens,
} from '../../ts/chronacta/client-auth.js';
import { clientSecurityFromFiles, TOKEN_ENV } from '../../ts/chronacta/client-credentials.js';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { createJobCa, issueRankCertificate } from '../../ts/crypto/x509.js';

const dir = mkdtempSync(join(tmpdir(), 'plexus-client-auth-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text, { mode: 0o600 });
  return p;
}

function codeOf(f: () => unknown): string {
  try {
    f();
    return '';
  } catch (e) {
    return isPlexusError(e) ? e.code : `not a PlexusError: ${String(e)}`;
  }
}

describe('the tokens file', () => {
  it('takes one token a line, skipping comments and blank lines', () => {
    const a = 'a'.repeat(16);
    const b = `b${'x'.repeat(40)}`;
    expect(parseTokens(`# ops\n\n${a}\r\n  ${b}  \n`, 'f')).toEqual([a, b]);
  });

  it('refuses short, long, spaced or non-ASCII tokens and an empty file, naming the line only', () => {
    const secret = 'short-secret';
    let err: unknown;
    try {
      parseTokens(`${'a'.repeat(16)}\n${secret}\n`, 'f');
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_CHRONACTA_BAD_TOKENS')).toBe(true);
    expect((err as Error).message).toContain('line 2');
    expect((err as Error).message).not.toContain(secret);
    for (const bad of [
      'x'.repeat(MAX_TOKEN_LENGTH + 1),
      'two words in a line',
      `caf\u00e9${'x'.repeat(20)}`,
      '# only',
    ]) {
      expect(codeOf(() => parseTokens(bad, 'f'))).toBe('PLX_CHRONACTA_BAD_TOKENS');
    }
  });

  it('admits a call only with a Bearer token of the file', () => {
    const t1 = randomBytes(20).toString('hex');
    const t2 = randomBytes(20).toString('hex');
    const sec = loadClientPortSecurity({ authTokensFile: file('tokens', `${t1}\n${t2}\n`) });
    try {
      expect(sec.authenticate({ authorization: `Bearer ${t1}` })).toBeUndefined();
      expect(sec.authenticate({ authorization: `bearer ${t2}` })).toBeUndefined();
      for (const h of [undefined, '', t1, `Basic ${t1}`, `Bearer ${t1}x`, `Bearer ${t1.slice(1)}`, 'Bearer ']) {
        const refused = sec.authenticate(h === undefined ? {} : { authorization: h });
        expect(refused?.code, String(h)).toBe(16);
        expect(refused?.metadata?.['plexus-code']).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
      }
      // What the member presents to others: the first token, and no TLS.
      expect(sec.peerCredentials()).toEqual({ token: t1 });
    } finally {
      sec.close();
    }
  });
});

describe('loopback and the start warning', () => {
  it('tells loopback addresses from the others', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1']) {
      expect(isLoopback(h), h).toBe(true);
    }
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.2', 'example.org', '128.0.0.1']) {
      expect(isLoopback(h), h).toBe(false);
    }
  });

  it('warns for a non-loopback bind without TLS or without client authentication, only then', () => {
    const none = { tls: undefined, clientCertAuth: false, tokens: false };
    const tls = { tls: {}, clientCertAuth: false, tokens: false };
    expect(exposureWarning('127.0.0.1', none)).toBeUndefined();
    expect(exposureWarning('0.0.0.0', none)).toMatch(/without TLS .* and without client authentication/);
    expect(exposureWarning('0.0.0.0', tls)).toMatch(/without client authentication/);
    expect(exposureWarning('0.0.0.0', tls)).not.toContain('without TLS');
    expect(exposureWarning('0.0.0.0', { ...none, tokens: true })).toContain('bearer tokens included');
    expect(exposureWarning('0.0.0.0', { ...tls, tokens: true })).toBeUndefined();
    expect(exposureWarning('::', { ...tls, clientCertAuth: true })).toBeUndefined();
  });
});

describe('the TLS files', async () => {
  const jobId = randomBytes(16);
  const ca = await createJobCa({ jobId });
  const a = await issueRankCertificate(ca, { jobId, rank: 0, host: '127.0.0.1' });
  const b = await issueRankCertificate(ca, { jobId, rank: 1, host: '127.0.0.1' });

  it('loads a certificate with its key, and gives the member its own certificate as client', () => {
    const sec = loadClientPortSecurity({
      certFile: file('a.pem', a.cert),
      keyFile: file('a-key.pem', a.key),
      trustedCaFile: file('ca.pem', ca.cert),
      clientCertAuth: true,
    });
    try {
      expect(sec.tls).toMatchObject({ minVersion: 'TLSv1.3', requestCert: true, rejectUnauthorized: true });
      expect(sec.peerCredentials()).toEqual({ tls: { ca: ca.cert, cert: a.cert, key: a.key } });
    } finally {
      sec.close();
    }
  });

  it('warns about an expired certificate (and still loads it)', async () => {
    const old = await issueRankCertificate(ca, {
      jobId,
      rank: 2,
      host: '127.0.0.1',
      notBefore: new Date(Date.now() - 10 * 86_400_000),
      notAfter: new Date(Date.now() - 86_400_000),
    });
    const warnings: string[] = [];
    const sec = loadClientPortSecurity(
      { certFile: file('old.pem', old.cert), keyFile: file('old-key.pem', old.key) },
      { warn: (m) => warnings.push(m) },
    );
    sec.close();
    expect(warnings.some((w) => w.includes('has expired'))).toBe(true);
    const fresh: string[] = [];
    loadClientPortSecurity(
      { certFile: file('fresh.pem', a.cert), keyFile: file('fresh-key.pem', a.key) },
      { warn: (m) => fresh.push(m) },
    ).close();
    expect(fresh).toEqual([]);
  });

  it('judges validity by the clock it is given', () => {
    const notAfter = new X509Certificate(a.cert).validTo;
    const later = new ManualClock(Date.parse(notAfter) + 86_400_000);
    const warnings: string[] = [];
    loadClientPortSecurity(
      { certFile: file('later.pem', a.cert), keyFile: file('later-key.pem', a.key), clock: later },
      { warn: (m) => warnings.push(m) },
    ).close();
    expect(warnings.some((w) => w.includes('has expired'))).toBe(true);
    const early: string[] = [];
    loadClientPortSecurity(
      { certFile: file('early.pem', a.cert), keyFile: file('early-key.pem', a.key), clock: new ManualClock(0) },
      { warn: (m) => early.push(m) },
    ).close();
    expect(early.some((w) => w.includes('not valid yet'))).toBe(true);
  });

  it('refuses a key of another certificate, missing halves and a CA without TLS', () => {
    const cert = file('a2.pem', a.cert);
    const otherKey = file('b-key.pem', b.key);
    expect(codeOf(() => loadClientPortSecurity({ certFile: cert, keyFile: otherKey }))).toBe('PLX_CHRONACTA_BAD_TLS');
    expect(codeOf(() => loadClientPortSecurity({ keyFile: otherKey }))).toBe('PLX_CHRONACTA_BAD_TLS');
    expect(codeOf(() => loadClientPortSecurity({ trustedCaFile: cert }))).toBe('PLX_CHRONACTA_BAD_TLS');
    expect(
      codeOf(() =>
        loadClientPortSecurity({ certFile: cert, keyFile: file('a3-key.pem', a.key), clientCertAuth: true }),
      ),
    ).toBe('PLX_CHRONACTA_BAD_TLS');
  });

  it('reads the client side from files and the environment, never quoting the token', () => {
    const token = randomBytes(20).toString('hex');
    const got = clientSecurityFromFiles({
      caFile: file('c-ca.pem', ca.cert),
      certFile: file('c.pem', b.cert),
      keyFile: file('c-key.pem', b.key),
      tokenFile: file('c-token', `${token}\nignored\n`),
      env: {},
    });
    expect(got.token).toBe(token);
    expect(String(got.tls?.ca)).toBe(ca.cert);
    expect(clientSecurityFromFiles({ env: { [TOKEN_ENV]: token } })).toEqual({ token });
    expect(clientSecurityFromFiles({ env: {} })).toEqual({});
    expect(clientSecurityFromFiles({ tls: true, env: {} })).toEqual({ tls: {} });
    let err: unknown;
    try {
      clientSecurityFromFiles({ env: { [TOKEN_ENV]: `${token} more` } });
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_CHRONACTA_BAD_TOKENS')).toBe(true);
    expect((err as Error).message).not.toContain(token);
    expect(codeOf(() => clientSecurityFromFiles({ certFile: file('d.pem', b.cert), env: {} }))).toBe(
      'PLX_CHRONACTA_BAD_TLS',
    );
    expect(codeOf(() => clientSecurityFromFiles({ caFile: file('e.pem', 'not pem'), env: {} }))).toBe(
      'PLX_CHRONACTA_BAD_TLS',
    );
  });
});
