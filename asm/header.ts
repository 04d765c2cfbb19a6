// Generic fixed-size little-endian frame headers with length-first validation.
// A compiled schema (built by ts/core/header-schema.ts, layout documented there and in
// docs/core.md) lists the header's fields and its checks in their declared order.
// The decoder reads the length field first and refuses a length above the maximum before
// it looks at anything else, then runs the checks in order; the first failing check's
// verdict is the result (0 = accepted).

// Schema header offsets.
const S_SIZE = 0;
const S_LEN_OFF = 4;
const S_LEN_WIDTH = 8;
const S_MAX_LEN = 12;
const S_LEN_INCL = 16;
const S_V_TOO_LONG = 20;
const S_V_TOO_SHORT = 24;
const S_NFIELDS = 28;
const S_FIELDS = 32;
const S_NCHECKS = 36;
const S_CHECKS = 40;

// Check record: 48 bytes.
const C_OFF = 0; // u16 field offset
const C_WIDTH = 2; // u8 field width
const C_OP = 3; // u8 operation
const C_VERDICT = 4; // i16
const C_VERDICT2 = 6; // i16
const C_WHEN_OFF = 8; // u16
const C_WHEN_WIDTH = 10; // u8, 0 = unconditional
const C_WHEN_OP = 11; // u8: 1 = applies when equal, 2 = not equal, 3 = inside [value, max], 4 = outside it
const C_A = 16; // u64
const C_B = 24; // u64
const C_WHEN_VALUE = 32; // u64
const C_WHEN_MAX = 40; // u64
const CHECK_SIZE: usize = 48;

const OP_RANGE = 1;
const OP_EQ = 2;
const OP_ORDER = 3;
const OP_BYTES_EQ = 4;
const OP_MASK_ZERO = 5;

/** Verdict when fewer bytes than a header remain (batch: the walk stops there). */
export const VERDICT_INCOMPLETE: i32 = -1;

@inline
function readUint(p: usize, width: u32): u64 {
  if (width == 1) return <u64>load<u8>(p);
  if (width == 2) return <u64>load<u16>(p);
  if (width == 4) return <u64>load<u32>(p);
  return load<u64>(p);
}

@inline
function lengthOf(schema: usize, p: usize): u64 {
  return readUint(p + <usize>load<u32>(schema + S_LEN_OFF), load<u32>(schema + S_LEN_WIDTH));
}

/** Runs the length check and then every check, in order, on the header at p. */
function verdictOf(schema: usize, p: usize): i32 {
  const size = <u64>load<u32>(schema + S_SIZE);
  const len = lengthOf(schema, p);
  if (len > <u64>load<u32>(schema + S_MAX_LEN)) return load<i32>(schema + S_V_TOO_LONG);
  if (load<u32>(schema + S_LEN_INCL) != 0 && len < size) return load<i32>(schema + S_V_TOO_SHORT);
  const n = load<u32>(schema + S_NCHECKS);
  let c = schema + <usize>load<u32>(schema + S_CHECKS);
  for (let i: u32 = 0; i < n; i++, c += CHECK_SIZE) {
    const whenWidth = <u32>load<u8>(c + C_WHEN_WIDTH);
    if (whenWidth != 0) {
      const w = readUint(p + <usize>load<u16>(c + C_WHEN_OFF), whenWidth);
      const whenOp = <u32>load<u8>(c + C_WHEN_OP);
      const lo = load<u64>(c + C_WHEN_VALUE);
      const hit = whenOp <= 2 ? w == lo : w >= lo && w <= load<u64>(c + C_WHEN_MAX);
      if ((whenOp == 1 || whenOp == 3) != hit) continue;
    }
    const op = <u32>load<u8>(c + C_OP);
    const fp = p + <usize>load<u16>(c + C_OFF);
    const width = <u32>load<u8>(c + C_WIDTH);
    if (op == OP_BYTES_EQ) {
      const exp = schema + <usize>load<u64>(c + C_A);
      let same = true;
      for (let k: usize = 0; k < <usize>width; k++) {
        if (load<u8>(fp + k) != load<u8>(exp + k)) {
          same = false;
          break;
        }
      }
      if (!same) return <i32>load<i16>(c + C_VERDICT);
      continue;
    }
    const v = readUint(fp, width);
    const a = load<u64>(c + C_A);
    if (op == OP_RANGE) {
      if (v < a || v > load<u64>(c + C_B)) return <i32>load<i16>(c + C_VERDICT);
    } else if (op == OP_EQ) {
      if (v != a) return <i32>load<i16>(c + C_VERDICT);
    } else if (op == OP_ORDER) {
      if (v > a) return <i32>load<i16>(c + C_VERDICT);
      if (v < a) return <i32>load<i16>(c + C_VERDICT2);
    } else if (op == OP_MASK_ZERO) {
      if ((v & a) != 0) return <i32>load<i16>(c + C_VERDICT);
    }
  }
  return 0;
}

