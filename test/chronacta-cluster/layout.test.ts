/** Cluster-mode data directories: the files `cluster init` writes, what reads them, what is refused. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  clusterFiles,
  DEFAULT_GROUP_COMMIT_BYTES,
  haConfigOf,
  membershipFile,
  prepareDataDir,
  writeClusterFiles,
} from '../../ts/chronacta/layout.js';
import { EventStore } from '../../ts/chronacta/store.js';

const members = [1, 2, 3].map((id) => ({
  id,
  advertise: `127.0.0.1:${7100 + id}`,
  raftAddress: `127.0.0.1:${7200 + id}`,
}));

let root = '';
afterEach(() => {
  if (root) rmSync(root, { recursive: true, force: true });
  root = '';
});

describe('cluster-mode layout', () => {
  it('reads the HA configuration of member 2 from the files written for it', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-chronacta-layout-'));
    await writeClusterFiles(root, clusterFiles('c1', members, 2));
    const prep = await prepareDataDir(root);
    expect(prep.cluster.mode).toBe('cluster');
    expect(haConfigOf(prep)).toEqual({ clusterId: 'c1', id: 2, members, groupCommitBytes: DEFAULT_GROUP_COMMIT_BYTES });
  });

  it('records group commit in the cluster.json of a new cluster, keeps it across membership changes, refuses bad values', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-chronacta-layout-'));
    const files = clusterFiles('c1', members, 1);
    expect(files.cluster.groupCommitBytes).toBe(131_072);
    // A member added later: the rewritten file keeps the setting.
    const four = { id: 4, advertise: '127.0.0.1:7104', raftAddress: '127.0.0.1:7204' };
    const next = membershipFile(files.cluster, {
      voters: [1, 2, 3],
      learners: [4],
      members: [...members, four],
      leader: 1,
    });
    expect(next?.epoch).toBe(1);
    expect(next?.groupCommitBytes).toBe(131_072);
    // A cluster.json without the field (made before it existed): group commit stays off.
    await writeClusterFiles(root, files);
    const clusterFile = join(root, 'cluster/cluster.json');
    const j = JSON.parse(readFileSync(clusterFile, 'utf8'));
    delete j.groupCommitBytes;
    writeFileSync(clusterFile, JSON.stringify(j));
    expect(haConfigOf(await prepareDataDir(root)).groupCommitBytes).toBeUndefined();
    expect(
      membershipFile((await prepareDataDir(root)).cluster, {
        voters: [1, 2, 3],
        learners: [4],
        members: [...members, four],
        leader: 1,
      }),
    ).not.toHaveProperty('groupCommitBytes');
    for (const bad of [-1, 1.5, 1_048_577, '131072', null]) {
      writeFileSync(clusterFile, JSON.stringify({ ...j, groupCommitBytes: bad }));
      await expect(prepareDataDir(root)).rejects.toMatchObject({
        code: 'PLX_CHRONACTA_BAD_DATA_DIR',
        message: expect.stringContaining('"groupCommitBytes" must be a whole number from 0 to 1048576'),
      });
    }
    writeFileSync(clusterFile, JSON.stringify({ ...j, groupCommitBytes: 0 }));
    expect(haConfigOf(await prepareDataDir(root)).groupCommitBytes).toBe(0);
  });

  it('refuses a cluster directory opened standalone, a node that is not a member, and missing Raft addresses', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-chronacta-layout-'));
    await writeClusterFiles(root, clusterFiles('c1', members, 1));
    await expect(EventStore.open({ dataDir: root })).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_BAD_DATA_DIR',
      message: expect.stringContaining('--cluster'),
    });
    const nodeFile = join(root, 'cluster/node.json');
    writeFileSync(nodeFile, JSON.stringify({ version: 1, id: '9', advertiseAddress: '' }));
    const prep = await prepareDataDir(root);
    expect(() => haConfigOf(prep)).toThrow(expect.objectContaining({ code: 'PLX_CHRONACTA_BAD_DATA_DIR' }));
    const clusterFile = join(root, 'cluster/cluster.json');
    const j = JSON.parse(readFileSync(clusterFile, 'utf8'));
    j.members = j.members.map((m: Record<string, unknown>) => ({ id: m.id, address: m.address }));
    writeFileSync(clusterFile, JSON.stringify(j));
    await expect(prepareDataDir(root)).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_BAD_DATA_DIR',
      message: expect.stringContaining('raftAddress'),
    });
    j.mode = 'sharded';
    writeFileSync(clusterFile, JSON.stringify(j));
    await expect(prepareDataDir(root)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_BAD_DATA_DIR' });
  });
});
