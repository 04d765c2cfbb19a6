/**
 * Messages that could not be decrypted are recorded, never dropped silently: the envelope's
 * SHA-256, its size, the recipient kids it named and the refusal code. The record holds no
 * content, so it may go to logs and journals.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';

export interface UndecryptableRecord {
  at: number;
  code: string;
  reason: string;
  envelopeSha256: string;
  bytes: number;
  recipientKids: string[];
}

export interface UndecryptableRecorder {
  record(r: UndecryptableRecord): void;
}

export function describeEnvelope(envelope: string): { envelopeSha256: string; bytes: number } {
  const b = new TextEncoder().encode(envelope);
  return { envelopeSha256: bytesToHex(sha256(b)), bytes: b.length };
}

/** A bounded in-memory log of undecryptable messages; the oldest go first, `dropped` counts them. */
export class UndecryptableLog implements UndecryptableRecorder {
  private readonly items: UndecryptableRecord[] = [];
  dropped = 0;
  constructor(readonly capacity = 1024) {}
  record(r: UndecryptableRecord): void {
    this.items.push(r);
    if (this.items.length > this.capacity) {
      this.items.shift();
      this.dropped++;
    }
  }
  entries(): readonly UndecryptableRecord[] {
    return this.items;
  }
}
