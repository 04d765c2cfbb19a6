/**
 * The client port's TLS and client authentication with real `node dist/cli/main.js chronacta
 * serve` processes on loopback (build first: `npm run build`), certificates made with the
 * project's certificate code (ts/crypto: an Ed25519 CA and certificates naming 127.0.0.1):
 *
 * - TLS: a client that trusts the server's CA reads and writes; one that trusts another CA,
 *   and a plaintext one, do not get through;
 * - mutual TLS (--client-cert-auth): no client certificate, and one of a foreign CA, are
 *   refused in the handshake; a certificate of the trusted CA is served;
 * - bearer tokens (--auth-tokens-file): no token and a wrong one end UNAUTHENTICATED
 *   (PLX_CHRONACTA_UNAUTHENTICATED), the right one is served, from the library, the CLI's
 *   --token-file and PLEXUS_CHRONACTA_TOKEN; the token is never printed; a rewritten
 *   tokens file is taken;
 * - reload: certificate and key files replaced while the server runs are what a new
 *   connection sees; a replacement that cannot be used is refused with a warning and the
 *   server keeps serving the certificate it had;
 * - the start warning for a client port bound beyond loopback (0.0.0.0, reached through
 *   127.0.0.1 only) without TLS and client authentication, and none on loopback or when
 *   both are on;
 * - settings that cannot work are refused at start with coded errors, no stack trace.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes, X509Certificate } from 'node:crypto';
import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { createJobCa, issueRankCertificate, type JobCa } from '../../ts/crypto/x509.js';
import { isRunning, MAIN, stopChild } from '../chronacta-cluster/helpers.js';
import { runNode, startPlexus } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

interface Pki {
  readonly ca: JobCa;
  /** A certificate and key naming 127.0.0.1 (server and client use). */
  issue(rank: number): Promise<{ cert: string; key: string }>;
}

async function pki(): Promise<Pki> {
  const jobId = randomBytes(16);
  const ca = await createJobCa({ jobId });
  return { ca, issue: (rank) => issueRankCertificate(ca, { jobId, rank, host: '127.0.0.1' }) };
}

interface Served {
  readonly child: ChildProcess;
  /** The address to dial: 127.0.0.1 and the port served. */
  readonly address: string;
  readonly port: number;
  readonly servedLine: Record<string, unknown>;
  stderr(): string;
  stdout(): string;
}

const children = new Set<ChildProcess>();
let root: string;

/** `plexus chronacta serve --data DIR --port 0 --metrics-port 0 ...args`, once it serves. */
async function serveProcess(name: string, args: readonly string[]): Promise<Served> {
  const p = startPlexus([
    'chronacta',
    'serve',
    '--data',
    join(root, `data-${name}`),
    '--port',
    '0',
    '--metrics-port',
    '0',
    ...args,
  ]);
  const child = p.child;
  children.add(child);
  const line = await p
    .line((l) => l.includes('"serving"'), { timeoutMs: 30_000, what: `serve ${name}` })
    .then((l) => JSON.parse(l) as Record<string, unknown>)
    .catch(async (e: unknown) => {
      await stopChild(child, 'SIGKILL');
      throw e;
    });
  const port = Number(String(line.address).slice(String(line.address).lastIndexOf(':') + 1));
  return {
    child,
    address: `127.0.0.1:${port}`,
    port,
    servedLine: line,
    stderr: p.stderr,
    stdout: p.stdout,
  };
}

/** Runs `plexus chronacta serve ...` expecting it to refuse to start; resolves with its exit code and output. */
function run(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  // Past 30 s it is SIGKILLed by its PID (no exit code: counted as 1, a failure to refuse).
  return runNode(MAIN, ['chronacta', ...args], {
    env: { ...process.env, PLEXUS_CHRONACTA_TOKEN: '', ...env },
    timeoutMs: 30_000,
  }).then((r) => ({ code: r.code ?? 1, stdout: r.stdout, stderr: r.stderr }));
}

