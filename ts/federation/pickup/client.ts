/**
 * The pickup client: binds a DID (and the KeyManager holding its keys) to a remote mediator.
 * Over HTTP it requests mediation, registers recipient DIDs, asks for the queue's status and
 * fetches batches; over a WebSocket it runs live mode, reconnecting after a lost connection.
 *
 * Nothing is ever deleted at the mediator until the caller calls `acknowledge(ids)`
 * (messages-received): call it only once the message is durable on this side, or was dropped as
 * a duplicate. A crash before that gets the message delivered again, never lost.
 */
import { randomUUID } from 'node:crypto';
import { WebSocket } from 'ws';
import { type Clock, heldMonotonicClock, systemClock, type TimerHandle, type Timers } from '../../core/clock.js';
import { type CodeSuffix, PlexusError } from '../../core/errors.js';

import { type Backoff, RetryPolicy } from '../../core/retry.js';
import { clip } from '../did/did-url.js';
import type { DidDocumentSource } from '../did/types.js';
import type { Attachment, DidCommMessage } from '../didcomm/message.js';
import { packEncrypted } from '../didcomm/pack.js';
import { unpack } from '../didcomm/unpack.js';
import type { KeyManager } from '../keys/types.js';
import {
  DELIVERY,
  DELIVERY_REQUEST,
  KEYLIST,
  KEYLIST_QUERY,
  KEYLIST_UPDATE,
  KEYLIST_UPDATE_RESPONSE,
  type KeylistUpdate,
  type KeylistUpdated,
  LIVE_DELIVERY_CHANGE,
  MEDIA_TYPE_ENCRYPTED,
  MEDIATE_DENY,
  MEDIATE_GRANT,
  MEDIATE_REQUEST,
  MESSAGES_RECEIVED,
  PROBLEM_REPORT,
  STATUS,
  STATUS_REQUEST,
  type StatusBody,
} from '../mediator/protocol.js';

export interface PickupClientOptions {
  /** The mediator's HTTP endpoint. */
  mediatorUrl: string;
  /** The mediator's DID (its routing DID, printed when it starts). */
  mediatorDid: string;
  /** This client's DID; the KeyManager holds its keys. */
  did: string;
  resolver: DidDocumentSource;
  keys: KeyManager;
  /** The WebSocket endpoint (default: the HTTP URL with ws: or wss:). */
  wsUrl?: string;
  /** How long one request may take (default 10 s). */
  timeoutMs?: number;
  /** The largest answer accepted (default 4 MiB). */
  maxAnswerBytes?: number;
  /** Time for the messages' created_time (default the system clock). */
  clock?: Clock;
  /**
   * Runs the live connection's reconnect pauses and answer timeouts (default
   * `heldMonotonicClock`: a pending reconnect keeps the process alive).
   */
  timers?: Timers;
}

/** One message picked up: the envelope as the sender packed it for its recipient. */
export interface PickedUp {
  /** The mediator's id of the message: acknowledge it with this. */
  readonly id: string;
  /** The packed DIDComm message (unpack it with the recipient's keys). */
  readonly envelope: string;
}

/** A pickup status. */
export interface PickupStatus {
  readonly messageCount: number;
  readonly totalBytes?: number;
  readonly longestWaitedSeconds?: number;
  readonly liveDelivery?: boolean;
  readonly recipientDid?: string;
}

