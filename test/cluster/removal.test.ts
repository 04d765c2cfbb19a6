import { afterEach, describe, expect, it } from 'vitest';
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import { StaticMembership } from '../../ts/cluster/static.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { until } from '../helpers/until.js';
import { nodeCreds } from '../net/helpers.js';
import { META } from './helpers.js';

describe('a removed member over the real wire', () => {
  const closers: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });

  it('is refused on its next connection to the authority, and cannot join again', async () => {
    const members = ['a', 'b'].map((id) => ({ id, address: '' }));
    const host = new AuthorityHost({ meta: META, members, tickEveryMs: 20 });
    closers.push(() => host.close());
    const addresses = new Map<string, string>();
    const wa = new Http2Wire({
      self: 'a',
      cluster: 'c1',
      tls: await nodeCreds('a'),
      resolve: (n) => addresses.get(n),
      isMember: host.isAdmitted,
      deliveryDeadlineMs: 1000,
    });
    const wb = new Http2Wire({
      self: 'b',
      cluster: 'c1',
      tls: await nodeCreds('b'),
      resolve: (n) => addresses.get(n),
      isMember: () => true,
      deliveryDeadlineMs: 1000,
    });
    closers.push(
      () => wa.close(),
      () => wb.close(),
    );
    addresses.set('a', await wa.listen());
    addresses.set('b', await wb.listen());
    wa.onCall(host.handle);
    const errors: unknown[] = [];
    const b = new StaticMembership({
      config: { meta: META, self: { id: 'b', address: addresses.get('b')! }, members, authority: 'a' },
      call: async (req) => decodeReply(await wb.call('a', encodeRequest(req))),
      lease: { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 },
      heartbeatEveryMs: 50,
      onError: (e) => errors.push(e),
    });
    closers.push(() => b.close());
    await b.join();
    await until(() => b.held().length === 8, { what: 'b to hold its leases' });
    await host.call({ type: 'remove', node: 'b' });
    await until(() => errors.length > 0, { what: 'b’s heartbeat to fail' });
    expect(wa.refusals().some((r) => r.code === 'PLX_WIRE_NOT_MEMBER' && r.peer === 'b')).toBe(true);
    wb.disconnect('a');
    let refused: unknown;
    try {
      await b.join();
    } catch (e) {
      refused = e;
    }
    expect(isPlexusError(refused)).toBe(true);
    expect(host.authority.isMember('b')).toBe(false);
    // Its leases were not handed to anyone before they expired (no other member is alive).
    expect(host.authority.view().leases.every((l) => l.owner === 'b')).toBe(true);
  });
});
