/**
 * Grants: SCXML event descriptor matching (SCXML 1.0 §3.12.1: "An event descriptor matches an
 * event name if its string of tokens is an exact match or a prefix of the set of tokens in the
 * event's name") checked against a deliberately simple reference with fast-check, grantee and
 * target scoping, expiry, the two directions, refusal codes, and the vt-id JSON-LD form.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  descriptorMatches,
  GRANT_CONTEXT,
  type Grant,
  GrantSet,
  grant,
  grantFromJsonLd,
  grantsToJsonLd,
  grantToJsonLd,
  makeGrant,
  VT_ID,
} from '../../ts/federation/grants.js';
import { expectCode } from './fixtures.js';

const seed = process.env.PLEXUS_FUZZ_SEED === 'random' ? undefined : Number(process.env.PLEXUS_FUZZ_SEED ?? 20261130);
const params = { numRuns: 300, ...(seed !== undefined ? { seed } : {}) };

const token = fc.constantFrom('order', 'orders', 'placed', 'paid', 'x', 'ord', 'error', 'a_b', 'Order');
const name = fc.array(token, { minLength: 1, maxLength: 4 }).map((t) => t.join('.'));
const descriptor = fc.oneof(
  name,
  name.map((n) => `${n}.*`),
  fc.constant('*'),
);

/** The reference: string prefix on whole tokens, written the obvious way. */
function reference(d: string, e: string): boolean {
  if (d === '*') return true;
  const base = d.endsWith('.*') ? d.slice(0, -2) : d;
  return e === base || e.startsWith(`${base}.`);
}

const BUYER = 'did:peer:2.Ez6LSbuyer';
const SHOP = 'did:web:shop.example';

describe('SCXML event descriptors', () => {
  it('match exactly the reference on random descriptors and event names', () => {
    fc.assert(
      fc.property(descriptor, name, (d, e) => {
        expect(descriptorMatches(d, e)).toBe(reference(d, e));
      }),
      params,
    );
  });

  it('a descriptor matches its own name and every longer name under it, and * matches all', () => {
    fc.assert(
      fc.property(name, fc.array(token, { maxLength: 3 }), (n, more) => {
        const e = [n, ...more].join('.');
        expect(descriptorMatches(n, e)).toBe(true);
        expect(descriptorMatches(`${n}.*`, e)).toBe(true);
        expect(descriptorMatches('*', e)).toBe(true);
      }),
      params,
    );
  });

  it('tokens are whole and case-sensitive', () => {
    expect(descriptorMatches('order', 'orders')).toBe(false);
    expect(descriptorMatches('order.*', 'orders.placed')).toBe(false);
    expect(descriptorMatches('order.*', 'order')).toBe(true);
    expect(descriptorMatches('order.placed', 'order')).toBe(false);
    expect(descriptorMatches('Order', 'order')).toBe(false);
  });

  it('refuses malformed descriptors and event names', async () => {
    for (const d of ['', 'order.', '.order', 'or der', 'order.*.x', '**', 'a..b', 'x'.repeat(300)]) {
      await expectCode(() => descriptorMatches(d, 'order'), 'PLX_GRANT_BAD_DESCRIPTOR');
    }
    for (const e of ['', 'order.*', 'a b', 'a..b', '*']) {
      await expectCode(() => descriptorMatches('order', e), 'PLX_GRANT_BAD_EVENT');
    }
  });
});

