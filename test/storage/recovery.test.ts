/**
 * Recovery on open and verifyLog, on real files damaged on purpose: torn tails, incomplete
 * last batches, garbage, damage before the tail, torn new segments, lost indexes, the lock.
 */
import { appendFile, mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { crc32c } from '../../ts/core/index.js';
import { type FileLogOptions, openLog } from '../../ts/storage/file-log.js';
import { verifyLog } from '../../ts/storage/verify.js';
import { ROOT } from '../helpers/paths.js';
import { startNode } from '../helpers/processes.js';
import { refusal } from '../helpers/refusal.js';

const WAIT_FOREVER = join(ROOT, 'test/fixtures/wait-forever.mjs');

const SEG = '00000000000000000001.seg';
const HEADER = 32;
const REC = 48;

interface Logged {
  readonly message: string;
  readonly details: Record<string, unknown> | undefined;
}

let dir: string;
let warnings: Logged[];
let infos: Logged[];
const logger = {
  warn: (message: string, details?: Record<string, unknown>) => warnings.push({ message, details }),
  info: (message: string, details?: Record<string, unknown>) => infos.push({ message, details }),
};

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-recovery-'));
  warnings = [];
  infos = [];
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const bytes = (n: number, fill: number) => new Uint8Array(n).fill(fill);
const open = (opts: FileLogOptions = {}) => openLog(dir, { logger, ...opts });

/** Writes batches of records of the given payload sizes; returns each record's offset in the first segment. */
async function write(batches: number[][], opts: FileLogOptions = {}): Promise<number[]> {
  const log = await open(opts);
  const offsets: number[] = [];
  let off = HEADER;
  let fill = 1;
  for (const sizes of batches) {
    await log.append(sizes.map((n) => bytes(n, fill++)));
    for (const n of sizes) {
      offsets.push(off);
      off += REC + n;
    }
  }
  await log.close();
  return offsets;
}

async function flipByte(file: string, offset: number): Promise<void> {
  const path = join(dir, file);
  const buf = await readFile(path);
  buf[offset] = (buf[offset] as number) ^ 0x40;
  await writeFile(path, buf);
}

describe('the file format', () => {
  it('lays out segment header and records as docs/storage.md says', async () => {
    const log = await open();
    const batchId = Uint8Array.from({ length: 16 }, (_, i) => i + 1);
    await log.append([new TextEncoder().encode('hello'), new Uint8Array(0)], { batchId, epoch: 7n });
    await log.close();
    expect((await readdir(dir)).sort()).toEqual([SEG]);
    const f = await readFile(join(dir, SEG));
    // Segment header: magic, base position, 16 reserved bytes, CRC-32C of bytes 0..27.
    expect(f.subarray(0, 8).toString('latin1')).toBe('PLXSEG01');
    expect(f.readBigUInt64LE(8)).toBe(1n);
    expect(f.subarray(16, 28).every((x) => x === 0)).toBe(true);
    expect(f.readUInt32LE(28)).toBe(crc32c(f.subarray(0, 28)));
    // Record: length, CRC-32C, position, epoch, batch id, index in batch, flags, reserved, payload.
    const r = HEADER;
    expect(f.readUInt32LE(r)).toBe(5);
    expect(f.readBigUInt64LE(r + 8)).toBe(1n);
    expect(f.readBigUInt64LE(r + 16)).toBe(7n);
    expect(new Uint8Array(f.subarray(r + 24, r + 40))).toEqual(batchId);
    expect(f.readUInt32LE(r + 40)).toBe(0);
    expect(f.readUInt16LE(r + 44)).toBe(0); // not the end of its batch
    expect(f.readUInt16LE(r + 46)).toBe(0);
    expect(f.subarray(r + 48, r + 53).toString()).toBe('hello');
    const crc = crc32c(f.subarray(r + 8, r + 53), crc32c(f.subarray(r, r + 4)));
    expect(f.readUInt32LE(r + 4)).toBe(crc);
    const r2 = r + 53;
    expect(f.readUInt32LE(r2)).toBe(0);
    expect(f.readBigUInt64LE(r2 + 8)).toBe(2n);
    expect(f.readUInt32LE(r2 + 40)).toBe(1);
    expect(f.readUInt16LE(r2 + 44)).toBe(1); // batch end
    expect(f.length).toBe(r2 + 48);
  });

  it('names segments by their first position and writes an index for each closed one', async () => {
    const log = await open({ segmentBytes: 250 });
    for (let i = 0; i < 6; i++) await log.append([bytes(60, i)]);
    await log.close();
    const names = (await readdir(dir)).sort();
    expect(names).toContain(SEG);
    expect(names).toContain('00000000000000000001.idx');
    expect(names.filter((n) => n.endsWith('.seg'))).toEqual([
      '00000000000000000001.seg',
      '00000000000000000003.seg',
      '00000000000000000005.seg',
    ]);
    // The last segment has no index file: it is always scanned on open.
    expect(names).not.toContain('00000000000000000005.idx');
    const idx = await readFile(join(dir, '00000000000000000003.idx'));
    expect(idx.subarray(0, 8).toString('latin1')).toBe('PLXIDX01');
    expect(idx.readBigUInt64LE(8)).toBe(3n); // base
    expect(idx.readBigUInt64LE(16)).toBe(2n); // records
    expect(idx.readBigUInt64LE(24)).toBe(BigInt(HEADER + 2 * (REC + 60))); // end
    expect(idx.readUInt32LE(40)).toBe(16); // indexEvery
    expect(idx.readUInt32LE(44)).toBe(1); // entries
    expect(idx.readUInt32LE(48)).toBe(HEADER);
    expect(idx.readUInt32LE(52)).toBe(crc32c(idx.subarray(0, 52)));
  });
});

describe('recovery of a torn tail', () => {
  it('cuts a record torn in its payload, logs it, and keeps every earlier batch', async () => {
    const offs = await write([[10], [20, 30], [40]]);
    const size = (await stat(join(dir, SEG))).size;
    await truncate(join(dir, SEG), size - 15);
    const report = await verifyLog(dir);
    expect(report.openable).toBe(true);
    expect(report.problems).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[3], severity: 'repairable', reason: 'torn-tail' }),
    ]);
    expect(report.records).toBe(3);
    const log = await open();
    expect(log.last).toBe(3n);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.details).toMatchObject({ file: SEG, offset: offs[3], reason: 'torn-tail' });
    expect((await stat(join(dir, SEG))).size).toBe(offs[3]);
    expect((await log.read(1n)).map((r) => r.payload.length)).toEqual([10, 20, 30]);
    expect((await log.append([bytes(5, 9)])).first).toBe(4n);
    await log.close();
    expect((await verifyLog(dir)).ok).toBe(true);
  });

  it('cuts a header shorter than a record header', async () => {
    const offs = await write([[10], [10]]);
    await truncate(join(dir, SEG), (offs[1] as number) + 20);
    const log = await open();
    expect(log.last).toBe(1n);
    expect(warnings[0]?.details).toMatchObject({ offset: offs[1], reason: 'torn-tail' });
    await log.close();
  });

  it('cuts garbage after the last record', async () => {
    await write([[10], [10, 10]]);
    const size = (await stat(join(dir, SEG))).size;
    const garbage = Uint8Array.from({ length: 300 }, (_, i) => (i * 97 + 13) & 0xff);
    await appendFile(join(dir, SEG), garbage);
    const log = await open();
    expect(log.last).toBe(3n);
    expect(warnings[0]?.details).toMatchObject({ file: SEG, offset: size, reason: 'torn-tail' });
    expect((await stat(join(dir, SEG))).size).toBe(size);
    await log.close();
  });

  it('cuts zeros after the last record (a file extended but never written)', async () => {
    await write([[10]]);
    const size = (await stat(join(dir, SEG))).size;
    await appendFile(join(dir, SEG), new Uint8Array(4096));
    const log = await open();
    expect(log.last).toBe(1n);
    expect(warnings[0]?.details).toMatchObject({ offset: size, reason: 'torn-tail' });
    await log.close();
  });

  it('drops an incomplete last batch whole, even when every record of it is intact', async () => {
    const offs = await write([[10], [11, 12, 13]]);
    // Cut after the second record of the three-record batch: both survivors have good CRCs.
    await truncate(join(dir, SEG), offs[3] as number);
    const report = await verifyLog(dir);
    expect(report.problems.map((p) => [p.reason, p.offset])).toEqual([['incomplete-batch', offs[1]]]);
    expect(report.records).toBe(1);
    const log = await open();
    expect(log.last).toBe(1n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['incomplete-batch']);
    expect((await stat(join(dir, SEG))).size).toBe(offs[1]);
    await log.close();
  });

  it('drops the torn rest of a batch together with its intact beginning', async () => {
    const offs = await write([[10], [11, 12, 13]]);
    await truncate(join(dir, SEG), (offs[3] as number) + 30);
    const log = await open();
    expect(log.last).toBe(1n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['torn-tail', 'incomplete-batch']);
    await log.close();
  });

  it('keeps a batch cut by truncateAfter whole across a later torn batch', async () => {
    let log = await open();
    await log.append([bytes(10, 1), bytes(10, 2), bytes(10, 3)]);
    await log.truncateAfter(2n); // the batch now ends at 2 without its end flag
    await log.append([bytes(10, 4), bytes(10, 5)]);
    await log.close();
    const size = (await stat(join(dir, SEG))).size;
    await truncate(join(dir, SEG), size - REC - 10); // the second batch loses its last record
    log = await open();
    expect(log.last).toBe(2n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['incomplete-batch']);
    await log.close();
  });

  it('removes a segment whose header was torn as it was made', async () => {
    const log = await open({ segmentBytes: 250 });
    for (let i = 0; i < 4; i++) await log.append([bytes(60, i)]);
    await log.close();
    await writeFile(join(dir, '00000000000000000005.seg'), Buffer.from('PLXSEG'));
    const log2 = await open({ segmentBytes: 250 });
    expect(log2.last).toBe(4n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['torn-segment-header']);
    expect((await readdir(dir)).filter((n) => n.endsWith('.seg'))).toHaveLength(2);
    expect((await log2.append([bytes(1, 1)])).first).toBe(5n);
    await log2.close();
  });
});

