/**
 * Simulated Raft storage with disk latency and crash loss. Writes land at once in the
 * member's working copy (what its core reads, as `FileRaftStorage` keeps a mirror) and are
 * queued; `sync()` makes what was queued durable after a seeded latency, on the simulated
 * clock. A crash keeps only what was durable: `recover()` gives the storage a restarted member
 * reads. Writes that `sync()` is never called for (a hard state that only moves the commit
 * index) become durable with the next sync, or are lost by a crash, as on a real disk.
 */
import type { Timers } from '../../core/clock.js';
import { MemoryRaftStorage, type RaftStorageWriter } from '../../raft/storage.js';
import type { Entry, HardState, Snapshot } from '../../raft/types.js';

type Write =
  | { readonly kind: 'append'; readonly entries: readonly Entry[] }
  | { readonly kind: 'hard'; readonly hs: HardState }
  | { readonly kind: 'snapshot'; readonly snap: Snapshot }
  | { readonly kind: 'compact'; readonly snap: Snapshot };

/** A thenable that calls its callbacks synchronously when the simulated disk is done. */
class DiskDone implements PromiseLike<void> {
  private done = false;
  private readonly callbacks: (() => void)[] = [];

  resolve(): void {
    this.done = true;
    for (const f of this.callbacks.splice(0)) f();
  }

  // biome-ignore lint/suspicious/noThenProperty: a thenable on purpose (it settles on simulated time)
  then<A = void, B = never>(onOk?: ((v: undefined) => A | PromiseLike<A>) | null): PromiseLike<A | B> {
    if (onOk) {
      if (this.done) onOk(undefined);
      else this.callbacks.push(() => void onOk(undefined));
    }
    return this as unknown as PromiseLike<A | B>;
  }
}

function apply(to: MemoryRaftStorage, w: Write): void {
  if (w.kind === 'append') to.append(w.entries);
  else if (w.kind === 'hard') to.setHardState(w.hs);
  else if (w.kind === 'snapshot') to.applySnapshot(w.snap);
  else to.compact(w.snap);
}

export class SimDisk implements RaftStorageWriter {
  /** What the member's core reads and writes. */
  readonly storage: MemoryRaftStorage;
  private pending: Write[] = [];
  private dead = false;

  constructor(
    /** What survives a crash. */
    private readonly durable: MemoryRaftStorage,
    private readonly timers: Timers,
    /** Milliseconds the next sync takes. */
    private readonly latency: () => number,
    /** Told of each hard state once it is durable. */
    private readonly onDurableHardState?: (hs: HardState) => void,
  ) {
    this.storage = SimDisk.copy(durable);
  }

  /** A copy of a storage: its snapshot, entries and hard state. */
  static copy(from: MemoryRaftStorage): MemoryRaftStorage {
    const s = new MemoryRaftStorage();
    s.applySnapshot(from.snapshot());
    const first = from.firstIndex();
    const last = from.lastIndex();
    if (last >= first) s.append(from.entries(first, last + 1));
    s.setHardState(from.initialState().hardState);
    return s;
  }

  private write(w: Write): void {
    if (this.dead) return;
    apply(this.storage, w);
    this.pending.push(w);
  }

  append(entries: readonly Entry[]): void {
    if (entries.length > 0) this.write({ kind: 'append', entries });
  }

  setHardState(hs: HardState): void {
    this.write({ kind: 'hard', hs });
  }

  applySnapshot(snap: Snapshot): void {
    this.write({ kind: 'snapshot', snap });
  }

  compact(snap: Snapshot): void {
    this.write({ kind: 'compact', snap });
  }

  /** Resolves, on the simulated clock, once every write made so far is durable. */
  sync(): PromiseLike<void> {
    const writes = this.pending;
    this.pending = [];
    const done = new DiskDone();
    this.timers.setTimeout(() => {
      if (this.dead) return; // the member crashed meanwhile: the writes are lost, nobody waits
      for (const w of writes) {
        apply(this.durable, w);
        if (w.kind === 'hard') this.onDurableHardState?.(w.hs);
      }
      done.resolve();
    }, this.latency());
    return done;
  }

  /** The member crashes: what was not durable is lost, and later writes go nowhere. */
  crash(): void {
    this.dead = true;
    this.pending = [];
  }
}
