/**
 * A small client of etcd v3's JSON gateway on `node:http` (no dependency): `/v3/kv/range`,
 * `/v3/kv/txn`, `/v3/lease/grant`, `/v3/lease/keepalive` (one POST per renewal),
 * `/v3/lease/revoke` and `/v3/watch` (a stream of JSON results). Keys and values travel as
 * base64, int64 values as decimal strings (read here as bigint); the gateway leaves out
 * fields at their default (an empty `kvs`, `succeeded: false`, a zero `TTL`).
 *
 * Every call has a timeout (`timeoutMs`) and bounded retries (a RetryPolicy, ts/core/retry.ts),
 * moving to the next endpoint after a failure, so that a dead etcd member is passed over. A
 * call whose retries are spent rejects with PLX_CLUSTER_UNAVAILABLE. A reply is read up to
 * `maxResponseBytes`; one above it, not JSON, or without the fields its call needs is refused
 * with PLX_CLUSTER_ETCD_RESPONSE (the decoders below, which throw nothing else). A retried
 * txn may have been applied once already: callers make every txn a compare-and-set, so a
 * repeat fails its comparison instead of applying twice.
 */
import { request } from 'node:http';
import type { ClockTimers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { heldClock, RetryPolicy, retry } from '../core/retry.js';
import { ClusterCode, clusterError } from './errors.js';

/** One key-value as etcd returns it. */
export interface EtcdKv {
  readonly key: string;
  readonly value: Buffer;
  readonly createRevision: bigint;
  readonly modRevision: bigint;
  readonly version: bigint;
  /** The etcd lease the key is bound to (0n: none). */
  readonly lease: bigint;
}

export interface EtcdRange {
  readonly revision: bigint;
  readonly kvs: readonly EtcdKv[];
}

export interface EtcdTxnResult {
  readonly succeeded: boolean;
  readonly revision: bigint;
  /** The ranges among the operations that ran, in order. */
  readonly ranges: readonly EtcdRange[];
}

export type EtcdCompare =
  | { readonly key: string; readonly target: 'MOD'; readonly modRevision: bigint }
  | { readonly key: string; readonly target: 'CREATE'; readonly createRevision: bigint };

export type EtcdOp =
  | { readonly put: string; readonly value: string | Buffer; readonly lease?: bigint }
  | { readonly del: string }
  | { readonly range: string; readonly prefix?: boolean };

export interface EtcdWatchEvent {
  readonly type: 'PUT' | 'DELETE';
  readonly kv: EtcdKv;
}

export interface EtcdGatewayOptions {
  /** Client URLs (`http://127.0.0.1:2379`), tried in turn. */
  readonly endpoints: readonly string[];
  /** One HTTP exchange's limit (ms, default 2000). */
  readonly timeoutMs?: number;
  /** Delays between attempts (default: 8 attempts, 20 ms up to 500 ms, within 8 s). */
  readonly retry?: RetryPolicy;
  /** The largest reply read (default 4 MiB). */
  readonly maxResponseBytes?: number;
  /** Timers of the retry waits (default: real time). */
  readonly clock?: ClockTimers;
}

export const ETCD_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

const b64 = (s: string | Buffer) => (typeof s === 'string' ? Buffer.from(s, 'utf8') : s).toString('base64');

/** The key just after every key that starts with `prefix` (etcd's range_end of a prefix). */
export function prefixEnd(prefix: string): string {
  const b = Buffer.from(prefix, 'utf8');
  for (let i = b.length - 1; i >= 0; i--) {
    if ((b[i] as number) < 0xff) {
      const out = Buffer.from(b.subarray(0, i + 1));
      out[i] = (out[i] as number) + 1;
      return out.toString('base64');
    }
  }
  return b64(Buffer.from([0]));
}

// ---- decoders: bytes of a reply -> checked values, or PLX_CLUSTER_ETCD_RESPONSE ----

function bad(what: string, reason: string): never {
  throw clusterError(ClusterCode.ETCD_RESPONSE, `etcd answered ${what} with ${reason}`, { what, reason });
}

function obj(v: unknown, what: string, field: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(what, `${field} that is not an object`);
  return v as Record<string, unknown>;
}

const INT64 = /^-?\d{1,19}$/;

function int64(v: unknown, what: string, field: string): bigint {
  if (v === undefined) return 0n;
  if (typeof v !== 'string' || !INT64.test(v)) bad(what, `${field} that is not an int64 string`);
  const n = BigInt(v as string);
  if (n > (1n << 63n) - 1n || n < -(1n << 63n)) bad(what, `${field} outside int64`);
  return n;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function bytes(v: unknown, what: string, field: string): Buffer {
  if (v === undefined) return Buffer.alloc(0);
  if (typeof v !== 'string' || v.length % 4 !== 0 || !BASE64.test(v)) bad(what, `${field} that is not base64`);
  return Buffer.from(v as string, 'base64');
}

/** Parses a reply's bytes as one JSON object (an etcd error reply is refused with its message). */
export function decodeJson(body: Uint8Array, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return bad(what, 'bytes that are not UTF-8');
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return bad(what, 'a body that is not JSON');
  }
  const o = obj(v, what, 'a body');
  if (o.error !== undefined) {
    const message = typeof o.message === 'string' ? o.message : typeof o.error === 'string' ? o.error : '?';
    bad(what, `an error: ${message.slice(0, 200)}`);
  }
  return o;
}

function decodeKv(v: unknown, what: string): EtcdKv {
  const o = obj(v, what, 'a kv');
  const key = bytes(o.key, what, 'a key');
  if (key.length === 0) bad(what, 'an empty key');
  return {
    key: key.toString('utf8'),
    value: bytes(o.value, what, 'a value'),
    createRevision: int64(o.create_revision, what, 'create_revision'),
    modRevision: int64(o.mod_revision, what, 'mod_revision'),
    version: int64(o.version, what, 'version'),
    lease: int64(o.lease, what, 'lease'),
  };
}

function revisionOf(o: Record<string, unknown>, what: string): bigint {
  return int64(obj(o.header, what, 'a header').revision, what, 'header.revision');
}

function decodeRangeObject(o: Record<string, unknown>, what: string): EtcdRange {
  const kvs = o.kvs === undefined ? [] : o.kvs;
  if (!Array.isArray(kvs)) bad(what, 'kvs that is not a list');
  return { revision: revisionOf(o, what), kvs: (kvs as unknown[]).map((kv) => decodeKv(kv, what)) };
}

/** A `/v3/kv/range` reply. */
export function decodeRange(body: Uint8Array): EtcdRange {
  return decodeRangeObject(decodeJson(body, 'range'), 'range');
}

/** A `/v3/kv/txn` reply. */
export function decodeTxn(body: Uint8Array): EtcdTxnResult {
  const o = decodeJson(body, 'txn');
  if (o.succeeded !== undefined && typeof o.succeeded !== 'boolean') bad('txn', 'succeeded that is not a boolean');
  const responses = o.responses === undefined ? [] : o.responses;
  if (!Array.isArray(responses)) bad('txn', 'responses that is not a list');
  const ranges: EtcdRange[] = [];
  for (const r of responses as unknown[]) {
    const ro = obj(r, 'txn', 'a response');
    if (ro.response_range !== undefined) {
      const rr = obj(ro.response_range, 'txn', 'response_range');
      ranges.push(decodeRangeObject({ header: o.header, ...rr }, 'txn'));
    }
  }
  return { succeeded: o.succeeded === true, revision: revisionOf(o, 'txn'), ranges };
}

/** A `/v3/lease/grant` reply: the lease's ID and TTL (s). */
export function decodeLeaseGrant(body: Uint8Array): { id: bigint; ttl: bigint } {
  const o = decodeJson(body, 'lease grant');
  const id = int64(o.ID, 'lease grant', 'ID');
  const ttl = int64(o.TTL, 'lease grant', 'TTL');
  if (id <= 0n || ttl <= 0n) bad('lease grant', 'no lease');
  return { id, ttl };
}

/** A `/v3/lease/keepalive` reply: the lease's TTL (s) after the renewal, 0n when it is gone. */
export function decodeKeepAlive(body: Uint8Array): bigint {
  const o = decodeJson(body, 'lease keepalive');
  const r = obj(o.result, 'lease keepalive', 'a result');
  int64(r.ID, 'lease keepalive', 'ID');
  return int64(r.TTL, 'lease keepalive', 'TTL');
}

/** One result of a `/v3/watch` stream: its events (none for the creation or a progress note). */
export function decodeWatchResult(body: Uint8Array): { revision: bigint; events: EtcdWatchEvent[]; canceled: boolean } {
  const o = decodeJson(body, 'watch');
  const r = obj(o.result, 'watch', 'a result');
  const events = r.events === undefined ? [] : r.events;
  if (!Array.isArray(events)) bad('watch', 'events that is not a list');
  return {
    revision: revisionOf(r, 'watch'),
    canceled: r.canceled === true,
    events: (events as unknown[]).map((e) => {
      const eo = obj(e, 'watch', 'an event');
      if (eo.type !== undefined && eo.type !== 'PUT' && eo.type !== 'DELETE') bad('watch', 'an event of unknown type');
      return { type: eo.type === 'DELETE' ? 'DELETE' : 'PUT', kv: decodeKv(eo.kv, 'watch') };
    }),
  };
}

// ---- the client ----

/** Whether a failed exchange is worth another attempt (a transport failure or etcd unavailable now). */
function retryable(e: unknown): boolean {
  if (e instanceof PlexusError) return e.code === ClusterCode.UNAVAILABLE;
  return true;
}

export class EtcdGateway {
  readonly endpoints: readonly string[];
  private readonly timeoutMs: number;
  private readonly policy: RetryPolicy;
  private readonly maxBytes: number;
  private readonly clock: ClockTimers;
  private next = 0;

  constructor(opts: EtcdGatewayOptions) {
    if (opts.endpoints.length === 0) {
      throw clusterError(ClusterCode.BAD_CONFIG, 'the etcd authority needs at least one etcd endpoint', {
        field: 'endpoints',
      });
    }
    this.endpoints = [...opts.endpoints];
    this.timeoutMs = opts.timeoutMs ?? 2000;
    this.policy = opts.retry ?? new RetryPolicy({ baseMs: 20, capMs: 500, maxAttempts: 8, deadlineMs: 8000 });
    this.maxBytes = opts.maxResponseBytes ?? ETCD_MAX_RESPONSE_BYTES;
    this.clock = opts.clock ?? heldClock;
  }

  range(key: string, prefix = false): Promise<EtcdRange> {
    const body: Record<string, string> = { key: b64(key) };
    if (prefix) body.range_end = prefixEnd(key);
    return this.call('/v3/kv/range', body, decodeRange);
  }

  /** One transaction: if every comparison holds, `success` runs, else `failure`. */
  txn(
    compare: readonly EtcdCompare[],
    success: readonly EtcdOp[],
    failure: readonly EtcdOp[] = [],
  ): Promise<EtcdTxnResult> {
    const cmp = compare.map((c) =>
      c.target === 'MOD'
        ? { key: b64(c.key), target: 'MOD', result: 'EQUAL', mod_revision: c.modRevision.toString() }
        : { key: b64(c.key), target: 'CREATE', result: 'EQUAL', create_revision: c.createRevision.toString() },
    );
    const op = (o: EtcdOp) => {
      if ('put' in o) {
        const put: Record<string, string> = { key: b64(o.put), value: b64(o.value) };
        if (o.lease !== undefined && o.lease !== 0n) put.lease = o.lease.toString();
        return { request_put: put };
      }
      if ('del' in o) return { request_delete_range: { key: b64(o.del) } };
      const range: Record<string, string> = { key: b64(o.range) };
      if (o.prefix) range.range_end = prefixEnd(o.range);
      return { request_range: range };
    };
    return this.call('/v3/kv/txn', { compare: cmp, success: success.map(op), failure: failure.map(op) }, decodeTxn);
  }

  leaseGrant(ttlSeconds: number): Promise<{ id: bigint; ttl: bigint }> {
    return this.call('/v3/lease/grant', { TTL: String(ttlSeconds) }, decodeLeaseGrant);
  }

  /** Renews etcd lease `id` (one POST); resolves with its TTL after, 0n when it is gone. */
  keepAlive(id: bigint): Promise<bigint> {
    return this.call('/v3/lease/keepalive', { ID: id.toString() }, decodeKeepAlive);
  }

  /** Revokes etcd lease `id` (its keys are deleted); a lease already gone is no error. */
  async leaseRevoke(id: bigint): Promise<void> {
    try {
      await this.call('/v3/lease/revoke', { ID: id.toString() }, (b) => decodeJson(b, 'lease revoke'));
    } catch (e) {
      if (e instanceof PlexusError && e.code === ClusterCode.ETCD_RESPONSE && /not found/.test(e.message)) return;
      throw e;
    }
  }

  /**
   * Watches every key under `prefix` from `startRevision`; `onEvents` gets each batch, `onEnd`
   * the reason the stream ended (the caller watches again from the last revision it saw).
   */
  watch(
    prefix: string,
    startRevision: bigint,
    onEvents: (revision: bigint, events: readonly EtcdWatchEvent[]) => void,
    onEnd: (err: unknown) => void,
  ): { close(): void } {
    const endpoint = this.endpoints[this.next % this.endpoints.length] as string;
    const data = Buffer.from(
      JSON.stringify({
        create_request: { key: b64(prefix), range_end: prefixEnd(prefix), start_revision: startRevision.toString() },
      }),
    );
    let ended = false;
    const end = (err: unknown) => {
      if (ended) return;
      ended = true;
      onEnd(err);
    };
    const req = request(new URL('/v3/watch', endpoint), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': data.length },
    });
    // etcd answers a watch's creation at once: an endpoint silent until then is passed over.
    req.setTimeout(this.timeoutMs, () => {
      this.next++;
      req.destroy();
      end(clusterError(ClusterCode.UNAVAILABLE, `etcd watch at ${endpoint} did not start within ${this.timeoutMs} ms`));
    });
    req.on('response', (res) => {
      req.setTimeout(0);
      if (res.statusCode !== 200) {
        this.next++;
        res.resume();
        end(clusterError(ClusterCode.UNAVAILABLE, `etcd watch at ${endpoint} answered HTTP ${res.statusCode}`));
        return;
      }
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        if (buf.length > this.maxBytes) {
          req.destroy();
          end(clusterError(ClusterCode.ETCD_RESPONSE, 'etcd answered watch with a result above the size limit'));
          return;
        }
        let nl = buf.indexOf('\n');
        while (nl >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          nl = buf.indexOf('\n');
          if (line === '') continue;
          try {
            const r = decodeWatchResult(Buffer.from(line, 'utf8'));
            if (r.canceled) throw clusterError(ClusterCode.UNAVAILABLE, 'etcd canceled the watch');
            if (r.events.length > 0) onEvents(r.revision, r.events);
          } catch (e) {
            req.destroy();
            end(e);
            return;
          }
        }
      });
      res.on('end', () => end(clusterError(ClusterCode.UNAVAILABLE, `etcd watch at ${endpoint} ended`)));
      res.on('error', (e) => end(e));
    });
    req.on('error', (e) => {
      this.next++;
      end(e);
    });
    req.end(data);
    return {
      close: () => {
        ended = true;
        req.destroy();
      },
    };
  }

  private call<T>(path: string, body: unknown, decode: (b: Uint8Array) => T): Promise<T> {
    const data = Buffer.from(JSON.stringify(body));
    return retry(
      async () => {
        const endpoint = this.endpoints[this.next % this.endpoints.length] as string;
        try {
          return decode(await this.exchange(endpoint, path, data));
        } catch (e) {
          if (retryable(e)) this.next++;
          throw e;
        }
      },
      this.policy,
      { clock: this.clock, retryable: (e) => retryable(e) },
    ).catch((e: unknown) => {
      if (e instanceof PlexusError) throw e;
      throw clusterError(
        ClusterCode.UNAVAILABLE,
        `etcd did not answer ${path} at ${this.endpoints.join(', ')}: ${(e as Error).message}`,
        { path, endpoints: this.endpoints },
        e,
      );
    });
  }

  private exchange(endpoint: string, path: string, data: Buffer): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      const req = request(new URL(path, endpoint), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': data.length },
        timeout: this.timeoutMs,
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > this.maxBytes) {
            req.destroy();
            reject(
              clusterError(ClusterCode.ETCD_RESPONSE, `etcd answered ${path} with more than ${this.maxBytes} bytes`, {
                what: path,
                reason: 'size',
              }),
            );
            return;
          }
          chunks.push(c);
        });
        res.on('error', reject);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          // 503 (no leader yet, a member cut off) and the like: another attempt may find a leader.
          if (status >= 500) {
            reject(
              clusterError(ClusterCode.UNAVAILABLE, `etcd at ${endpoint} answered ${path} with HTTP ${status}`, {
                endpoint,
                status,
              }),
            );
            return;
          }
          resolve(Buffer.concat(chunks));
        });
      });
      req.end(data);
    });
  }
}