describe('a damaged last record (whole in the file, CRC wrong)', () => {
  // A group is acknowledged once its O_DSYNC write returned, so a record that lies whole in
  // the file was written whole and may have been acknowledged: a wrong CRC there is damage,
  // not a torn write, and open refuses it unless asked to cut it.
  it('refuses to open, naming the file and the offset, and verifyLog calls it fatal', async () => {
    const offs = await write([[10], [20], [30]]);
    const size = (await stat(join(dir, SEG))).size;
    await flipByte(SEG, (offs[2] as number) + REC + 7);
    const e = await refusal(open());
    expect(e.code).toBe('PLX_STORAGE_CORRUPT');
    expect(e.details).toMatchObject({ file: SEG, offset: offs[2], reason: 'damaged-tail', dir });
    expect(e.message).toContain(join(dir, SEG));
    expect(e.message).toContain(`offset ${offs[2]}`);
    expect(e.message).toContain('truncateDamagedTail');
    // Nothing was cut, nothing was logged as repaired, and the lock is released.
    expect((await stat(join(dir, SEG))).size).toBe(size);
    expect(warnings).toEqual([]);
    expect((await readdir(dir)).includes('LOCK')).toBe(false);
    const report = await verifyLog(dir);
    expect(report.ok).toBe(false);
    expect(report.openable).toBe(false);
    expect(report.problems).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[2], severity: 'fatal', reason: 'damaged-tail' }),
    ]);
  });

  it('refuses a flipped bit in the header of the last record too (position, epoch, flags are under the CRC)', async () => {
    const offs = await write([[10], [20]]);
    await flipByte(SEG, (offs[1] as number) + 8); // the position field
    const e = await refusal(open());
    expect(e.details).toMatchObject({ file: SEG, offset: offs[1], reason: 'damaged-tail' });
  });

  it('with truncateDamagedTail cuts it, reports what it dropped, and takes appends after it', async () => {
    const offs = await write([[10], [20], [30]]);
    await flipByte(SEG, (offs[2] as number) + REC + 7);
    const log = await open({ truncateDamagedTail: true });
    expect(log.last).toBe(2n);
    expect(warnings.map((w) => w.details)).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[2], reason: 'damaged-tail' }),
    ]);
    expect(warnings[0]?.message).toContain('position 3');
    expect(log.recovery).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[2], severity: 'repairable', reason: 'damaged-tail' }),
    ]);
    expect((await stat(join(dir, SEG))).size).toBe(offs[2]);
    expect((await log.read(1n)).map((r) => r.payload.length)).toEqual([10, 20]);
    expect((await log.append([bytes(5, 9)])).first).toBe(3n);
    await log.close();
    expect((await verifyLog(dir)).ok).toBe(true);
  });

  it('with truncateDamagedTail drops the whole batch the damaged record ends', async () => {
    const offs = await write([[10], [11, 12, 13]]);
    await flipByte(SEG, (offs[3] as number) + REC + 1);
    const log = await open({ truncateDamagedTail: true });
    expect(log.last).toBe(1n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['damaged-tail', 'incomplete-batch']);
    expect(log.recovery.map((p) => p.reason)).toEqual(['damaged-tail', 'incomplete-batch']);
    await log.close();
  });

  it('still cuts a record cut short by the end of the file, with a warning, without the option', async () => {
    const offs = await write([[10], [20], [30]]);
    const size = (await stat(join(dir, SEG))).size;
    await truncate(join(dir, SEG), size - 1);
    const log = await open();
    expect(log.last).toBe(2n);
    expect(warnings.map((w) => w.details)).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[2], reason: 'torn-tail' }),
    ]);
    expect(log.recovery.map((p) => p.reason)).toEqual(['torn-tail']);
    await log.close();
  });

  it('refuses a bad truncateDamagedTail option', async () => {
    const e = await refusal(open({ truncateDamagedTail: 'yes' as unknown as boolean }));
    expect(e.code).toBe('PLX_STORAGE_BAD_INPUT');
  });
});

