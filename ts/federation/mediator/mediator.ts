/**
 * The DIDComm v2 mediator, independent of its transports: it takes one packed message and answers
 * with a packed reply or nothing. It speaks Routing 2.0 (forward), Coordinate Mediation 2.0 and
 * Message Pickup 3.0 (see protocol.ts). The HTTP and WebSocket transports are in server.ts.
 *
 * Forwards come from anyone (anoncrypt); the inner envelope is stored unchanged on the log engine
 * for the client that registered `next`, and the sender is answered only once it is durable.
 * Everything else must be authcrypted by a client: the client is the message's `from`.
 * A queued message is deleted only when its client names it in messages-received, never when it
 * is delivered: a delivery that is lost, or a client that crashes before its message is durable
 * on its side, gets the message again.
 */

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { type Clock, systemClock } from '../../core/clock.js';
import { type CodeSuffix, PlexusError } from '../../core/errors.js';

import { openLog } from '../../storage/file-log.js';
import type { FsyncMode, LogStorage, StorageLogger } from '../../storage/types.js';
import { clip, parseDidUrl } from '../did/did-url.js';
import { findMethod } from '../did/doc-keys.js';
import { ResolverRegistry } from '../did/registry.js';
import type { DidDocument, DidDocumentSource } from '../did/types.js';
import { FORWARD_TYPE, parseForward } from '../didcomm/forward.js';
import type { Attachment, DidCommMessage } from '../didcomm/message.js';
import { packEncrypted } from '../didcomm/pack.js';
import { UndecryptableLog } from '../didcomm/undecryptable.js';
import { unpack } from '../didcomm/unpack.js';
import type { KeyManager } from '../keys/types.js';
import { type AliasKeyManager, mediatorIdentity, mediatorKeys, type PeerIdentity } from './identity.js';
import {
  DELIVERY,
  DELIVERY_REQUEST,
  KEYLIST,
  KEYLIST_QUERY,
  KEYLIST_UPDATE,
  KEYLIST_UPDATE_RESPONSE,
  type KeylistUpdated,
  LIVE_DELIVERY_CHANGE,
  MEDIATE_DENY,
  MEDIATE_GRANT,
  MEDIATE_REQUEST,
  MESSAGES_RECEIVED,
  PROBLEM,
  PROBLEM_REPORT,
  STATUS,
  STATUS_REQUEST,
  type StatusBody,
} from './protocol.js';
import { DEFAULT_QUEUE_LIMITS, MessageQueue, type QueuedMessage, type QueueLimits } from './queue.js';
import { ReplayGuard } from './replay.js';
import { DEFAULT_ROUTE_LIMITS, type RouteLimits, RouteTable } from './routes.js';

export interface MediatorLimits extends QueueLimits, RouteLimits {
  /** Most messages in one delivery (default 100); a larger `limit` is cut to it. */
  maxBatch: number;
  /** Most stored bytes in one delivery (default 512 KiB; one message is always delivered). */
  maxDeliveryBytes: number;
  /** Most messages pushed live to a connection and not yet acknowledged (default 100). */
  liveWindow: number;
  /** Most ids in one messages-received (default 1000) and updates in one keylist-update. */
  maxListItems: number;
  /**
   * How far a keylist-update's `created_time` may be from the mediator's clock (default 300,000 ms);
   * one outside it is refused as a possible replay (PLX_MEDIATOR_REPLAY).
   */
  maxClockSkewMs: number;
  /** How many recent keylist-update ids are remembered to refuse replays (default 100,000). */
  maxRecentIds: number;
}

export const DEFAULT_MEDIATOR_LIMITS: MediatorLimits = {
  ...DEFAULT_QUEUE_LIMITS,
  ...DEFAULT_ROUTE_LIMITS,
  maxBatch: 100,
  maxDeliveryBytes: 512 * 1024,
  liveWindow: 100,
  maxListItems: 1000,
  maxClockSkewMs: 300_000,
  maxRecentIds: 100_000,
};