export interface LiveOptions {
  /** Reports failures (a lost connection, a refused answer); live mode keeps trying. */
  onError?: (e: PlexusError) => void;
  /** Reports the connection state. */
  onState?: (state: 'open' | 'closed') => void;
  /** First reconnect delay (default 100 ms), doubled up to `maxBackoffMs` (default 5 s), with full jitter. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

/** A live session: deliveries arrive through the callback until `close()`. */
export interface LiveSession {
  /** Resolves once the first connection is live. */
  readonly ready: Promise<void>;
  /** Whether a connection is open and live now. */
  readonly connected: boolean;
  /** messages-received for these ids (over the socket when open, else over HTTP). */
  acknowledge(ids: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

const MAX_ID_LENGTH = 256;

function fail(
  reason: CodeSuffix<'PLX_PICKUP_'>,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): never {
  throw new PlexusError(`PLX_PICKUP_${reason}`, message, details, cause === undefined ? undefined : { cause });
}

function statusOf(m: DidCommMessage): PickupStatus {
  const b = m.body as StatusBody;
  if (typeof b?.message_count !== 'number' || !Number.isSafeInteger(b.message_count) || b.message_count < 0) {
    fail('BAD_ANSWER', 'the mediator sent a status without a message_count');
  }
  return {
    messageCount: b.message_count,
    ...(typeof b.total_bytes === 'number' ? { totalBytes: b.total_bytes } : {}),
    ...(typeof b.longest_waited_seconds === 'number' ? { longestWaitedSeconds: b.longest_waited_seconds } : {}),
    ...(typeof b.live_delivery === 'boolean' ? { liveDelivery: b.live_delivery } : {}),
    ...(typeof b.recipient_did === 'string' ? { recipientDid: b.recipient_did } : {}),
  };
}

/** The messages of a delivery, checked. */
function delivered(m: DidCommMessage): PickedUp[] {
  const att = m.attachments;
  if (!Array.isArray(att)) fail('BAD_ANSWER', 'a delivery without attachments');
  return (att as Attachment[]).map((a) => {
    const id = a?.id;
    const b64 = a?.data?.base64;
    const json = a?.data?.json;
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH) {
      fail('BAD_ANSWER', 'a delivered message without an id');
    }
    if (typeof b64 === 'string') return { id, envelope: Buffer.from(b64, 'base64').toString('utf8') };
    if (json !== null && typeof json === 'object') return { id, envelope: JSON.stringify(json) };
    return fail('BAD_ANSWER', `delivered message ${clip(id)} carries no data.base64 or data.json`);
  });
}

export class PickupClient {
  readonly mediatorUrl: string;
  readonly mediatorDid: string;
  readonly did: string;
  readonly wsUrl: string;
  readonly timeoutMs: number;
  private readonly maxAnswerBytes: number;
  readonly clock: Clock;
  readonly timers: Timers;