describe('damage before the tail', () => {
  it('refuses a flipped payload byte of an earlier record, naming the file and offset', async () => {
    const offs = await write([[10], [20], [30], [40]]);
    await flipByte(SEG, (offs[1] as number) + REC + 3);
    const e = await refusal(open());
    expect(e.code).toBe('PLX_STORAGE_CORRUPT');
    expect(e.details).toMatchObject({ file: SEG, offset: offs[1], reason: 'bad-crc' });
    expect(e.message).toContain(SEG);
    expect(e.message).toContain(`offset ${offs[1]}`);
    const report = await verifyLog(dir);
    expect(report.openable).toBe(false);
    expect(report.problems).toEqual([
      expect.objectContaining({ file: SEG, offset: offs[1], severity: 'fatal', reason: 'bad-crc' }),
    ]);
    // The refusal released the directory: nothing half-open is left behind.
    expect((await readdir(dir)).includes('LOCK')).toBe(false);
  });

  it('refuses a damaged length field of an earlier record', async () => {
    const offs = await write([[10], [20], [30]]);
    await flipByte(SEG, (offs[0] as number) + 1);
    const e = await refusal(open());
    expect(e.details).toMatchObject({ file: SEG, offset: offs[0] });
  });

  it('refuses damage in the last record of a closed segment when scanning all segments, and at read otherwise', async () => {
    const log = await open({ segmentBytes: 250 });
    for (let i = 0; i < 6; i++) await log.append([bytes(60, i)]);
    await log.close();
    const second = HEADER + REC + 60;
    await flipByte(SEG, second + REC + 5);
    const e = await refusal(open({ segmentBytes: 250, scanOnOpen: 'all' }));
    expect(e.details).toMatchObject({ file: SEG, offset: second, reason: 'bad-crc' });
    const report = await verifyLog(dir);
    expect(report.problems).toEqual([expect.objectContaining({ file: SEG, offset: second, severity: 'fatal' })]);
    // By default open trusts the closed segment's index; the read of the record refuses it.
    const l = await open({ segmentBytes: 250 });
    expect((await l.read(1n, { maxCount: 1 }))[0]?.position).toBe(1n);
    const r = await refusal(l.read(2n));
    expect(r.code).toBe('PLX_STORAGE_CORRUPT');
    expect(r.details).toMatchObject({ file: SEG, offset: second, reason: 'bad-crc' });
    expect((await l.read(3n)).length).toBe(4);
    await l.close();
  });

  it('refuses a record whose CRC is right but whose position is not the next one', async () => {
    const offs = await write([[10], [10], [10]]);
    const f = await readFile(join(dir, SEG));
    // Copy record 1 over record 2: intact bytes, wrong place.
    f.copy(f, offs[1] as number, offs[0] as number, (offs[0] as number) + REC + 10);
    await writeFile(join(dir, SEG), f);
    const e = await refusal(open());
    expect(e.details).toMatchObject({ file: SEG, offset: offs[1], reason: 'bad-position' });
  });

  it('refuses a gap between segments', async () => {
    const log = await open({ segmentBytes: 250 });
    for (let i = 0; i < 6; i++) await log.append([bytes(60, i)]);
    await log.close();
    await rm(join(dir, '00000000000000000003.seg'));
    await rm(join(dir, '00000000000000000003.idx'));
    const e = await refusal(open({ segmentBytes: 250 }));
    expect(e.code).toBe('PLX_STORAGE_CORRUPT');
    expect(e.details).toMatchObject({ file: '00000000000000000005.seg', reason: 'gap' });
  });

  it('refuses a damaged meta file', async () => {
    const log = await open();
    await log.append([bytes(3, 1)], { epoch: 4n });
    await log.truncateAfter(0n);
    await log.close();
    await flipByte('log.meta', 9);
    const e = await refusal(open());
    expect(e.details).toMatchObject({ file: 'log.meta', offset: 0, reason: 'bad-meta-crc' });
  });
});

