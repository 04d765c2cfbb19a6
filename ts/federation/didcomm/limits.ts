/**
 * Size caps applied to every envelope before anything is allocated from its contents.
 */
export interface DidCommLimits {
  /** Longest envelope text accepted by `unpack` (default 1 MiB). */
  maxEnvelopeBytes: number;
  /** Most JWE recipients (default 64). */
  maxRecipients: number;
  /** Most JWS signatures (default 8). */
  maxSignatures: number;
  /** Longest base64url protected header (default 8 KiB). */
  maxProtectedLength: number;
  /** Longest kid or skid (default 2048 characters). */
  maxKidLength: number;
  /** Most nested layers (anoncrypt, authcrypt, signed) before the plaintext (default 3). */
  maxLayers: number;
}

export const DEFAULT_LIMITS: DidCommLimits = {
  maxEnvelopeBytes: 1024 * 1024,
  maxRecipients: 64,
  maxSignatures: 8,
  maxProtectedLength: 8192,
  maxKidLength: 2048,
  maxLayers: 3,
};

export function withLimits(l?: Partial<DidCommLimits>): DidCommLimits {
  return l ? { ...DEFAULT_LIMITS, ...l } : DEFAULT_LIMITS;
}
