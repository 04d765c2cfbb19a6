/**
 * The per-actor inbound log: what federation's admission pipeline refused for an actor, and the
 * senders an actor has admitted a message from (its contacts). It is the `<actor>/inbound` graph
 * of the design, kept as a log on the log engine: `graphName(actor)` is that name and
 * `entries(actor)` reads its contents back, oldest first.
 *
 * One log holds every actor's records (one log-engine record each). A record is `u8 1` (version)
 * followed by UTF-8 JSON of at most `MAX_INBOUND_RECORD_BYTES`; its shape is checked when read.
 * Opening reads the log once and keeps, per actor, the positions of its records and its contacts.
 */
import { PlexusError } from '../core/errors.js';
import { MemoryLog } from '../storage/memory-log.js';
import type { LogStorage } from '../storage/types.js';

export const MAX_INBOUND_RECORD_BYTES = 64 * 1024;
const VERSION = 1;

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

/** The graph name the design gives an actor's inbound records. */
export function graphName(actor: string): string {
  return `${actor}/inbound`;
}

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
  if (bytes[0] !== VERSION) throw corrupt(position, `version ${bytes[0]}`);
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
  out[0] = VERSION;
  out.set(json, 1);
  return out;
}

/** The inbound log of every actor of a node (one log-engine log). */
export class InboundLog {
  private readonly positions = new Map<string, bigint[]>();
  private readonly contactSet = new Set<string>();
  /** Refusals recorded (since open, or read at open). */
  refusals = 0;

  private constructor(private readonly log: LogStorage) {}

  /** Opens `log` (a FileLog for durability; default an in-memory log) and indexes it. */
  static async open(log: LogStorage = new MemoryLog()): Promise<InboundLog> {
    const il = new InboundLog(log);
    let from = log.first > 0n ? log.first : 1n;
    for (;;) {
      const recs = await log.read(from, { maxCount: 1024 });
      if (recs.length === 0) break;
      for (const r of recs) il.index(decodeInboundEntry(r.payload, r.position), r.position);
      from = (recs[recs.length - 1] as { position: bigint }).position + 1n;
    }
    return il;
  }

  private index(e: InboundEntry, position: bigint): void {
    const list = this.positions.get(e.actor) ?? [];
    list.push(position);
    this.positions.set(e.actor, list);
    if (e.kind === 'contact') this.contactSet.add(`${e.actor}\n${e.sender}`);
    else this.refusals++;
  }

  /** Appends an entry; resolves once durable. */
  async record(e: InboundEntry): Promise<void> {
    const r = await this.log.append([encodeInboundEntry(e)]);
    this.index(e, r.first);
  }

  /** Whether `sender` had a message admitted by `actor` before. */
  hasContact(actor: string, sender: string): boolean {
    return this.contactSet.has(`${actor}\n${sender}`);
  }

  /** Records `sender` as a contact of `actor` once. */
  async contact(actor: string, sender: string, at: number): Promise<void> {
    if (this.hasContact(actor, sender)) return;
    await this.record({ kind: 'contact', at, actor, sender });
  }

  /** The actor's inbound graph contents, oldest first. */
  async entries(actor: string): Promise<InboundEntry[]> {
    const out: InboundEntry[] = [];
    for (const p of this.positions.get(actor) ?? []) {
      const [r] = await this.log.read(p, { maxCount: 1 });
      if (r !== undefined && r.position === p) out.push(decodeInboundEntry(r.payload, p));
    }
    return out;
  }

  /** The refusals of `actor`, oldest first. */
  async refused(actor: string): Promise<InboundRefusal[]> {
    return (await this.entries(actor)).filter((e): e is InboundRefusal => e.kind === 'refused');
  }

  /** The actors that have an inbound graph. */
  actors(): string[] {
    return [...this.positions.keys()];
  }

  close(): Promise<void> {
    return this.log.close();
  }
}