export interface MediatorOptions {
  /** The mediator's keys: its did:key is kept here (made on first start). */
  keys: KeyManager;
  /** The URL published in its DID's DIDCommMessaging service. */
  url: string;
  /** A data directory: the queue in `<dir>/queue`, the routes in `<dir>/routes` (FileLog). */
  dataDir?: string;
  /** Or the two logs themselves (e.g. MemoryLog in tests). */
  logs?: { queue: LogStorage; routes: LogStorage };
  /** fsync mode of the FileLogs (default `batch`: every answer waits for its fsync). */
  fsync?: FsyncMode;
  resolver?: DidDocumentSource;
  limits?: Partial<MediatorLimits>;
  /** Which clients get mediation (default: every authenticated client). */
  allowClient?: (did: string) => boolean;
  logger?: StorageLogger;
  /** Time for message creation, replay windows and queue ages (default the system clock). */
  clock?: Clock;
}

/** A transport connection (a WebSocket): where live deliveries go. */
export interface Link {
  /** Whether the connection can carry messages the mediator starts (live mode needs it). */
  readonly duplex: boolean;
  send(packed: string): void;
  /** The client bound to the connection by its first authenticated message. */
  client?: string;
  live: boolean;
  /** Ids delivered on this connection and not yet acknowledged. */
  readonly inflight: Set<string>;
  closed: boolean;
  pumping?: boolean;
  again?: boolean;
}

export type MediatorAnswer = { kind: 'accepted' } | { kind: 'reply'; packed: string };

const te = new TextEncoder();

function fail(reason: CodeSuffix<'PLX_MEDIATOR_'>, message: string, details: Record<string, unknown> = {}): never {
  throw new PlexusError(`PLX_MEDIATOR_${reason}`, message, details);
}

class Problem extends Error {
  constructor(
    readonly problem: string,
    message: string,
  ) {
    super(message);
  }
}

export class Mediator {
  readonly undecryptable = new UndecryptableLog(256);
  private readonly links = new Map<string, Set<Link>>();
  private closed = false;
  private readonly pending = new Set<Promise<unknown>>();
  private readonly replays: ReplayGuard;

  private constructor(
    readonly identity: PeerIdentity,
    private readonly keys: AliasKeyManager,
    private readonly resolver: DidDocumentSource,
    readonly queue: MessageQueue,
    readonly routes: RouteTable,
    readonly limits: MediatorLimits,
    private readonly allowClient: (did: string) => boolean,
    private readonly clock: Clock,
  ) {
    this.replays = new ReplayGuard(limits.maxClockSkewMs, limits.maxRecentIds, clock);
  }

  /** Opens the mediator's logs (rebuilding its queue and routes) and its identity. */
  static async open(opts: MediatorOptions): Promise<Mediator> {
    const limits = { ...DEFAULT_MEDIATOR_LIMITS, ...opts.limits };
    for (const [k, v] of Object.entries(limits)) {
      if (!Number.isSafeInteger(v) || v < 1)
        fail('BAD_INPUT', `the mediator limit ${k} must be a positive whole number`);
    }
    let logs = opts.logs;
    if (!logs) {
      if (opts.dataDir === undefined) fail('BAD_INPUT', 'a mediator needs a data directory (dataDir) or logs');
      const lo = {
        fsync: opts.fsync ?? 'batch',
        segmentBytes: 8 * 1024 * 1024,
        ...(opts.logger ? { logger: opts.logger } : {}),
      };
      const queue = await openLog(join(opts.dataDir, 'queue'), lo);
      let routes: LogStorage;
      try {
        routes = await openLog(join(opts.dataDir, 'routes'), lo);
      } catch (e) {
        await queue.close();
        throw e;
      }
      logs = { queue, routes };
    }
    try {
      const clock = opts.clock ?? systemClock;
      const queue = await MessageQueue.open(logs.queue, limits, clock);
      const routes = await RouteTable.open(logs.routes, limits);
      if (routes.dropped > 0) {
        opts.logger?.warn(
          'registrations of DIDs other than their client were dropped: the owner of each DID must register it again',
          { dropped: routes.dropped },
        );
      }
      const mk = await mediatorKeys(opts.keys);
      const { identity, keys } = mediatorIdentity(opts.keys, mk, opts.url);
      return new Mediator(
        identity,
        keys,
        opts.resolver ?? new ResolverRegistry(),
        queue,
        routes,
        limits,
        opts.allowClient ?? (() => true),
        clock,
      );
    } catch (e) {
      await logs.queue.close().catch(() => {});
      await logs.routes.close().catch(() => {});
      throw e;
    }
  }