  constructor(private readonly opts: PickupClientOptions) {
    this.clock = opts.clock ?? systemClock;
    this.timers = opts.timers ?? heldMonotonicClock;
    let u: URL;
    try {
      u = new URL(opts.mediatorUrl);
    } catch {
      fail('BAD_INPUT', `'${clip(String(opts.mediatorUrl))}' is not a mediator URL (http://host:port/path)`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      fail('BAD_INPUT', 'the mediator URL must be http: or https:');
    this.mediatorUrl = u.href;
    this.mediatorDid = opts.mediatorDid;
    this.did = opts.did;
    this.wsUrl = opts.wsUrl ?? u.href.replace(/^http/, 'ws');
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.maxAnswerBytes = opts.maxAnswerBytes ?? 4 * 1024 * 1024;
  }

  private message(type: string, body: unknown): DidCommMessage {
    return {
      id: randomUUID(),
      type,
      from: this.did,
      to: [this.mediatorDid],
      created_time: Math.floor(this.clock.now() / 1000),
      body,
      return_route: 'all',
    };
  }

  /** Packs a request for the mediator (authcrypt from this DID). */
  async pack(m: DidCommMessage): Promise<string> {
    const r = await packEncrypted(
      m,
      { to: this.mediatorDid, from: this.did, forward: false },
      { resolver: this.opts.resolver, keys: this.opts.keys },
    );
    return r.packed;
  }

  /** Opens a message of the mediator and checks it is from the mediator, for this client. */
  async openRaw(text: string): Promise<DidCommMessage> {
    let u: Awaited<ReturnType<typeof unpack>>;
    try {
      u = await unpack(text, {
        resolver: this.opts.resolver,
        keys: this.opts.keys,
        limits: { maxEnvelopeBytes: this.maxAnswerBytes },
        clock: this.clock,
      });
    } catch (e) {
      fail(
        'BAD_ANSWER',
        `the mediator's answer could not be opened (${e instanceof PlexusError ? e.code : 'error'})`,
        {},
        e,
      );
    }
    if (!u.metadata.authenticated || u.message.from !== this.mediatorDid) {
      fail('BAD_ANSWER', 'an answer that is not authenticated as the mediator');
    }
    return u.message;
  }

  /** Opens an answer; a problem report is thrown as PLX_PICKUP_PROBLEM. */
  async open(text: string): Promise<DidCommMessage> {
    const m = await this.openRaw(text);
    if (m.type === PROBLEM_REPORT) throw problemOf(m);
    return m;
  }

  /** Sends a request over HTTP and returns the mediator's answer. */
  async request(type: string, body: unknown, expect: readonly string[]): Promise<DidCommMessage> {
    const m = this.message(type, body);
    const packed = await this.pack(m);
    let res: Response;
    try {
      res = await fetch(this.mediatorUrl, {
        method: 'POST',
        headers: { 'content-type': MEDIA_TYPE_ENCRYPTED },
        body: packed,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      if ((e as Error)?.name === 'TimeoutError') {
        fail('TIMEOUT', `the mediator at ${this.mediatorUrl} did not answer within ${this.timeoutMs} ms`, {}, e);
      }
      fail('UNREACHABLE', `the mediator at ${this.mediatorUrl} cannot be reached: ${(e as Error)?.message}`, {}, e);
    }
    const text = await readCapped(res, this.maxAnswerBytes);
    if (res.status !== 200) {
      let code = `HTTP ${res.status}`;
      let message = text.slice(0, 300);
      try {
        const j = JSON.parse(text) as { code?: string; message?: string };
        code = j.code ?? code;
        message = j.message ?? message;
      } catch {}
      fail('REFUSED', `the mediator refused ${type.slice(type.lastIndexOf('/') + 1)}: ${code}: ${message}`, {
        status: res.status,
        code,
      });
    }
    const answer = await this.open(text);
    if (answer.thid !== m.id) fail('BAD_ANSWER', 'the answer names another request (thid)');
    if (!expect.includes(answer.type)) fail('BAD_ANSWER', `expected ${expect.join(' or ')}, got ${clip(answer.type)}`);
    return answer;
  }

  /** Coordinate Mediation: mediate-request. Resolves with the routing DID; a deny is PLX_PICKUP_DENIED. */
  async requestMediation(): Promise<{ routingDid: string }> {
    const a = await this.request(MEDIATE_REQUEST, {}, [MEDIATE_GRANT, MEDIATE_DENY]);
    if (a.type === MEDIATE_DENY)
      fail('DENIED', `the mediator ${clip(this.mediatorDid)} denied mediation to ${clip(this.did)}`);
    const r = (a.body as { routing_did?: unknown }).routing_did;
    const routingDid = Array.isArray(r) ? r[0] : r;
    if (typeof routingDid !== 'string') fail('BAD_ANSWER', 'a mediate-grant without routing_did');
    return { routingDid };
  }

  /** keylist-update; resolves with the result of each update. */
  async updateKeylist(updates: readonly KeylistUpdate[]): Promise<KeylistUpdated[]> {
    const a = await this.request(KEYLIST_UPDATE, { updates }, [KEYLIST_UPDATE_RESPONSE]);
    const u = (a.body as { updated?: unknown }).updated;
    if (!Array.isArray(u)) fail('BAD_ANSWER', 'a keylist-update-response without updated');
    return u as KeylistUpdated[];
  }

  /**
   * Registers recipient DIDs; refuses when the mediator did not take one (PLX_PICKUP_KEYLIST, with
   * the mediator's reason in `details.code`). A client registers its own DID and key ids of its own
   * DID document: the request, authcrypted from this DID, is the proof of control.
   */
  async addRecipients(dids: readonly string[]): Promise<void> {
    const r = await this.updateKeylist(dids.map((d) => ({ recipient_did: d, action: 'add' as const })));
    const bad = r.filter((x) => x.result !== 'success' && x.result !== 'no_change');
    if (bad.length > 0) {
      const why = (b: KeylistUpdated) => `${clip(b.recipient_did)} (${b.result}${b.code ? ` ${b.code}` : ''})`;
      fail('KEYLIST', `the mediator did not register ${bad.map(why).join(', ')}`, {
        results: bad,
        ...(bad[0]!.code ? { code: bad[0]!.code } : {}),
      });
    }
  }

  async removeRecipients(dids: readonly string[]): Promise<KeylistUpdated[]> {
    return this.updateKeylist(dids.map((d) => ({ recipient_did: d, action: 'remove' as const })));
  }

  /** keylist-query. */
  async queryKeylist(paginate?: { limit: number; offset: number }): Promise<{
    keys: string[];
    pagination?: { count: number; offset: number; remaining: number };
  }> {
    const a = await this.request(KEYLIST_QUERY, paginate ? { paginate } : {}, [KEYLIST]);
    const b = a.body as {
      keys?: { recipient_did?: unknown }[];
      pagination?: { count: number; offset: number; remaining: number };
    };
    if (!Array.isArray(b.keys)) fail('BAD_ANSWER', 'a keylist without keys');
    return {
      keys: b.keys.map((k) => String(k?.recipient_did)),
      ...(b.pagination ? { pagination: b.pagination } : {}),
    };
  }

  /** status-request. */
  async status(recipientDid?: string): Promise<PickupStatus> {
    const a = await this.request(STATUS_REQUEST, recipientDid ? { recipient_did: recipientDid } : {}, [STATUS]);
    return statusOf(a);
  }

  /** delivery-request: up to `limit` queued messages, oldest first. Acknowledge each one. */
  async fetch(limit: number, recipientDid?: string): Promise<PickedUp[]> {
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000)
      fail('BAD_INPUT', 'fetch takes a limit of 1..10000');
    const a = await this.request(
      DELIVERY_REQUEST,
      { limit, ...(recipientDid ? { recipient_did: recipientDid } : {}) },
      [DELIVERY, STATUS],
    );
    return a.type === STATUS ? [] : delivered(a);
  }

  /** messages-received: the mediator deletes these messages for good. */
  async acknowledge(ids: readonly string[]): Promise<PickupStatus> {
    checkIds(ids);
    const a = await this.request(MESSAGES_RECEIVED, { message_id_list: [...ids] }, [STATUS]);
    return statusOf(a);
  }

  /**
   * Live mode over a WebSocket: queued messages and new ones are pushed as they arrive and given
   * to `onMessage` one at a time, in order. Acknowledge each one (session.acknowledge or
   * client.acknowledge) once it is durable; unacknowledged ones come again after a reconnect.
   */
  live(onMessage: (m: PickedUp) => void | Promise<void>, opts: LiveOptions = {}): LiveSession {
    return new LiveConnection(this, onMessage, opts);
  }
}

function problemOf(m: DidCommMessage): PlexusError {
  const b = m.body as { code?: unknown; comment?: unknown };
  return new PlexusError('PLX_PICKUP_PROBLEM', `the mediator refused: ${String(b?.comment ?? b?.code)}`, {
    problem: String(b?.code),
  });
}

function checkIds(ids: readonly string[]): void {
  if (!Array.isArray(ids) || ids.length > 1000 || ids.some((i) => typeof i !== 'string' || i.length > MAX_ID_LENGTH)) {
    fail('BAD_INPUT', 'acknowledge takes at most 1000 message ids');
  }
}

async function readCapped(res: Response, max: number): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? 0);
  if (declared > max) {
    await res.body?.cancel();
    fail('BAD_ANSWER', `the mediator's answer of ${declared} bytes is above ${max}`);
  }
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let n = 0;
  for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
    n += c.length;
    if (n > max) fail('BAD_ANSWER', `the mediator's answer is above ${max} bytes`);
    chunks.push(c);
  }
  return Buffer.concat(chunks).toString('utf8');
}

class LiveConnection implements LiveSession {
  readonly ready: Promise<void>;
  private resolveReady!: () => void;
  private ws: WebSocket | undefined;
  private isLive = false;
  private closed = false;
  /** Reconnect delays: the one retry policy, reset once the live connection is up. */
  private readonly backoff: Backoff;
  private timer: TimerHandle | undefined;
  private chain: Promise<void> = Promise.resolve();
  private deliveries: Promise<void> = Promise.resolve();
  private readonly waiting = new Map<string, { resolve: (m: DidCommMessage) => void; reject: (e: unknown) => void }>();

