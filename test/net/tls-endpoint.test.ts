/**
 * The TLS endpoint builder (ts/net/tls-endpoint.ts) over real node:tls sockets on loopback:
 * TLS 1.3 only, mutual authentication against the given CA, and the peer bound to the
 * identity its certificate claims, by URI and DNS policies.
 */
import * as tls from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { createCa, issueCertificate } from '../../ts/net/ca.js';
import { freePort } from '../../ts/net/ports.js';
import {
  type AcceptedPeer,
  sanDnsPolicy,
  sanEntries,
  sanUriPolicy,
  type TlsEndpoint,
  tlsEndpoint,
} from '../../ts/net/tls-endpoint.js';

const PREFIX = 'urn:test:member:';
const policy = sanUriPolicy('member', PREFIX, (rest) => (/^[1-9][0-9]*$/.test(rest) ? Number(rest) : undefined));

async function member(ca: { cert: string; key: string }, uris: string[]) {
  return issueCertificate(ca, { commonName: 'm', altNames: uris.map((value) => ({ type: 'url' as const, value })) });
}

const servers: tls.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise<void>((r) => s.close(() => r()));
});

/** A server of `endpoint` that records what `accept` found for each connection, then answers "hi". */
async function serve(endpoint: TlsEndpoint<number>, extra: tls.TlsOptions = {}) {
  const accepted: AcceptedPeer<number>[] = [];
  const server = tls.createServer(endpoint.serverOptions(extra));
  server.on('secureConnection', (s) => {
    const peer = endpoint.accept(s);
    accepted.push(peer);
    if (peer.identity === undefined) s.destroy();
    else s.end('hi');
  });
  server.on('tlsClientError', () => {});
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  servers.push(server);
  return { port, accepted };
}

/** Dials and reads until the server closes; the text read, or the handshake's error. */
function dial(options: tls.ConnectionOptions): Promise<{ text?: string; error?: Error; protocol?: string | null }> {
  return new Promise((resolve) => {
    const s = tls.connect(options);
    let text = '';
    let protocol: string | null = null;
    s.on('secureConnect', () => {
      protocol = s.getProtocol();
    });
    s.on('data', (c: Buffer) => {
      text += c.toString();
    });
    s.on('error', (error) => resolve({ error }));
    s.on('close', () => resolve({ text, protocol }));
  });
}

describe('tlsEndpoint', () => {
  it('binds both ends to the member ids their certificates name, over TLS 1.3', async () => {
    const ca = await createCa('test-ca');
    const one = tlsEndpoint({ ...(await member(ca, [`${PREFIX}1`])), ca: ca.cert }, policy);
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, policy);
    const { port, accepted } = await serve(two);
    const ok = await dial(
      one.clientOptions({ expect: 2, mismatch: (n) => new Error(`named ${String(n)}`) }, { host: '127.0.0.1', port }),
    );
    expect(ok.error).toBeUndefined();
    expect(ok.text).toBe('hi');
    expect(ok.protocol).toBe('TLSv1.3');
    expect(accepted).toEqual([{ identity: 1 }]);
  });

  it('fails the handshake when the server names another member, with the caller’s error', async () => {
    const ca = await createCa('test-ca');
    const one = tlsEndpoint({ ...(await member(ca, [`${PREFIX}1`])), ca: ca.cert }, policy);
    const three = tlsEndpoint({ ...(await member(ca, [`${PREFIX}3`])), ca: ca.cert }, policy);
    const { port } = await serve(three);
    const seen: (number | undefined)[] = [];
    const r = await dial(
      one.clientOptions(
        {
          expect: 2,
          mismatch: (n) => {
            seen.push(n);
            return new Error(`the server names member ${String(n)}`);
          },
        },
        { host: '127.0.0.1', port },
      ),
    );
    expect(r.error?.message).toBe('the server names member 3');
    expect(seen).toEqual([3]);
  });

  it('runs the after-match check inside the handshake', async () => {
    const ca = await createCa('test-ca');
    const one = tlsEndpoint({ ...(await member(ca, [`${PREFIX}1`])), ca: ca.cert }, policy);
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, policy);
    const { port, accepted } = await serve(two);
    const r = await dial(
      one.clientOptions(
        { expect: 2, mismatch: () => new Error('mismatch'), afterwards: (id) => new Error(`member ${id} left`) },
        { host: '127.0.0.1', port },
      ),
    );
    expect(r.error?.message).toBe('member 2 left');
    expect(r.text).toBeUndefined();
    expect(accepted.every((a) => a.identity === 1)).toBe(true);
  });

  it('refuses a client certificate of another CA in the handshake, and one naming no member after it', async () => {
    const ca = await createCa('test-ca');
    const other = await createCa('other-ca');
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, policy);
    const { port, accepted } = await serve(two);
    const stranger = tlsEndpoint({ ...(await member(other, [`${PREFIX}1`])), ca: ca.cert }, policy);
    const r1 = await dial(
      stranger.clientOptions({ expect: 2, mismatch: () => new Error('mismatch') }, { host: '127.0.0.1', port }),
    );
    expect(r1.text ?? '').toBe('');
    // Two member URIs: the certificate names no one member.
    const twice = tlsEndpoint({ ...(await member(ca, [`${PREFIX}1`, `${PREFIX}4`])), ca: ca.cert }, policy);
    const r2 = await dial(
      twice.clientOptions({ expect: 2, mismatch: () => new Error('mismatch') }, { host: '127.0.0.1', port }),
    );
    expect(r2.text ?? '').toBe('');
    expect(accepted).toEqual([{ refused: 'unnamed' }]);
  });

  it('refuses a client that offers only TLS 1.2', async () => {
    const ca = await createCa('test-ca');
    const one = await member(ca, [`${PREFIX}1`]);
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, policy);
    const { port, accepted } = await serve(two);
    const r = await dial({
      ...one,
      ca: ca.cert,
      host: '127.0.0.1',
      port,
      maxVersion: 'TLSv1.2',
      checkServerIdentity: () => undefined,
    });
    expect(r.error).toBeDefined();
    expect(accepted).toEqual([]);
  });
});

