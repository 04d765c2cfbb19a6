/**
 * A shared journal store for nodes in separate processes: one process (the store host)
 * opens one log-engine store per shard under a shared directory (`<dir>/shards/<7 digits>`,
 * the single-node journal layout) and serves appends and reads over the cluster wire's call
 * channel. The epoch check of each append runs inside the store host, so it is atomic: once
 * a shard's store accepted epoch e, every append of a lower epoch is refused
 * `PLX_STORAGE_FENCED`, however late the stale owner sends it. `RemoteLog` is the
 * `LogStorage` a node uses to reach it.
 *
 * Requests are one tag byte (STORE_TAG) and JSON; payloads are base64. A request above the
 * wire's call limit is refused by the wire; shapes are checked before use.
 */
import { mkdir } from 'node:fs/promises';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { shardDir } from '../runtime/log-journal.js';
import { openLog } from '../storage/index.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import { ClusterCode } from './errors.js';

/** The first byte of a store request on the call channel (authority requests start with `{`). */
export const STORE_TAG = 0x01;
const MAX_READ_BYTES = 4 * 1024 * 1024;
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

type StoreRequest =
  | { readonly op: 'info'; readonly shard: number }
  | { readonly op: 'append'; readonly shard: number; readonly payloads: string[]; readonly epoch?: string }
  | { readonly op: 'read'; readonly shard: number; readonly from: string; readonly maxCount?: number };

interface StoreReply {
  readonly ok: boolean;
  readonly code?: string;
  readonly message?: string;
  readonly details?: Record<string, unknown>;
  readonly first?: string;
  readonly last?: string;
  readonly highestEpoch?: string;
  readonly result?: { first: string; last: string; batchId: string };
  readonly records?: { position: string; epoch: string; batchId: string; payload: string }[];
}

function bad(message: string): PlexusError {
  return new PlexusError('PLX_CLUSTER_BAD_REQUEST', message);
}

function encodeStore(o: unknown): Uint8Array {
  const body = enc.encode(JSON.stringify(o));
  const out = new Uint8Array(body.length + 1);
  out[0] = STORE_TAG;
  out.set(body, 1);
  return out;
}

function parseBody(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(dec.decode(bytes.subarray(1)));
  } catch {
    throw bad('a store request is not UTF-8 JSON');
  }
}

/** Serves the shard stores of `dir` (the store host's side). */
export class StoreHost {
  private readonly logs = new Map<number, Promise<LogStorage>>();

  constructor(
    readonly dir: string,
    readonly shardCount: number,
    private readonly fsync: 'batch' | 'always' | 'never' = 'batch',
  ) {}

  private log(shard: number): Promise<LogStorage> {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.shardCount) {
      throw new PlexusError('PLX_CLUSTER_BAD_SHARD', `shard ${shard} is outside 0..${this.shardCount - 1}`, { shard });
    }
    let p = this.logs.get(shard);
    if (p === undefined) {
      p = (async () => {
        const d = shardDir(this.dir, shard);
        await mkdir(d, { recursive: true });
        return openLog(d, { fsync: this.fsync });
      })();
      p.catch(() => this.logs.delete(shard));
      this.logs.set(shard, p);
    }
    return p;
  }

  /** Answers one store request (the bytes after the wire's call). */
  handle = async (_from: string, body: Uint8Array): Promise<Uint8Array> => {
    let reply: StoreReply;
    try {
      reply = await this.answer(parseBody(body));
    } catch (e) {
      reply = {
        ok: false,
        code: isPlexusError(e) ? e.code : 'PLX_CLUSTER_UNAVAILABLE',
        message: (e as Error).message,
        details: isPlexusError(e) ? jsonSafe(e.details) : {},
      };
    }
    return enc.encode(JSON.stringify(reply));
  };

  private async answer(r: unknown): Promise<StoreReply> {
    if (typeof r !== 'object' || r === null) throw bad('a store request must be an object');
    const q = r as StoreRequest;
    const log = await this.log(q.shard);
    const info = () => ({ first: `${log.first}`, last: `${log.last}`, highestEpoch: `${log.highestEpoch}` });
    if (q.op === 'info') return { ok: true, ...info() };
    if (q.op === 'append') {
      if (!Array.isArray(q.payloads) || q.payloads.some((p) => typeof p !== 'string')) {
        throw bad('append needs payloads as base64 strings');
      }
      if (q.epoch !== undefined && !/^[0-9]{1,20}$/.test(q.epoch)) throw bad('append epoch must be a decimal string');
      const opts: AppendOptions = q.epoch === undefined ? {} : { epoch: BigInt(q.epoch) };
      const res = await log.append(
        q.payloads.map((p) => Buffer.from(p, 'base64')),
        opts,
      );
      return {
        ok: true,
        ...info(),
        result: { first: `${res.first}`, last: `${res.last}`, batchId: Buffer.from(res.batchId).toString('hex') },
      };
    }
    if (q.op === 'read') {
      if (typeof q.from !== 'string' || !/^[0-9]{1,20}$/.test(q.from)) throw bad('read needs a decimal `from`');
      const maxCount = Math.min(Math.max(1, Number(q.maxCount ?? 1024) | 0), 65_536);
      const recs = await log.read(BigInt(q.from), { maxCount, maxBytes: MAX_READ_BYTES });
      return {
        ok: true,
        ...info(),
        records: recs.map((x) => ({
          position: `${x.position}`,
          epoch: `${x.epoch}`,
          batchId: Buffer.from(x.batchId).toString('hex'),
          payload: Buffer.from(x.payload).toString('base64'),
        })),
      };
    }
    throw bad(`unknown store operation ${JSON.stringify((q as { op?: unknown }).op)}`);
  }

  async close(): Promise<void> {
    const all = [...this.logs.values()];
    this.logs.clear();
    for (const p of all) await (await p.catch(() => undefined))?.close();
  }
}

