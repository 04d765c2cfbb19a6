/**
 * The compliance suite of the DidResolver seam (ts/federation/did/types.ts): every method
 * resolver (did:key, did:peer:2, did:web) and the registry in front of them runs the same
 * checks. An implementation runs it from its own test file with a factory whose `setup` gives
 * the resolver with DIDs it must resolve and identifiers it must refuse, and whose `teardown`
 * releases what `setup` started (a document server, ...):
 *
 * ```ts
 * resolverSuite('did:key', {
 *   setup: async () => ({ resolver: new DidKeyResolver(), valid: [createDidKey().did], invalid: ['did:key:abc'] }),
 *   teardown: async () => {},
 * });
 * ```
 */
import { describe, expect, it } from 'vitest';
import type { DidResolver } from '../../ts/federation/did/types.js';
import { refusal } from '../helpers/refusal.js';
import { eachTest, type SuiteFactory } from './_kit.js';

export interface ResolverHarness {
  readonly resolver: DidResolver;
  /** DIDs the resolver resolves. */
  readonly valid: readonly string[];
  /** Identifiers the resolver refuses. */
  readonly invalid: readonly string[];
}

export function resolverSuite<T extends ResolverHarness>(name: string, factory: SuiteFactory<T>): void {
  describe(`DidResolver compliance: ${name}`, () => {
    const subject = eachTest(factory);

    it('resolves its DIDs to documents whose id is the DID, with absolute or relative ids that resolve', async () => {
      const { resolver, valid } = subject();
      for (const did of valid) {
        const doc = await resolver.resolve(did);
        expect(doc.id).toBe(did);
        for (const vm of doc.verificationMethod ?? [])
          expect(vm.id.startsWith('#') || vm.id.startsWith(`${did}#`)).toBe(true);
      }
    });

    it('refuses bad identifiers with a PLX_DID_* code', async () => {
      const { resolver, invalid } = subject();
      for (const did of invalid) expect((await refusal(resolver.resolve(did))).code).toMatch(/^PLX_DID_/);
    });
  });
}
