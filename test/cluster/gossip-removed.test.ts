/**
 * Removals in gossip membership, in process: the removed set file in a member's data directory
 * (ts/cluster/gossip/removed-file.ts, layout ts/codec/gossip-removed.ts) and a GossipLeaseLeader
 * started with the removed set its host held. The leader change over real wires is in
 * gossip-membership.test.ts; restarts of node processes in gossip-removed-procs.test.ts.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeReply, decodeRequest } from '../../ts/cluster/codec.js';
import { GossipLeaseLeader } from '../../ts/cluster/gossip/leader.js';
import { GOSSIP_REMOVED_FILE, loadGossipRemoved, saveGossipRemoved } from '../../ts/cluster/gossip/removed-file.js';
import { ManualClock } from '../../ts/core/clock.js';
import { PlexusError } from '../../ts/core/errors.js';
import { refusal } from '../helpers/refusal.js';
import { META } from './helpers.js';

const LEASE = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };

describe('the removed set file', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('is empty when missing, reads back what was saved, and refuses a damaged file or another cluster’s', async () => {
    dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-removed-'));
    expect(await loadGossipRemoved(dir, META.id)).toEqual([]);
    await saveGossipRemoved(dir, META.id, ['d', 'b']);
    expect(await loadGossipRemoved(dir, META.id)).toEqual(['b', 'd']);
    const text = await readFile(join(dir, GOSSIP_REMOVED_FILE), 'utf8');
    expect(JSON.parse(text)).toMatchObject({ format: 'plexus-gossip-removed', version: 1, cluster: META.id });
    const other = await refusal(loadGossipRemoved(dir, 'another'));
    expect(other.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
    expect(other.details.reason).toBe('cluster');
    await writeFile(join(dir, GOSSIP_REMOVED_FILE), text.slice(0, 20));
    const cut = await refusal(loadGossipRemoved(dir, META.id));
    expect(cut.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
    expect(cut.details.reason).toBe('format');
    await writeFile(join(dir, GOSSIP_REMOVED_FILE), text.replace('"version":1', '"version":2'));
    expect((await refusal(loadGossipRemoved(dir, META.id))).details.reason).toBe('version');
    // No temporary file is left beside it.
    await saveGossipRemoved(dir, META.id, ['b']);
    expect(await loadGossipRemoved(dir, META.id)).toEqual(['b']);
  });
});

describe('GossipLeaseLeader with a removed set', () => {
  it('a leader started with its host’s removed set refuses them, names them in every reply, and adds new removals', async () => {
    const clock = new ManualClock(0);
    const leader = new GossipLeaseLeader({
      meta: META,
      self: 'a',
      lease: LEASE,
      clock,
      wallClock: { now: () => 1_700_000_000_000 },
      status: (n) => (['a', 'b', 'c', 'd'].includes(n) ? 'alive' : undefined),
      address: (n) => `${n}.test:7000`,
      removed: ['c'],
      autoAssign: false,
    });
    try {
      expect(leader.isAdmitted('c')).toBe(false);
      expect(leader.isAdmitted('b')).toBe(true);
      const c = await leader.call({ type: 'join', node: 'c', address: '', meta: META });
      expect(c.ok).toBe(false);
      expect(c.ok === false && c.message).toMatch(/removed/);
      expect(c.removed).toEqual(['c']);
      // A removed member that reports leases (it held them from an earlier leader) is neither
      // joined nor given them.
      const hb = await leader.call({ type: 'heartbeat', node: 'c', held: [{ shard: 1, epoch: 5n }] });
      expect(hb.ok).toBe(false);
      expect(leader.authority.view().leases).toEqual([]);
      const b = await leader.call({ type: 'join', node: 'b', address: '', meta: META });
      expect(b.ok).toBe(true);
      expect(b.removed).toEqual(['c']);
      expect((await leader.call({ type: 'remove', node: 'b' })).removed).toEqual(['b', 'c']);
      expect(leader.isMember('b')).toBe(false);
      // Over the wire too (the reply's bytes carry the list).
      expect(decodeReply(await leader.handle('d', new TextEncoder().encode('{"type":"view"}'))).removed).toEqual([
        'b',
        'c',
      ]);
      expect(leader.removed()).toEqual(['b', 'c']);
    } finally {
      leader.close();
    }
  });

  it('a leader that did not know of a removal takes it from a member’s heartbeat, but not from a removed node or for the sender itself', async () => {
    const clock = new ManualClock(0);
    const leader = new GossipLeaseLeader({
      meta: META,
      self: 'a',
      lease: LEASE,
      clock,
      wallClock: { now: () => 1_700_000_000_000 },
      status: (n) => (['a', 'b', 'c', 'd', 'e'].includes(n) ? 'alive' : undefined),
      address: (n) => `${n}.test:7000`,
      removed: ['e'],
      autoAssign: false,
    });
    try {
      for (const n of ['b', 'c'])
        expect((await leader.call({ type: 'join', node: n, address: '', meta: META })).ok).toBe(true);
      // The removed e cannot have others removed.
      await leader.call({ type: 'heartbeat', node: 'e', removed: ['b'] });
      expect(leader.isAdmitted('b')).toBe(true);
      // b names itself and c: c is removed (and no longer a member), b is not.
      const hb = await leader.call({ type: 'heartbeat', node: 'b', removed: ['b', 'c'] });
      expect(hb.ok).toBe(true);
      expect(hb.removed).toEqual(['c', 'e']);
      expect(leader.isMember('c')).toBe(false);
      expect(leader.isAdmitted('c')).toBe(false);
      expect(leader.isMember('b')).toBe(true);
      const again = await leader.call({ type: 'join', node: 'c', address: '', meta: META });
      expect(again.ok === false && again.message).toMatch(/removed/);
    } finally {
      leader.close();
    }
  });

  it('a reply whose removed list is not node ids is refused, and so is a heartbeat’s', () => {
    expect(() => decodeRequest(new TextEncoder().encode('{"type":"heartbeat","node":"b","removed":"c"}'))).toThrow(
      PlexusError,
    );
    const bytes = new TextEncoder().encode(
      JSON.stringify({ ok: true, view: { version: 1, members: [], leases: [] }, removed: [3] }),
    );
    expect(() => decodeReply(bytes)).toThrow(PlexusError);
  });
});