function jsonSafe(d: Record<string, unknown>): Record<string, unknown> {
  return JSON.parse(JSON.stringify(d, (_k, v) => (typeof v === 'bigint' ? `${v}` : v))) as Record<string, unknown>;
}

/** One shard's store on a store host, reached with `call` (the wire's call to the host). */
export class RemoteLog implements LogStorage {
  private firstPos = 0n;
  private lastPos = 0n;
  private highest = 0n;

  private constructor(
    private readonly shard: number,
    private readonly call: (body: Uint8Array) => Promise<Uint8Array>,
  ) {}

  static async open(shard: number, call: (body: Uint8Array) => Promise<Uint8Array>): Promise<RemoteLog> {
    const l = new RemoteLog(shard, call);
    await l.request({ op: 'info', shard });
    return l;
  }

  get first(): bigint {
    return this.firstPos;
  }
  get last(): bigint {
    return this.lastPos;
  }
  get highestEpoch(): bigint {
    return this.highest;
  }

  private async request(q: StoreRequest): Promise<StoreReply> {
    const bytes = await this.call(encodeStore(q));
    let r: StoreReply;
    try {
      r = JSON.parse(dec.decode(bytes)) as StoreReply;
    } catch {
      throw bad('the store host answered something that is not JSON');
    }
    if (!r.ok) {
      throw new PlexusError(codeFromPeer(r.code ?? 'PLX_CLUSTER_UNAVAILABLE'), r.message ?? 'the store host refused', {
        ...(r.details ?? {}),
        shard: this.shard,
      });
    }
    if (r.first !== undefined) this.firstPos = BigInt(r.first);
    if (r.last !== undefined) this.lastPos = BigInt(r.last);
    if (r.highestEpoch !== undefined) this.highest = BigInt(r.highestEpoch);
    return r;
  }

  async append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    const r = await this.request({
      op: 'append',
      shard: this.shard,
      payloads: payloads.map((p) => Buffer.from(p).toString('base64')),
      ...(opts.epoch === undefined ? {} : { epoch: `${opts.epoch}` }),
    });
    const res = r.result as { first: string; last: string; batchId: string };
    return { first: BigInt(res.first), last: BigInt(res.last), batchId: Buffer.from(res.batchId, 'hex') };
  }

  async read(from: bigint, opts: ReadOptions = {}): Promise<LogRecord[]> {
    const r = await this.request({
      op: 'read',
      shard: this.shard,
      from: `${from}`,
      ...(opts.maxCount === undefined ? {} : { maxCount: opts.maxCount }),
    });
    return (r.records ?? []).map((x) => ({
      position: BigInt(x.position),
      epoch: BigInt(x.epoch),
      batchId: Buffer.from(x.batchId, 'hex'),
      payload: Buffer.from(x.payload, 'base64'),
    })) as LogRecord[];
  }

  async readBackward(): Promise<LogRecord[]> {
    throw new PlexusError(ClusterCode.UNSUPPORTED, 'a remote shard store reads forwards only');
  }
  async compactBefore(): Promise<void> {
    throw new PlexusError(ClusterCode.UNSUPPORTED, 'a remote shard store is compacted on its host only');
  }
  async close(): Promise<void> {}
}
