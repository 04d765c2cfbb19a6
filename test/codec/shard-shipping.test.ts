/**
 * The shard-shipping stream codec (ts/codec/shard-shipping.ts, docs/shard-shipping.md):
 * exact bytes against vectors/shard-shipping.txt (written by scripts/shard-shipping-vectors.py,
 * an implementation independent of the TypeScript one), the script against its own file, and
 * fast-check: random valid frames round-trip whole and split across pushes; random and
 * mutated bytes are refused with PLX_SHIP_BAD_FRAME and nothing else.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decodeShipFrame,
  encodeShipAck,
  encodeShipChunk,
  encodeShipEnd,
  encodeShipOpen,
  encodeShipRefuse,
  SHIP_HEADER_BYTES,
  SHIP_MAX_BODY,
  type ShipFrame,
  type ShipRefusalReason,
  ShipStream,
  shipRecordCrc,
} from '../../ts/codec/shard-shipping.js';
import { crc32c, isPlexusError } from '../../ts/core/index.js';
import { ROOT } from '../helpers/paths.js';

const FILE = resolve(ROOT, 'vectors/shard-shipping.txt');
const SCRIPT = resolve(ROOT, 'scripts/shard-shipping-vectors.py');

type Rec = { name: string; f: Record<string, string> };
function vectors(kind: string): Rec[] {
  const out: Rec[] = [];
  for (const line of readFileSync(FILE, 'utf8').split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const [k, name, ...pairs] = line.split('\t');
    if (k !== kind) continue;
    const f: Record<string, string> = {};
    for (const p of pairs) f[p.slice(0, p.indexOf('='))] = p.slice(p.indexOf('=') + 1);
    out.push({ name: name as string, f });
  }
  return out;
}

const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

function reason(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (isPlexusError(e, 'PLX_SHIP_BAD_FRAME')) return String(e.details.reason);
    throw e;
  }
  return 'ok';
}

/** The frame a vector record describes, built by the TS encoders from its fields. */
function encodeFromFields(f: Record<string, string>): Uint8Array {
  const n = (k: string): number => Number(f[k]);
  const b = (k: string): bigint => BigInt(f[k] as string);
  switch (f.type) {
    case 'open':
      return encodeShipOpen({
        shard: n('shard'),
        window: n('window'),
        epoch: b('epoch'),
        end: b('end'),
        maxChunk: n('maxChunk'),
        endCrc: n('endCrc'),
      });
    case 'chunk': {
      const first = b('first');
      const records = (f.records as string).split(',').map((r, i) => {
        const [epoch, batch, payload] = r.split(':');
        return {
          position: first + BigInt(i),
          epoch: BigInt(epoch as string),
          batchId: hex(batch as string),
          payload: hex(payload as string),
        };
      });
      return encodeShipChunk(n('shard'), b('epoch'), records);
    }
    case 'ack':
      return encodeShipAck(n('shard'), b('durable'));
    case 'end':
      return encodeShipEnd(n('shard'), b('epoch'), b('end'), n('lastCrc'));
    case 'refuse':
      return encodeShipRefuse(
        n('shard'),
        n('reason') as ShipRefusalReason,
        b('position'),
        Buffer.from(f.text_hex as string, 'hex').toString('utf8'),
      );
    default:
      throw new Error(`unknown vector type ${f.type}`);
  }
}

/** A decoded frame as the vectors write its fields. */
function fieldsOf(frame: ShipFrame): Record<string, string> {
  const out: Record<string, string> = { type: frame.type };
  for (const [k, v] of Object.entries(frame)) {
    if (k === 'type') continue;
    if (k === 'records') {
      out.records = (v as Extract<ShipFrame, { type: 'chunk' }>['records'])
        .map((r) => `${r.epoch}:${toHex(r.batchId)}:${toHex(r.payload)}:${r.crc}`)
        .join(',');
    } else if (k === 'text') out.text_hex = Buffer.from(v as string, 'utf8').toString('hex');
    else out[k] = String(v);
  }
  return out;
}

