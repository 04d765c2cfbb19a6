/**
 * The data of a Raft `conf-change` entry (ts/codec/raft-confchange.ts): version 2 written
 * (a 0x82 marker, the kind, the node id as a little-endian u64), version 1 still read (the
 * kind, then a big-endian u64). A data directory whose conf-change entries were written by
 * version 1 (test/fixtures/raft/journal-confchange-v1, made by
 * test/fixtures/raft/write-journal-confchange-v1.mjs) opens with the same configuration.
 */
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CONF_CHANGE_BYTES,
  CONF_CHANGE_MARKER,
  CONF_CHANGE_V1_BYTES,
  type ConfChange,
  confChangeVersion,
  decodeConfChange,
  encodeConfChange,
} from '../../ts/codec/raft-confchange.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import { FileRaftStorage } from '../../ts/raft-io/file-storage.js';

const FIXTURE = join(import.meta.dirname, '../fixtures/raft/journal-confchange-v1');
const dirs: string[] = [];
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop()!, { recursive: true, force: true });
});
async function copyOfFixture(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-raft-cc-v1-'));
  dirs.push(d);
  await cp(FIXTURE, d, { recursive: true });
  return d;
}

const codeOf = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    return isPlexusError(e) ? e.code : `not coded: ${String(e)}`;
  }
  return 'no refusal';
};

/** The version-1 layout, written by hand: the kind, then the id as a big-endian u64. */
function v1(kind: number, id: bigint): Uint8Array {
  const b = new Uint8Array(9);
  b[0] = kind;
  new DataView(b.buffer).setBigUint64(1, id, false);
  return b;
}

const BIG = 2 ** 40 + 5;

describe('conf-change bytes, version 2', () => {
  it('has the documented layout', () => {
    expect([...encodeConfChange({ type: 'add-voter', nodeId: 7 })]).toEqual([0x82, 1, 7, 0, 0, 0, 0, 0, 0, 0]);
    expect([...encodeConfChange({ type: 'add-learner', nodeId: 0x0102 })]).toEqual([
      0x82, 2, 0x02, 0x01, 0, 0, 0, 0, 0, 0,
    ]);
    expect([...encodeConfChange({ type: 'remove-node', nodeId: Number.MAX_SAFE_INTEGER })]).toEqual([
      0x82, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0,
    ]);
    expect(CONF_CHANGE_BYTES).toBe(10);
    expect(CONF_CHANGE_MARKER).toBe(0x82);
  });

  it('round-trips every type and id', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('add-voter', 'add-learner', 'remove-node' as const),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        (type, nodeId) => {
          const bytes = encodeConfChange({ type, nodeId });
          expect(bytes.length).toBe(CONF_CHANGE_BYTES);
          expect(confChangeVersion(bytes)).toBe(2);
          expect(decodeConfChange(bytes)).toEqual({ type, nodeId });
        },
      ),
    );
  });

  it('refuses ids and types it cannot write', () => {
    expect(codeOf(() => encodeConfChange({ type: 'add-voter', nodeId: 0 }))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
    expect(codeOf(() => encodeConfChange({ type: 'add-voter', nodeId: 2 ** 53 }))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
    expect(codeOf(() => encodeConfChange({ type: 'promote' as ConfChange['type'], nodeId: 1 }))).toBe(
      'PLX_RAFT_BAD_CONF_CHANGE',
    );
  });

  it('refuses damaged bytes with PLX_RAFT_BAD_CONF_CHANGE', () => {
    const good = encodeConfChange({ type: 'add-voter', nodeId: 9 });
    const cases: Uint8Array[] = [
      good.subarray(0, 9), // cut short: 9 bytes starting with the marker
      Uint8Array.of(...good, 0), // a byte too many
      Uint8Array.of(0x82, 4, 9, 0, 0, 0, 0, 0, 0, 0), // unknown kind
      Uint8Array.of(0x82, 0, 9, 0, 0, 0, 0, 0, 0, 0), // kind 0
      Uint8Array.of(0x82, 1, 0, 0, 0, 0, 0, 0, 0, 0), // id 0
      Uint8Array.of(0x82, 1, 0, 0, 0, 0, 0, 0, 0x20, 0), // id 2^53
      Uint8Array.of(0x81, 1, 9, 0, 0, 0, 0, 0, 0, 0), // another marker
      Uint8Array.of(1, 1, 9, 0, 0, 0, 0, 0, 0, 0), // a version-1 kind, 10 bytes
      new Uint8Array(0),
    ];
    for (const b of cases)
      expect(
        codeOf(() => decodeConfChange(b)),
        `${[...b]}`,
      ).toBe('PLX_RAFT_BAD_CONF_CHANGE');
  });

  it('accepts only the two layouts among random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 20 }), (bytes) => {
        let cc: ConfChange;
        try {
          cc = decodeConfChange(bytes);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_RAFT_BAD_CONF_CHANGE')).toBe(true);
          return;
        }
        const isV2 = bytes.length === 10 && bytes[0] === 0x82;
        const isV1 = bytes.length === 9 && bytes[0]! >= 1 && bytes[0]! <= 3;
        expect(isV1 || isV2).toBe(true);
        expect(cc.nodeId).toBeGreaterThan(0);
      }),
    );
    // Random 10-byte arrays starting with the marker and a kind: the id is read little-endian.
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3 }), fc.uint8Array({ minLength: 8, maxLength: 8 }), (kind, id) => {
        const bytes = Uint8Array.of(0x82, kind, ...id);
        const n = new DataView(id.buffer).getBigUint64(0, true);
        if (n === 0n || n > BigInt(Number.MAX_SAFE_INTEGER)) {
          expect(codeOf(() => decodeConfChange(bytes))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
        } else expect(decodeConfChange(bytes).nodeId).toBe(Number(n));
      }),
    );
  });
});

