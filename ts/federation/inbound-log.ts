/**
 * The per-actor inbound log: what federation's admission pipeline refused for an actor, and the
 * senders an actor has admitted a message from (its contacts). It is the `<actor>/inbound` graph
 * of the design, kept as a log on the log engine: `graphName(actor)` is that name and
 * `entries(actor)` reads its contents back, oldest first.
 *
 * One log holds every actor's records (one log-engine record each), in the format of
 * ts/codec/inbound-record.ts.
 * Opening reads the log once and keeps, per actor, the positions of its records and its contacts.
 */
import {
  decodeInboundEntry,
  encodeInboundEntry,
  type InboundEntry,
  type InboundRefusal,
} from '../codec/inbound-record.js';
import { MemoryLog } from '../storage/memory-log.js';
import type { LogStorage } from '../storage/types.js';

/** The graph name the design gives an actor's inbound records. */
export function graphName(actor: string): string {
  return `${actor}/inbound`;
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