describe('vectors/shard-shipping.txt', () => {
  it('CRC-32C of plexus/core gives every crc record', () => {
    const rs = vectors('crc');
    expect(rs.length).toBeGreaterThanOrEqual(4);
    for (const { name, f } of rs) expect(crc32c(hex(f.data as string)), name).toBe(Number(f.crc));
  });

  it('shipRecordCrc gives every record record', () => {
    const rs = vectors('record');
    expect(rs.length).toBeGreaterThanOrEqual(3);
    for (const { name, f } of rs) {
      const crc = shipRecordCrc(
        BigInt(f.position as string),
        BigInt(f.epoch as string),
        hex(f.batch as string),
        hex(f.payload as string),
      );
      expect(crc, name).toBe(Number(f.crc));
    }
  });

  it('the encoders write every frame record byte for byte, and the decoder reads each back to its fields', () => {
    const rs = vectors('frame');
    expect(rs.length).toBeGreaterThanOrEqual(20);
    for (const { name, f } of rs) {
      const { bytes, ...fields } = f;
      expect(toHex(encodeFromFields(fields)), name).toBe(bytes);
      const d = decodeShipFrame(hex(bytes as string));
      if (d.kind !== 'frame') throw new Error(`${name}: incomplete`);
      expect(d.consumed, name).toBe((bytes as string).length / 2);
      expect(fieldsOf(d.frame), name).toEqual(fields);
    }
  });

  it('a stream of every frame record, fed one byte at a time and split at every offset, gives the same frames', () => {
    const frames = vectors('frame').map(({ f }) => hex(f.bytes as string));
    const all = new Uint8Array(Buffer.concat(frames));
    const whole = new ShipStream().push(all);
    expect(whole.map(fieldsOf)).toEqual(
      vectors('frame').map(({ f }) => fieldsOf(new ShipStream().push(hex(f.bytes as string))[0] as ShipFrame)),
    );
    const bytewise = new ShipStream();
    const got: ShipFrame[] = [];
    for (let i = 0; i < all.length; i++) got.push(...bytewise.push(all.slice(i, i + 1)));
    expect(got).toEqual(whole);
    for (let cut = 1; cut < all.length; cut++) {
      const st = new ShipStream();
      const two = [...st.push(all.slice(0, cut)), ...st.push(all.slice(cut))];
      expect(two).toEqual(whole);
    }
  });

  it('the decoder refuses every refused record with the reason the script gives', () => {
    const rs = vectors('refused');
    expect(rs.length).toBeGreaterThanOrEqual(20);
    for (const { name, f } of rs) {
      const bytes = hex(f.bytes as string);
      if (f.reason === 'incomplete') {
        expect(decodeShipFrame(bytes).kind, name).toBe('incomplete');
        continue;
      }
      expect(
        reason(() => decodeShipFrame(bytes)),
        name,
      ).toBe(f.reason);
      expect(
        reason(() => new ShipStream().push(bytes)),
        name,
      ).toBe(f.reason);
    }
  });
});