describe('conf-change bytes, version 1 (read only)', () => {
  it('decodes the older 9-byte big-endian layout', () => {
    expect(CONF_CHANGE_V1_BYTES).toBe(9);
    expect(decodeConfChange(Uint8Array.of(1, 0, 0, 0, 0, 0, 0, 0, 7))).toEqual({ type: 'add-voter', nodeId: 7 });
    expect(decodeConfChange(Uint8Array.of(2, 0, 0, 0, 0, 0, 0, 0x01, 0x02))).toEqual({
      type: 'add-learner',
      nodeId: 0x0102,
    });
    expect(decodeConfChange(v1(3, BigInt(BIG)))).toEqual({ type: 'remove-node', nodeId: BIG });
    expect(confChangeVersion(v1(3, 5n))).toBe(1);
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        (kind, nodeId) => {
          const cc = decodeConfChange(v1(kind, BigInt(nodeId)));
          expect(cc.nodeId).toBe(nodeId);
          expect(encodeConfChange(cc)[1]).toBe(kind);
        },
      ),
    );
  });

  it('refuses version-1 bytes with an id of 0, above 2^53 - 1, or an unknown kind', () => {
    expect(codeOf(() => decodeConfChange(v1(1, 0n)))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
    expect(codeOf(() => decodeConfChange(v1(1, 2n ** 53n)))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
    expect(codeOf(() => decodeConfChange(v1(4, 1n)))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
    expect(codeOf(() => decodeConfChange(v1(0, 1n)))).toBe('PLX_RAFT_BAD_CONF_CHANGE');
  });
});

describe('a Raft data directory with version-1 conf-change entries', () => {
  const expected = [
    { type: 'add-learner', nodeId: 4 },
    { type: 'add-voter', nodeId: 4 },
    { type: 'remove-node', nodeId: 2 },
    { type: 'add-learner', nodeId: BIG },
  ];

  it('reads them back, and a node opened on it has the configuration they make', async () => {
    const s = await FileRaftStorage.open(await copyOfFixture());
    const ccs = s.entries(2, 8).filter((e) => e.type === 'conf-change');
    expect(ccs.map((e) => e.index)).toEqual([3, 4, 5, 6]);
    expect(ccs.map((e) => confChangeVersion(e.data))).toEqual([1, 1, 1, 1]);
    expect(ccs.map((e) => decodeConfChange(e.data))).toEqual(expected);
    const node = new RaftNode({ id: 1, storage: s, random: () => 0 });
    expect(node.status().commit).toBe(7);
    expect(node.status().confState).toEqual({ voters: [1, 3, 4], learners: [BIG] });
    await s.close();
  });

  it('takes version-2 conf changes after them, and the mixed log reads back', async () => {
    const dir = await copyOfFixture();
    const s = await FileRaftStorage.open(dir);
    s.append([
      { index: 8, term: 2, type: 'conf-change', data: encodeConfChange({ type: 'remove-node', nodeId: BIG }) },
    ]);
    s.setHardState({ term: 2, vote: 1, commit: 8 });
    await s.sync();
    await s.close();

    const r = await FileRaftStorage.open(dir);
    const ccs = r.entries(2, 9).filter((e) => e.type === 'conf-change');
    expect(ccs.map((e) => confChangeVersion(e.data))).toEqual([1, 1, 1, 1, 2]);
    expect(ccs.map((e) => decodeConfChange(e.data))).toEqual([...expected, { type: 'remove-node', nodeId: BIG }]);
    const again = new RaftNode({ id: 1, storage: r, random: () => 0 });
    expect(again.status().confState).toEqual({ voters: [1, 3, 4], learners: [] });
    await r.close();
  });

  it('a leader writes version-2 conf changes through proposeConfChange', async () => {
    const d = await mkdtemp(join(tmpdir(), 'plexus-raft-cc-v2-'));
    dirs.push(d);
    const s = await FileRaftStorage.bootstrap(d, { voters: [1], learners: [] });
    const n = new RaftNode({ id: 1, storage: s, random: () => 0 });
    n.campaign();
    const drain = async () => {
      while (n.hasReady()) {
        const rd = n.ready();
        if (rd.hardState) s.setHardState(rd.hardState);
        s.append(rd.entries);
        await s.sync();
        n.advance();
      }
    };
    await drain();
    n.proposeConfChange({ type: 'add-learner', nodeId: 9 });
    await drain();
    expect(n.status().confState).toEqual({ voters: [1], learners: [9] });
    await s.close();
    const r = await FileRaftStorage.open(d);
    const ccs = r.entries(r.firstIndex(), r.lastIndex() + 1).filter((e) => e.type === 'conf-change');
    expect(ccs.map((e) => [...e.data])).toEqual([[0x82, 2, 9, 0, 0, 0, 0, 0, 0, 0]]);
    await r.close();
  });
});
