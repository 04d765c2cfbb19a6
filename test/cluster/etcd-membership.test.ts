/**
 * The Membership compliance suite (test/compliance/membership.suite.ts) and the failure-costs
 * rows (test/compliance/failure-costs.suite.ts) for static membership
 * over the etcd lease authority on a real 3-member etcd (test/helpers/etcd.ts), every node with
 * its own EtcdAuthority on one key prefix, as launched nodes with `membership.kind` `etcd` run.
 * Skipped when no `etcd` binary is on PATH.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { failureCostsSuite } from '../compliance/failure-costs.suite.js';
import { membershipSuite } from '../compliance/membership.suite.js';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { etcdMembershipFactory } from './etcd-membership.js';

describe.skipIf(!etcdAvailable)('Membership on a real etcd (skipped: no etcd binary on PATH)', () => {
  let etcd: EtcdCluster | undefined;
  beforeAll(async () => {
    etcd = await startEtcd();
  }, 60_000);
  afterAll(async () => {
    await etcd?.stop();
  });

  const factory = etcdMembershipFactory(() => (etcd as EtcdCluster).clientUrls);
  membershipSuite('StaticMembership + EtcdAuthority', factory);
  failureCostsSuite('StaticMembership + EtcdAuthority', factory);
});