/** A server of `endpoint` that records what `identityOf` gave or threw for each connection. */
async function serveIdentities(endpoint: TlsEndpoint<number>) {
  const seen: unknown[] = [];
  const server = tls.createServer(endpoint.serverOptions());
  server.on('secureConnection', (s) => {
    try {
      seen.push(endpoint.identityOf(s));
      s.end('hi');
    } catch (e) {
      seen.push(e);
      s.destroy();
    }
  });
  server.on('tlsClientError', () => {});
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  servers.push(server);
  return { port, seen };
}

describe('identityOf and the policy refusal hook', () => {
  it("throws the policy's own refusal, with what identify threw as its cause", async () => {
    const ca = await createCa('test-ca');
    const strict: typeof policy = {
      kind: 'member',
      identify: (cert) => {
        const id = policy.identify(cert);
        if (id === undefined) throw new Error(`no single member URI in "${cert.subjectaltname}"`);
        return id;
      },
      refuse: (refused, cause) =>
        new Error(`refused (${refused}): ${cause instanceof Error ? cause.message : 'no cause'}`, { cause }),
    };
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, strict);
    const { port, seen } = await serveIdentities(two);
    const client = (uris: string[]) =>
      member(ca, uris).then((m) =>
        tlsEndpoint({ ...m, ca: ca.cert }, policy).clientOptions(
          { expect: 2, mismatch: () => new Error('mismatch') },
          { host: '127.0.0.1', port },
        ),
      );
    await dial(await client([`${PREFIX}1`]));
    await dial(await client([`${PREFIX}1`, `${PREFIX}4`]));
    expect(seen[0]).toBe(1);
    const e = seen[1] as Error;
    expect(e.message).toBe(`refused (unnamed): no single member URI in "URI:${PREFIX}1, URI:${PREFIX}4"`);
    expect((e.cause as Error).message).toBe(`no single member URI in "URI:${PREFIX}1, URI:${PREFIX}4"`);
  });

  it('without a hook, refuses with PLX_NET_UNTRUSTED_PEER', async () => {
    const ca = await createCa('test-ca');
    const two = tlsEndpoint({ ...(await member(ca, [`${PREFIX}2`])), ca: ca.cert }, policy);
    const { port, seen } = await serveIdentities(two);
    const twice = tlsEndpoint({ ...(await member(ca, [`${PREFIX}1`, `${PREFIX}4`])), ca: ca.cert }, policy);
    await dial(twice.clientOptions({ expect: 2, mismatch: () => new Error('mismatch') }, { host: '127.0.0.1', port }));
    expect(seen).toHaveLength(1);
    expect(isPlexusError(seen[0], 'PLX_NET_UNTRUSTED_PEER')).toBe(true);
    expect((seen[0] as Error).message).toBe("the peer's certificate names no member");
  });
});

describe('identity policies', () => {
  it('a URI policy takes exactly one entry with its prefix', () => {
    const id = (san: string) => policy.identify({ subjectaltname: san } as tls.PeerCertificate);
    expect(id(`URI:${PREFIX}7`)).toBe(7);
    expect(id(`DNS:x.example, URI:${PREFIX}7`)).toBe(7);
    expect(id(`URI:${PREFIX}7, URI:${PREFIX}8`)).toBeUndefined();
    expect(id(`URI:${PREFIX}0`)).toBeUndefined();
    expect(id('URI:urn:other:7')).toBeUndefined();
    expect(id('')).toBeUndefined();
  });

  it('a DNS policy takes exactly one name it accepts', () => {
    const dns = sanDnsPolicy('node', (n) => (n.endsWith('.c1.test') ? n.slice(0, -8) : undefined));
    const id = (san: string) => dns.identify({ subjectaltname: san } as tls.PeerCertificate);
    expect(id('DNS:a.c1.test')).toBe('a');
    expect(id('DNS:a.c1.test, DNS:elsewhere.org')).toBe('a');
    expect(id('DNS:a.c1.test, DNS:b.c1.test')).toBeUndefined();
    expect(sanEntries({ subjectaltname: 'DNS:a, URI:u:1, IP Address:127.0.0.1' }, 'IP Address')).toEqual(['127.0.0.1']);
  });
});
