/**
 * Identities for mediators and their clients.
 *
 * A mediator keeps one Ed25519 key (and the X25519 key derived from it) as a did:key in its
 * KeyManager: that is its stable identity. The DID it publishes is a did:peer:2 built from the
 * same two public keys and a DIDCommMessaging service with its URL, so a restart on the same
 * address gives the same DID. `AliasKeyManager` lets the did:peer:2 key ids (`#key-1` the
 * Ed25519 key, `#key-2` the X25519 key) reach the did:key keys, without a private key ever
 * leaving the manager.
 */
import { PlexusError } from '../../core/errors.js';
import { createDidKey } from '../did/did-key.js';
import { createDidPeer2 } from '../did/did-peer.js';
import { parseDidUrl } from '../did/did-url.js';
import { decodeMultikey, encodeMultikey, type KeyType } from '../did/multibase.js';
import type { KeyInfo, KeyManager } from '../keys/types.js';

/** A KeyManager view that answers for aliased key ids with the keys they stand for. */
export class AliasKeyManager implements KeyManager {
  private readonly aliases = new Map<string, string>();

  constructor(private readonly inner: KeyManager) {}

  /** `alias` (a DID URL) stands for the key `kid` of the inner manager. */
  alias(alias: string, kid: string): this {
    parseDidUrl(alias);
    this.aliases.set(alias, kid);
    return this;
  }

  private target(kid: string): string {
    return this.aliases.get(kid) ?? kid;
  }

  generate(kid: string, type: KeyType): Promise<KeyInfo> {
    return this.inner.generate(kid, type);
  }
  importKey(kid: string, type: KeyType, secret: Uint8Array): Promise<KeyInfo> {
    return this.inner.importKey(kid, type, secret);
  }
  info(kid: string): KeyInfo | undefined {
    const t = this.aliases.get(kid);
    if (t === undefined) return this.inner.info(kid);
    const i = this.inner.info(t);
    return i === undefined ? undefined : { ...i, kid, did: parseDidUrl(kid).did };
  }
  list(did?: string): KeyInfo[] {
    const own = this.inner.list(did);
    const aliased: KeyInfo[] = [];
    for (const a of this.aliases.keys()) {
      const i = this.info(a);
      if (i !== undefined && (did === undefined || i.did === did)) aliased.push(i);
    }
    return [...own, ...aliased];
  }
  sign(kid: string, data: Uint8Array): Promise<Uint8Array> {
    return this.inner.sign(this.target(kid), data);
  }
  ecdh(kid: string, peerPublicKey: Uint8Array): Promise<Uint8Array> {
    return this.inner.ecdh(this.target(kid), peerPublicKey);
  }
  rotate(oldKid: string, newKid: string): Promise<KeyInfo> {
    return this.inner.rotate(this.target(oldKid), newKid);
  }
  remove(kid: string): Promise<boolean> {
    return this.inner.remove(this.target(kid));
  }
  purgeExpired(): Promise<number> {
    return this.inner.purgeExpired();
  }
  toJSON(): unknown {
    return { kind: 'AliasKeyManager', aliases: [...this.aliases.keys()] };
  }
}

/** A did:peer:2 identity whose keys a KeyManager holds. */
export interface PeerIdentity {
  did: string;
  /** `#key-1`: the Ed25519 authentication key. */
  signingKid: string;
  /** `#key-2`: the X25519 key-agreement key. */
  agreementKid: string;
}

/** A DIDCommMessaging service of a did:peer:2, given unabbreviated. */
export interface PeerService {
  uri: string;
  routingKeys?: string[];
  accept?: string[];
}

function peerDid(signPub: Uint8Array, agreePub: Uint8Array, services: PeerService[]): PeerIdentity {
  const did = createDidPeer2(
    [
      { purpose: 'V', publicKeyMultibase: encodeMultikey('Ed25519', signPub) },
      { purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', agreePub) },
    ],
    services.map((s) => ({
      type: 'DIDCommMessaging',
      serviceEndpoint: {
        uri: s.uri,
        accept: s.accept ?? ['didcomm/v2'],
        ...(s.routingKeys && s.routingKeys.length > 0 ? { routingKeys: s.routingKeys } : {}),
      },
    })),
  );
  return { did, signingKid: `${did}#key-1`, agreementKid: `${did}#key-2` };
}

/**
 * Makes a fresh did:peer:2 (one Ed25519 and one X25519 key, and the given services) and imports
 * its private keys into `keys`. For a party whose messages come through a mediator, give the
 * mediator's URL and its routing key as the service.
 */
export async function createPeerIdentity(keys: KeyManager, services: PeerService[] = []): Promise<PeerIdentity> {
  const m = createDidKey();
  const id = peerDid(publicOf(m.did), agreementPublicOf(m.agreementKid), services);
  await keys.importKey(id.signingKid, 'Ed25519', m.ed25519Seed);
  await keys.importKey(id.agreementKid, 'X25519', m.x25519Secret);
  m.ed25519Seed.fill(0);
  m.x25519Secret.fill(0);
  return id;
}

function publicOf(didKey: string): Uint8Array {
  return decodeFromMultibase(didKey.slice('did:key:'.length));
}
function agreementPublicOf(kid: string): Uint8Array {
  return decodeFromMultibase(kid.slice(kid.indexOf('#') + 1));
}

function decodeFromMultibase(mb: string): Uint8Array {
  return decodeMultikey(mb).publicKey;
}

/** The key pair of a mediator: a did:key identity in its KeyManager. */
export interface MediatorKeys {
  didKey: string;
  signingKid: string;
  agreementKid: string;
}

/**
 * The mediator's did:key in `keys`: the first did:key with an active Ed25519 and X25519 key, or a
 * fresh one imported into it.
 */
export async function mediatorKeys(keys: KeyManager): Promise<MediatorKeys> {
  for (const k of keys.list()) {
    if (!k.did.startsWith('did:key:') || k.type !== 'Ed25519' || k.status !== 'active') continue;
    const agreement = keys.list(k.did).find((x) => x.type === 'X25519' && x.status === 'active');
    if (agreement) return { didKey: k.did, signingKid: k.kid, agreementKid: agreement.kid };
  }
  const m = createDidKey();
  await keys.importKey(m.signingKid, 'Ed25519', m.ed25519Seed);
  await keys.importKey(m.agreementKid, 'X25519', m.x25519Secret);
  m.ed25519Seed.fill(0);
  m.x25519Secret.fill(0);
  return { didKey: m.did, signingKid: m.signingKid, agreementKid: m.agreementKid };
}

/** The mediator's published did:peer:2 for `url`, and a KeyManager that answers for its key ids. */
export function mediatorIdentity(
  keys: KeyManager,
  mk: MediatorKeys,
  url: string,
): { identity: PeerIdentity; keys: AliasKeyManager } {
  const sign = keys.info(mk.signingKid);
  const agree = keys.info(mk.agreementKid);
  if (!sign || !agree) {
    throw new PlexusError('PLX_MEDIATOR_NO_KEY', 'the mediator key manager no longer holds its keys', {});
  }
  const identity = peerDid(sign.publicKey, agree.publicKey, [{ uri: url }]);
  const alias = new AliasKeyManager(keys)
    .alias(identity.signingKid, mk.signingKid)
    .alias(identity.agreementKid, mk.agreementKid);
  return { identity, keys: alias };
}
