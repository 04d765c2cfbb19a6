/**
 * The receive side shared by every wire: drops repeats by message id (a bounded cache of
 * `dedupCapacity` ids, oldest forgotten first), lets one copy of an id in at a time, and turns
 * the frame handler's answer into an ACK status.
 */
import { AckStatus, type AckStatusCode, type ClusterFrame } from '../codec/cluster-frame.js';
import type { FrameHandler } from './types.js';

export class DedupCache {
  private readonly ids = new Set<string>();
  /** The ids in insertion order, as a ring: the oldest is forgotten first. */
  private readonly ring: (string | undefined)[];
  private next = 0;

  constructor(readonly capacity: number) {
    this.ring = new Array(capacity);
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  add(id: string): void {
    if (this.capacity === 0 || this.ids.has(id)) return;
    const oldest = this.ring[this.next];
    if (oldest !== undefined) this.ids.delete(oldest);
    this.ring[this.next] = id;
    this.next = (this.next + 1) % this.capacity;
    this.ids.add(id);
  }

  get size(): number {
    return this.ids.size;
  }
}

/** A message id as a map key (16 bytes as 16 latin-1 characters). */
export function idKey(id: Uint8Array): string {
  return String.fromCharCode(
    id[0]!,
    id[1]!,
    id[2]!,
    id[3]!,
    id[4]!,
    id[5]!,
    id[6]!,
    id[7]!,
    id[8]!,
    id[9]!,
    id[10]!,
    id[11]!,
    id[12]!,
    id[13]!,
    id[14]!,
    id[15]!,
  );
}

export class Receiver {
  readonly dedup: DedupCache;
  private handler: FrameHandler = async () => 'refused';
  private readonly inflight = new Map<string, Promise<AckStatusCode>>();

  constructor(dedupCapacity: number) {
    this.dedup = new DedupCache(dedupCapacity);
  }

  setHandler(h: FrameHandler): void {
    this.handler = h;
  }

  /** Handles one inbound DATA frame; resolves with the ACK status once it is stored or refused. */
  handle(from: string, frame: ClusterFrame): Promise<AckStatusCode> {
    const id = idKey(frame.messageId);
    if (this.dedup.has(id)) return Promise.resolve(AckStatus.duplicate);
    const running = this.inflight.get(id);
    if (running) return running.then((s) => (s === AckStatus.stored ? AckStatus.duplicate : s));
    let stored: Promise<'stored' | 'stale' | 'refused'>;
    try {
      stored = this.handler(from, frame);
    } catch {
      stored = Promise.resolve('refused');
    }
    const p = stored.then(
      (verdict) => {
        this.inflight.delete(id);
        if (verdict !== 'refused') this.dedup.add(id);
        return AckStatus[verdict] ?? AckStatus.refused;
      },
      () => {
        this.inflight.delete(id);
        return AckStatus.refused;
      },
    );
    this.inflight.set(id, p);
    return p;
  }
}