describe('GrantSet', () => {
  it('checks grantee, target and event, outbound and inbound separately', () => {
    const gs = new GrantSet();
    gs.grantOutbound(grant(BUYER, SHOP, ['order.*']));
    gs.grantInbound(grant('*', SHOP, ['ping']));
    expect(gs.allowsOutbound(BUYER, SHOP, 'order.placed', 0)).toMatchObject({ allowed: true });
    expect(gs.allowsOutbound(BUYER, SHOP, 'order', 0)).toMatchObject({ allowed: true });
    expect(gs.allowsOutbound(BUYER, SHOP, 'refund', 0)).toMatchObject({ allowed: false, code: 'PLX_GRANT_NONE' });
    expect(gs.allowsOutbound('did:key:z6Mkother', SHOP, 'order.placed', 0)).toMatchObject({ allowed: false });
    expect(gs.allowsOutbound(BUYER, 'did:web:other.example', 'order.placed', 0)).toMatchObject({ allowed: false });
    // Directions do not mix.
    expect(gs.allowsInbound(BUYER, SHOP, 'order.placed', 0)).toMatchObject({ allowed: false, code: 'PLX_GRANT_NONE' });
    expect(gs.allowsInbound('did:key:z6Mkanyone', SHOP, 'ping', 0)).toMatchObject({ allowed: true });
    expect(gs.allowsOutbound(BUYER, SHOP, 'ping', 0)).toMatchObject({ allowed: false });
  });

  it('an expired grant refuses with PLX_GRANT_EXPIRED, a live one next to it still allows', async () => {
    const gs = new GrantSet();
    gs.grantInbound(grant(BUYER, SHOP, ['order.*'], 1000));
    expect(gs.allowsInbound(BUYER, SHOP, 'order.placed', 999)).toMatchObject({ allowed: true });
    const late = gs.allowsInbound(BUYER, SHOP, 'order.placed', 1000);
    expect(late).toMatchObject({ allowed: false, code: 'PLX_GRANT_EXPIRED' });
    await expectCode(() => gs.requireInbound(BUYER, SHOP, 'order.placed', 5000), 'PLX_GRANT_EXPIRED');
    await expectCode(() => gs.requireInbound(BUYER, SHOP, 'refund', 5000), 'PLX_GRANT_NONE');
    gs.grantInbound(grant(BUYER, SHOP, ['order.placed']));
    expect(gs.requireInbound(BUYER, SHOP, 'order.placed', 5000).expires).toBeUndefined();
    expect(gs.revokeInbound(grant(BUYER, SHOP, ['order.placed']))).toBe(1);
    expect(gs.allowsInbound(BUYER, SHOP, 'order.placed', 5000)).toMatchObject({ code: 'PLX_GRANT_EXPIRED' });
  });

  it('allows exactly when some unexpired grant for the sender and target matches (property)', () => {
    const arbGrant = fc.record({
      grantee: fc.constantFrom(BUYER, 'did:key:z6Mkb', '*'),
      events: fc.array(descriptor, { minLength: 1, maxLength: 3 }),
      expires: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(
        fc.array(arbGrant, { maxLength: 6 }),
        fc.constantFrom(BUYER, 'did:key:z6Mkb', 'did:key:z6Mkc'),
        name,
        fc.integer({ min: 0, max: 120 }),
        (grants, who, ev, now) => {
          const gs = new GrantSet();
          for (const g of grants) gs.grantOutbound({ ...g, target: SHOP } as Grant);
          const matching = grants.filter(
            (g) => (g.grantee === '*' || g.grantee === who) && g.events.some((d) => reference(d, ev)),
          );
          const live = matching.some((g) => g.expires === undefined || now < g.expires);
          const d = gs.allowsOutbound(who, SHOP, ev, now);
          expect(d.allowed).toBe(live);
          if (!d.allowed) expect(d.code).toBe(matching.length > 0 ? 'PLX_GRANT_EXPIRED' : 'PLX_GRANT_NONE');
        },
      ),
      params,
    );
  });

  it('refuses malformed grants', async () => {
    await expectCode(() => makeGrant({ grantee: '', target: SHOP, events: ['x'] }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(() => makeGrant({ grantee: BUYER, target: '*', events: ['x'] }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(() => makeGrant({ grantee: BUYER, target: SHOP, events: [] }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(() => makeGrant({ grantee: 'no scheme', target: SHOP, events: ['x'] }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(() => makeGrant({ grantee: 'noscheme', target: SHOP, events: ['x'] }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(
      () => makeGrant({ grantee: BUYER, target: SHOP, events: ['x'], expires: -1 }),
      'PLX_GRANT_BAD_GRANT',
    );
    await expectCode(() => makeGrant({ grantee: BUYER, target: SHOP, events: ['a b'] }), 'PLX_GRANT_BAD_DESCRIPTOR');
  });
});

describe('JSON-LD with the vt-id vocabulary', () => {
  it('uses vt-id:Grant, vt-id:grantee, vt-id:target, vt-id:event and vt-id:expires', () => {
    const g = grant(BUYER, SHOP, ['order.*', 'ping'], Date.UTC(2027, 0, 1));
    expect(grantToJsonLd(g, '_:g1')).toEqual({
      '@id': '_:g1',
      '@type': 'vt-id:Grant',
      'vt-id:grantee': { '@id': BUYER },
      'vt-id:target': { '@id': SHOP },
      'vt-id:event': ['order.*', 'ping'],
      'vt-id:expires': { '@value': '2027-01-01T00:00:00.000Z', '@type': 'xsd:dateTime' },
    });
    const doc = grantsToJsonLd([g, grant('*', SHOP, ['*'])]);
    expect(doc['@context']).toEqual(GRANT_CONTEXT);
    expect(GRANT_CONTEXT['vt-id']).toBe('https://w3id.org/vertep/vt-id#');
    expect(doc['@graph'][1]).toEqual({
      '@type': 'vt-id:Grant',
      'vt-id:grantee': '*',
      'vt-id:target': { '@id': SHOP },
      'vt-id:event': ['*'],
    });
  });

  it('round-trips, and reads the expanded IRIs too (property)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(BUYER, '*', 'did:key:z6Mkb'),
        fc.array(descriptor, { minLength: 1, maxLength: 4 }),
        fc.option(fc.integer({ min: 0, max: 4_000_000_000_000 }), { nil: undefined }),
        (grantee, events, expires) => {
          const g = grant(grantee, SHOP, events, expires);
          expect(grantFromJsonLd(JSON.parse(JSON.stringify(grantToJsonLd(g))))).toEqual(g);
        },
      ),
      params,
    );
    const expanded = {
      '@type': `${VT_ID}Grant`,
      [`${VT_ID}grantee`]: { '@id': BUYER },
      [`${VT_ID}target`]: { '@id': SHOP },
      [`${VT_ID}event`]: 'order.*',
    };
    expect(grantFromJsonLd(expanded)).toEqual(grant(BUYER, SHOP, ['order.*']));
  });

  it('refuses nodes that are not grants', async () => {
    await expectCode(() => grantFromJsonLd({ '@type': 'vt-id:Other' }), 'PLX_GRANT_BAD_GRANT');
    await expectCode(
      () =>
        grantFromJsonLd({
          '@type': 'vt-id:Grant',
          'vt-id:grantee': BUYER,
          'vt-id:target': { '@id': SHOP },
          'vt-id:event': ['x'],
        }),
      'PLX_GRANT_BAD_GRANT',
    );
    await expectCode(
      () =>
        grantFromJsonLd({
          '@type': 'vt-id:Grant',
          'vt-id:grantee': { '@id': BUYER },
          'vt-id:target': { '@id': SHOP },
          'vt-id:event': ['x'],
          'vt-id:expires': 'soon',
        }),
      'PLX_GRANT_BAD_GRANT',
    );
  });
});
