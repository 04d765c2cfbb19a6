/**
 * A synchronous test network for the Raft core, in the style of etcd's interaction tests:
 * nodes with in-memory storage, a message queue per recipient, link cuts, crash and restart,
 * and a text rendering of every Ready and message so scenario scripts can pin traces.
 */

import { decodeConfChange } from '../../ts/codec/raft-confchange.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage, type RaftStorageWriter } from '../../ts/raft/storage.js';
import type { Entry, Message, RaftOptions, Ready } from '../../ts/raft/types.js';
import { SimRandom } from '../../ts/sim/rng.js';

const dec = new TextDecoder();
const enc = new TextEncoder();
export const bytes = (s: string) => enc.encode(s);

export function fmtEntry(e: Entry): string {
  if (e.type === 'conf-change') {
    const cc = decodeConfChange(e.data);
    return `${e.term}/${e.index} ${cc.type} ${cc.nodeId}`;
  }
  return `${e.term}/${e.index} ${JSON.stringify(dec.decode(e.data))}`;
}

export function fmtMsg(m: Message): string {
  let s = `${m.from}->${m.to} ${m.type} term=${m.term}`;
  switch (m.type) {
    case 'MsgApp':
      s += ` log=${m.logTerm}/${m.index} commit=${m.commit}`;
      if (m.entries.length > 0) s += ` entries=[${m.entries.map(fmtEntry).join(', ')}]`;
      break;
    case 'MsgAppResp':
      s += ` index=${m.index}`;
      if (m.reject) s += ` rejected hint=${m.logTerm}/${m.rejectHint}`;
      break;
    case 'MsgVote':
    case 'MsgPreVote':
      s += ` log=${m.logTerm}/${m.index}`;
      if (m.transfer) s += ' transfer';
      break;
    case 'MsgVoteResp':
    case 'MsgPreVoteResp':
      if (m.reject) s += ' rejected';
      break;
    case 'MsgHeartbeat':
      s += ` commit=${m.commit}`;
      break;
    case 'MsgSnap': {
      const md = m.snapshot!.metadata;
      s += ` snapshot=${md.term}/${md.index} voters=${md.confState.voters.join(',')}`;
      if (md.confState.learners.length > 0) s += ` learners=${md.confState.learners.join(',')}`;
      break;
    }
    case 'MsgReadIndexResp':
      s += ` index=${m.index}`;
      break;
  }
  if (m.context !== undefined && m.context.length > 0) s += ` ctx=${dec.decode(m.context)}`;
  return s;
}

export function fmtReady(id: number, rd: Ready): string[] {
  const out = [`> ${id} ready`];
  if (rd.softState) out.push(`  role=${rd.softState.role} lead=${rd.softState.lead}`);
  if (rd.hardState) out.push(`  hs term=${rd.hardState.term} vote=${rd.hardState.vote} commit=${rd.hardState.commit}`);
  if (rd.snapshot) out.push(`  snapshot ${rd.snapshot.metadata.term}/${rd.snapshot.metadata.index}`);
  if (rd.entries.length > 0) out.push(`  entries: ${rd.entries.map(fmtEntry).join(', ')}`);
  if (rd.committedEntries.length > 0) out.push(`  committed: ${rd.committedEntries.map(fmtEntry).join(', ')}`);
  for (const r of rd.readStates) out.push(`  read-state index=${r.index} ctx=${dec.decode(r.context)}`);
  for (const m of rd.messages) out.push(`  send ${fmtMsg(m)}`);
  return out;
}

export interface TestNode {
  readonly id: number;
  storage: MemoryRaftStorage;
  node: RaftNode | undefined;
  /** Everything the node applied, in order (normal and conf-change entries). */
  applied: Entry[];
}

export type NodeOptions = Partial<Omit<RaftOptions, 'id' | 'storage' | 'random'>>;

export class TestCluster {
  readonly nodes = new Map<number, TestNode>();
  /** Messages sent and not yet delivered, in send order. */
  queue: Message[] = [];
  private cut = new Set<string>();
  readonly rng: SimRandom;
  /** Lines of output since the last `takeOutput()`. */
  out: string[] = [];
  trace = true;

  constructor(
    voters: number,
    readonly opts: NodeOptions = {},
    seed = 1,
  ) {
    this.rng = new SimRandom(seed);
    const ids = Array.from({ length: voters }, (_, i) => i + 1);
    for (const id of ids) this.add(id, MemoryRaftStorage.bootstrap({ voters: ids, learners: [] }));
  }