  /** The mediator's DID (its routing DID). */
  get did(): string {
    return this.identity.did;
  }

  /** Handles one packed message. Refusals a transport must report are PlexusErrors. */
  async handle(envelope: string, link?: Link): Promise<MediatorAnswer> {
    if (this.closed) fail('CLOSED', 'the mediator is shutting down: try again later');
    const p = this.handleInner(envelope, link);
    this.pending.add(p);
    try {
      return await p;
    } finally {
      this.pending.delete(p);
    }
  }

  private async handleInner(envelope: string, link?: Link): Promise<MediatorAnswer> {
    const size = Buffer.byteLength(envelope);
    if (size > this.limits.maxMessageBytes) {
      fail('TOO_LARGE', `a message of ${size} bytes is above the mediator's ${this.limits.maxMessageBytes}-byte cap`, {
        bytes: size,
        max: this.limits.maxMessageBytes,
      });
    }
    let msg: DidCommMessage;
    let authenticated: boolean;
    try {
      const u = await unpack(envelope, {
        resolver: this.resolver,
        keys: this.keys,
        limits: { maxEnvelopeBytes: this.limits.maxMessageBytes },
        recorder: this.undecryptable,
      });
      msg = u.message;
      authenticated = u.metadata.authenticated && u.metadata.encrypted;
    } catch (e) {
      const code = e instanceof PlexusError ? e.code : 'unknown';
      return fail('UNREADABLE', `the mediator could not open the message (${code}): pack it for ${clip(this.did)}`, {
        cause: code,
      });
    }
    if (msg.type === FORWARD_TYPE) return this.forward(msg);
    if (!authenticated || msg.from === undefined) {
      fail(
        'UNAUTHENTICATED',
        `${clip(msg.type)} must be authcrypted by the client (from set): only forwards may be anonymous`,
      );
    }
    const client = msg.from;
    const wantsReply = link !== undefined || msg.return_route === 'all';
    let reply: DidCommMessage | undefined;
    let after: (() => void) | undefined;
    try {
      if (link !== undefined) {
        // A connection belongs to the first client that speaks on it.
        if (link.client === undefined && !link.closed) {
          link.client = client;
          let set = this.links.get(client);
          if (!set) {
            set = new Set();
            this.links.set(client, set);
          }
          set.add(link);
        }
        if (link.client !== client)
          throw new Problem(PROBLEM.otherConnection, 'this connection belongs to another client');
      }
      switch (msg.type) {
        case MEDIATE_REQUEST:
          reply = await this.mediateRequest(client);
          break;
        case KEYLIST_UPDATE:
          reply = await this.keylistUpdate(client, msg);
          break;
        case KEYLIST_QUERY:
          reply = this.keylistQuery(client, msg.body);
          break;
        case STATUS_REQUEST:
          reply = this.status(client, recipientOf(msg.body), link);
          break;
        case DELIVERY_REQUEST:
          reply = await this.deliveryRequest(client, msg.body, link);
          break;
        case MESSAGES_RECEIVED:
          reply = await this.messagesReceived(client, msg.body);
          break;
        case LIVE_DELIVERY_CHANGE: {
          const r = this.liveChange(client, msg.body, link);
          reply = r.reply;
          after = r.after;
          break;
        }
        case PROBLEM_REPORT:
          return { kind: 'accepted' };
        default:
          throw new Problem(PROBLEM.unsupported, `the mediator does not handle ${clip(msg.type)}`);
      }
    } catch (e) {
      if (!(e instanceof Problem)) throw e;
      reply = {
        id: randomUUID(),
        type: PROBLEM_REPORT,
        pthid: msg.thid ?? msg.id,
        body: { code: e.problem, comment: e.message },
      };
    }
    if (!wantsReply || reply === undefined) {
      if (after) setImmediate(after);
      return { kind: 'accepted' };
    }
    const packed = await this.pack(client, { ...reply, thid: reply.thid ?? msg.id });
    if (after) setImmediate(after);
    return { kind: 'reply', packed };
  }

