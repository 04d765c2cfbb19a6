/**
 * Fuzzed envelopes and identifiers: every input is either accepted or refused with a
 * PlexusError; nothing else escapes, and sizes are refused before parsing.
 */
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { PlexusError } from '../../ts/core/errors.js';
import {
  b64uDecode,
  b64uEncode,
  base58Decode,
  base58Encode,
  createDidKey,
  type DidKeyMaterial,
  InMemoryKeyManager,
  packEncrypted,
  packSigned,
  parseDidUrl,
  ResolverRegistry,
  resolveDidKey,
  resolveDidPeer2,
  unpack,
} from '../../ts/federation/index.js';

const reg = new ResolverRegistry();
const km = new InMemoryKeyManager();
let a: DidKeyMaterial;
let b: DidKeyMaterial;
const envelopes: Record<string, Record<string, unknown>> = {};

async function refusedOrAccepted(text: string): Promise<void> {
  try {
    await unpack(text, { resolver: reg, keys: km });
  } catch (e) {
    if (!(e instanceof PlexusError)) throw e;
    expect(e.code).toMatch(/^PLX_(DIDCOMM|DID|KEYS)_[A-Z_]+$/);
    expect(e.message.length).toBeGreaterThan(10);
  }
}

beforeAll(async () => {
  [a, b] = [createDidKey(), createDidKey()];
  for (const m of [a, b]) {
    await km.importKey(m.signingKid, 'Ed25519', m.ed25519Seed);
    await km.importKey(m.agreementKid, 'X25519', m.x25519Secret);
  }
  const msg = { id: '1', type: 't', from: a.did, to: [b.did], body: { n: 1 } };
  const ctx = { resolver: reg, keys: km };
  envelopes.anoncrypt = JSON.parse((await packEncrypted(msg, { to: b.did }, ctx)).packed);
  envelopes.authcrypt = JSON.parse((await packEncrypted(msg, { to: b.did, from: a.did }, ctx)).packed);
  envelopes.signed = JSON.parse((await packSigned(msg, a.did, ctx)).packed);
});

describe('fuzzed envelopes', () => {
  it('random JSON values and random text are refused with PlexusError', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.json(),
          fc.string({ maxLength: 300 }),
          fc.jsonValue().map((v) => JSON.stringify({ ciphertext: v, protected: v, recipients: v })),
        ),
        refusedOrAccepted,
      ),
      { numRuns: 300 },
    );
  });

  for (const kind of ['anoncrypt', 'authcrypt', 'signed'] as const) {
    it(`${kind}: truncated fields are refused`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.nat(), fc.nat(), async (fieldPick, cut) => {
          const env = structuredClone(envelopes[kind]!);
          const flat = stringSlots(env);
          const slot = flat[fieldPick % flat.length]!;
          const v = slot.get();
          slot.set(v.slice(0, cut % Math.max(1, v.length)));
          await expect(unpack(JSON.stringify(env), { resolver: reg, keys: km })).rejects.toBeInstanceOf(PlexusError);
        }),
        { numRuns: 120 },
      );
    });

    it(`${kind}: any string field replaced by other JSON is refused`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.nat(), fc.jsonValue({ maxDepth: 3 }), async (pick, value) => {
          const env = structuredClone(envelopes[kind]!);
          const slots = stringSlots(env);
          const slot = slots[pick % slots.length]!;
          if (JSON.stringify(value) === JSON.stringify(slot.get())) return;
          slot.setAny(value);
          await expect(unpack(JSON.stringify(env), { resolver: reg, keys: km })).rejects.toBeInstanceOf(PlexusError);
        }),
        { numRuns: 120 },
      );
    });

    it(`${kind}: the envelope cut at any length is refused`, async () => {
      const text = JSON.stringify(envelopes[kind]);
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: text.length - 1 }), async (n) => {
          await expect(unpack(text.slice(0, n), { resolver: reg, keys: km })).rejects.toBeInstanceOf(PlexusError);
        }),
        { numRuns: 100 },
      );
    });
  }

  it('huge fields are refused by size before parsing or decoding', async () => {
    const huge = 'A'.repeat(8 * 1024 * 1024);
    const t0 = performance.now();
    for (const field of ['ciphertext', 'protected', 'tag', 'iv']) {
      const env = { ...envelopes.anoncrypt, [field]: huge };
      await expect(unpack(JSON.stringify(env), { resolver: reg, keys: km })).rejects.toMatchObject({
        code: 'PLX_DIDCOMM_TOO_LARGE',
      });
    }
    const bigKid = structuredClone(envelopes.anoncrypt!) as { recipients: { header: { kid: string } }[] };
    bigKid.recipients[0]!.header.kid = 'did:key:z'.padEnd(100_000, 'x');
    await expect(unpack(JSON.stringify(bigKid), { resolver: reg, keys: km })).rejects.toMatchObject({
      code: 'PLX_DIDCOMM_TOO_LARGE',
    });
    const manySigs = {
      ...envelopes.signed,
      signatures: Array(1000).fill((envelopes.signed as { signatures: unknown[] }).signatures[0]),
    };
    await expect(unpack(JSON.stringify(manySigs), { resolver: reg, keys: km })).rejects.toMatchObject({
      code: 'PLX_DIDCOMM_TOO_LARGE',
    });
    // Refusals by size take no time proportional to a decode of the content.
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe('fuzzed identifiers and encodings', () => {
  it('DIDs and DID URLs: arbitrary text is parsed or refused with PLX_DID_*', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 200 }),
          fc.string().map((s) => `did:peer:2.${s}`),
          fc.string().map((s) => `did:key:z${s}`),
        ),
        (s) => {
          for (const f of [parseDidUrl, resolveDidPeer2, resolveDidKey]) {
            try {
              f(s);
            } catch (e) {
              expect(e).toBeInstanceOf(PlexusError);
              expect((e as PlexusError).code).toMatch(/^PLX_DID_/);
            }
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('base58btc and base64url round-trip any bytes; base64url refuses non-canonical text', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 120 }), (bytes) => {
        expect(base58Decode(base58Encode(bytes))).toEqual(bytes);
        expect(b64uDecode(b64uEncode(bytes), 'x')).toEqual(bytes);
      }),
      { numRuns: 300 },
    );
    expect(() => b64uDecode('AB', 'x')).toThrow(PlexusError); // trailing bits set
    expect(() => b64uDecode('AA==', 'x')).toThrow(PlexusError);
    expect(() => b64uDecode('A', 'x')).toThrow(PlexusError);
  });
});

interface Slot {
  get(): string;
  set(v: string): void;
  setAny(v: unknown): void;
}

/** Every string-valued member in a JSON tree, with a setter. */
function stringSlots(root: unknown): Slot[] {
  const out: Slot[] = [];
  const walk = (x: unknown): void => {
    if (Array.isArray(x) || (x && typeof x === 'object')) {
      const o = x as Record<string | number, unknown>;
      for (const k of Object.keys(o)) {
        if (typeof o[k] === 'string') {
          out.push({ get: () => o[k] as string, set: (v) => void (o[k] = v), setAny: (v) => void (o[k] = v) });
        } else walk(o[k]);
      }
    }
  };
  walk(root);
  return out;
}