describe('truncation seals (log.meta)', () => {
  const SIZE = REC + 10;
  /** Offset of record `position` in a first segment of 10-byte records that were never cut out of order. */
  const offsetOf = (position: number) => HEADER + (position - 1) * SIZE;
  const crcOf = async (position: number) => (await readFile(join(dir, SEG))).readUInt32LE(offsetOf(position) + 4);

  async function seals(): Promise<[number, number][]> {
    const m = await readFile(join(dir, 'log.meta'));
    expect(m.subarray(0, 8).toString('latin1')).toBe('PLXMETA2');
    const n = m.readUInt32LE(16);
    expect(m.length).toBe(20 + 12 * n + 4);
    expect(m.readUInt32LE(m.length - 4)).toBe(crc32c(m.subarray(0, m.length - 4)));
    return Array.from({ length: n }, (_, k) => [Number(m.readBigUInt64LE(20 + 12 * k)), m.readUInt32LE(28 + 12 * k)]);
  }

  function metaV2(epoch: bigint, list: [number, number][]): Buffer {
    const b = Buffer.alloc(20 + 12 * list.length + 4);
    b.write('PLXMETA2', 0, 'latin1');
    b.writeBigUInt64LE(epoch, 8);
    b.writeUInt32LE(list.length, 16);
    list.forEach(([position, crc], k) => {
      b.writeBigUInt64LE(BigInt(position), 20 + 12 * k);
      b.writeUInt32LE(crc, 28 + 12 * k);
    });
    b.writeUInt32LE(crc32c(b.subarray(0, b.length - 4)), b.length - 4);
    return b;
  }

  it('lays out log.meta as docs/storage.md says, with a seal for every batch cut', async () => {
    const log = await open();
    await log.append([bytes(10, 1), bytes(10, 2), bytes(10, 3), bytes(10, 4)], { epoch: 3n });
    await log.truncateAfter(2n); // cuts 1..4 at 2
    await log.append([bytes(10, 5), bytes(10, 6), bytes(10, 7)], { epoch: 3n });
    await log.truncateAfter(4n); // cuts 3..5 at 4
    await log.close();
    const m = await readFile(join(dir, 'log.meta'));
    expect(m.readBigUInt64LE(8)).toBe(3n);
    expect(await seals()).toEqual([
      [2, await crcOf(2)],
      [4, await crcOf(4)],
    ]);
    const again = await open();
    expect(again.last).toBe(4n);
    expect(warnings).toEqual([]);
    await again.close();
  });

  it('keeps the seals of records a truncation removes until the next append, then drops them', async () => {
    const log = await open();
    await log.append([bytes(10, 1), bytes(10, 2), bytes(10, 3), bytes(10, 4)]);
    await log.truncateAfter(3n);
    const crc1 = await crcOf(1);
    const crc3 = await crcOf(3);
    await log.truncateAfter(1n);
    // A crash before the segment was cut would have left 3 as the last record.
    expect(await seals()).toEqual([
      [1, crc1],
      [3, crc3],
    ]);
    await log.append([bytes(10, 5)]);
    expect(await seals()).toEqual([[1, crc1]]);
    await log.close();
  });

  it('never takes a record written again at the position of a removed seal for the sealed one', async () => {
    const batchId = new Uint8Array(16).fill(9);
    const payloads = [bytes(10, 1), bytes(10, 2), bytes(10, 3)];
    const log = await open();
    await log.append(payloads, { batchId });
    await log.truncateAfter(2n);
    await log.truncateAfter(0n);
    await log.append(payloads, { batchId }); // the same bytes at the same positions
    expect(await seals()).toEqual([]);
    await log.close();
    // As if the second append had been torn after its record 2: a half batch.
    await truncate(join(dir, SEG), offsetOf(3));
    const again = await open();
    expect(again.last).toBe(0n);
    expect(warnings.map((w) => w.details?.reason)).toEqual(['incomplete-batch']);
    await again.close();
  });

  it('reads a meta file of the first layout (PLXMETA1: one seal) and writes the current one', async () => {
    let log = await open();
    await log.append([bytes(10, 1), bytes(10, 2), bytes(10, 3), bytes(10, 4)]);
    await log.truncateAfter(3n);
    await log.close();
    const v1 = Buffer.alloc(32);
    v1.write('PLXMETA1', 0, 'latin1');
    v1.writeBigUInt64LE(6n, 8);
    v1.writeBigUInt64LE(3n, 16);
    const crc3 = await crcOf(3);
    v1.writeUInt32LE(crc3, 24);
    v1.writeUInt32LE(crc32c(v1.subarray(0, 28)), 28);
    await writeFile(join(dir, 'log.meta'), v1);
    log = await open();
    expect([log.last, log.highestEpoch]).toEqual([3n, 6n]);
    expect(warnings).toEqual([]);
    await log.truncateAfter(2n);
    expect(await seals()).toEqual([
      [2, await crcOf(2)],
      [3, crc3],
    ]);
    expect((await readFile(join(dir, 'log.meta'))).readBigUInt64LE(8)).toBe(6n);
    await log.close();
  });

  it('seals a cut record that ends the segment before the truncation point, even one a first-layout meta file lost', async () => {
    const opts = { segmentBytes: 300 };
    const empty = (n: number) => Array.from({ length: n }, () => new Uint8Array(0));
    let log = await open(opts);
    for (const n of [4, 3, 2, 2]) await log.append(empty(n)); // segments 1..4, 5..9, 10..11
    await log.truncateAfter(3n); // cuts 1..4 at 3
    await log.append(empty(3)); // 4..6, in a segment of its own
    await log.truncateAfter(5n); // cuts 4..6 at 5
    await log.close();
    expect(await readdir(dir)).toContain('00000000000000000004.seg');
    // The first layout held one seal: the newest. The seal of 3 is lost.
    const seg4 = await readFile(join(dir, '00000000000000000004.seg'));
    const v1 = Buffer.alloc(32);
    v1.write('PLXMETA1', 0, 'latin1');
    v1.writeBigUInt64LE(5n, 16);
    v1.writeUInt32LE(seg4.readUInt32LE(HEADER + REC + 4), 24);
    v1.writeUInt32LE(crc32c(v1.subarray(0, 28)), 28);
    await writeFile(join(dir, 'log.meta'), v1);
    log = await open(opts);
    expect(log.last).toBe(5n);
    await log.truncateAfter(3n); // 3 ends segment 1; segment 4 is left without records
    await log.close();
    log = await open(opts);
    expect(log.last).toBe(3n);
    expect((await log.read(1n)).map((r) => r.position)).toEqual([1n, 2n, 3n]);
    await log.close();
    expect(warnings).toEqual([]);
  });

  it('refuses a meta file with seals out of order, a wrong size or an unknown magic', async () => {
    const log = await open();
    await log.append([bytes(10, 1)]);
    await log.close();
    const cases: [Buffer, string][] = [
      [
        metaV2(0n, [
          [3, 1],
          [2, 1],
        ]),
        'bad-meta-seal',
      ],
      [metaV2(0n, [[0, 1]]), 'bad-meta-seal'],
      [metaV2(0n, [[1, 1]]).subarray(0, 30), 'bad-meta-size'],
      [Buffer.from(metaV2(0n, []).fill(0x41, 0, 8)), 'bad-meta-magic'],
    ];
    for (const [bytesOnDisk, reason] of cases) {
      await writeFile(join(dir, 'log.meta'), bytesOnDisk);
      const e = await refusal(open());
      expect(e.details).toMatchObject({ file: 'log.meta', offset: 0, reason });
      expect((await verifyLog(dir)).problems.map((p) => p.reason)).toEqual([reason]);
    }
  });
});