  private async pack(client: string, m: DidCommMessage): Promise<string> {
    const msg: DidCommMessage = {
      ...m,
      from: this.did,
      to: [client],
      created_time: Math.floor(this.clock.now() / 1000),
    };
    const r = await packEncrypted(
      msg,
      { to: client, from: this.did, forward: false },
      { resolver: this.resolver, keys: this.keys },
    );
    return r.packed;
  }

  private async forward(msg: DidCommMessage): Promise<MediatorAnswer> {
    const { next, forwarded } = parseForward(msg);
    const route = this.routes.route(next);
    if (route === undefined) {
      fail(
        'UNKNOWN_RECIPIENT',
        `no client of this mediator registered ${clip(next)}: the recipient must add it with keylist-update`,
        {
          next: clip(next, 200),
        },
      );
    }
    // Store the forwarded envelope's bytes unchanged: the base64 text's bytes, or the JSON's text.
    const b64 = (msg.attachments as Attachment[])[0]?.data.base64;
    const body =
      typeof b64 === 'string' ? new Uint8Array(Buffer.from(b64, 'base64')) : te.encode(JSON.stringify(forwarded));
    await this.queue.enqueue(route.client, route.recipient, body);
    this.pumpClient(route.client);
    return { kind: 'accepted' };
  }

  private async mediateRequest(client: string): Promise<DidCommMessage> {
    if (!this.allowClient(client) || !(await this.routes.grant(client))) {
      return { id: randomUUID(), type: MEDIATE_DENY, body: {} };
    }
    return { id: randomUUID(), type: MEDIATE_GRANT, body: { routing_did: this.did } };
  }

  private granted(client: string): void {
    if (!this.routes.isGranted(client)) {
      throw new Problem(PROBLEM.notGranted, 'mediation was not granted to this DID: send mediate-request first');
    }
  }

  /**
   * keylist-update. The client proves control of what it registers: the request is authcrypted by
   * `from` (its sender key is a keyAgreement key of the client's DID document, checked by unpack),
   * so a client may register its own DID and key ids listed in its own DID document, nothing else.
   * The request must be fresh (created_time within the clock skew) and seen once (its id), so a
   * captured request cannot be replayed.
   */
  private async keylistUpdate(client: string, msg: DidCommMessage): Promise<DidCommMessage> {
    this.granted(client);
    const updates = (msg.body as { updates?: unknown })?.updates;
    if (!Array.isArray(updates) || updates.length > this.limits.maxListItems) {
      throw new Problem(
        PROBLEM.badRequest,
        `keylist-update needs body.updates, an array of at most ${this.limits.maxListItems}`,
      );
    }
    this.replays.check(client, msg.id, msg.created_time, 'keylist-update');
    const updated: KeylistUpdated[] = [];
    let doc: Promise<DidDocument | undefined> | undefined;
    const document = () => {
      doc ??= this.resolver.resolve(client).catch(() => undefined);
      return doc;
    };
    for (const u of updates as { recipient_did?: unknown; action?: unknown }[]) {
      const did = u?.recipient_did;
      const action = u?.action;
      if (typeof did !== 'string' || (action !== 'add' && action !== 'remove') || !isDidUrl(did)) {
        updated.push({
          recipient_did: typeof did === 'string' ? clip(did, 200) : '',
          action: action === 'remove' ? 'remove' : 'add',
          result: 'client_error',
          code: 'PLX_MEDIATOR_BAD_INPUT',
        });
        continue;
      }
      if (action === 'add') {
        const refused = await this.controls(client, did, document);
        if (refused !== undefined) {
          updated.push({ recipient_did: clip(did, 200), action, result: 'client_error', code: refused });
          continue;
        }
      }
      const result = action === 'add' ? await this.routes.add(client, did) : await this.routes.remove(client, did);
      updated.push({
        recipient_did: did,
        action,
        result,
        ...(result === 'client_error'
          ? { code: this.routes.owner(did) === client ? 'PLX_MEDIATOR_TOO_MANY_KEYS' : 'PLX_MEDIATOR_TAKEN' }
          : {}),
      });
    }
    return { id: randomUUID(), type: KEYLIST_UPDATE_RESPONSE, body: { updated } };
  }