  constructor(
    private readonly client: PickupClient,
    private readonly onMessage: (m: PickedUp) => void | Promise<void>,
    private readonly opts: LiveOptions,
  ) {
    const baseMs = opts.backoffMs ?? 100;
    this.backoff = new RetryPolicy({ baseMs, capMs: Math.max(baseMs, opts.maxBackoffMs ?? 5000) }).start();
    this.ready = new Promise((r) => {
      this.resolveReady = r;
    });
    this.connect();
  }

  get connected(): boolean {
    return this.isLive && this.ws?.readyState === WebSocket.OPEN;
  }

  private report(e: unknown): void {
    const pe =
      e instanceof PlexusError
        ? e
        : new PlexusError(
            'PLX_PICKUP_UNREACHABLE',
            `live connection to ${this.client.wsUrl}: ${(e as Error)?.message ?? e}`,
            {},
          );
    this.opts.onError?.(pe);
  }

  private connect(): void {
    if (this.closed) return;
    const ws = new WebSocket(this.client.wsUrl, {
      maxPayload: 8 * 1024 * 1024,
      handshakeTimeout: this.client.timeoutMs,
    });
    this.ws = ws;
    ws.on('open', () => {
      void (async () => {
        try {
          const a = await this.call(ws, LIVE_DELIVERY_CHANGE, { live_delivery: true });
          if (a.type !== STATUS) fail('BAD_ANSWER', `expected a status, got ${clip(a.type)}`);
          this.isLive = true;
          this.backoff.reset();
          this.opts.onState?.('open');
          this.resolveReady();
        } catch (e) {
          this.report(e);
          ws.terminate();
        }
      })();
    });
    ws.on('message', (data) => {
      const text = Array.isArray(data)
        ? Buffer.concat(data).toString('utf8')
        : Buffer.from(data as ArrayBuffer).toString('utf8');
      this.chain = this.chain.then(() => this.receive(text)).catch((e) => this.report(e));
    });
    ws.on('error', (e) => this.report(e));
    ws.on('close', () => {
      const wasLive = this.isLive;
      this.isLive = false;
      for (const w of this.waiting.values())
        w.reject(new PlexusError('PLX_PICKUP_CLOSED', 'the live connection closed', {}));
      this.waiting.clear();
      if (wasLive) this.opts.onState?.('closed');
      if (this.closed) return;
      const delay = this.backoff.next() ?? 0;
      this.timer = this.client.timers.setTimeout(() => this.connect(), delay);
    });
  }

