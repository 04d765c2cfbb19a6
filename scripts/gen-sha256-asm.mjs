// Writes asm/sha256.ts from scripts/sha256-asm.template: the 64 unrolled rounds of the scalar
// and the 4-lane SIMD compression functions are generated, the rest is the template.
//   node scripts/gen-sha256-asm.mjs           rewrite asm/sha256.ts
//   node scripts/gen-sha256-asm.mjs --check   exit 1 if asm/sha256.ts is not what the template gives
import { readFileSync, writeFileSync } from 'node:fs';

const K = [
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
];
const hex = (k) => `0x${k.toString(16).padStart(8, '0')}`;
const N = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
const roles = (t) => [0, 1, 2, 3, 4, 5, 6, 7].map((j) => N[(((j - t) % 8) + 8) % 8]);
const indent = (lines, n) => lines.map((l) => ' '.repeat(n) + l).join('\n');

// kind 'msg': words in locals w0..w15 loaded from p, schedule inline, K as immediates.
// kind 'kw': K[t] + W[t] loaded from the table at kw.
function scalarRounds(kind, pad) {
  const out = [];
  if (kind === 'msg') for (let i = 0; i < 16; i++) out.push(`let w${i} = be32(p, ${4 * i});`);
  for (let t = 0; t < 64; t++) {
    const [a, b, , d, e, f, g, h] = roles(t);
    const [x, y] = t % 2 === 0 ? ['m0', 'm1'] : ['m1', 'm0'];
    if (kind === 'msg' && t >= 16) {
      out.push(`w${t % 16} += ss1(w${(t - 2) % 16}) + w${(t - 7) % 16} + ss0(w${(t - 15) % 16});`);
    }
    const kw = kind === 'msg' ? `${hex(K[t])} + w${t % 16}` : `load<u32>(kw, ${4 * t})`;
    out.push(`${h} += ${kw} + (${g} ^ (${e} & (${f} ^ ${g}))) + bs1(${e});`);
    out.push(`${d} += ${h};`);
    out.push(`${x} = ${a} ^ ${b};`);
    out.push(`${h} += bs0(${a}) + ((${x} & ${y}) ^ ${b});`);
  }
  return indent(out, pad);
}

function simdLoad(pad) {
  const out = [];
  for (let k = 0; k < 4; k++) {
    for (let j = 0; j < 4; j++) out.push(`const x${k}${j} = bswap4(v128.load(p${j}, ${16 * k}));`);
    out.push(`const y${k}0 = lo32(x${k}0, x${k}1);`);
    out.push(`const y${k}1 = hi32(x${k}0, x${k}1);`);
    out.push(`const y${k}2 = lo32(x${k}2, x${k}3);`);
    out.push(`const y${k}3 = hi32(x${k}2, x${k}3);`);
    out.push(`let w${4 * k} = lo64(y${k}0, y${k}2);`);
    out.push(`let w${4 * k + 1} = hi64(y${k}0, y${k}2);`);
    out.push(`let w${4 * k + 2} = lo64(y${k}1, y${k}3);`);
    out.push(`let w${4 * k + 3} = hi64(y${k}1, y${k}3);`);
  }
  return indent(out, pad);
}

function simdRounds(kind, pad) {
  const out = [];
  for (let t = 0; t < 64; t++) {
    const [a, b, , d, e, f, g, h] = roles(t);
    const [x, y] = t % 2 === 0 ? ['m0', 'm1'] : ['m1', 'm0'];
    if (kind === 'msg' && t >= 16) {
      const i = t % 16;
      out.push(`w${i} = add(add(w${i}, vs1(w${(t - 2) % 16})), add(w${(t - 7) % 16}, vs0(w${(t - 15) % 16})));`);
    }
    const kw = kind === 'msg' ? `add(v128.load32_splat(K, ${4 * t}), w${t % 16})` : `v128.load32_splat(kw, ${4 * t})`;
    out.push(`${h} = add(add(${h}, ${kw}), add(xor(${g}, and(${e}, xor(${f}, ${g}))), vbs1(${e})));`);
    out.push(`${d} = add(${d}, ${h});`);
    out.push(`${x} = xor(${a}, ${b});`);
    out.push(`${h} = add(${h}, add(vbs0(${a}), xor(and(${x}, ${y}), ${b})));`);
  }
  return indent(out, pad);
}

function kTable() {
  const rows = [];
  for (let i = 0; i < 64; i += 8)
    rows.push(
      `  ${K.slice(i, i + 8)
        .map(hex)
        .join(', ')},`,
    );
  return rows.join('\n');
}

const tpl = readFileSync(new URL('./sha256-asm.template', import.meta.url), 'utf8');
const text = tpl
  .replace('%K%', kTable())
  .replace('%SCALAR_MSG%', scalarRounds('msg', 4))
  .replace('%SCALAR_KW%', scalarRounds('kw', 2))
  .replace('%SIMD_LOAD%', simdLoad(4))
  .replace('%SIMD_MSG%', simdRounds('msg', 4))
  .replace('%SIMD_KW%', simdRounds('kw', 2));
const target = new URL('../asm/sha256.ts', import.meta.url);
if (process.argv.includes('--check')) {
  if (readFileSync(target, 'utf8') !== text) {
    console.error('asm/sha256.ts differs from what scripts/sha256-asm.template gives: run npm run gen:sha256');
    process.exit(1);
  }
} else {
  writeFileSync(target, text);
}