/**
 * Verdict of the header at memory[dataPtr ..]; VERDICT_INCOMPLETE if dataLen is
 * shorter than a header. Writes the frame's payload length (u32) at outPtr.
 */
export function headerDecode(schema: usize, dataPtr: usize, dataLen: usize, outPtr: usize): i32 {
  const size = <usize>load<u32>(schema + S_SIZE);
  if (dataLen < size) return VERDICT_INCOMPLETE;
  const v = verdictOf(schema, dataPtr);
  let len = lengthOf(schema, dataPtr);
  if (load<u32>(schema + S_LEN_INCL) != 0 && len >= <u64>size) len -= <u64>size;
  store<u32>(outPtr, <u32>len);
  return v;
}

/**
 * Walks the frames in memory[dataPtr .. dataPtr + dataLen). Output at outPtr, planar,
 * with cap = maxFrames: i32 consumed bytes, then i32 offsets[cap], i32 lengths[cap],
 * i32 verdicts[cap]. Stops after maxFrames frames, at a header or payload that does not
 * fit in what is left, or after a frame whose length was refused (its end is unknown).
 * Returns the number of frames written.
 */
export function headerDecodeBatch(schema: usize, dataPtr: usize, dataLen: usize, outPtr: usize, maxFrames: i32): i32 {
  const size = <usize>load<u32>(schema + S_SIZE);
  const maxLen = <u64>load<u32>(schema + S_MAX_LEN);
  const incl = load<u32>(schema + S_LEN_INCL) != 0;
  const vTooLong = load<i32>(schema + S_V_TOO_LONG);
  const vTooShort = load<i32>(schema + S_V_TOO_SHORT);
  const offs = outPtr + 4;
  const lens = offs + (<usize>maxFrames << 2);
  const verd = lens + (<usize>maxFrames << 2);
  let off: usize = 0;
  let n: i32 = 0;
  while (n < maxFrames && dataLen - off >= size) {
    const p = dataPtr + off;
    const k = <usize>n << 2;
    let len = lengthOf(schema, p);
    if (len > maxLen) {
      store<i32>(offs + k, <i32>off);
      store<i32>(lens + k, 0);
      store<i32>(verd + k, vTooLong);
      n++;
      break;
    }
    if (incl) {
      if (len < <u64>size) {
        store<i32>(offs + k, <i32>off);
        store<i32>(lens + k, 0);
        store<i32>(verd + k, vTooShort);
        n++;
        break;
      }
      len -= <u64>size;
    }
    if (<u64>(dataLen - off - size) < len) break;
    store<i32>(offs + k, <i32>off);
    store<i32>(lens + k, <i32>len);
    store<i32>(verd + k, verdictOf(schema, p));
    n++;
    off += size + <usize>len;
  }
  store<i32>(outPtr, <i32>off);
  return n;
}

/**
 * Writes a header at outPtr from u64 values at valuesPtr, one per field in the schema's
 * field table (field record: u16 offset, u8 width, u8 kind (0 integer, 1 bytes)). For a
 * bytes field the value is a pointer to `width` bytes. Integers are truncated to width;
 * the caller has checked that they fit.
 */
export function headerEncode(schema: usize, valuesPtr: usize, outPtr: usize): void {
  const n = load<u32>(schema + S_NFIELDS);
  let f = schema + <usize>load<u32>(schema + S_FIELDS);
  for (let i: u32 = 0; i < n; i++, f += 8) {
    const dst = outPtr + <usize>load<u16>(f);
    const width = <u32>load<u8>(f, 2);
    const v = load<u64>(valuesPtr + (<usize>i << 3));
    if (load<u8>(f, 3) == 1) {
      memory.copy(dst, <usize>v, <usize>width);
    } else if (width == 1) store<u8>(dst, <u8>v);
    else if (width == 2) store<u16>(dst, <u16>v);
    else if (width == 4) store<u32>(dst, <u32>v);
    else store<u64>(dst, v);
  }
}
