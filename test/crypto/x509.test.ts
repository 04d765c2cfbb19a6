import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import * as tls from 'node:tls';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import {
  certificateHasHost,
  certificateIdentity,
  createJobCa,
  isDottedIPv4,
  issueRankCertificate,
  type JobCa,
  jobIdHex,
  normalizeHost,
  parseRankCommonName,
  type RankCredentials,
  rankCommonName,
  serverIdentityCheck,
} from '../../ts/crypto/index.js';
import { until } from '../helpers/until.js';

const JOB = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);
const JOB_HEX = 'a0a1a2a3a4a5a6a7a8a9aaabacadaeaf';
const OTHER_JOB = 'f'.repeat(32);
const DNS_HOST = 'Rank1.SPERLI.test.';

async function codeOf(f: () => unknown): Promise<string | undefined> {
  try {
    await f();
  } catch (e) {
    return isPlexusError(e) ? e.code : `not a PlexusError: ${String(e)}`;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// A real TLS 1.3 server and client with mutual authentication on 127.0.0.1.

const open: { close(): void }[] = [];
afterEach(() => {
  for (const x of open.splice(0)) x.close();
});

interface Server {
  port: number;
  /** Identities (CN parsed) of the clients that completed the handshake. */
  accepted: { jobId: string; rank: number; protocol: string | null }[];
  /** Handshakes the server refused. */
  refused: Error[];
}

async function startServer(creds: RankCredentials, ca: JobCa): Promise<Server> {
  const state: Server = { port: 0, accepted: [], refused: [] };
  const sockets = new Set<tls.TLSSocket>();
  const server = tls.createServer(
    {
      key: creds.key,
      cert: creds.cert,
      ca: [ca.cert],
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.3',
    },
    (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
      state.accepted.push({ ...certificateIdentity(socket.getPeerCertificate()), protocol: socket.getProtocol() });
      socket.end('ok');
    },
  );
  server.on('tlsClientError', (err, socket) => {
    state.refused.push(err);
    socket.destroy();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  state.port = (server.address() as AddressInfo).port;
  open.push({
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  });
  return state;
}

interface ClientResult {
  data: string;
  error?: Error;
  protocol?: string | null;
  server?: { jobId: string; rank: number };
}

function connect(
  port: number,
  creds: RankCredentials,
  ca: JobCa,
  expectedHost: string,
  extra: tls.ConnectionOptions = {},
): Promise<ClientResult> {
  return new Promise((resolve) => {
    const result: ClientResult = { data: '' };
    const socket = tls.connect({
      host: '127.0.0.1',
      port,
      key: creds.key,
      cert: creds.cert,
      ca: [ca.cert],
      minVersion: 'TLSv1.3',
      rejectUnauthorized: true,
      checkServerIdentity: serverIdentityCheck(expectedHost),
      ...(isDottedIPv4(expectedHost) ? {} : { servername: normalizeHost(expectedHost) }),
      ...extra,
    });
    open.push({ close: () => socket.destroy() });
    socket.setEncoding('utf8');
    socket.on('secureConnect', () => {
      result.protocol = socket.getProtocol();
      result.server = certificateIdentity(socket.getPeerCertificate());
    });
    socket.on('data', (d: string) => {
      result.data += d;
    });
    socket.on('error', (e) => {
      result.error ??= e;
    });
    socket.on('close', () => resolve(result));
  });
}

describe('job CA and rank certificates over node:tls (TLS 1.3, mutual authentication)', () => {
  let ca: JobCa;
  let otherCa: JobCa;
  let rank0Ip: RankCredentials;
  let rank1Dns: RankCredentials;
  let rank2Ip: RankCredentials;
  let stranger: RankCredentials;

  beforeAll(async () => {
    ca = await createJobCa({ jobId: JOB });
    otherCa = await createJobCa({ jobId: JOB_HEX });
    rank0Ip = await issueRankCertificate(ca, { jobId: JOB, rank: 0, host: '127.0.0.1' });
    rank1Dns = await issueRankCertificate(ca, { jobId: JOB_HEX, rank: 1, host: DNS_HOST });
    rank2Ip = await issueRankCertificate(ca, { jobId: JOB, rank: 4095, host: '127.0.0.1' });
    stranger = await issueRankCertificate(otherCa, { jobId: JOB, rank: 2, host: '127.0.0.1' });
  });

  it('gives PEM texts: a self-signed CA, rank certificates signed by it, PKCS #8 keys', () => {
    expect(ca.cert).toMatch(/^-----BEGIN CERTIFICATE-----\n/);
    expect(ca.key).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(rank0Ip.key).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    const caCert = new X509Certificate(ca.cert);
    expect(caCert.ca).toBe(true);
    expect(caCert.publicKey.asymmetricKeyType).toBe('ed25519');
    expect(caCert.verify(caCert.publicKey)).toBe(true);
    expect(caCert.subject).toBe(`CN=sperli-ca-${JOB_HEX}`);
    for (const c of [rank0Ip, rank1Dns, rank2Ip]) {
      const x = new X509Certificate(c.cert);
      expect(x.ca).toBe(false);
      expect(x.publicKey.asymmetricKeyType).toBe('ed25519');
      expect(x.verify(caCert.publicKey)).toBe(true);
      expect(x.checkIssued(caCert)).toBe(true);
      expect(x.verify(new X509Certificate(otherCa.cert).publicKey)).toBe(false);
      expect(x.keyUsage).toEqual(expect.arrayContaining(['1.3.6.1.5.5.7.3.1', '1.3.6.1.5.5.7.3.2']));
    }
    expect(new X509Certificate(rank0Ip.cert).subject).toBe(`CN=sperli-${JOB_HEX}-0`);
    expect(rank2Ip.commonName).toBe(`sperli-${JOB_HEX}-4095`);
    expect(rank2Ip.commonName.length).toBe(44);
  });

  it('puts a dotted IPv4 host in the subjectAltName as an IP address, a DNS name as a DNS name', () => {
    const ip = new X509Certificate(rank0Ip.cert);
    expect(ip.subjectAltName).toBe('IP Address:127.0.0.1');
    expect(ip.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(ip.subjectAltName).not.toContain('DNS:');
    const dns = new X509Certificate(rank1Dns.cert);
    expect(dns.subjectAltName).toBe('DNS:rank1.sperli.test');
    expect(dns.checkHost('rank1.sperli.test', { subject: 'never' })).toBe('rank1.sperli.test');
  });

  it('completes the handshake both ways with a certificate for 127.0.0.1', async () => {
    const server = await startServer(rank2Ip, ca);
    const client = await connect(server.port, rank0Ip, ca, '127.0.0.1');
    expect(client.error).toBeUndefined();
    expect(client.data).toBe('ok');
    expect(client.protocol).toBe('TLSv1.3');
    expect(client.server).toEqual({ jobId: JOB_HEX, rank: 4095 });
    expect(server.accepted).toEqual([{ jobId: JOB_HEX, rank: 0, protocol: 'TLSv1.3' }]);
    expect(server.refused).toEqual([]);
  });

  it('completes the handshake with a certificate for a DNS name, checked against that name', async () => {
    const server = await startServer(rank1Dns, ca);
    const client = await connect(server.port, rank0Ip, ca, 'rank1.sperli.test');
    expect(client.error).toBeUndefined();
    expect(client.data).toBe('ok');
    expect(client.server).toEqual({ jobId: JOB_HEX, rank: 1 });
    expect(server.accepted).toEqual([{ jobId: JOB_HEX, rank: 0, protocol: 'TLSv1.3' }]);
  });

  it('refuses a client certificate from another CA', async () => {
    const server = await startServer(rank2Ip, ca);
    const client = await connect(server.port, stranger, ca, '127.0.0.1');
    await until(() => server.refused.length > 0, { timeoutMs: 5_000, what: 'server.refused.length > 0' });
    expect(client.data).toBe('');
    expect(server.accepted).toEqual([]);
    expect(server.refused.length).toBe(1);
  });

  it('refuses a client that offers TLS 1.2 at most', async () => {
    const server = await startServer(rank2Ip, ca);
    const client = await connect(server.port, rank0Ip, ca, '127.0.0.1', {
      minVersion: 'TLSv1.2',
      maxVersion: 'TLSv1.2',
    });
    await until(() => server.refused.length > 0, { timeoutMs: 5_000, what: 'server.refused.length > 0' });
    expect(client.error).toBeDefined();
    expect(client.data).toBe('');
    expect(server.accepted).toEqual([]);
    expect(String((server.refused[0] as NodeJS.ErrnoException).code)).toMatch(/VERSION|PROTOCOL/);
  });

  it('the client refuses a server whose subjectAltName is not the dialled host', async () => {
    const server = await startServer(rank2Ip, ca);
    const client = await connect(server.port, rank0Ip, ca, '127.0.0.2');
    expect(client.data).toBe('');
    expect(isPlexusError(client.error, 'PLX_CRYPTO_HOST_MISMATCH')).toBe(true);
    const dnsServer = await startServer(rank1Dns, ca);
    const other = await connect(dnsServer.port, rank0Ip, ca, 'rank2.sperli.test');
    expect(isPlexusError(other.error, 'PLX_CRYPTO_HOST_MISMATCH')).toBe(true);
  });

  it('the client refuses a server certificate from another CA', async () => {
    const server = await startServer(stranger, otherCa);
    const client = await connect(server.port, rank0Ip, ca, '127.0.0.1');
    expect(client.data).toBe('');
    expect(client.error).toBeDefined();
    expect(server.accepted).toEqual([]);
  });

  it('parses the common name of a rank certificate into job and rank', () => {
    expect(certificateIdentity(rank0Ip.cert)).toEqual({ jobId: JOB_HEX, rank: 0 });
    expect(certificateIdentity(rank1Dns.cert)).toEqual({ jobId: JOB_HEX, rank: 1 });
    expect(certificateIdentity(new X509Certificate(rank2Ip.cert))).toEqual({ jobId: JOB_HEX, rank: 4095 });
    expect(certificateIdentity(new Uint8Array(new X509Certificate(rank2Ip.cert).raw))).toEqual({
      jobId: JOB_HEX,
      rank: 4095,
    });
  });

  it('checks the subjectAltName against the expected host: IP as an address, DNS as a name', () => {
    expect(certificateHasHost(rank0Ip.cert, '127.0.0.1')).toBe(true);
    expect(certificateHasHost(rank0Ip.cert, '127.0.0.2')).toBe(false);
    expect(certificateHasHost(rank0Ip.cert, 'localhost')).toBe(false);
    expect(certificateHasHost(rank0Ip.cert, '127.000.0.1')).toBe(false);
    expect(certificateHasHost(rank1Dns.cert, 'rank1.sperli.test')).toBe(true);
    expect(certificateHasHost(rank1Dns.cert, 'RANK1.sperli.TEST.')).toBe(true);
    expect(certificateHasHost(rank1Dns.cert, 'rank2.sperli.test')).toBe(false);
    expect(certificateHasHost(rank1Dns.cert, 'sperli.test')).toBe(false);
    expect(certificateHasHost(rank1Dns.cert, 'x.rank1.sperli.test')).toBe(false);
    expect(certificateHasHost(rank1Dns.cert, '127.0.0.1')).toBe(false);
    // The common name is never a host.
    expect(certificateHasHost(rank1Dns.cert, rank1Dns.commonName)).toBe(false);
  });

  it('refuses to read what is not a rank certificate', async () => {
    expect(await codeOf(() => certificateIdentity(ca.cert))).toBe('PLX_CRYPTO_BAD_NAME');
    expect(await codeOf(() => certificateIdentity('not a certificate'))).toBe('PLX_CRYPTO_BAD_CERT');
    expect(await codeOf(() => certificateIdentity(new Uint8Array([0x30, 0x03, 1, 2, 3])))).toBe('PLX_CRYPTO_BAD_CERT');
    expect(await codeOf(() => certificateIdentity({} as unknown as Uint8Array))).toBe('PLX_CRYPTO_BAD_CERT');
  });

  it('refuses to issue for a bad host, rank or job, or with a key that is not the CA key', async () => {
    for (const host of [
      '',
      'bad_host',
      '256.1.1.1',
      '1.2.3',
      '::1',
      'a..b',
      '-a.b',
      'a.b-',
      'é.test',
      'x'.repeat(64),
    ]) {
      expect(await codeOf(() => issueRankCertificate(ca, { jobId: JOB, rank: 0, host })), host).toBe(
        'PLX_CRYPTO_BAD_HOST',
      );
    }
    for (const rank of [-1, 4096, 1.5, Number.NaN]) {
      expect(await codeOf(() => issueRankCertificate(ca, { jobId: JOB, rank, host: 'a.b' })), String(rank)).toBe(
        'PLX_CRYPTO_BAD_NAME',
      );
    }
    expect(await codeOf(() => issueRankCertificate(ca, { jobId: new Uint8Array(15), rank: 0, host: 'a.b' }))).toBe(
      'PLX_CRYPTO_BAD_NAME',
    );
    expect(await codeOf(() => issueRankCertificate(ca, { jobId: OTHER_JOB, rank: 0, host: 'a.b' }))).toBe(
      'PLX_CRYPTO_BAD_CERT',
    );
    expect(
      await codeOf(() =>
        issueRankCertificate({ cert: ca.cert, key: otherCa.key }, { jobId: JOB, rank: 0, host: 'a.b' }),
      ),
    ).toBe('PLX_CRYPTO_BAD_KEY');
    expect(
      await codeOf(() =>
        issueRankCertificate({ cert: ca.cert, key: 'nonsense' }, { jobId: JOB, rank: 0, host: 'a.b' }),
      ),
    ).toBe('PLX_CRYPTO_BAD_KEY');
    const now = new Date();
    expect(
      await codeOf(() => issueRankCertificate(ca, { jobId: JOB, rank: 0, host: 'a.b', notBefore: now, notAfter: now })),
    ).toBe('PLX_CRYPTO_BAD_VALIDITY');
  });

  it('keeps the validity it is given', async () => {
    const notBefore = new Date('2030-01-01T00:00:00Z');
    const notAfter = new Date('2030-02-01T00:00:00Z');
    const c = await issueRankCertificate(ca, { jobId: JOB, rank: 3, host: '10.0.0.1', notBefore, notAfter });
    const x = new X509Certificate(c.cert);
    expect(new Date(x.validFrom).toISOString()).toBe(notBefore.toISOString());
    expect(new Date(x.validTo).toISOString()).toBe(notAfter.toISOString());
  });
});

describe('rank common names', () => {
  it('formats and parses sperli-<job id>-<rank>', () => {
    expect(rankCommonName(JOB, 0)).toBe(`sperli-${JOB_HEX}-0`);
    expect(rankCommonName(JOB_HEX, 4095)).toBe(`sperli-${JOB_HEX}-4095`);
    expect(parseRankCommonName(`sperli-${JOB_HEX}-17`)).toEqual({ jobId: JOB_HEX, rank: 17 });
    expect(jobIdHex(JOB)).toBe(JOB_HEX);
    for (let rank = 0; rank < 4096; rank += 91) {
      expect(parseRankCommonName(rankCommonName(JOB, rank))).toEqual({ jobId: JOB_HEX, rank });
    }
  });

  it('refuses anything else', async () => {
    const bad = [
      '',
      `sperli-${JOB_HEX}`,
      `sperli-${JOB_HEX}-`,
      `sperli-${JOB_HEX}-01`,
      `sperli-${JOB_HEX}-4096`,
      `sperli-${JOB_HEX}-10000`,
      `sperli-${JOB_HEX}--1`,
      `sperli-${JOB_HEX}-1 `,
      `sperli-${JOB_HEX}-1\n`,
      `sperli-${JOB_HEX.toUpperCase()}-1`,
      `sperli-${JOB_HEX.slice(1)}-1`,
      `sperli-${JOB_HEX}0-1`,
      `SPERLI-${JOB_HEX}-1`,
      `sperli-ca-${JOB_HEX}`,
      `xsperli-${JOB_HEX}-1`,
      `sperli-${JOB_HEX}-1.5`,
    ];
    for (const cn of bad) expect(await codeOf(() => parseRankCommonName(cn)), cn).toBe('PLX_CRYPTO_BAD_NAME');
    expect(await codeOf(() => parseRankCommonName(7 as unknown as string))).toBe('PLX_CRYPTO_BAD_NAME');
    expect(await codeOf(() => rankCommonName(JOB_HEX.toUpperCase(), 0))).toBe('PLX_CRYPTO_BAD_NAME');
    expect(await codeOf(() => rankCommonName(JOB, 4096))).toBe('PLX_CRYPTO_BAD_NAME');
  });

  it('tells dotted IPv4 addresses from DNS names', () => {
    for (const ip of ['127.0.0.1', '0.0.0.0', '255.255.255.255', '10.20.30.40'])
      expect(isDottedIPv4(ip), ip).toBe(true);
    for (const h of ['256.0.0.1', '1.2.3', '1.2.3.4.5', '01.2.3.4', '1.2.3.4.', ' 1.2.3.4', 'a.b.c.d', '::1']) {
      expect(isDottedIPv4(h), h).toBe(false);
    }
    expect(normalizeHost('Host.Example.COM.')).toBe('host.example.com');
    expect(normalizeHost('localhost')).toBe('localhost');
    expect(normalizeHost('1.2.3.4')).toBe('1.2.3.4');
    expect(normalizeHost('1.2.3.400')).toBeUndefined();
    expect(normalizeHost(`${'a'.repeat(63)}.b`)).toBe(`${'a'.repeat(63)}.b`);
    expect(normalizeHost(`${'a'.repeat(64)}.b`)).toBeUndefined();
    expect(normalizeHost(`${'a.'.repeat(126)}bc`)).toBeUndefined();
  });
});