  /** Adds a node; without a storage it joins empty (it must be added by a conf change). */
  add(id: number, storage = new MemoryRaftStorage()): TestNode {
    const t: TestNode = { id, storage, node: undefined, applied: [] };
    this.nodes.set(id, t);
    this.start(t);
    return t;
  }

  private start(t: TestNode): void {
    const rng = this.rng.fork();
    t.node = new RaftNode({ id: t.id, storage: t.storage, random: (n) => rng.int(n), ...this.opts });
  }

  get(id: number): RaftNode {
    const n = this.nodes.get(id)?.node;
    if (!n) throw new Error(`node ${id} is down or unknown`);
    return n;
  }

  crash(id: number): void {
    const t = this.nodes.get(id)!;
    t.node = undefined;
    this.queue = this.queue.filter((m) => m.to !== id);
  }

  restart(id: number): void {
    const t = this.nodes.get(id)!;
    t.applied = [];
    this.start(t);
  }

  isolate(id: number): void {
    for (const other of this.nodes.keys()) if (other !== id) this.cutLink(id, other);
  }

  cutLink(a: number, b: number): void {
    this.cut.add(`${a}-${b}`);
    this.cut.add(`${b}-${a}`);
  }

  heal(): void {
    this.cut.clear();
  }

  /** Handles every pending Ready of `id`: persist, queue the messages, apply, advance. */
  processReady(id: number): boolean {
    const t = this.nodes.get(id);
    const n = t?.node;
    if (!t || !n?.hasReady()) return false;
    while (n.hasReady()) {
      const rd = n.ready();
      if (this.trace) this.out.push(...fmtReady(id, rd));
      if (rd.snapshot) t.storage.applySnapshot(rd.snapshot);
      t.storage.append(rd.entries);
      if (rd.hardState) t.storage.setHardState(rd.hardState);
      for (const m of rd.messages) this.queue.push(m);
      t.applied.push(...rd.committedEntries);
      n.advance();
    }
    return true;
  }

  /** Delivers the queued messages addressed to `id` (all when undefined); cut links lose theirs. */
  deliver(id?: number): number {
    const take = this.queue.filter((m) => id === undefined || m.to === id);
    this.queue = this.queue.filter((m) => !(id === undefined || m.to === id));
    let n = 0;
    for (const m of take) {
      const dst = this.nodes.get(m.to)?.node;
      if (!dst) continue;
      if (this.cut.has(`${m.from}-${m.to}`)) {
        if (this.trace) this.out.push(`  dropped ${fmtMsg(m)}`);
        continue;
      }
      if (this.trace) this.out.push(`  deliver ${fmtMsg(m)}`);
      dst.step(m);
      n++;
    }
    return n;
  }

  /** Processes every Ready and delivers every message until nothing moves. */
  stabilize(limit = 1000): void {
    for (let i = 0; i < limit; i++) {
      let moved = false;
      for (const id of [...this.nodes.keys()].sort((a, b) => a - b)) moved = this.processReady(id) || moved;
      if (this.queue.length > 0) {
        this.deliver();
        moved = true;
      }
      if (!moved) return;
    }
    throw new Error('the cluster did not stabilize');
  }

  tick(id: number, n = 1): void {
    for (let i = 0; i < n; i++) this.get(id).tick();
  }

  /** Runs `f` and returns its error's code and leader, or undefined. */
  static attempt(f: () => void): string | undefined {
    try {
      f();
      return undefined;
    } catch (e) {
      if (isPlexusError(e)) {
        const leader = e.details.leader;
        return leader === undefined ? e.code : `${e.code} leader=${String(leader)}`;
      }
      throw e;
    }
  }

  takeOutput(): string[] {
    const o = this.out;
    this.out = [];
    return o;
  }

  /** The payloads every live node applied, as text (empty entries left out). */
  appliedText(id: number): string[] {
    return this.nodes
      .get(id)!
      .applied.filter((e) => e.type === 'normal' && e.data.length > 0)
      .map((e) => dec.decode(e.data));
  }

  leader(): number {
    for (const t of this.nodes.values()) if (t.node?.status().role === 'leader') return t.id;
    return 0;
  }
}

/** The driver's storage seam over a MemoryRaftStorage, with `sync` supplied by the test. */
export function memoryWriter(
  storage: MemoryRaftStorage,
  sync: () => Promise<void>,
): RaftStorageWriter & { sync(): Promise<void> } {
  return {
    append: (es) => storage.append(es),
    setHardState: (h) => storage.setHardState(h),
    applySnapshot: (s) => storage.applySnapshot(s),
    compact: (s) => storage.compact(s),
    sync,
  };
}
