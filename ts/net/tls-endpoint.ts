/**
 * One TLS endpoint for every mutually authenticated connection of plexus: the cluster wire
 * (node id), the Raft transport (member id) and the SPERLI mesh (rank). docs/net.md describes it.
 *
 * - TLS 1.3 only, both ways; the server demands a client certificate; both sides verify the
 *   peer's certificate against the given CA only (never the system store).
 * - The peer certificate is bound to the identity it claims inside the handshake's
 *   verification: the client's `checkServerIdentity` compares the identity the server's
 *   certificate names with the one dialled (so a mismatch fails the handshake), and the
 *   server reads the client's identity with `accept` first thing in `secureConnection`,
 *   before any application byte is read.
 * - How a certificate names its identity is a policy (`IdentityPolicy`): a subjectAltName URI
 *   with a prefix (`sanUriPolicy`), a DNS name (`sanDnsPolicy`), or any function of the
 *   certificate (the SPERLI rank's common name). A policy may also say how a connection without
 *   an identity is refused (`refuse`), so that each protocol keeps its own codes and messages;
 *   `identityOf` then reads a connection's identity or throws that refusal, on either side.
 */
import type { ConnectionOptions, PeerCertificate, TLSSocket, TlsOptions } from 'node:tls';
import { PlexusError } from '../core/errors.js';

/** PEM (or DER buffers) of this end's certificate and key, and of the CA its peers chain to. */
export interface TlsMaterial {
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
  readonly ca: string | Buffer | readonly (string | Buffer)[];
}

/** How a certificate (already verified against the CA) names the identity it claims. */
export interface IdentityPolicy<I> {
  /** What the identity is, for messages ("node", "member", "rank"). */
  readonly kind: string;
  /**
   * The identity `cert` names, or undefined when it names none (or more than one). It may
   * throw instead: the error is the `cause` given to `refuse`.
   */
  readonly identify: (cert: PeerCertificate) => I | undefined;
  /**
   * The error a connection without an identity is refused with: `unauthorized` (no
   * certificate of the CA), or `unnamed` (its certificate names no identity; `cause` is what
   * `identify` threw, if it threw). Default: a PLX_NET_UNTRUSTED_PEER refusal.
   */
  readonly refuse?: (refused: 'unauthorized' | 'unnamed', cause: unknown) => Error;
}

/** The subjectAltName entries of one type (`URI`, `DNS`, `IP Address`), as node:tls lists them. */
export function sanEntries(cert: { subjectaltname?: string } | undefined, type: string): string[] {
  const san = cert?.subjectaltname;
  if (typeof san !== 'string' || san === '') return [];
  const head = `${type}:`;
  return san
    .split(', ')
    .filter((e) => e.startsWith(head))
    .map((e) => e.slice(head.length));
}

/**
 * The identity is the rest of the one subjectAltName URI starting with `prefix` (for example
 * `plexus-chronacta:member:` then the member id), parsed by `parse`; none or several: undefined.
 */
export function sanUriPolicy<I>(
  kind: string,
  prefix: string,
  parse: (rest: string) => I | undefined,
): IdentityPolicy<I> {
  return {
    kind,
    identify: (cert) => {
      const rests = sanEntries(cert, 'URI')
        .filter((u) => u.startsWith(prefix))
        .map((u) => u.slice(prefix.length));
      return rests.length === 1 ? parse(rests[0] as string) : undefined;
    },
  };
}

/** The identity is named by exactly one subjectAltName DNS name that `parse` accepts. */
export function sanDnsPolicy<I>(kind: string, parse: (name: string) => I | undefined): IdentityPolicy<I> {
  return {
    kind,
    identify: (cert) => {
      const found = sanEntries(cert, 'DNS')
        .map(parse)
        .filter((i): i is I => i !== undefined);
      return found.length === 1 ? found[0] : undefined;
    },
  };
}

