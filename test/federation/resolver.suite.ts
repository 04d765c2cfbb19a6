/**
 * The DidResolver compliance suite: every method resolver, and the registry in front of them,
 * runs the same checks.
 */
import { describe, expect, it } from 'vitest';
import type { DidResolver } from '../../ts/federation/did/types.js';
import { expectCode } from './fixtures.js';

export interface ResolverFactory {
  setup(): Promise<{ resolver: DidResolver; valid: string[]; invalid: string[] }>;
  teardown?(): Promise<void>;
}

export function resolverSuite(name: string, f: ResolverFactory): void {
  describe(`DidResolver compliance: ${name}`, () => {
    it('resolves its DIDs to documents whose id is the DID, with absolute or relative ids that resolve', async () => {
      const { resolver, valid } = await f.setup();
      for (const did of valid) {
        const doc = await resolver.resolve(did);
        expect(doc.id).toBe(did);
        for (const vm of doc.verificationMethod ?? [])
          expect(vm.id.startsWith('#') || vm.id.startsWith(`${did}#`)).toBe(true);
      }
      await f.teardown?.();
    });

    it('refuses bad identifiers with a PLX_DID_* code', async () => {
      const { resolver, invalid } = await f.setup();
      for (const did of invalid) await expectCode(resolver.resolve(did), /^PLX_DID_/);
      await f.teardown?.();
    });
  });
}
