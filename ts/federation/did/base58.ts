/**
 * Base58btc (the Bitcoin alphabet), the `z` multibase. An encoding, not cryptography.
 * Inputs are capped before any work: keys and hashes are short.
 */
import { PlexusError } from '../../core/errors.js';

const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
const INDEX = new Int8Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) INDEX[ALPHABET.charCodeAt(i)] = i;

/** The longest base58 text decoded (enough for any key or multihash plexus handles). */
export const MAX_BASE58_LENGTH = 256;

export function base58Encode(bytes: Uint8Array): string {
  let zeros = 0;
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++;
  const digits: number[] = [];
  for (let i = zeros; i < bytes.length; i++) {
    let carry = bytes[i]!;
    for (let j = 0; j < digits.length; j++) {
      carry += digits[j]! << 8;
      digits[j] = carry % 58;
      carry = (carry / 58) | 0;
    }
    while (carry > 0) {
      digits.push(carry % 58);
      carry = (carry / 58) | 0;
    }
  }
  let out = '1'.repeat(zeros);
  for (let i = digits.length - 1; i >= 0; i--) out += ALPHABET[digits[i]!];
  return out;
}

export function base58Decode(text: string, what = 'base58 text'): Uint8Array {
  if (text.length > MAX_BASE58_LENGTH) {
    throw new PlexusError('PLX_DID_BAD_ENCODING', `${what} is longer than ${MAX_BASE58_LENGTH} characters`, {
      length: text.length,
    });
  }
  let zeros = 0;
  while (zeros < text.length && text[zeros] === '1') zeros++;
  const bytes: number[] = [];
  for (let i = zeros; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? INDEX[c]! : -1;
    if (v < 0) {
      throw new PlexusError('PLX_DID_BAD_ENCODING', `${what} has a character outside the base58btc alphabet`, {
        position: i,
      });
    }
    let carry = v;
    for (let j = 0; j < bytes.length; j++) {
      carry += bytes[j]! * 58;
      bytes[j] = carry & 0xff;
      carry >>= 8;
    }
    while (carry > 0) {
      bytes.push(carry & 0xff);
      carry >>= 8;
    }
  }
  const out = new Uint8Array(zeros + bytes.length);
  for (let i = 0; i < bytes.length; i++) out[out.length - 1 - i] = bytes[i]!;
  return out;
}
