/**
 * The in-memory lease authority (MemoryAuthority driven by AuthorityHost) through the
 * LeaseAuthority compliance suite, on an injected clock: once held only in memory, once with
 * its state in a real `authority.state` file (fsynced), restarted by closing the host and
 * opening a new one on the same directory.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuthorityHost, type AuthorityHostOptions } from '../../ts/cluster/host.js';
import {
  LEASE_AUTHORITY_SUITE,
  type LeaseAuthorityHarness,
  leaseAuthoritySuite,
} from '../compliance/lease-authority.suite.js';

const options = (clock: { now: number }): AuthorityHostOptions => ({
  meta: LEASE_AUTHORITY_SUITE.meta,
  members: LEASE_AUTHORITY_SUITE.members,
  lease: LEASE_AUTHORITY_SUITE.lease,
  detector: LEASE_AUTHORITY_SUITE.detector,
  autoAssign: LEASE_AUTHORITY_SUITE.autoAssign,
  clock: { now: () => clock.now },
  // Time moves only when the suite calls: the periodic tick never fires during a test.
  tickEveryMs: 1_000_000,
});

leaseAuthoritySuite('MemoryAuthority in AuthorityHost (memory only)', {
  setup: async () => {
    const clock = { now: 0 };
    return { clock, authority: new AuthorityHost(options(clock)) };
  },
  teardown: async (h) => h.authority.close(),
});

interface Persistent extends LeaseAuthorityHarness {
  readonly dir: string;
}

leaseAuthoritySuite('MemoryAuthority in AuthorityHost (authority.state)', {
  setup: async (): Promise<Persistent> => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-lease-authority-'));
    const clock = { now: 0 };
    const h: Persistent = {
      dir,
      clock,
      authority: await AuthorityHost.open({ ...options(clock), stateDir: dir }),
      restart: async () => {
        h.authority.close();
        h.authority = await AuthorityHost.open({ ...options(clock), stateDir: dir });
      },
    };
    return h;
  },
  teardown: async (h) => {
    h.authority.close();
    await rm((h as Persistent).dir, { recursive: true, force: true });
  },
});
