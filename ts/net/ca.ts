/**
 * The cluster CA: an Ed25519 key with a self-signed CA certificate for one cluster, and one
 * Ed25519 certificate per node naming `<node>.<cluster>.plexus.internal` in its
 * subjectAltName (the only name the wire looks at), usable as TLS server and client. PEM
 * texts that `node:tls` takes directly. Built with @peculiar/x509 and signed by Node's
 * WebCrypto, as ts/crypto/x509.ts does for SPERLI jobs.
 */
import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import { PlexusError } from '../core/errors.js';
import { isDnsLabel } from '../core/names.js';
import type { IdentityPolicy } from './tls-endpoint.js';

export const NAME_SUFFIX = 'plexus.internal';
const ED25519 = { name: 'Ed25519' } as const;
const DAY = 24 * 60 * 60 * 1000;

export interface ClusterCa {
  readonly cluster: string;
  /** The CA certificate, PEM: `ca` for node:tls. */
  readonly cert: string;
  /** The CA's private key, PKCS #8 PEM. */
  readonly key: string;
}

export interface NodeCredentials {
  readonly node: string;
  /** `<node>.<cluster>.plexus.internal`. */
  readonly name: string;
  readonly cert: string;
  readonly key: string;
  /** The cluster CA certificate. */
  readonly ca: string;
}

function label(what: string, v: string): string {
  if (!isDnsLabel(v)) {
    throw new PlexusError(
      'PLX_WIRE_BAD_NAME',
      `${what} ${JSON.stringify(v)} must be a DNS label: lower-case letters, digits and hyphens, 1 to 63`,
      { [what]: v },
    );
  }
  return v;
}

/** The DNS name of a node's certificate. */
export function nodeName(node: string, cluster: string): string {
  return `${label('node', node)}.${label('cluster', cluster)}.${NAME_SUFFIX}`;
}

/** The node id a DNS name gives for `cluster`, or undefined when it is not a node name of it. */
export function nodeOfName(name: string, cluster: string): string | undefined {
  const suffix = `.${cluster}.${NAME_SUFFIX}`;
  if (!name.endsWith(suffix)) return undefined;
  const node = name.slice(0, -suffix.length);
  return isDnsLabel(node) ? node : undefined;
}

/**
 * The node named by a peer certificate as node:tls reports it (`subjectaltname`, e.g.
 * "DNS:a.c1.plexus.internal"): exactly one node name of `cluster`, else undefined.
 */
export function nodeOfPeer(cert: { subjectaltname?: string } | undefined, cluster: string): string | undefined {
  const san = cert?.subjectaltname;
  if (typeof san !== 'string') return undefined;
  const nodes = san
    .split(', ')
    .filter((e) => e.startsWith('DNS:'))
    .map((e) => nodeOfName(e.slice(4), cluster))
    .filter((n): n is string => n !== undefined);
  return nodes.length === 1 ? nodes[0] : undefined;
}

/** The cluster wire's identity policy: a peer certificate names one node of `cluster` by DNS name (`nodeOfPeer`). */
export function nodeIdentityPolicy(cluster: string): IdentityPolicy<string> {
  return { kind: 'node', identify: (cert) => nodeOfPeer(cert, cluster) };
}

/**
 * Programs outside the cluster (ts/cluster/client.ts, `ActorClient`) hold a client certificate
 * of the cluster CA naming `<client>.client.<cluster>.plexus.internal`. Its first label is
 * followed by another one, so it is never a node name (`nodeOfName` takes one label only):
 * such a certificate cannot join, be gossiped or hold a lease. A wire that admits clients
 * identifies it as `client:<client>` (a colon: never a node id), for calls only.
 */
export const CLIENT_PEER_PREFIX = 'client:';

/** The DNS name of a client certificate. */
export function clientName(client: string, cluster: string): string {
  return `${label('client', client)}.client.${label('cluster', cluster)}.${NAME_SUFFIX}`;
}

/** The client a DNS name names for `cluster`, or undefined when it is not a client name of it. */
export function clientOfName(name: string, cluster: string): string | undefined {
  const suffix = `.client.${cluster}.${NAME_SUFFIX}`;
  if (!name.endsWith(suffix)) return undefined;
  const client = name.slice(0, -suffix.length);
  return isDnsLabel(client) ? client : undefined;
}

/** Whether a wire peer id is a client's (`client:<client>`), not a node's. */
export function isClientPeer(peer: string): boolean {
  return peer.startsWith(CLIENT_PEER_PREFIX);
}

/**
 * The cluster wire's identity policy when it admits clients: a node name gives the node id
 * (as `nodeIdentityPolicy`); else a certificate whose only DNS name is one client name of
 * `cluster` gives `client:<client>`.
 */
export function wireIdentityPolicy(cluster: string, clients: boolean): IdentityPolicy<string> {
  if (!clients) return nodeIdentityPolicy(cluster);
  return {
    kind: 'node',
    identify: (cert) => {
      const node = nodeOfPeer(cert, cluster);
      if (node !== undefined) return node;
      const names = (cert?.subjectaltname ?? '').split(', ').filter((e) => e.startsWith('DNS:'));
      if (names.length !== 1) return undefined;
      const client = clientOfName((names[0] as string).slice(4), cluster);
      return client === undefined ? undefined : `${CLIENT_PEER_PREFIX}${client}`;
    },
  };
}

