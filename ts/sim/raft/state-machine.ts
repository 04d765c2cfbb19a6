/**
 * The application the simulator replicates: an append-only log of string values. A normal
 * entry's payload is one value (UTF-8); applying it gives the value the next position unless
 * the same value was applied before (an idempotency key: a duplicate keeps its first position).
 */
import type { Entry } from '../../raft/types.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encodeValue(v: string): Uint8Array {
  return enc.encode(v);
}

export class LogStateMachine {
  values: string[] = [];
  private positions = new Map<string, number>();
  applied = 0;

  /** Applies a committed entry; returns the position of its value, or undefined for an empty or conf-change entry. */
  apply(e: Entry): number | undefined {
    this.applied = e.index;
    if (e.type !== 'normal' || e.data.length === 0) return undefined;
    const v = dec.decode(e.data);
    const had = this.positions.get(v);
    if (had !== undefined) return had;
    this.values.push(v);
    this.positions.set(v, this.values.length);
    return this.values.length;
  }

  snapshotData(): Uint8Array {
    return enc.encode(JSON.stringify(this.values));
  }

  restore(index: number, data: Uint8Array): void {
    const values = data.length === 0 ? [] : (JSON.parse(dec.decode(data)) as string[]);
    this.values = [...values];
    this.positions = new Map(values.map((v, i) => [v, i + 1]));
    this.applied = index;
  }
}
