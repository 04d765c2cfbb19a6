/**
 * The federation inbound log's record (ts/federation/inbound-log.ts keeps the log itself):
 * `u8 1` (the version) followed by UTF-8 JSON of at most `MAX_INBOUND_RECORD_BYTES`, an
 * `InboundRefusal` or an `InboundContact`. The shape is checked when read; a record that is
 * not one is PLX_ADMISSION_LOG_CORRUPT with its position (docs/federation.md, "The inbound log").
 */
import { PlexusError } from '../core/errors.js';

export const MAX_INBOUND_RECORD_BYTES = 64 * 1024;
/** The record version byte. */
export const INBOUND_RECORD_VERSION = 1;

/** A refused inbound message, with its reason. No payload is kept. */
export interface InboundRefusal {
  readonly kind: 'refused';
  /** ms since the epoch, by the receiving node's clock. */
  readonly at: number;
  readonly actor: string;
  /** A stable code: PLX_ADMISSION_*. */
  readonly code: string;
  readonly reason: string;
  /** What could be read before the refusal (absent when the message was not decrypted). */
  readonly messageId?: string;
  readonly sender?: string;
  readonly event?: string;
  /** Whether the sender was verified (an error.communication may only go to such a sender). */
  readonly senderVerified?: boolean;
  /** SHA-256 of the envelope, hex, when the message was not decrypted. */
  readonly envelopeSha256?: string;
}

/** The first admitted message of a verified sender to an actor. */
export interface InboundContact {
  readonly kind: 'contact';
  readonly at: number;
  readonly actor: string;
  readonly sender: string;
}

export type InboundEntry = InboundRefusal | InboundContact;

function corrupt(position: bigint, why: string): PlexusError {
  return new PlexusError(
    'PLX_ADMISSION_LOG_CORRUPT',
    `inbound log record at position ${position} is not an inbound entry (${why}); the log was written by something else`,
    { position: position.toString(), why },
  );
}

const te = new TextEncoder();
const td = new TextDecoder('utf-8', { fatal: true });

function str(v: unknown, max = 16_384): v is string {
  return typeof v === 'string' && v.length <= max;
}

/** Decodes one record; throws PLX_ADMISSION_LOG_CORRUPT on anything else. */
export function decodeInboundEntry(bytes: Uint8Array, position = 0n): InboundEntry {
  if (bytes.length < 1) throw corrupt(position, 'empty');
  if (bytes.length > MAX_INBOUND_RECORD_BYTES + 1) throw corrupt(position, 'too long');
  if (bytes[0] !== INBOUND_RECORD_VERSION) throw corrupt(position, `version ${bytes[0]}`);
  let v: unknown;
  try {
    v = JSON.parse(td.decode(bytes.subarray(1)));
  } catch {
    throw corrupt(position, 'not UTF-8 JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw corrupt(position, 'not an object');
  const o = v as Record<string, unknown>;
  if (typeof o.at !== 'number' || !Number.isSafeInteger(o.at) || !str(o.actor) || o.actor === '') {
    throw corrupt(position, 'at/actor');
  }
  if (o.kind === 'contact') {
    if (!str(o.sender)) throw corrupt(position, 'sender');
    return { kind: 'contact', at: o.at, actor: o.actor, sender: o.sender };
  }
  if (o.kind !== 'refused' || !str(o.code, 128) || !str(o.reason)) throw corrupt(position, 'kind/code/reason');
  for (const k of ['messageId', 'sender', 'event', 'envelopeSha256']) {
    if (o[k] !== undefined && !str(o[k])) throw corrupt(position, k);
  }
  if (o.senderVerified !== undefined && typeof o.senderVerified !== 'boolean')
    throw corrupt(position, 'senderVerified');
  return o as unknown as InboundRefusal;
}

/** Encodes one record; refuses (PLX_ADMISSION_BAD_INPUT) an entry above MAX_INBOUND_RECORD_BYTES. */
export function encodeInboundEntry(e: InboundEntry): Uint8Array {
  const json = te.encode(JSON.stringify(e));
  if (json.length > MAX_INBOUND_RECORD_BYTES) {
    throw new PlexusError(
      'PLX_ADMISSION_BAD_INPUT',
      `an inbound entry takes at most ${MAX_INBOUND_RECORD_BYTES} bytes`,
      {
        bytes: json.length,
      },
    );
  }
  const out = new Uint8Array(json.length + 1);
  out[0] = INBOUND_RECORD_VERSION;
  out.set(json, 1);
  return out;
}