/** Issues client `client`'s certificate (valid 1 year by default) with a fresh Ed25519 key. */
export async function issueClientCertificate(
  ca: ClusterCa,
  client: string,
  opts: { notAfter?: Date } = {},
): Promise<{
  readonly client: string;
  readonly name: string;
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
}> {
  const name = clientName(client, ca.cluster);
  const creds = await issueCertificate(ca, { commonName: name, altNames: [{ type: 'dns', value: name }] }, opts);
  return { client, name, ...creds, ca: ca.cert };
}

/**
 * The cluster and client a client certificate (PEM) names, or undefined when its only DNS
 * subjectAltName is not a client name.
 */
export function clientOfCertificate(
  certPem: string,
): { readonly cluster: string; readonly client: string } | undefined {
  let names: string[];
  try {
    const cert = new x509.X509Certificate(certPem);
    const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
    names = (san?.names.items ?? []).filter((n) => n.type === 'dns').map((n) => n.value);
  } catch {
    return undefined;
  }
  if (names.length !== 1) return undefined;
  const m = /^([^.]+)\.client\.([^.]+)\.plexus\.internal$/.exec(names[0] as string);
  if (!m || !isDnsLabel(m[1] as string) || !isDnsLabel(m[2] as string)) return undefined;
  return { client: m[1] as string, cluster: m[2] as string };
}

function pem(labelText: string, der: ArrayBuffer): string {
  const lines =
    Buffer.from(der)
      .toString('base64')
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${labelText}-----\n${lines.join('\n')}\n-----END ${labelText}-----\n`;
}

function serial(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x01;
  return b.toString('hex');
}

async function keys(): Promise<webcrypto.CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(ED25519, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
}

/** Makes the CA of cluster `cluster` (valid 10 years by default). */
export async function createClusterCa(cluster: string, opts: { notAfter?: Date } = {}): Promise<ClusterCa> {
  label('cluster', cluster);
  return { cluster, ...(await createCa(`plexus-cluster-ca-${cluster}`, opts)) };
}

/**
 * Makes a self-signed Ed25519 CA named `commonName` (valid 10 years by default): its
 * certificate and PKCS #8 key, PEM. The cluster CA above and Chronacta's member CA
 * (ts/chronacta/member-tls.ts) are made by it.
 */
export async function createCa(
  commonName: string,
  opts: { notAfter?: Date } = {},
): Promise<{ readonly cert: string; readonly key: string }> {
  const k = await keys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: serial(),
      name: [{ CN: [commonName] }],
      notBefore: new Date(Date.now() - 5 * 60_000),
      notAfter: opts.notAfter ?? new Date(Date.now() + 3650 * DAY),
      signingAlgorithm: ED25519,
      keys: k,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(k.publicKey, false, webcrypto),
      ],
    },
    webcrypto,
  );
  return {
    cert: cert.toString('pem'),
    key: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', k.privateKey)),
  };
}

/** Issues node `node`'s certificate (valid 1 year by default) with a fresh Ed25519 key. */
export async function issueNodeCertificate(
  ca: ClusterCa,
  node: string,
  opts: { notAfter?: Date } = {},
): Promise<NodeCredentials> {
  const name = nodeName(node, ca.cluster);
  const creds = await issueCertificate(ca, { commonName: name, altNames: [{ type: 'dns', value: name }] }, opts);
  return { node, name, ...creds, ca: ca.cert };
}

/**
 * Issues an Ed25519 certificate signed by `ca` (valid 1 year by default), usable as TLS
 * server and client, with subject `commonName` and the given subjectAltNames (`dns` or
 * `url` entries), and a fresh key. Fails with PLX_WIRE_BAD_NAME when the CA key is not an
 * Ed25519 PKCS #8 PEM key.
 */
export async function issueCertificate(
  ca: { readonly cert: string; readonly key: string },
  subject: { readonly commonName: string; readonly altNames: readonly { type: 'dns' | 'url'; value: string }[] },
  opts: { notAfter?: Date } = {},
): Promise<{ readonly cert: string; readonly key: string }> {
  const caCert = new x509.X509Certificate(ca.cert);
  let signingKey: webcrypto.CryptoKey;
  try {
    const der = Buffer.from(ca.key.replace(/-----[^-]+-----|\s/g, ''), 'base64');
    signingKey = await webcrypto.subtle.importKey('pkcs8', der, ED25519, false, ['sign']);
  } catch (e) {
    throw new PlexusError(
      'PLX_WIRE_BAD_NAME',
      'the cluster CA key must be an Ed25519 PKCS #8 PEM key',
      {},
      { cause: e },
    );
  }
  const k = await keys();
  const cert = await x509.X509CertificateGenerator.create(
    {
      serialNumber: serial(),
      subject: [{ CN: [subject.commonName] }],
      issuer: caCert.subjectName,
      notBefore: new Date(Date.now() - 5 * 60_000),
      notAfter: opts.notAfter ?? new Date(Date.now() + 365 * DAY),
      signingAlgorithm: ED25519,
      publicKey: k.publicKey,
      signingKey,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], false),
        new x509.SubjectAlternativeNameExtension(
          subject.altNames.map((n) => ({ type: n.type, value: n.value })),
          false,
        ),
        await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey, false, webcrypto),
      ],
    },
    webcrypto,
  );
  return {
    cert: cert.toString('pem'),
    key: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', k.privateKey)),
  };
}