describe('index files', () => {
  async function segmented(): Promise<void> {
    const log = await open({ segmentBytes: 300, indexEvery: 2 });
    for (let i = 0; i < 30; i++) await log.append([bytes(20 + i, i)]);
    await log.close();
  }

  it('rebuilds a missing or damaged index and reads the same records', async () => {
    await segmented();
    const idx = (await readdir(dir)).filter((n) => n.endsWith('.idx')).sort();
    expect(idx.length).toBeGreaterThan(3);
    await rm(join(dir, idx[0] as string));
    await flipByte(idx[1] as string, 50);
    const report = await verifyLog(dir);
    expect(report.ok).toBe(false);
    expect(report.openable).toBe(true);
    expect(report.problems.map((p) => [p.file, p.reason])).toEqual([
      [idx[0], 'missing-index'],
      [idx[1], 'stale-index'],
    ]);
    const log = await open({ segmentBytes: 300, indexEvery: 2 });
    expect(infos.filter((m) => m.message.startsWith('rebuilt the index'))).toHaveLength(2);
    const all = await log.read(1n);
    expect(all.map((r) => r.payload.length)).toEqual(Array.from({ length: 30 }, (_, i) => 20 + i));
    await log.close();
    expect((await verifyLog(dir)).ok).toBe(true);
  });

  it('rebuilds every index when opened with another indexEvery', async () => {
    await segmented();
    const log = await open({ segmentBytes: 300, indexEvery: 5 });
    expect((await log.readBackward(30n)).map((r) => r.position)).toEqual(
      Array.from({ length: 30 }, (_, i) => BigInt(30 - i)),
    );
    await log.close();
    expect((await verifyLog(dir)).ok).toBe(true);
  });
});