  /**
   * Why `client` may not register `recipient`, or undefined when it may: the recipient must be the
   * client's DID or a key id (`<did>#fragment`) of a verification method in its DID document.
   */
  private async controls(
    client: string,
    recipient: string,
    document: () => Promise<DidDocument | undefined>,
  ): Promise<string | undefined> {
    const p = parseDidUrl(recipient);
    if (p.did !== client) return 'PLX_MEDIATOR_NOT_CONTROLLER';
    if (recipient === client) return undefined;
    if (p.fragment === undefined || recipient !== `${p.did}#${p.fragment}`) return 'PLX_MEDIATOR_UNKNOWN_KEY';
    const doc = await document();
    if (doc === undefined || findMethod(doc, recipient) === undefined) return 'PLX_MEDIATOR_UNKNOWN_KEY';
    return undefined;
  }

  private keylistQuery(client: string, body: unknown): DidCommMessage {
    this.granted(client);
    const keys = this.routes.keys(client);
    const pg = (body as { paginate?: { limit?: unknown; offset?: unknown } })?.paginate;
    if (pg === undefined) {
      return { id: randomUUID(), type: KEYLIST, body: { keys: keys.map((k) => ({ recipient_did: k })) } };
    }
    const { limit, offset } = pg ?? {};
    if (!isCount(limit) || !isCount(offset))
      throw new Problem(PROBLEM.badRequest, 'paginate needs whole numbers limit and offset');
    const page = keys.slice(offset, offset + limit);
    return {
      id: randomUUID(),
      type: KEYLIST,
      body: {
        keys: page.map((k) => ({ recipient_did: k })),
        pagination: { count: page.length, offset, remaining: Math.max(0, keys.length - offset - page.length) },
      },
    };
  }

  private statusBody(client: string, recipient: string | undefined, link?: Link): StatusBody {
    const s = this.queue.stats(client, recipient);
    const now = this.clock.now();
    return {
      ...(recipient !== undefined ? { recipient_did: recipient } : {}),
      message_count: s.count,
      total_bytes: s.bytes,
      ...(s.oldest !== undefined
        ? {
            longest_waited_seconds: Math.max(0, Math.floor((now - s.oldest) / 1000)),
            oldest_received_time: Math.floor(s.oldest / 1000),
            newest_received_time: Math.floor(s.newest! / 1000),
          }
        : {}),
      live_delivery: link?.live === true,
    };
  }

  private status(client: string, recipient: string | undefined, link?: Link): DidCommMessage {
    this.granted(client);
    return { id: randomUUID(), type: STATUS, body: this.statusBody(client, recipient, link) };
  }

  private async deliveryRequest(client: string, body: unknown, link?: Link): Promise<DidCommMessage> {
    this.granted(client);
    const limit = (body as { limit?: unknown })?.limit;
    if (!isCount(limit) || limit < 1)
      throw new Problem(PROBLEM.badRequest, 'delivery-request needs body.limit, a whole number of at least 1');
    const recipient = recipientOf(body);
    const batch = this.select(client, Math.min(limit, this.limits.maxBatch), link, recipient);
    const attachments = await this.attach(batch);
    if (attachments.length === 0)
      return { id: randomUUID(), type: STATUS, body: this.statusBody(client, recipient, link) };
    if (link) for (const a of attachments) link.inflight.add(a.id!);
    return {
      id: randomUUID(),
      type: DELIVERY,
      body: recipient !== undefined ? { recipient_did: recipient } : {},
      attachments,
    };
  }

  /** The oldest queued messages not yet in flight on `link`, within the batch caps. */
  private select(client: string, n: number, link?: Link, recipient?: string): QueuedMessage[] {
    const out: QueuedMessage[] = [];
    let bytes = 0;
    for (const m of this.queue.iterate(client)) {
      if (out.length >= n) break;
      if (link?.inflight.has(m.id) || (recipient !== undefined && m.recipient !== recipient)) continue;
      if (out.length > 0 && bytes + m.bytes > this.limits.maxDeliveryBytes) break;
      out.push(m);
      bytes += m.bytes;
    }
    return out;
  }

