/**
 * The mediator's message queue on the log engine, in two kinds of record (message, received;
 * ts/codec/mediator-queue.ts). `body` is the forwarded envelope exactly as stored, nothing more; owner
 * and recipient are routing data. A message is live until a later `received` record names its id.
 * Opening rebuilds the index (id, position, size, time; never the bodies) from the log, so a
 * restart loses nothing that was acknowledged to a sender, and a message comes back until the
 * recipient says it was received. Whole segments below the oldest live message are compacted.
 */

import { randomBytes } from 'node:crypto';
import { decodeRecord, encodeMessage, encodeReceived, ID_BYTES, MAX_RECEIVED_IDS } from '../../codec/mediator-queue.js';
import { type Clock, systemClock } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import type { LogStorage } from '../../storage/types.js';

export interface QueueLimits {
  /** Most queued messages per owner (default 10,000). */
  maxMessages: number;
  /** Most queued bytes per owner (default 64 MiB). */
  maxBytes: number;
  /** Largest stored message (default 1 MiB). */
  maxMessageBytes: number;
  /** Most queued messages over all owners (default 1,000,000). */
  maxTotalMessages: number;
}

export const DEFAULT_QUEUE_LIMITS: QueueLimits = {
  maxMessages: 10_000,
  maxBytes: 64 * 1024 * 1024,
  maxMessageBytes: 1024 * 1024,
  maxTotalMessages: 1_000_000,
};

/** One queued message, as the index holds it (the body stays in the log). */
export interface QueuedMessage {
  readonly id: string;
  readonly position: bigint;
  readonly owner: string;
  readonly recipient: string;
  readonly bytes: number;
  readonly receivedAt: number;
}

interface OwnerQueue {
  readonly messages: Map<string, QueuedMessage>;
  bytes: number;
}

function corrupt(position: bigint, reason: string): PlexusError {
  return new PlexusError(
    'PLX_MEDIATOR_CORRUPT',
    `queue record ${position} is not a mediator record (${reason}): restore the data directory from a backup`,
    { position: String(position), reason },
  );
}

function hex(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
}

const ID_RE = /^[0-9a-f]{32}$/;

export class MessageQueue {
  private readonly all = new Map<string, QueuedMessage>();
  private readonly owners = new Map<string, OwnerQueue>();
  private compacting: Promise<void> | undefined;

  private constructor(
    private readonly log: LogStorage,
    readonly limits: QueueLimits,
    private readonly clock: Clock,
  ) {}

  /** Opens the queue on `log`, rebuilding the index from every record. */
  static async open(
    log: LogStorage,
    limits: Partial<QueueLimits> = {},
    clock: Clock = systemClock,
  ): Promise<MessageQueue> {
    const q = new MessageQueue(log, { ...DEFAULT_QUEUE_LIMITS, ...limits }, clock);
    let from = log.first === 0n ? 1n : log.first;
    while (from <= log.last) {
      const recs = await log.read(from, { maxBytes: 16 * 1024 * 1024 });
      if (recs.length === 0) break;
      for (const r of recs) {
        const d = decodeRecord(r.payload, r.position);
        if (d.kind === 'message') {
          q.index({
            id: d.id,
            position: r.position,
            owner: d.owner,
            recipient: d.recipient,
            bytes: d.bodyLength,
            receivedAt: d.receivedAt,
          });
        } else {
          for (const id of d.ids) q.unindex(id);
        }
        from = r.position + 1n;
      }
    }
    return q;
  }

  private index(m: QueuedMessage): void {
    this.all.set(m.id, m);
    let oq = this.owners.get(m.owner);
    if (!oq) {
      oq = { messages: new Map(), bytes: 0 };
      this.owners.set(m.owner, oq);
    }
    oq.messages.set(m.id, m);
    oq.bytes += m.bytes;
  }

  private unindex(id: string): QueuedMessage | undefined {
    const m = this.all.get(id);
    if (!m) return undefined;
    this.all.delete(id);
    const oq = this.owners.get(m.owner);
    if (oq) {
      oq.messages.delete(id);
      oq.bytes -= m.bytes;
      if (oq.messages.size === 0) this.owners.delete(m.owner);
    }
    return m;
  }

  /** Messages queued in all. */
  get size(): number {
    return this.all.size;
  }