const python = spawnSync('python3', ['--version'], { encoding: 'utf8' });
const tmp = mkdtempSync(join(tmpdir(), 'plexus-ship-vectors-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// python3 is not plexus: it runs directly, to its end (spawnSync).
describe.skipIf(python.status !== 0)(
  'vectors/shard-shipping.txt against scripts/shard-shipping-vectors.py (needs python3)',
  () => {
    it('the script builds the file again, line for line', () => {
      const r = spawnSync('python3', [SCRIPT, '--check'], { encoding: 'utf8' });
      expect(r.stdout + r.stderr).toContain('ok,');
      expect(r.status).toBe(0);
    });

    it('one changed byte in the file fails the check', () => {
      const copy = join(tmp, 'copy.txt');
      copyFileSync(FILE, copy);
      const text = readFileSync(copy, 'utf8');
      const at = text.indexOf('\tbytes=') + 7 + 40;
      writeFileSync(copy, text.slice(0, at) + (text[at] === '0' ? '1' : '0') + text.slice(at + 1));
      const r = spawnSync('python3', [SCRIPT, '--check', '--file', copy], { encoding: 'utf8' });
      expect(r.status).not.toBe(0);
    });
  },
);

const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
const u64 = fc.bigInt({ min: 0n, max: 0xffff_ffff_ffff_ffffn });
const pos = fc.bigInt({ min: 0n, max: BigInt(Number.MAX_SAFE_INTEGER) });
const record = fc.record({
  epoch: u64,
  batchId: fc.uint8Array({ minLength: 16, maxLength: 16 }),
  payload: fc.uint8Array({ maxLength: 300 }),
});
const frameArb: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc
    .record({ shard: u32, window: u32, epoch: u64, end: pos, maxChunk: u32, endCrc: u32 })
    .map((f) => encodeShipOpen({ ...f, endCrc: f.end === 0n ? 0 : f.endCrc })),
  fc
    .record({
      shard: u32,
      epoch: u64,
      first: fc.bigInt({ min: 1n, max: BigInt(Number.MAX_SAFE_INTEGER) - 100n }),
      records: fc.array(record, { minLength: 1, maxLength: 6 }),
    })
    .map((f) =>
      encodeShipChunk(
        f.shard,
        f.epoch,
        f.records.map((r, i) => ({ ...r, position: f.first + BigInt(i) })),
      ),
    ),
  fc.record({ shard: u32, durable: pos }).map((f) => encodeShipAck(f.shard, f.durable)),
  fc
    .record({ shard: u32, epoch: u64, end: pos, crc: u32 })
    .map((f) => encodeShipEnd(f.shard, f.epoch, f.end, f.end === 0n ? 0 : f.crc)),
  fc
    .record({ shard: u32, reason: fc.integer({ min: 1, max: 8 }), position: pos, text: fc.string({ maxLength: 80 }) })
    .map((f) => encodeShipRefuse(f.shard, f.reason as ShipRefusalReason, f.position, f.text)),
);

function onlyBadFrame(f: () => unknown): void {
  try {
    f();
  } catch (e) {
    expect(isPlexusError(e, 'PLX_SHIP_BAD_FRAME'), String(e)).toBe(true);
  }
}

describe('fuzz', () => {
  it('random valid frames round-trip: decode, encode again, the same bytes; split anywhere across pushes', () => {
    fc.assert(
      fc.property(
        fc.array(frameArb, { minLength: 1, maxLength: 4 }),
        fc.array(fc.nat(), { maxLength: 5 }),
        (frames, cuts) => {
          const all = Buffer.concat(frames);
          const decoded = frames.map((b) => {
            const d = decodeShipFrame(b);
            if (d.kind !== 'frame') throw new Error('incomplete');
            expect(d.consumed).toBe(b.length);
            return d.frame;
          });
          for (let i = 0; i < frames.length; i++) {
            const f = fieldsOf(decoded[i] as ShipFrame);
            const { type: _t, ...rest } = f;
            expect(toHex(encodeFromFields({ ...rest, type: f.type as string }))).toBe(toHex(frames[i] as Uint8Array));
          }
          const at = [...new Set(cuts.map((c) => c % (all.length + 1)))].sort((a, b) => a - b);
          const stream = new ShipStream();
          const got: ShipFrame[] = [];
          let from = 0;
          for (const c of [...at, all.length]) {
            got.push(...stream.push(new Uint8Array(all.subarray(from, c))));
            from = c;
          }
          expect(got).toEqual(decoded);
          expect(stream.buffered).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('random bytes: refused with PLX_SHIP_BAD_FRAME only, or incomplete', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (b) => {
        onlyBadFrame(() => decodeShipFrame(b));
        onlyBadFrame(() => new ShipStream().push(b));
      }),
      { numRuns: 1000 },
    );
  });

  it('random bytes behind a valid magic and version: refused with PLX_SHIP_BAD_FRAME only', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 7 }), fc.nat(400), fc.uint8Array({ maxLength: 400 }), (type, len, rest) => {
        const b = new Uint8Array(SHIP_HEADER_BYTES + rest.length);
        b.set([0x50, 0x58, 0x53, 0x48, 1, type, 0, 0]);
        new DataView(b.buffer).setUint32(8, len, true);
        b.set(rest.subarray(0, 4), 12);
        b.set(rest, SHIP_HEADER_BYTES);
        onlyBadFrame(() => decodeShipFrame(b));
      }),
      { numRuns: 1000 },
    );
  });

  it('mutated valid frames (flipped, cut, extended bytes): PLX_SHIP_BAD_FRAME only, and every header or covered-body flip is caught', () => {
    fc.assert(
      fc.property(frameArb, fc.nat(), fc.integer({ min: 1, max: 255 }), fc.nat(), (frame, at, x, cut) => {
        const b = frame.slice();
        const i = at % b.length;
        b[i] = (b[i] as number) ^ x;
        onlyBadFrame(() => decodeShipFrame(b));
        // A flip in the header or a body the frame CRC covers is always refused.
        const covered = b[5] === 2 ? SHIP_HEADER_BYTES + 32 : b.length;
        if (i < covered && reason(() => decodeShipFrame(b)) === 'ok')
          expect(decodeShipFrame(b).kind).toBe('incomplete');
        onlyBadFrame(() => decodeShipFrame(frame.subarray(0, cut % frame.length)));
        const longer = new Uint8Array(frame.length + 3);
        longer.set(frame);
        const d = decodeShipFrame(longer);
        expect(d.kind === 'frame' && d.consumed).toBe(frame.length);
      }),
      { numRuns: 1000 },
    );
  });

  it('a header announcing more than the stream accepts is refused before any body byte is held', () => {
    const big = encodeShipAck(1, 1n).slice();
    big[5] = 2;
    new DataView(big.buffer).setUint32(8, SHIP_MAX_BODY + 1, true);
    expect(reason(() => new ShipStream().push(big.subarray(0, SHIP_HEADER_BYTES)))).toBe('length');
    const chunk = encodeShipChunk(1, 1n, [
      { position: 1n, epoch: 1n, batchId: new Uint8Array(16), payload: new Uint8Array(5000) },
    ]);
    const small = new ShipStream(1024);
    expect(reason(() => small.push(chunk.subarray(0, SHIP_HEADER_BYTES)))).toBe('length');
    expect(small.buffered).toBe(0);
  });
});
