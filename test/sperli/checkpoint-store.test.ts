/**
 * The durable file store of SPERLI checkpoints (ts/sperli/checkpoint-store.ts): writes go
 * through a temporary name and a rename, leave nothing behind, can be fed in pieces or
 * thrown away, and several writers of one file (ranks sharing a directory) never collide.
 */
import {
  closeSync,
  constants,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileStore } from '../../ts/sperli/checkpoint-store.js';

const root = mkdtempSync(join(tmpdir(), 'plexus-ckpt-store-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `case-${++n}`);
const bytes = (k: number, len = 1000) => Uint8Array.from({ length: len }, (_, i) => (i * k) & 255);
/** `len` bytes that differ from one 4 KiB block to the next (a misplaced block shows). */
function big(k: number, len: number): Buffer {
  const out = Buffer.allocUnsafe(len);
  for (let i = 0; i < len; i++) out[i] = (i * k + (i >>> 12)) & 255;
  return out;
}

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

  it('writes large files of any length past the page cache in pieces of any size, byte for byte', async () => {
    const dir = fresh();
    const same = (path: string, want: Uint8Array) => expect(readFileSync(path).equals(want)).toBe(true);
    // A header and a state, as a rank file is written: 80 + 9 MiB + 123 bytes.
    const head = big(3, 80);
    const state = big(5, 9 * 2 ** 20 + 123);
    const whole = Buffer.concat([head, state]);
    await fileStore.writeParts?.(join(dir, 'rank-0.ckpt'), [head, state]);
    same(join(dir, 'rank-0.ckpt'), whole);
    // A buddy copy fed in odd pieces, some joined in one writev, crossing every slot edge.
    const w = await fileStore.begin(join(dir, 'rank-0.ckpt.buddy'));
    const cuts = [0, 1, 4095, 4097, 2 ** 20, 4 * 2 ** 20 - 7, 4 * 2 ** 20 + 1, 8 * 2 ** 20, whole.length];
    for (let i = 0; i + 1 < cuts.length; i++) {
      const piece = whole.subarray(cuts[i], cuts[i + 1]);
      if (i % 2 === 0) await w.write(piece);
      else await w.writev?.([piece.subarray(0, 100), new Uint8Array(0), piece.subarray(100)]);
    }
    await w.commit();
    same(join(dir, 'rank-0.ckpt.buddy'), whole);
    // Exactly one 4 MiB piece, and an empty file.
    await fileStore.write(join(dir, 'even'), big(7, 4 * 2 ** 20));
    same(join(dir, 'even'), big(7, 4 * 2 ** 20));
    const empty = await fileStore.begin(join(dir, 'empty'));
    await empty.commit();
    expect(readFileSync(join(dir, 'empty')).length).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(['empty', 'even', 'rank-0.ckpt', 'rank-0.ckpt.buddy']);
  });

  it('copy takes each piece before it returns (the caller reuses its buffer), byte for byte, while writes run behind', async () => {
    const dir = fresh();
    mkdirSync(dir);
    const whole = big(11, 13 * 2 ** 20 + 4321);
    // Two writers at once, fed from one buffer that is overwritten after every copy:
    // pieces of a read buffer's size, odd pieces crossing slot edges, whole 1 MiB chunks.
    const paths = [join(dir, 'a.buddy'), join(dir, 'b.buddy')];
    const writers = await Promise.all(paths.map((p) => fileStore.begin(p)));
    const reused = new Uint8Array(2 ** 20 + 1);
    const sizes = [16384, 16384, 7, 2 ** 20, 4093, 2 ** 20 + 1, 1];
    for (const w of writers) {
      let k = 0;
      for (let at = 0; at < whole.length; k++) {
        const len = Math.min(sizes[k % sizes.length] as number, whole.length - at);
        reused.set(whole.subarray(at, at + len));
        w.copy?.(reused.subarray(0, len));
        reused.fill(0xee);
        at += len;
        // Now and then the event loop turns, so that writes end between copies.
        if (k % 50 === 0) await new Promise((r) => setImmediate(r));
      }
    }
    for (const w of writers) expect(typeof w.copy).toBe('function');
    await Promise.all(writers.map((w) => w.commit()));
    for (const p of paths) expect(readFileSync(p).equals(whole)).toBe(true);
    expect(readdirSync(dir).sort()).toEqual(['a.buddy', 'b.buddy']);
  });

  it('two writers at a time go past the page cache (O_DIRECT where the file system takes it), the others through it', async () => {
    const dir = fresh();
    mkdirSync(dir);
    // Whether this file system takes O_DIRECT at all (Linux only).
    let direct = false;
    if (constants.O_DIRECT !== undefined) {
      try {
        closeSync(openSync(join(dir, 'probe'), constants.O_WRONLY | constants.O_CREAT | constants.O_DIRECT));
        direct = true;
      } catch {
        direct = false;
      }
      rmSync(join(dir, 'probe'), { force: true });
    }
    const writers = await Promise.all([1, 2, 3].map((k) => fileStore.begin(join(dir, `f${k}`))));
    const flags = (k: number): number | undefined => {
      for (const fd of readdirSync('/proc/self/fd')) {
        let target = '';
        try {
          target = readlinkSync(`/proc/self/fd/${fd}`);
        } catch {
          continue;
        }
        if (target.startsWith(join(dir, `.f${k}.`))) {
          const line = /flags:\s+([0-7]+)/.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
          return Number.parseInt(line?.[1] ?? '0', 8);
        }
      }
      return undefined;
    };
    if (process.platform === 'linux') {
      const got = [1, 2, 3].map((k) => ((flags(k) ?? -1) & (constants.O_DIRECT ?? 0)) !== 0);
      expect(got).toEqual(direct ? [true, true, false] : [false, false, false]);
    }
    await Promise.all(writers.map((w, i) => w.write(big(i + 1, 5 * 2 ** 20 + i))));
    await writers[0]?.discard();
    await writers[1]?.commit();
    await writers[2]?.commit();
    // The slots came back: the next two writers get them again.
    const again = await Promise.all([4, 5].map((k) => fileStore.begin(join(dir, `f${k}`))));
    if (process.platform === 'linux') {
      expect([4, 5].map((k) => ((flags(k) ?? -1) & (constants.O_DIRECT ?? 0)) !== 0)).toEqual([direct, direct]);
    }
    for (const w of again) await w.discard();
    expect(readdirSync(dir).sort()).toEqual(['f2', 'f3']);
    expect(readFileSync(join(dir, 'f2')).equals(big(2, 5 * 2 ** 20 + 1))).toBe(true);
    expect(readFileSync(join(dir, 'f3')).equals(big(3, 5 * 2 ** 20 + 2))).toBe(true);
    unlinkSync(join(dir, 'f2'));
  });
});
