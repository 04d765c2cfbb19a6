/**
 * A whole SPERLI job in memory for tests: a job id, the job CA, one certificate and key
 * per rank on a loopback address (127.0.0.1, 127.0.0.2, ... by default), the job's
 * CompositeSig key pair, a signed join token per rank and each rank's JobDescription,
 * with ports picked free beforehand (a launcher assigns them; a rank never picks one).
 * Also certificates with any common name under a CA, for tests of refusals.
 */
import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import type { HostEntry, JobDescription } from '../../ts/codec/sperli-jobdesc.js';
import type { JoinTokenFields } from '../../ts/codec/sperli-payloads.js';
import { type CompositeKeyPair, CompositeSig } from '../../ts/crypto/index.js';
import {
  createJobCa,
  isDottedIPv4,
  issueRankCertificate,
  type JobCa,
  jobIdHex,
  type RankCredentials,
} from '../../ts/crypto/x509.js';
import { freePort } from '../../ts/sperli/launcher.js';
import { signJoinToken } from '../../ts/sperli/tokens.js';

const utf8 = new TextEncoder();

export interface TestJobOptions {
  readonly size: number;
  /** Host of each rank (default 127.0.0.<rank + 1>). */
  readonly hosts?: readonly string[];
  readonly incarnation?: number;
  /** Lifetime of the join tokens (default one hour). */
  readonly tokenTtlMs?: number;
  readonly jobId?: Uint8Array;
  /** The job key pair (default a fresh one). */
  readonly keys?: CompositeKeyPair;
}

export interface TestJob {
  readonly jobId: Uint8Array;
  readonly jobHex: string;
  readonly size: number;
  readonly incarnation: number;
  readonly ca: JobCa;
  readonly keys: CompositeKeyPair;
  /** Host list with the ports picked for this job. */
  readonly hosts: readonly HostEntry[];
  readonly creds: readonly RankCredentials[];
  readonly tokens: readonly Uint8Array[];
  /** Each rank's job description, in rank order. */
  readonly descriptions: readonly JobDescription[];
  /** Rank `rank`'s description with some fields changed. */
  description(rank: number, change?: Partial<JobDescription>): JobDescription;
  /** A join token of `rank` signed with the job key (or `secretKey`), fields changed as given. */
  token(rank: number, change?: Partial<JoinTokenFields>, secretKey?: Uint8Array): Uint8Array;
  /** The same job (certificates, keys, tokens) on newly picked free ports. */
  withNewPorts(): Promise<TestJob>;
}

/** Picks a free TCP port on each host (the launcher's own way: bind port 0, release). */
export async function freePorts(hosts: readonly string[]): Promise<number[]> {
  const ports: number[] = [];
  for (const h of hosts) {
    let p = await freePort(h);
    while (ports.includes(p)) p = await freePort(h);
    ports.push(p);
  }
  return ports;
}

/** The default host of a rank: 127.0.0.1, 127.0.0.2, ... (all of 127/8 is loopback on Linux). */
export function loopbackHost(rank: number): string {
  const n = rank + 1;
  return `127.0.${(n >> 8) & 255}.${n & 255}`;
}

export async function makeTestJob(opts: TestJobOptions): Promise<TestJob> {
  const size = opts.size;
  const jobId = opts.jobId ?? new Uint8Array(randomBytes(16));
  const incarnation = opts.incarnation ?? 1;
  const keys = opts.keys ?? CompositeSig.keygen();
  const names = opts.hosts ?? Array.from({ length: size }, (_, r) => loopbackHost(r));
  const ca = await createJobCa({ jobId });
  const creds: RankCredentials[] = [];
  for (let rank = 0; rank < size; rank++) {
    creds.push(await issueRankCertificate(ca, { jobId, rank, host: names[rank] as string }));
  }
  const expiry = BigInt(Date.now() + (opts.tokenTtlMs ?? 3_600_000));
  const fields = (rank: number): JoinTokenFields => ({
    jobId,
    rank,
    size,
    incarnation,
    host: names[rank] as string,
    expiry,
  });
  const tokens = names.map((_, rank) => signJoinToken(keys.secretKey, fields(rank)));
  const caCert = utf8.encode(ca.cert);

  const build = async (): Promise<TestJob> => {
    const ports = await freePorts(names);
    const hosts: HostEntry[] = names.map((name, r) => ({ name, port: ports[r] as number }));
    const description = (rank: number, change: Partial<JobDescription> = {}): JobDescription => ({
      jobId,
      size,
      rank,
      incarnation,
      hosts,
      caCert,
      rankCert: utf8.encode((creds[rank] as RankCredentials).cert),
      rankKey: utf8.encode((creds[rank] as RankCredentials).key),
      joinToken: tokens[rank] as Uint8Array,
      jobSecretKey: rank === 0 ? keys.secretKey : null,
      jobPublicKey: keys.publicKey,
      ...change,
    });
    return {
      jobId,
      jobHex: jobIdHex(jobId),
      size,
      incarnation,
      ca,
      keys,
      hosts,
      creds,
      tokens,
      descriptions: names.map((_, r) => description(r)),
      description,
      token: (rank, change = {}, secretKey = keys.secretKey) =>
        signJoinToken(secretKey, { ...fields(rank), ...change }),
      withNewPorts: build,
    };
  };
  return build();
}

function pem(label: string, der: ArrayBuffer): string {
  const lines =
    Buffer.from(der)
      .toString('base64')
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/**
 * A certificate signed by `ca` with any subject common name (one the issuer of
 * ts/crypto/x509.ts refuses to make, such as a rank of another job) and `host` in the
 * subjectAltName; a fresh Ed25519 key.
 */
export async function issueCertificate(
  ca: JobCa,
  opts: { readonly commonName: string; readonly host: string },
): Promise<{ cert: string; key: string }> {
  const crypto = webcrypto;
  const ed = { name: 'Ed25519' } as const;
  const caCert = new x509.X509Certificate(ca.cert);
  const der = Buffer.from(ca.key.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
  const signingKey = await crypto.subtle.importKey('pkcs8', der, ed, false, ['sign']);
  const keys = (await crypto.subtle.generateKey(ed, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create(
    {
      serialNumber: randomBytes(8).toString('hex').replace(/^./, '1'),
      subject: [{ CN: [opts.commonName] }],
      issuer: caCert.subjectName,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 3_600_000),
      signingAlgorithm: ed,
      publicKey: keys.publicKey,
      signingKey,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], false),
        new x509.SubjectAlternativeNameExtension(
          [{ type: isDottedIPv4(opts.host) ? 'ip' : 'dns', value: opts.host }],
          false,
        ),
        await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey, false, crypto),
      ],
    },
    crypto,
  );
  return {
    cert: cert.toString('pem'),
    key: pem('PRIVATE KEY', await crypto.subtle.exportKey('pkcs8', keys.privateKey)),
  };
}