describe('verifyLog', () => {
  it('reports a sound log', async () => {
    const log = await open({ segmentBytes: 300 });
    for (let i = 0; i < 20; i++) await log.append([bytes(30, i), bytes(5, i)], { epoch: BigInt(i) });
    await log.compactBefore(10n);
    const first = log.first;
    await log.close();
    const report = await verifyLog(dir);
    expect(report).toMatchObject({ ok: true, openable: true, first, last: 40n, highestEpoch: 19n, problems: [] });
    expect(report.records).toBe(Number(40n - first + 1n));
    expect(report.segments).toBeGreaterThan(1);
  });

  it('refuses a directory that does not exist', async () => {
    const e = await refusal(verifyLog(join(dir, 'nope')));
    expect(e.code).toBe('PLX_STORAGE_NOT_FOUND');
  });
});

describe('the directory lock', () => {
  it('refuses a second open in this process until the first is closed', async () => {
    const log = await open();
    expect((await refusal(open())).code).toBe('PLX_STORAGE_LOCKED');
    await log.close();
    await (await open()).close();
  });

  it('refuses a lock held by a live process and takes over one left by a dead process', async () => {
    // A live process that is not this one: the lock names its PID.
    const child = startNode(WAIT_FOREVER);
    try {
      await writeFile(join(dir, 'LOCK'), `${child.pid}\n`);
      const e = await refusal(open());
      expect(e.code).toBe('PLX_STORAGE_LOCKED');
      expect(e.details.pid).toBe(child.pid);
    } finally {
      await child.stop('SIGKILL');
    }
    const log = await open();
    expect(log.last).toBe(0n);
    await log.close();
  });
});
