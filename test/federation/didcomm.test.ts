import { x25519 } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import {
  type ContentEncryption,
  createDidKey,
  createDidPeer2,
  type DidCommMessage,
  type DidKeyMaterial,
  encodeMultikey,
  encryptJwe,
  InMemoryKeyManager,
  packEncrypted,
  packFromPrior,
  packPlaintext,
  packSigned,
  parseForward,
  ResolverRegistry,
  relationshipKeys,
  signJws,
  UndecryptableLog,
  unpack,
} from '../../ts/federation/index.js';
import { expectCode } from './fixtures.js';

async function party(km: InMemoryKeyManager, m: DidKeyMaterial = createDidKey()) {
  await km.importKey(m.signingKid, 'Ed25519', m.ed25519Seed);
  await km.importKey(m.agreementKid, 'X25519', m.x25519Secret);
  return m;
}

const message = (from: string | undefined, to: string, extra: Partial<DidCommMessage> = {}): DidCommMessage => ({
  id: 'send-7f3a',
  type: 'https://plexus.example/events/order.placed',
  ...(from ? { from } : {}),
  to: [to],
  body: { secretPayload: 'forty-two cups of tea' },
  ...extra,
});

describe('DIDComm pack and unpack round trips', () => {
  const reg = new ResolverRegistry();

  it('plaintext', async () => {
    const km = new InMemoryKeyManager();
    const a = await party(km);
    const { message: m, metadata } = await unpack(packPlaintext(message(a.did, a.did)), { resolver: reg, keys: km });
    expect(m.body).toEqual({ secretPayload: 'forty-two cups of tea' });
    expect(metadata).toMatchObject({ encrypted: false, authenticated: false });
  });

  for (const enc of ['XC20P', 'A256GCM', 'A256CBC-HS512'] as ContentEncryption[]) {
    it(`anoncrypt ${enc}, signed inside`, async () => {
      const km = new InMemoryKeyManager();
      const [a, b] = [await party(km), await party(km)];
      const r = await packEncrypted(
        message(a.did, b.did),
        { to: b.did, enc, signBy: a.did },
        { resolver: reg, keys: km },
      );
      const { message: m, metadata } = await unpack(r.packed, { resolver: reg, keys: km });
      expect(m.id).toBe('send-7f3a');
      expect(metadata).toMatchObject({
        encrypted: true,
        anonymousSender: true,
        nonRepudiation: true,
        signFrom: a.signingKid,
      });
      expect(metadata.encAlgAnon).toBe(`ECDH-ES+A256KW/${enc}`);
    });
  }

  it('authcrypt to a did:peer:2 with two key-agreement keys: each key decrypts alone', async () => {
    const km = new InMemoryKeyManager();
    const a = await party(km);
    const [x1, x2] = [x25519.utils.randomSecretKey(), x25519.utils.randomSecretKey()];
    const b = createDidPeer2([
      { purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', x25519.getPublicKey(x1)) },
      { purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', x25519.getPublicKey(x2)) },
    ]);
    const r = await packEncrypted(message(a.did, b), { to: b, from: a.did }, { resolver: reg, keys: km });
    expect(r.toKids).toEqual([`${b}#key-1`, `${b}#key-2`]);
    for (const [kid, sk] of [
      [`${b}#key-1`, x1],
      [`${b}#key-2`, x2],
    ] as const) {
      const bk = new InMemoryKeyManager();
      await bk.importKey(kid, 'X25519', sk);
      const { metadata } = await unpack(r.packed, { resolver: reg, keys: bk });
      expect(metadata).toMatchObject({
        authenticated: true,
        anonymousSender: false,
        recipientKid: kid,
        encryptedFromKid: a.agreementKid,
      });
    }
  });

  it('forward through two mediators: each sees routing data only, the recipient gets the message', async () => {
    const km = new InMemoryKeyManager();
    const a = await party(km);
    const [m1, m2] = [createDidKey(), createDidKey()];
    const k1 = new InMemoryKeyManager();
    const k2 = new InMemoryKeyManager();
    await party(k1, m1);
    await party(k2, m2);
    const bx = x25519.utils.randomSecretKey();
    const b = createDidPeer2(
      [{ purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', x25519.getPublicKey(bx)) }],
      [
        {
          type: 'DIDCommMessaging',
          serviceEndpoint: {
            uri: 'https://m1.example',
            accept: ['didcomm/v2'],
            routingKeys: [m1.agreementKid, m2.agreementKid],
          },
        },
      ],
    );
    const bk = new InMemoryKeyManager();
    await bk.importKey(`${b}#key-1`, 'X25519', bx);
    const sent = message(a.did, b);
    const r = await packEncrypted(sent, { to: b, from: a.did, protectSender: true }, { resolver: reg, keys: km });
    expect(r.service).toMatchObject({ uri: 'https://m1.example' });

    const secrets = [sent.type, 'order.placed', sent.id, 'forty-two cups', a.did, a.did.slice(8, 30)];
    const seenBy = (text: string) => visibleText(JSON.parse(text));
    const hop1 = await unpack(r.packed, { resolver: reg, keys: k1 });
    const f1 = parseForward(hop1.message);
    expect(f1.next).toBe(m2.agreementKid);
    const hop2 = await unpack(JSON.stringify(f1.forwarded), { resolver: reg, keys: k2 });
    const f2 = parseForward(hop2.message);
    expect(f2.next).toBe(b);
    for (const stored of [r.packed, JSON.stringify(hop1.message), JSON.stringify(hop2.message)]) {
      const visible = seenBy(stored);
      for (const s of secrets) expect(visible.includes(s), `relay sees ${s}`).toBe(false);
    }
    // The check can fail: without protectSender the authcrypt skid (the sender's key) is visible.
    const open = await packEncrypted(sent, { to: b, from: a.did }, { resolver: reg, keys: km });
    const o1 = parseForward((await unpack(open.packed, { resolver: reg, keys: k1 })).message);
    const o2 = await unpack(JSON.stringify(o1.forwarded), { resolver: reg, keys: k2 });
    expect(seenBy(JSON.stringify(o2.message)).includes(a.did)).toBe(true);
    const final = await unpack(JSON.stringify(f2.forwarded), { resolver: reg, keys: bk });
    expect(final.message).toMatchObject({ id: sent.id, body: sent.body, from: a.did });
    expect(final.metadata).toMatchObject({
      authenticated: true,
      anonymousSender: true,
      encryptedFromKid: a.agreementKid,
    });
  });

  it('parseForward reads data.json and data.base64, and refuses anything else', async () => {
    const env = { protected: 'x', recipients: [], iv: 'i', ciphertext: 'c', tag: 't' };
    const base = { id: 'f', type: 'https://didcomm.org/routing/2.0/forward', body: { next: 'did:example:b' } };
    expect(parseForward({ ...base, attachments: [{ data: { json: env } }] }).forwarded).toEqual(env);
    const b64 = Buffer.from(JSON.stringify(env)).toString('base64');
    expect(parseForward({ ...base, attachments: [{ data: { base64: b64 } }] }).forwarded).toEqual(env);
    await expectCode(
      () => parseForward({ ...base, attachments: [{ data: { base64: 'bm90IGpzb24=' } }] }),
      'PLX_DIDCOMM_BAD_FORWARD',
    );
    await expectCode(() => parseForward({ ...base, attachments: [] }), 'PLX_DIDCOMM_BAD_FORWARD');
    await expectCode(
      () => parseForward({ ...base, type: 'other', attachments: [{ data: { json: env } }] }),
      'PLX_DIDCOMM_BAD_FORWARD',
    );
  });

  it('a retired key decrypts during its grace period; afterwards the message is refused and recorded', async () => {
    let now = 0;
    const km = new InMemoryKeyManager();
    const a = await party(km);
    const bk = new InMemoryKeyManager({ graceMs: 10_000, clock: { now: () => now } });
    const b = await party(bk);
    const r = await packEncrypted(message(a.did, b.did), { to: b.did, from: a.did }, { resolver: reg, keys: km });
    await bk.rotate(b.agreementKid, `${b.did}#ka-2`);
    expect((await unpack(r.packed, { resolver: reg, keys: bk })).metadata.recipientKid).toBe(b.agreementKid);
    now = 10_001;
    const log = new UndecryptableLog();
    await expectCode(
      unpack(r.packed, { resolver: reg, keys: bk, recorder: log, clock: { now: () => now } }),
      'PLX_DIDCOMM_NO_KEY',
    );
    expect(log.entries()).toMatchObject([{ at: 10_001, code: 'PLX_DIDCOMM_NO_KEY', recipientKids: [b.agreementKid] }]);
    expect(JSON.stringify(log.entries()).includes('forty-two')).toBe(false);
  });

  it('from_prior is verified and reported', async () => {
    const km = new InMemoryKeyManager();
    const [old, a, b] = [await party(km), await party(km), await party(km)];
    const fp = await packFromPrior({ iss: old.did, sub: a.did, iat: 1 }, old.signingKid, km);
    const r = await packEncrypted(
      message(a.did, b.did, { from_prior: fp }),
      { to: b.did, from: a.did },
      { resolver: reg, keys: km },
    );
    const { metadata } = await unpack(r.packed, { resolver: reg, keys: km });
    expect(metadata).toMatchObject({
      fromPrior: { iss: old.did, sub: a.did, iat: 1 },
      fromPriorIssuerKid: old.signingKid,
    });
    const wrongSub = await packFromPrior({ iss: old.did, sub: b.did }, old.signingKid, km);
    const r2 = await packEncrypted(
      message(a.did, b.did, { from_prior: wrongSub }),
      { to: b.did },
      { resolver: reg, keys: km },
    );
    await expectCode(unpack(r2.packed, { resolver: reg, keys: km }), 'PLX_DIDCOMM_BAD_FROM_PRIOR');
  });

  it('refuses a sender that is not the message from, and a recipient not in to', async () => {
    const km = new InMemoryKeyManager();
    const [a, b, c] = [await party(km), await party(km), await party(km)];
    const te = new TextEncoder();
    const forged = await encryptJwe({
      plaintext: te.encode(packPlaintext(message(a.did, b.did))),
      recipients: relationshipKeys(await reg.resolve(b.did), 'keyAgreement'),
      enc: 'A256CBC-HS512',
      sender: { kid: c.agreementKid, keys: km },
    });
    await expectCode(unpack(JSON.stringify(forged), { resolver: reg, keys: km }), 'PLX_DIDCOMM_SENDER_MISMATCH');
    const signedByC = await signJws(te.encode(packPlaintext(message(a.did, b.did))), c.signingKid, km);
    await expectCode(unpack(JSON.stringify(signedByC), { resolver: reg, keys: km }), 'PLX_DIDCOMM_SENDER_MISMATCH');
    const toC = await encryptJwe({
      plaintext: te.encode(packPlaintext(message(a.did, b.did))),
      recipients: relationshipKeys(await reg.resolve(c.did), 'keyAgreement'),
      enc: 'XC20P',
    });
    await expectCode(unpack(JSON.stringify(toC), { resolver: reg, keys: km }), 'PLX_DIDCOMM_RECIPIENT_MISMATCH');
    await expectCode(
      packEncrypted(message(a.did, b.did), { to: c.did }, { resolver: reg, keys: km }),
      'PLX_DIDCOMM_RECIPIENT_MISMATCH',
    );
    await expectCode(
      packEncrypted(message(a.did, b.did), { to: b.did, from: c.did }, { resolver: reg, keys: km }),
      'PLX_DIDCOMM_SENDER_MISMATCH',
    );
    await expectCode(
      packSigned(message(a.did, b.did), b.did, { resolver: reg, keys: km }),
      'PLX_DIDCOMM_SENDER_MISMATCH',
    );
  });

  it('refuses layers in a wrong order: encryption inside a signature', async () => {
    const km = new InMemoryKeyManager();
    const [a, b] = [await party(km), await party(km)];
    const r = await packEncrypted(message(a.did, b.did), { to: b.did }, { resolver: reg, keys: km });
    const wrapped = await signJws(new TextEncoder().encode(r.packed), a.signingKid, km);
    await expectCode(unpack(JSON.stringify(wrapped), { resolver: reg, keys: km }), 'PLX_DIDCOMM_MALFORMED');
  });

  it('caps: too many recipients and too large envelopes are refused before any work', async () => {
    const km = new InMemoryKeyManager();
    const [a, b] = [await party(km), await party(km)];
    const r = JSON.parse(
      (await packEncrypted(message(a.did, b.did), { to: b.did }, { resolver: reg, keys: km })).packed,
    );
    r.recipients = Array.from({ length: 65 }, () => r.recipients[0]);
    await expectCode(unpack(JSON.stringify(r), { resolver: reg, keys: km }), 'PLX_DIDCOMM_TOO_LARGE');
    await expectCode(unpack(' '.repeat(1024 * 1024 + 1), { resolver: reg, keys: km }), 'PLX_DIDCOMM_TOO_LARGE');
    await expectCode(
      unpack('{"x":1}'.padEnd(2000), { resolver: reg, keys: km, limits: { maxEnvelopeBytes: 1000 } }),
      'PLX_DIDCOMM_TOO_LARGE',
    );
  });
});

/** Everything a relay can read in a stored JSON value: strings, and base64url strings decoded. */
function visibleText(v: unknown): string {
  const out: string[] = [];
  const walk = (x: unknown): void => {
    if (typeof x === 'string') {
      out.push(x);
      if (/^[A-Za-z0-9_-]+$/.test(x)) out.push(Buffer.from(x, 'base64url').toString('latin1'));
    } else if (Array.isArray(x)) x.forEach(walk);
    else if (x && typeof x === 'object') {
      for (const [k, y] of Object.entries(x)) {
        out.push(k);
        walk(y);
      }
    }
  };
  walk(v);
  return out.join('\n');
}