  /**
   * Stores a message for `owner` durably (resolves once fsynced) or refuses it when the owner's
   * queue is full (`PLX_MEDIATOR_QUEUE_FULL`) or the body too large (`PLX_MEDIATOR_TOO_LARGE`).
   */
  async enqueue(owner: string, recipient: string, body: Uint8Array): Promise<QueuedMessage> {
    const l = this.limits;
    if (body.length > l.maxMessageBytes) {
      throw new PlexusError(
        'PLX_MEDIATOR_TOO_LARGE',
        `a forwarded message of ${body.length} bytes is above the ${l.maxMessageBytes}-byte cap`,
        {
          bytes: body.length,
          max: l.maxMessageBytes,
        },
      );
    }
    const oq = this.owners.get(owner);
    const count = oq?.messages.size ?? 0;
    const bytes = oq?.bytes ?? 0;
    if (count + 1 > l.maxMessages || bytes + body.length > l.maxBytes || this.all.size + 1 > l.maxTotalMessages) {
      throw new PlexusError(
        'PLX_MEDIATOR_QUEUE_FULL',
        `the recipient's queue is full (${count} messages, ${bytes} bytes; at most ${l.maxMessages} and ${l.maxBytes}): try again after it picks up`,
        { messages: count, bytes },
      );
    }
    const idBytes = randomBytes(ID_BYTES);
    const receivedAt = this.clock.now();
    const { first } = await this.log.append([encodeMessage(idBytes, receivedAt, owner, recipient, body)]);
    const m: QueuedMessage = { id: hex(idBytes), position: first, owner, recipient, bytes: body.length, receivedAt };
    this.index(m);
    return m;
  }

  /** The owner's queued messages, oldest first, optionally only those for one recipient. */
  list(owner: string, recipient?: string): QueuedMessage[] {
    const oq = this.owners.get(owner);
    if (!oq) return [];
    const out = [...oq.messages.values()];
    return recipient === undefined ? out : out.filter((m) => m.recipient === recipient);
  }

  /** Iterates the owner's queued messages, oldest first. */
  *iterate(owner: string): Generator<QueuedMessage> {
    const oq = this.owners.get(owner);
    if (oq) yield* oq.messages.values();
  }

  get(id: string): QueuedMessage | undefined {
    return this.all.get(id);
  }

  /** The stored body of a queued message, exactly as it was forwarded. */
  async body(m: QueuedMessage): Promise<Uint8Array> {
    const [r] = await this.log.read(m.position, { maxCount: 1 });
    if (!r || r.position !== m.position) throw corrupt(m.position, 'missing');
    const d = decodeRecord(r.payload, r.position);
    if (d.kind !== 'message' || d.id !== m.id) throw corrupt(m.position, 'another record');
    return r.payload.subarray(d.bodyOffset, d.bodyOffset + d.bodyLength);
  }

  /**
   * Marks the owner's messages with these ids received, durably (resolves once fsynced), and
   * drops them. Unknown ids and other owners' ids are ignored. Returns the ids removed.
   */
  async received(owner: string, ids: readonly string[]): Promise<string[]> {
    const mine = [...new Set(ids)].filter((id) => ID_RE.test(id) && this.all.get(id)?.owner === owner);
    const done: string[] = [];
    for (let i = 0; i < mine.length; i += MAX_RECEIVED_IDS) {
      const chunk = mine.slice(i, i + MAX_RECEIVED_IDS);
      await this.log.append([encodeReceived(chunk.map((id) => Buffer.from(id, 'hex')))]);
      for (const id of chunk) if (this.unindex(id)) done.push(id);
    }
    if (done.length > 0) this.compact();
    return done;
  }

  /** Counts for a pickup status. */
  stats(owner: string, recipient?: string): { count: number; bytes: number; oldest?: number; newest?: number } {
    const ms = this.list(owner, recipient);
    let bytes = 0;
    let oldest: number | undefined;
    let newest: number | undefined;
    for (const m of ms) {
      bytes += m.bytes;
      if (oldest === undefined || m.receivedAt < oldest) oldest = m.receivedAt;
      if (newest === undefined || m.receivedAt > newest) newest = m.receivedAt;
    }
    return { count: ms.length, bytes, ...(oldest !== undefined ? { oldest, newest: newest! } : {}) };
  }

  /** Drops whole log segments below the oldest queued message (in the background). */
  compact(): void {
    if (this.compacting) return;
    const oldest = this.all.values().next().value as QueuedMessage | undefined;
    const below = oldest ? oldest.position : this.log.last + 1n;
    if (below <= this.log.first) return;
    this.compacting = this.log
      .compactBefore(below)
      .catch(() => {})
      .finally(() => {
        this.compacting = undefined;
      });
  }

  async close(): Promise<void> {
    await this.compacting;
    await this.log.close();
  }
}