  /**
   * Frames are opened in order on one chain; deliveries go to a second chain that runs the
   * callback, so an answer (to an acknowledge made inside the callback) is never stuck behind it.
   */
  private async receive(text: string): Promise<void> {
    if (text.startsWith('{"code"')) {
      // A refusal the mediator could not pack answers the oldest request on this socket.
      const j = JSON.parse(text) as { code: string; message: string };
      const e = new PlexusError('PLX_PICKUP_REFUSED', `the mediator refused: ${j.code}: ${j.message}`, {
        code: j.code,
      });
      const first = this.waiting.entries().next().value as [string, { reject: (e: unknown) => void }] | undefined;
      if (first === undefined) throw e;
      this.waiting.delete(first[0]);
      first[1].reject(e);
      return;
    }
    const m = await this.client.openRaw(text);
    if (m.type === DELIVERY) {
      const batch = delivered(m);
      this.deliveries = this.deliveries
        .then(async () => {
          for (const p of batch) {
            if (this.closed) return;
            await this.onMessage(p);
          }
        })
        .catch((e) => this.report(e));
      return;
    }
    const ref = m.type === PROBLEM_REPORT ? m.pthid : m.thid;
    const w = ref !== undefined ? this.waiting.get(ref) : undefined;
    if (w) {
      this.waiting.delete(ref!);
      if (m.type === PROBLEM_REPORT) w.reject(problemOf(m));
      else w.resolve(m);
    } else if (m.type === PROBLEM_REPORT) {
      throw problemOf(m);
    }
  }

  private async call(ws: WebSocket, type: string, body: unknown): Promise<DidCommMessage> {
    const m: DidCommMessage = {
      id: randomUUID(),
      type,
      from: this.client.did,
      to: [this.client.mediatorDid],
      created_time: Math.floor(this.client.clock.now() / 1000),
      body,
      return_route: 'all',
    };
    const packed = await this.client.pack(m);
    return new Promise((resolve, reject) => {
      const timers = this.client.timers;
      const t = timers.setTimeout(() => {
        this.waiting.delete(m.id);
        reject(new PlexusError('PLX_PICKUP_TIMEOUT', `the mediator did not answer ${type} in time`, {}));
      }, 10_000);
      this.waiting.set(m.id, {
        resolve: (x) => {
          timers.clearTimeout(t);
          resolve(x);
        },
        reject: (e) => {
          timers.clearTimeout(t);
          reject(e);
        },
      });
      ws.send(packed, (err) => {
        if (err) {
          this.waiting.delete(m.id);
          timers.clearTimeout(t);
          reject(err);
        }
      });
    });
  }

  async acknowledge(ids: readonly string[]): Promise<void> {
    checkIds(ids);
    if (ids.length === 0) return;
    const ws = this.ws;
    if (this.connected && ws) {
      try {
        await this.call(ws, MESSAGES_RECEIVED, { message_id_list: [...ids] });
        return;
      } catch {
        // fall back to HTTP
      }
    }
    await this.client.acknowledge(ids);
  }

  async close(): Promise<void> {
    this.closed = true;
    const timers = this.client.timers;
    if (this.timer) timers.clearTimeout(this.timer);
    const ws = this.ws;
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((r) => {
        const t = timers.setTimeout(() => {
          ws.terminate();
          r();
        }, 1000);
        ws.once('close', () => {
          timers.clearTimeout(t);
          r();
        });
        ws.close();
      });
    }
    await this.chain.catch(() => {});
    await this.deliveries.catch(() => {});
  }
}