/** How a client binds the server it dialled: the identity expected, or its own check. */
export type ServerBinding<I> =
  | {
      /** The identity the server's certificate must name. */
      readonly expect: I;
      /** The handshake's error when it names another identity (or none). */
      readonly mismatch: (named: I | undefined) => Error;
      /** Checked after the identity matched (a membership check, say); an error fails the handshake. */
      readonly afterwards?: (identity: I) => Error | undefined;
    }
  | {
      /** A check of its own (the SPERLI mesh checks the host name the certificate names). */
      readonly check: (host: string, cert: PeerCertificate) => Error | undefined;
    };

/** What `accept` found on a server-side connection. */
export type AcceptedPeer<I> =
  | { readonly identity: I }
  | { readonly identity?: undefined; readonly refused: 'unauthorized' | 'unnamed'; readonly cause?: unknown };

export interface TlsEndpoint<I> {
  readonly policy: IdentityPolicy<I>;
  /** Options for `tls.createServer` / `http2.createSecureServer` (plus `extra`). */
  serverOptions<E extends object = object>(extra?: E): TlsOptions & E;
  /** Options for `tls.connect` / `http2.connect` that bind the server to `binding` in the handshake. */
  clientOptions<E extends object = object>(binding: ServerBinding<I>, extra?: E): ConnectionOptions & E;
  /** The identity a server-side connection's client certificate names, or why there is none. */
  accept(socket: TLSSocket): AcceptedPeer<I>;
  /**
   * The identity the peer's certificate names on an established connection (accepted or
   * dialled); throws the policy's refusal (`refuse`) when it names none.
   */
  identityOf(socket: TLSSocket): I;
}

/** The same identity from every policy's `identify`: undefined, or the error it threw. */
function identifyOrCause<I>(policy: IdentityPolicy<I>, cert: PeerCertificate): { identity?: I; cause?: unknown } {
  try {
    return { identity: policy.identify(cert) };
  } catch (e) {
    return { cause: e };
  }
}

/** One endpoint: `material` on both sides, peers' identities read by `policy`. */
export function tlsEndpoint<I>(material: TlsMaterial, policy: IdentityPolicy<I>): TlsEndpoint<I> {
  const base = {
    key: material.key,
    cert: material.cert,
    ca: material.ca as string | Buffer | (string | Buffer)[],
    minVersion: 'TLSv1.3',
    maxVersion: 'TLSv1.3',
    rejectUnauthorized: true,
  } as const;
  return {
    policy,
    serverOptions<E extends object = object>(extra?: E) {
      return { ...base, requestCert: true, ...(extra as E) };
    },
    clientOptions<E extends object = object>(binding: ServerBinding<I>, extra?: E) {
      const checkServerIdentity =
        'check' in binding
          ? binding.check
          : (_host: string, cert: PeerCertificate): Error | undefined => {
              const named = identifyOrCause(policy, cert).identity;
              if (named !== binding.expect) return binding.mismatch(named);
              return binding.afterwards?.(named as I);
            };
      return { ...base, ...(extra as E), checkServerIdentity };
    },
    accept(socket: TLSSocket): AcceptedPeer<I> {
      const cert = socket.getPeerCertificate();
      if (!socket.authorized || cert?.raw === undefined) return { refused: 'unauthorized' };
      const { identity, cause } = identifyOrCause(policy, cert);
      if (identity !== undefined) return { identity };
      return cause === undefined ? { refused: 'unnamed' } : { refused: 'unnamed', cause };
    },
    identityOf(socket: TLSSocket): I {
      const peer = this.accept(socket);
      if (!('refused' in peer)) return peer.identity;
      if (policy.refuse) throw policy.refuse(peer.refused, peer.cause);
      throw new PlexusError(
        'PLX_NET_UNTRUSTED_PEER',
        peer.refused === 'unauthorized'
          ? 'the peer presented no certificate of the CA'
          : `the peer's certificate names no ${policy.kind}`,
        { reason: peer.refused },
        peer.cause === undefined ? undefined : { cause: peer.cause },
      );
    },
  };
}