function file(name: string, text: string, mode = 0o600): string {
  const p = join(root, name);
  writeFileSync(p, text, { mode });
  chmodSync(p, mode);
  return p;
}

/** Replaces `path` with `text` atomically (write beside, rename over), as certificate tools do. */
function replace(path: string, text: string): void {
  const tmp = `${path}.new-${randomBytes(4).toString('hex')}`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, path);
}

/** The SHA-256 fingerprint of the certificate a new TLS connection to `port` is served. */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ALPNProtocols: ['h2'], rejectUnauthorized: false }, () => {
      const fp = s.getPeerCertificate().fingerprint256;
      s.destroy();
      resolve(fp);
    });
    s.on('error', reject);
  });
}

const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256;

/** Resolves with the error code a call fails with ('' when it succeeds). */
async function failure(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return '';
  } catch (e) {
    return isPlexusError(e) ? e.code : `not a PlexusError: ${String(e)}`;
  }
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'plexus-client-auth-'));
});

afterAll(async () => {
  for (const c of children) if (isRunning(c)) await stopChild(c, 'SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

async function stop(s: Served): Promise<void> {
  await stopChild(s.child, 'SIGTERM');
  children.delete(s.child);
}

describe('the client port over TLS', () => {
  let server: Pki;
  let foreign: Pki;
  let clients: Pki;
  beforeAll(async () => {
    [server, foreign, clients] = await Promise.all([pki(), pki(), pki()]);
  });

  it('serves a client that trusts its CA, not one that trusts another CA nor a plaintext one', async () => {
    const leaf = await server.issue(0);
    const s = await serveProcess('tls', [
      '--cert-file',
      file('tls-cert.pem', leaf.cert),
      '--key-file',
      file('tls-key.pem', leaf.key),
    ]);
    try {
      expect(s.servedLine.security).toEqual({ tls: true, clientCertAuth: false, tokens: false });
      const good = new ChronactaClient(s.address, { tls: { ca: server.ca.cert }, deadlineMs: 10_000 });
      const wrongCa = new ChronactaClient(s.address, { tls: { ca: foreign.ca.cert }, deadlineMs: 10_000 });
      const plain = new ChronactaClient(s.address, { deadlineMs: 3000 });
      try {
        const r = await good.append('orders-1', [{ type: 'placed', data: 'x' }]);
        expect(r.firstVersion).toBe(0n);
        expect((await good.readStream('orders-1')).events.map((e) => e.type)).toEqual(['placed']);
        expect(await failure(wrongCa.append('orders-1', [{ type: 'forged' }]))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        expect(await failure(wrongCa.readStream('orders-1'))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        expect(await failure(plain.append('orders-1', [{ type: 'plain' }]))).not.toBe('');
        // The CLI, with and without the CA.
        const cacert = file('tls-ca.pem', server.ca.cert);
        const read = await run(['read', 'orders-1', '--server', s.address, '--cacert', cacert]);
        expect(read.code, read.stderr).toBe(0);
        expect(read.stdout).toContain('"placed"');
        expect(read.stderr).toBe('');
        const untrusted = await run(['read', 'orders-1', '--server', s.address, '--tls']);
        expect(untrusted.code).toBe(1);
        expect(untrusted.stderr).toContain('PLX_CHRONACTA_UNAVAILABLE');
        expect((await good.readStream('orders-1')).events).toHaveLength(1);
      } finally {
        for (const c of [good, wrongCa, plain]) c.close();
      }
      // On loopback: no warning.
      expect(s.stderr()).not.toContain('WARNING');
    } finally {
      await stop(s);
    }
  });

  it('with --client-cert-auth refuses no certificate and a foreign one, and serves a trusted one', async () => {
    const leaf = await server.issue(0);
    const s = await serveProcess('mtls', [
      '--cert-file',
      file('mtls-cert.pem', leaf.cert),
      '--key-file',
      file('mtls-key.pem', leaf.key),
      '--trusted-ca-file',
      file('mtls-clients-ca.pem', clients.ca.cert),
      '--client-cert-auth',
    ]);
    try {
      expect(s.servedLine.security).toEqual({ tls: true, clientCertAuth: true, tokens: false });
      const mine = await clients.issue(7);
      const theirs = await foreign.issue(7);
      const good = new ChronactaClient(s.address, {
        tls: { ca: server.ca.cert, cert: mine.cert, key: mine.key },
        deadlineMs: 10_000,
      });
      const noCert = new ChronactaClient(s.address, { tls: { ca: server.ca.cert }, deadlineMs: 10_000 });
      const foreignCert = new ChronactaClient(s.address, {
        tls: { ca: server.ca.cert, cert: theirs.cert, key: theirs.key },
        deadlineMs: 10_000,
      });
      // A certificate the server itself presents is of another CA than the clients': refused too.
      const serverCert = new ChronactaClient(s.address, {
        tls: { ca: server.ca.cert, cert: leaf.cert, key: leaf.key },
        deadlineMs: 10_000,
      });
      try {
        expect(await failure(noCert.append('s-1', [{ type: 'anon' }]))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        expect(await failure(foreignCert.append('s-1', [{ type: 'foreign' }]))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        expect(await failure(serverCert.append('s-1', [{ type: 'server' }]))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        expect(await failure(noCert.readAll())).toBe('PLX_CHRONACTA_UNAVAILABLE');
        const r = await good.append('s-1', [{ type: 'trusted' }]);
        expect(r.firstPosition).toBe(1n);
        // Only the trusted client's event was written.
        expect((await good.readAll()).events.map((e) => e.type)).toEqual(['trusted']);
        // The CLI with a client certificate.
        const args = ['--server', s.address, '--cacert', file('mtls-ca.pem', server.ca.cert)];
        const withCert = await run([
          'append',
          's-1',
          '--type',
          'cli',
          ...args,
          '--cert',
          file('mtls-client-cert.pem', mine.cert),
          '--key',
          file('mtls-client-key.pem', mine.key),
        ]);
        expect(withCert.code, withCert.stderr).toBe(0);
        const without = await run(['append', 's-1', '--type', 'cli-anon', ...args]);
        expect(without.code).toBe(1);
        expect(without.stderr).toContain('PLX_CHRONACTA_UNAVAILABLE');
        expect((await good.readStream('s-1')).events.map((e) => e.type)).toEqual(['trusted', 'cli']);
        // A subscription over mutual TLS, from the library and the CLI.
        const sub = good.subscribe({ stream: 's-1', fromVersion: 'start' });
        const seen: string[] = [];
        for await (const m of sub) {
          if (m.kind === 'event') seen.push(m.event.type);
          if (seen.length === 2) break;
        }
        sub.close();
        expect(seen).toEqual(['trusted', 'cli']);
        const subscribed = await run([
          'subscribe',
          's-1',
          '--count',
          '2',
          ...args,
          '--cert',
          join(root, 'mtls-client-cert.pem'),
          '--key',
          join(root, 'mtls-client-key.pem'),
        ]);
        expect(subscribed.code, subscribed.stderr).toBe(0);
        expect(subscribed.stdout).toContain('"cli"');
        // The refused handshakes are reported (rate-limited) on stderr.
        await until(async () => (s.stderr().includes('refused a TLS connection') ? true : undefined), {
          timeoutMs: 10_000,
          what: 'the refused handshake warning',
          intervalMs: 25,
        });
      } finally {
        for (const c of [good, noCert, foreignCert, serverCert]) c.close();
      }
    } finally {
      await stop(s);
    }
  });

  it('replaces its certificate when the files change; a replacement that cannot be used is not taken', async () => {
    const first = await server.issue(0);
    const certFile = file('reload-cert.pem', first.cert);
    const keyFile = file('reload-key.pem', first.key);
    const s = await serveProcess('reload', ['--cert-file', certFile, '--key-file', keyFile]);
    const before = new ChronactaClient(s.address, { tls: { ca: server.ca.cert }, deadlineMs: 10_000 });
    try {
      expect(await servedFingerprint(s.port)).toBe(fingerprint(first.cert));
      await before.append('r-1', [{ type: 'before' }]);
      // A certificate of another CA, written key first then certificate (each renamed over).
      const second = await foreign.issue(0);
      replace(keyFile, second.key);
      replace(certFile, second.cert);
      await until(async () => ((await servedFingerprint(s.port)) === fingerprint(second.cert) ? true : undefined), {
        timeoutMs: 15_000,
        what: 'the new certificate on a new connection',
        intervalMs: 25,
      });
      const after = new ChronactaClient(s.address, { tls: { ca: foreign.ca.cert }, deadlineMs: 10_000 });
      const oldTrust = new ChronactaClient(s.address, { tls: { ca: server.ca.cert }, deadlineMs: 10_000 });
      try {
        await after.append('r-1', [{ type: 'after' }]);
        expect(await failure(oldTrust.readStream('r-1'))).toBe('PLX_CHRONACTA_UNAVAILABLE');
        // A certificate file that is not PEM: kept out, with a warning; the second stays.
        replace(certFile, 'not a certificate\n');
        await until(async () => (s.stderr().includes('the changed TLS files were not taken') ? true : undefined), {
          timeoutMs: 15_000,
          what: 'the warning about the unusable certificate file',
          intervalMs: 25,
        });
        expect(await servedFingerprint(s.port)).toBe(fingerprint(second.cert));
        // A certificate whose key is not the one in the key file: the same.
        const third = await server.issue(0);
        const warnings = s.stderr().split('the changed TLS files were not taken').length;
        replace(certFile, third.cert);
        await until(
          async () => (s.stderr().split('the changed TLS files were not taken').length > warnings ? true : undefined),
          { timeoutMs: 15_000, what: 'the warning about the mismatched key', intervalMs: 25 },
        );
        expect(await servedFingerprint(s.port)).toBe(fingerprint(second.cert));
        const fresh = new ChronactaClient(s.address, { tls: { ca: foreign.ca.cert }, deadlineMs: 10_000 });
        try {
          expect((await fresh.readStream('r-1')).events.map((e) => e.type)).toEqual(['before', 'after']);
        } finally {
          fresh.close();
        }
        expect(isRunning(s.child)).toBe(true);
      } finally {
        after.close();
        oldTrust.close();
      }
    } finally {
      before.close();
      await stop(s);
    }
  });
});

describe('bearer tokens', () => {
  const right = `tok-${randomBytes(24).toString('hex')}`;
  const other = `tok-${randomBytes(24).toString('hex')}`;
  const wrong = `tok-${randomBytes(24).toString('hex')}`;
  let s: Served;
  let tokensFile: string;
  beforeAll(async () => {
    tokensFile = file('tokens', `# clients of the orders service\n${right}\n\n${other}\n`);
    s = await serveProcess('tokens', ['--auth-tokens-file', tokensFile]);
  });
  afterAll(async () => {
    if (s) await stop(s);
  });

  it('refuses calls without a token or with a wrong one (UNAUTHENTICATED), serves the right one', async () => {
    expect(s.servedLine.security).toEqual({ tls: false, clientCertAuth: false, tokens: true });
    const none = new ChronactaClient(s.address, { deadlineMs: 10_000 });
    const bad = new ChronactaClient(s.address, { token: wrong, deadlineMs: 10_000 });
    const good = new ChronactaClient(s.address, { token: right, deadlineMs: 10_000 });
    const second = new ChronactaClient(s.address, { token: other, deadlineMs: 10_000 });
    try {
      for (const c of [none, bad]) {
        let err: unknown;
        await c.append('t-1', [{ type: 'x' }]).catch((e: unknown) => {
          err = e;
        });
        expect(isPlexusError(err, 'PLX_CHRONACTA_UNAUTHENTICATED')).toBe(true);
        expect((err as { details: { grpcStatus?: number } }).details.grpcStatus).toBe(16);
        expect(await failure(c.readAll())).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
        expect(await failure(c.clusterStatus())).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
        // A subscription is refused too.
        const sub = c.subscribe({ all: true, fromPosition: 'start' });
        let subErr = '';
        try {
          for await (const _ of sub) break;
        } catch (e) {
          subErr = isPlexusError(e) ? e.code : String(e);
        } finally {
          sub.close();
        }
        expect(subErr).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
      }
      await good.append('t-1', [{ type: 'good' }]);
      await second.append('t-1', [{ type: 'second' }]);
      expect((await good.readStream('t-1')).events.map((e) => e.type)).toEqual(['good', 'second']);
      const sub = good.subscribe({ stream: 't-1', fromVersion: 'start' });
      const seen: string[] = [];
      for await (const m of sub) {
        if (m.kind === 'event') seen.push(m.event.type);
        if (seen.length === 2) break;
      }
      sub.close();
      expect(seen).toEqual(['good', 'second']);
    } finally {
      for (const c of [none, bad, good, second]) c.close();
    }
  });

  it('takes the token from --token-file or PLEXUS_CHRONACTA_TOKEN in the CLI, and never prints it', async () => {
    const at = ['--server', s.address];
    const fromFile = await run([
      'append',
      't-2',
      '--type',
      'file',
      ...at,
      '--token-file',
      file('my-token', `${right}\n`),
    ]);
    expect(fromFile.code, fromFile.stderr).toBe(0);
    const fromEnv = await run(['read', 't-2', ...at], { PLEXUS_CHRONACTA_TOKEN: other });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(fromEnv.stdout).toContain('"file"');
    const refused = await run(['read', 't-2', ...at], { PLEXUS_CHRONACTA_TOKEN: wrong });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('PLX_CHRONACTA_UNAUTHENTICATED');
    const missing = await run(['cluster', 'status', ...at]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('PLX_CHRONACTA_UNAUTHENTICATED');
    const notAToken = await run(['read', 't-2', ...at], { PLEXUS_CHRONACTA_TOKEN: `${wrong} x` });
    expect(notAToken.code).toBe(1);
    expect(notAToken.stderr).toContain('PLX_CHRONACTA_BAD_TOKENS');
    for (const r of [fromFile, fromEnv, refused, missing, notAToken]) {
      for (const t of [right, other, wrong]) {
        expect(r.stdout).not.toContain(t);
        expect(r.stderr).not.toContain(t);
      }
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
    for (const t of [right, other]) {
      expect(s.stdout()).not.toContain(t);
      expect(s.stderr()).not.toContain(t);
    }
  });

  it('takes a rewritten tokens file; one without a token is not taken', async () => {
    const next = `tok-${randomBytes(24).toString('hex')}`;
    const oldClient = new ChronactaClient(s.address, { token: right, deadlineMs: 10_000 });
    const newClient = new ChronactaClient(s.address, { token: next, deadlineMs: 10_000 });
    try {
      replace(tokensFile, `${next}\n`);
      await until(async () => ((await failure(newClient.readAll())) === '' ? true : undefined), {
        timeoutMs: 15_000,
        what: 'the new token accepted',
        intervalMs: 25,
      });
      expect(await failure(oldClient.readAll())).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
      // A file with only a comment: refused, the tokens stay.
      replace(tokensFile, '# nobody\n');
      await until(async () => (s.stderr().includes('the changed tokens file was not taken') ? true : undefined), {
        timeoutMs: 15_000,
        what: 'the warning about the empty tokens file',
        intervalMs: 25,
      });
      expect(await failure(newClient.readAll())).toBe('');
      expect(await failure(oldClient.readAll())).toBe('PLX_CHRONACTA_UNAUTHENTICATED');
    } finally {
      oldClient.close();
      newClient.close();
    }
  });
});

describe('the start warning and refused settings', () => {
  it('warns on stderr when the port binds 0.0.0.0 without TLS and client authentication', async () => {
    const s = await serveProcess('open', ['--host', '0.0.0.0']);
    try {
      expect(String(s.servedLine.address)).toMatch(/^0\.0\.0\.0:\d+$/);
      await until(async () => (s.stderr().includes('WARNING') ? true : undefined), {
        timeoutMs: 10_000,
        what: 'the warning',
        intervalMs: 25,
      });
      expect(s.stderr()).toContain('WARNING: the gRPC client port binds 0.0.0.0');
      expect(s.stderr()).toContain('without TLS');
      expect(s.stderr()).toContain('client authentication');
      // Reached through loopback only.
      const c = new ChronactaClient(s.address, { deadlineMs: 10_000 });
      try {
        await c.append('w-1', [{ type: 'x' }]);
      } finally {
        c.close();
      }
    } finally {
      await stop(s);
    }
  });

  it('warns about client authentication alone when only TLS is on, and not at all with both', async () => {
    const ca = await pki();
    const leaf = await ca.issue(0);
    const tlsArgs = ['--cert-file', file('w-cert.pem', leaf.cert), '--key-file', file('w-key.pem', leaf.key)];
    const tlsOnly = await serveProcess('open-tls', ['--host', '0.0.0.0', ...tlsArgs]);
    try {
      await until(async () => (tlsOnly.stderr().includes('WARNING') ? true : undefined), {
        timeoutMs: 10_000,
        what: 'the warning',
        intervalMs: 25,
      });
      expect(tlsOnly.stderr()).not.toContain('without TLS');
      expect(tlsOnly.stderr()).toContain('without client authentication');
    } finally {
      await stop(tlsOnly);
    }
    const token = `tok-${randomBytes(24).toString('hex')}`;
    const both = await serveProcess('closed', [
      '--host',
      '0.0.0.0',
      ...tlsArgs,
      '--auth-tokens-file',
      file('w-tokens', `${token}\n`),
    ]);
    try {
      const c = new ChronactaClient(both.address, { tls: { ca: ca.ca.cert }, token, deadlineMs: 10_000 });
      try {
        await c.append('w-2', [{ type: 'x' }]);
      } finally {
        c.close();
      }
      expect(both.stderr()).not.toContain('WARNING');
    } finally {
      await stop(both);
    }
  });

  it('refuses settings that cannot work, with coded errors and no stack trace', async () => {
    const ca = await pki();
    const a = await ca.issue(0);
    const b = await ca.issue(1);
    const cert = file('bad-cert.pem', a.cert);
    const otherKey = file('bad-other-key.pem', b.key);
    const cases: [string[], string][] = [
      [['--cert-file', cert], 'PLX_CHRONACTA_BAD_TLS'],
      [['--cert-file', cert, '--key-file', otherKey], 'PLX_CHRONACTA_BAD_TLS'],
      [['--cert-file', file('bad-garbage.pem', 'garbage'), '--key-file', otherKey], 'PLX_CHRONACTA_BAD_TLS'],
      [['--cert-file', join(root, 'nonexistent.pem'), '--key-file', otherKey], 'PLX_CHRONACTA_BAD_TLS'],
      [['--client-cert-auth'], 'PLX_CHRONACTA_BAD_TLS'],
      [['--trusted-ca-file', file('bad-ca.pem', ca.ca.cert)], 'PLX_CHRONACTA_BAD_TLS'],
      [['--auth-tokens-file', file('bad-short', 'short\n')], 'PLX_CHRONACTA_BAD_TOKENS'],
      [['--auth-tokens-file', file('bad-empty', '# none\n')], 'PLX_CHRONACTA_BAD_TOKENS'],
      [['--auth-tokens-file', join(root, 'nonexistent-tokens')], 'PLX_CHRONACTA_BAD_TOKENS'],
    ];
    for (const [args, code] of cases) {
      const r = await run(['serve', '--data', join(root, 'refused'), '--port', '0', '--metrics-port', '0', ...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(1);
      expect(r.stderr).toContain(code);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(r.stdout).not.toContain('serving');
    }
  });
});
