/**
 * The durable file store of SPERLI checkpoints (ts/sperli/checkpoint-store.ts): writes go
 * through a temporary name and a rename, leave nothing behind, can be fed in pieces or
 * thrown away, and several writers of one file (ranks sharing a directory) never collide.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileStore } from '../../ts/sperli/checkpoint-store.js';

const root = mkdtempSync(join(tmpdir(), 'plexus-ckpt-store-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `case-${++n}`);
const bytes = (k: number, len = 1000) => Uint8Array.from({ length: len }, (_, i) => (i * k) & 255);

describe('fileStore', () => {
  it('writes a file durably into directories it makes, readable by its user only, with no temporary left', async () => {
    const dir = join(fresh(), 'job', '1');
    const path = join(dir, 'rank-0.ckpt');
    await fileStore.write(path, bytes(3));
    expect(new Uint8Array(readFileSync(path))).toEqual(bytes(3));
    expect(readdirSync(dir)).toEqual(['rank-0.ckpt']);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    await fileStore.write(path, bytes(5, 10));
    expect(new Uint8Array(readFileSync(path))).toEqual(bytes(5, 10));
    expect(readdirSync(dir)).toEqual(['rank-0.ckpt']);
  });

  it('several writers of identical bytes to one name (ranks sharing a directory) leave one whole file', async () => {
    const path = join(fresh(), 'COMMIT');
    await Promise.all(Array.from({ length: 16 }, () => fileStore.write(path, bytes(7, 5000))));
    expect(new Uint8Array(readFileSync(path))).toEqual(bytes(7, 5000));
    expect(readdirSync(join(path, '..'))).toEqual(['COMMIT']);
  });

  it('a piece writer shows nothing before commit, and discard leaves nothing', async () => {
    const dir = fresh();
    const path = join(dir, 'rank-2.ckpt.buddy');
    const w = await fileStore.begin(path);
    await w.write(bytes(1, 300));
    await w.write(bytes(2, 200));
    expect(await fileStore.read(path)).toBeNull();
    await w.commit();
    expect(new Uint8Array(readFileSync(path))).toEqual(new Uint8Array([...bytes(1, 300), ...bytes(2, 200)]));
    const thrown = await fileStore.begin(join(dir, 'other'));
    await thrown.write(bytes(1));
    await thrown.discard();
    expect(readdirSync(dir)).toEqual(['rank-2.ckpt.buddy']);
  });

  it('reads a missing file as null, and a long one cut at limit + 1 bytes', async () => {
    const dir = fresh();
    expect(await fileStore.read(join(dir, 'nothing'))).toBeNull();
    await fileStore.write(join(dir, 'long'), bytes(1, 4096));
    expect((await fileStore.read(join(dir, 'long'), 100))?.length).toBe(101);
    expect((await fileStore.read(join(dir, 'long'), 4096))?.length).toBe(4096);
  });

  it('lists, removes and removes trees; missing things are fine, also when two remove at once', async () => {
    const dir = fresh();
    expect(await fileStore.list(dir)).toEqual([]);
    await fileStore.remove(join(dir, 'nothing'));
    for (const e of ['1', '2']) {
      mkdirSync(join(dir, e, 'deeper'), { recursive: true });
      writeFileSync(join(dir, e, 'rank-0.ckpt'), 'x');
      writeFileSync(join(dir, e, 'deeper', 'f'), 'y');
    }
    expect((await fileStore.list(dir)).sort()).toEqual(['1', '2']);
    await Promise.all([fileStore.removeTree(join(dir, '1')), fileStore.removeTree(join(dir, '1'))]);
    await fileStore.removeTree(join(dir, '9'));
    await fileStore.remove(join(dir, '2', 'rank-0.ckpt'));
    expect(await fileStore.list(dir)).toEqual(['2']);
    expect(await fileStore.list(join(dir, '2'))).toEqual(['deeper']);
  });

  it('a write that cannot be made is PLX_SPERLI_CHECKPOINT_IO naming the path', async () => {
    const dir = fresh();
    mkdirSync(dir);
    writeFileSync(join(dir, 'a-file'), 'x');
    const path = join(dir, 'a-file', 'rank-0.ckpt');
    await expect(fileStore.write(path, bytes(1))).rejects.toMatchObject({
      code: 'PLX_SPERLI_CHECKPOINT_IO',
      details: { op: 'write', path },
    });
  });
});
