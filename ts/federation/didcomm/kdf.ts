/**
 * The Concat KDF of JOSE (RFC 7518 §4.6.2, NIST SP 800-56A §5.8.1) with SHA-256, for a 256-bit
 * key-wrapping key: SHA-256(u32be(1) ‖ Z ‖ lp(AlgorithmID) ‖ lp(PartyUInfo) ‖ lp(PartyVInfo) ‖
 * u32be(256) [‖ lp(cctag)]), where lp(x) = u32be(len(x)) ‖ x. The cctag suffix of SuppPubInfo is
 * the ECDH-1PU rule for key wrapping (draft-madden-jose-ecdh-1pu-04 §2.3).
 */
import { sha256 } from '@noble/hashes/sha2.js';

function u32(n: number): Uint8Array {
  return Uint8Array.of(n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
}

export function concatKdf256(
  z: Uint8Array,
  algorithmId: string,
  apu: Uint8Array,
  apv: Uint8Array,
  ccTag?: Uint8Array,
): Uint8Array {
  const alg = new TextEncoder().encode(algorithmId);
  const h = sha256.create();
  h.update(u32(1));
  h.update(z);
  h.update(u32(alg.length));
  h.update(alg);
  h.update(u32(apu.length));
  h.update(apu);
  h.update(u32(apv.length));
  h.update(apv);
  h.update(u32(256));
  if (ccTag !== undefined) {
    h.update(u32(ccTag.length));
    h.update(ccTag);
  }
  return h.digest();
}