  private async attach(batch: QueuedMessage[]): Promise<Attachment[]> {
    const out: Attachment[] = [];
    for (const m of batch) {
      let body: Uint8Array;
      try {
        body = await this.queue.body(m);
      } catch (e) {
        // Acknowledged (and compacted) meanwhile: nothing to deliver.
        if (this.queue.get(m.id) === undefined) continue;
        throw e;
      }
      out.push({
        id: m.id,
        media_type: 'application/didcomm-encrypted+json',
        data: { base64: Buffer.from(body).toString('base64url') },
      });
    }
    return out;
  }

  private async messagesReceived(client: string, body: unknown): Promise<DidCommMessage> {
    this.granted(client);
    const ids = (body as { message_id_list?: unknown })?.message_id_list;
    if (!Array.isArray(ids) || ids.length > this.limits.maxListItems || !ids.every((x) => typeof x === 'string')) {
      throw new Problem(
        PROBLEM.badRequest,
        `messages-received needs body.message_id_list, at most ${this.limits.maxListItems} ids`,
      );
    }
    await this.queue.received(client, ids as string[]);
    for (const l of this.links.get(client) ?? []) for (const id of ids as string[]) l.inflight.delete(id);
    this.pumpClient(client);
    return { id: randomUUID(), type: STATUS, body: this.statusBody(client, undefined) };
  }

  private liveChange(client: string, body: unknown, link?: Link): { reply: DidCommMessage; after?: () => void } {
    this.granted(client);
    const on = (body as { live_delivery?: unknown })?.live_delivery;
    if (typeof on !== 'boolean')
      throw new Problem(PROBLEM.badRequest, 'live-delivery-change needs body.live_delivery, true or false');
    if (on && (link === undefined || !link.duplex)) {
      throw new Problem(PROBLEM.liveNotSupported, 'Connection does not support Live Delivery: use a WebSocket');
    }
    if (link) link.live = on;
    return {
      reply: { id: randomUUID(), type: STATUS, body: this.statusBody(client, undefined, link) },
      ...(on && link ? { after: () => void this.pump(link) } : {}),
    };
  }

  /** Forgets a closed connection; its in-flight messages stay queued. */
  disconnect(link: Link): void {
    link.closed = true;
    link.live = false;
    if (link.client === undefined) return;
    const set = this.links.get(link.client);
    set?.delete(link);
    if (set?.size === 0) this.links.delete(link.client);
  }

  private pumpClient(client: string): void {
    for (const l of this.links.get(client) ?? []) if (l.live) void this.pump(l);
  }

  /** Pushes queued messages to a live connection, at most `liveWindow` unacknowledged. */
  private async pump(link: Link): Promise<void> {
    if (link.pumping) {
      link.again = true;
      return;
    }
    link.pumping = true;
    try {
      do {
        link.again = false;
        while (!link.closed && link.live && link.client !== undefined && !this.closed) {
          const room = this.limits.liveWindow - link.inflight.size;
          if (room <= 0) break;
          const batch = this.select(link.client, Math.min(room, this.limits.maxBatch), link);
          if (batch.length === 0) break;
          const attachments = await this.attach(batch);
          for (const m of batch) link.inflight.add(m.id);
          if (attachments.length === 0) continue;
          const packed = await this.pack(link.client, { id: randomUUID(), type: DELIVERY, body: {}, attachments });
          if (link.closed) break;
          link.send(packed);
        }
      } while (link.again && !link.closed);
    } catch {
      // A failed push leaves the messages queued; the connection gets them again when it reconnects.
    } finally {
      link.pumping = false;
    }
  }

  /** Stops taking messages, waits for those in progress, and closes the logs. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.pending]);
    for (const set of this.links.values()) for (const l of set) l.closed = true;
    this.links.clear();
    await this.queue.close();
    await this.routes.close();
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function isDidUrl(s: string): boolean {
  try {
    parseDidUrl(s);
    return true;
  } catch {
    return false;
  }
}

function recipientOf(body: unknown): string | undefined {
  const r = (body as { recipient_did?: unknown })?.recipient_did;
  if (r === undefined) return undefined;
  if (typeof r !== 'string') throw new Problem(PROBLEM.badRequest, 'recipient_did must be a DID');
  return r;
}
