/**
 * Programs outside the cluster (docs/cluster.md, "Programs outside the cluster"): `ActorClient`
 * sends to and asks actors by IRI through any member, and `serveClients` is the member's side.
 *
 * - Trust: the client dials a member's wire with a client certificate of the cluster CA
 *   (`issueClientCertificate`, `plexus cluster client-cert`) naming
 *   `<client>.client.<cluster>.plexus.internal`. That name is never a node name: the member
 *   admits the connection for calls only, as peer `client:<client>`; it cannot send frames,
 *   join, be gossiped or hold a lease. The client checks the member's certificate names a
 *   node of the same cluster.
 * - Requests: one call on the wire's call path, the tag byte CLIENT_TAG (0x04) and JSON of at
 *   most MAX_CLIENT_REQUEST bytes, checked before use (PLX_CLUSTER_BAD_REQUEST,
 *   `details.reason` = `client`). Replies are JSON.
 * - Routing: the member called does not redirect; it hands the message to its own runtime,
 *   whose placement forwards it to the owner of the actor's shard through the cluster
 *   processor (within the hop limit, held while the shard has no owner). A client so needs no
 *   view of the shard map, and a message is ordered and deduplicated as any other actor
 *   message. An ask's reply comes back to the member called, which waits for it on the
 *   client's behalf and answers the call with it.
 * - Failover and deadline: a member that does not answer, refuses the connection or answers
 *   with a transient refusal (stopping, leaving, no lease authority, a delivery deadline) is
 *   left for the next member; a send carries one message id over every attempt, so the owner
 *   takes it once. After `deadlineMs` the call rejects with PLX_CLUSTER_DEADLINE
 *   (`details.event` = `error.communication`, `details.attempts`, `details.last`). A refusal
 *   that another member would repeat (a bad request, no chart for the IRI) rejects at once.
 */
import { randomUUID } from 'node:crypto';
import * as http2 from 'node:http2';
import { type ClockTimers, heldMonotonicClock, systemClock, type TimerHandle } from '../core/clock.js';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { clientOfCertificate, nodeOfPeer } from '../net/ca.js';
import { CALL_PATH } from '../net/http2-wire-shared.js';
import { ERROR_COMMUNICATION, type Node } from '../runtime/node.js';
import type { ActorEvent, JsonValue } from '../runtime/types.js';
import { ClusterCode, clusterError } from './errors.js';

/** The first byte of a client request on the wire's call channel. */
export const CLIENT_TAG = 0x04;
/** The largest client request (tag byte and JSON). */
export const MAX_CLIENT_REQUEST = 64 * 1024;
/** How long a member whose connection failed is tried only after the others (ms). */
const DOWN_MS = 1000;
/** The largest client reply read. */
export const MAX_CLIENT_REPLY = 1024 * 1024;
/** The longest time a member waits for a send's verdict or an ask's reply for a client (ms). */
export const MAX_CLIENT_WAIT_MS = 300_000;
const MAX_EVENT_NAME = 256;
const MAX_ID = 128;
const MAX_IRI = 4096;

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** A client's request to a member. */
export interface ClientRequest {
  readonly op: 'send' | 'ask';
  readonly target: string;
  readonly event: string;
  readonly data?: JsonValue;
  /** The message id (sends): the same over every attempt, so the owner takes it once. */
  readonly id: string;
  /** How long the member waits for the verdict or reply (ms). */
  readonly waitMs: number;
}

/** A member's answer: a send's verdict or an ask's reply event. */
export type ClientReply =
  | { readonly verdict: 'processed' | 'duplicate' }
  | { readonly reply: { readonly name: string; readonly data?: JsonValue } };

function badRequest(why: string, details: Record<string, unknown> = {}): PlexusError {
  return clusterError(ClusterCode.BAD_REQUEST, `client request: ${why}`, { reason: 'client', ...details });
}

function boundedString(v: unknown, max: number): v is string {
  return typeof v === 'string' && v.length > 0 && enc.encode(v).length <= max;
}

export function encodeClientRequest(r: ClientRequest): Uint8Array {
  const json = enc.encode(JSON.stringify(r));
  const out = new Uint8Array(json.length + 1);
  out[0] = CLIENT_TAG;
  out.set(json, 1);
  if (out.length > MAX_CLIENT_REQUEST) {
    throw badRequest(`${out.length} bytes is above ${MAX_CLIENT_REQUEST}`, { size: out.length });
  }
  return out;
}

/** Reads and checks a client request; a bad one is refused with PLX_CLUSTER_BAD_REQUEST. */
export function decodeClientRequest(body: Uint8Array): ClientRequest {
  if (body.length > MAX_CLIENT_REQUEST) throw badRequest(`${body.length} bytes is above ${MAX_CLIENT_REQUEST}`);
  if (body[0] !== CLIENT_TAG) throw badRequest('not a client request');
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(dec.decode(body.subarray(1))) as Record<string, unknown>;
  } catch {
    throw badRequest('not UTF-8 JSON');
  }
  if (typeof r !== 'object' || r === null || Array.isArray(r)) throw badRequest('not a JSON object');
  for (const k of Object.keys(r)) {
    if (!['op', 'target', 'event', 'data', 'id', 'waitMs'].includes(k))
      throw badRequest(`unknown key ${k}`, { field: k });
  }
  if (r.op !== 'send' && r.op !== 'ask') throw badRequest('op must be send or ask', { field: 'op' });
  if (!boundedString(r.target, MAX_IRI))
    throw badRequest(`target must be an IRI of 1 to ${MAX_IRI} bytes`, { field: 'target' });
  if (!boundedString(r.event, MAX_EVENT_NAME)) {
    throw badRequest(`event must be a name of 1 to ${MAX_EVENT_NAME} bytes`, { field: 'event' });
  }
  if (!boundedString(r.id, MAX_ID)) throw badRequest(`id must be a string of 1 to ${MAX_ID} bytes`, { field: 'id' });
  const w = r.waitMs;
  if (typeof w !== 'number' || !Number.isInteger(w) || w < 1 || w > MAX_CLIENT_WAIT_MS) {
    throw badRequest(`waitMs must be a whole number of ms from 1 to ${MAX_CLIENT_WAIT_MS}`, { field: 'waitMs' });
  }
  return {
    op: r.op,
    target: r.target,
    event: r.event,
    id: r.id,
    waitMs: w,
    ...(r.data === undefined ? {} : { data: r.data as JsonValue }),
  };
}

/**
 * A member's handler for CLIENT_TAG calls: the request goes to `node`'s runtime (placement
 * forwards it to the owner); a send answers with its verdict, an ask with the reply event.
 * Waits at most the request's `waitMs` (then PLX_CLUSTER_DEADLINE, which the client takes as
 * "try another member").
 */
export function serveClients(
  node: () => Node | undefined,
  clock: ClockTimers = systemClock,
): (from: string, body: Uint8Array) => Promise<Uint8Array> {
  return async (_from, body) => {
    const req = decodeClientRequest(body);
    const n = node();
    if (n === undefined) throw clusterError(ClusterCode.UNAVAILABLE, 'the node is still starting');
    let timer: TimerHandle | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(
        () =>
          reject(
            clusterError(ClusterCode.DEADLINE, `no verdict from ${req.target} within ${req.waitMs} ms`, {
              target: req.target,
            }),
          ),
        req.waitMs,
      );
    });
    const work: Promise<ClientReply> =
      req.op === 'send'
        ? n
            .send(req.target, req.event, { id: req.id, ...(req.data === undefined ? {} : { data: req.data }) })
            .then((verdict) => ({ verdict: verdict === 'duplicate' ? 'duplicate' : 'processed' }))
        : n.ask(req.target, req.event, req.data, { timeoutMs: req.waitMs }).then((e) => ({
            reply: { name: e.name, ...(e.data === undefined ? {} : { data: e.data }) },
          }));
    try {
      const reply = await Promise.race([work, deadline]);
      return enc.encode(JSON.stringify(reply));
    } finally {
      clock.clearTimeout(timer);
      work.catch(() => {});
    }
  };
}

/** Refusals another member would repeat: the client rejects at once instead of failing over. */
const FINAL_CODES = new Set<string>([
  ClusterCode.BAD_REQUEST,
  'PLX_RUNTIME_BAD_INPUT',
  'PLX_RUNTIME_NO_CHART',
  'PLX_RUNTIME_CHART_FAILED',
]);

export interface ActorClientOptions {
  /** Members to call, `host:port` (their wire addresses); tried in turn. */
  readonly members: readonly string[];
  /** The client's certificate and key (`plexus cluster client-cert`) and the cluster CA, PEM. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** How long a send or ask may take, every attempt and member included (ms; default 10,000). */
  readonly deadlineMs?: number;
  /** The pause before trying a member again after every member failed in a row (ms; default 100). */
  readonly backoffMs?: number;
  /** Time of the deadlines and pauses (default monotonic time; a pending call keeps the process alive). */
  readonly clock?: ClockTimers;
}

/** The outcome of one call to one member. */
type Attempt = { readonly ok: true; readonly reply: ClientReply } | { readonly ok: false; readonly error: PlexusError };

/**
 * A client for programs outside the cluster: sends to and asks actors by IRI through the
 * members it is given, failing over between them, within a deadline. See the module comment.
 */
export class ActorClient {
  private readonly sessions = new Map<string, http2.ClientHttp2Session>();
  /** Members whose connection failed lately, until when they are tried only when all others are too. */
  private readonly down = new Map<string, number>();
  private next = 0;
  private closed = false;
  readonly deadlineMs: number;
  private readonly backoffMs: number;
  private readonly clock: ClockTimers;
  /** Calls made to members, successful or not (for tools and tests). */
  readonly stats = { attempts: 0, failovers: 0 };

  private constructor(
    private readonly members: readonly string[],
    private readonly tls: ActorClientOptions['tls'],
    /** The cluster the client certificate names. */
    readonly cluster: string,
    /** The client the certificate names. */
    readonly client: string,
    opts: ActorClientOptions,
  ) {
    this.deadlineMs = opts.deadlineMs ?? 10_000;
    this.backoffMs = opts.backoffMs ?? 100;
    this.clock = opts.clock ?? heldMonotonicClock;
  }

  /**
   * Checks the options and returns a client; members are dialled on first use. Refused with
   * PLX_CLUSTER_BAD_CONFIG (no members, a bad deadline) or PLX_CLUSTER_BAD_TLS (a certificate
   * that names no client).
   */
  static connect(opts: ActorClientOptions): ActorClient {
    if (!Array.isArray(opts.members) || opts.members.length === 0) {
      throw clusterError(ClusterCode.BAD_CONFIG, 'an ActorClient needs at least one member host:port', {
        field: 'members',
      });
    }
    for (const [i, m] of opts.members.entries()) {
      if (typeof m !== 'string' || !/^(\[[^\]]+\]|[^:\s]+):\d{1,5}$/.test(m)) {
        throw clusterError(ClusterCode.BAD_CONFIG, `members[${i}] must be host:port, got ${JSON.stringify(m)}`, {
          field: `members[${i}]`,
        });
      }
    }
    const d = opts.deadlineMs;
    if (d !== undefined && (!Number.isInteger(d) || d < 1 || d > MAX_CLIENT_WAIT_MS)) {
      throw clusterError(ClusterCode.BAD_CONFIG, `deadlineMs must be a whole number from 1 to ${MAX_CLIENT_WAIT_MS}`, {
        field: 'deadlineMs',
      });
    }
    const who = clientOfCertificate(opts.tls?.cert ?? '');
    if (who === undefined) {
      throw clusterError(
        ClusterCode.BAD_TLS,
        'the client certificate must name <client>.client.<cluster>.plexus.internal (plexus cluster client-cert)',
        { field: 'tls.cert' },
      );
    }
    return new ActorClient([...opts.members], opts.tls, who.cluster, who.client, opts);
  }

  /**
   * Sends an event to the actor `iri`; resolves with the owner's verdict once it took the
   * message durably (`processed`, or `duplicate` when it had it already). The message id is
   * fresh unless `opts.id` gives one: the same id sent again (after a restart of the program,
   * say) is taken once.
   */
  async send(
    iri: string,
    event: string,
    data?: JsonValue,
    opts: { readonly id?: string } = {},
  ): Promise<'processed' | 'duplicate'> {
    const r = await this.call('send', iri, event, data, opts.id);
    if (!('verdict' in r)) throw this.badReply('send');
    return r.verdict;
  }

  /** Sends an event to the actor `iri` and resolves with the event it sends back to the sender. */
  async ask(iri: string, event: string, data?: JsonValue): Promise<ActorEvent> {
    const r = await this.call('ask', iri, event, data);
    if (!('reply' in r)) throw this.badReply('ask');
    return r.reply;
  }

  /** Closes the connections to the members; later calls are refused. */
  close(): void {
    this.closed = true;
    for (const s of this.sessions.values()) s.destroy();
    this.sessions.clear();
  }

  private badReply(op: string): PlexusError {
    return clusterError(ClusterCode.BAD_REQUEST, `a member answered a ${op} with a reply of another shape`, {
      reason: 'client',
    });
  }

  private async call(
    op: 'send' | 'ask',
    target: string,
    event: string,
    data?: JsonValue,
    givenId?: string,
  ): Promise<ClientReply> {
    if (this.closed) throw clusterError(ClusterCode.BAD_REQUEST, 'the ActorClient is closed', { reason: 'client' });
    const id = givenId ?? randomUUID();
    const start = this.clock.now();
    const end = start + this.deadlineMs;
    let attempts = 0;
    let failedInRow = 0;
    let last: PlexusError | undefined;
    // Calls start at the members in turn (spreading the load), skipping one that failed lately.
    let at = this.next++;
    for (;;) {
      const left = end - this.clock.now();
      if (left <= 0) break;
      at = this.pick(at);
      const member = this.members[at % this.members.length] as string;
      attempts++;
      this.stats.attempts++;
      const body = encodeClientRequest({
        op,
        target,
        event,
        id,
        waitMs: Math.max(1, Math.min(MAX_CLIENT_WAIT_MS, Math.floor(left))),
        ...(data === undefined ? {} : { data }),
      });
      const a = await this.attempt(member, body, left);
      if (a.ok) return a.reply;
      last = a.error;
      if (FINAL_CODES.has(a.error.code)) throw a.error;
      // Another member next; after a full round without an answer, pause first.
      if (a.error.code.startsWith('PLX_WIRE_')) this.down.set(member, this.clock.now() + DOWN_MS);
      at++;
      this.stats.failovers++;
      failedInRow++;
      if (failedInRow % this.members.length === 0) {
        const pause = Math.min(this.backoffMs, end - this.clock.now());
        if (pause > 0) await new Promise((r) => this.clock.setTimeout(() => r(undefined), pause));
      }
    }
    throw clusterError(
      ClusterCode.DEADLINE,
      `${op} to ${target}: no member answered within ${this.deadlineMs} ms${last ? ` (last: ${last.code}: ${last.message})` : ''}`,
      {
        event: ERROR_COMMUNICATION,
        target,
        attempts,
        ...(last ? { last: last.code } : {}),
      },
      last,
    );
  }

  /** The index from `at` on of the first member not marked down (`at` itself when all are). */
  private pick(at: number): number {
    const now = this.clock.now();
    for (let i = 0; i < this.members.length; i++) {
      const m = this.members[(at + i) % this.members.length] as string;
      if ((this.down.get(m) ?? 0) <= now) return at + i;
    }
    return at;
  }

  private session(member: string): http2.ClientHttp2Session {
    const had = this.sessions.get(member);
    if (had !== undefined && !had.closed && !had.destroyed) return had;
    const cluster = this.cluster;
    const s = http2.connect(`https://${member}`, {
      cert: this.tls.cert,
      key: this.tls.key,
      ca: this.tls.ca,
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      rejectUnauthorized: true,
      // The member's certificate must name a node of the client's cluster (any node: the
      // client knows members by address only).
      checkServerIdentity: (_host, cert) =>
        nodeOfPeer(cert, cluster) === undefined
          ? new PlexusError('PLX_WIRE_UNTRUSTED', `${member} presents no node certificate of cluster ${cluster}`, {
              peer: member,
            })
          : undefined,
    });
    s.on('error', () => {});
    const drop = () => {
      if (this.sessions.get(member) === s) this.sessions.delete(member);
    };
    s.on('close', drop);
    s.on('goaway', drop);
    this.sessions.set(member, s);
    return s;
  }

  /** One call to one member, bounded by `ms`; never rejects. */
  private attempt(member: string, body: Uint8Array, ms: number): Promise<Attempt> {
    return new Promise<Attempt>((resolve) => {
      let done = false;
      let timer: TimerHandle | undefined;
      let offSession = () => {};
      const finish = (a: Attempt) => {
        if (done) return;
        done = true;
        this.clock.clearTimeout(timer);
        offSession();
        resolve(a);
      };
      const fail = (
        code: 'PLX_WIRE_UNREACHABLE' | 'PLX_WIRE_DEADLINE' | 'PLX_WIRE_REFUSED',
        message: string,
        cause?: unknown,
      ) =>
        finish({ ok: false, error: new PlexusError(code, message, { peer: member }, cause ? { cause } : undefined) });
      let session: http2.ClientHttp2Session;
      try {
        session = this.session(member);
      } catch (e) {
        fail('PLX_WIRE_UNREACHABLE', `cannot dial ${member}: ${(e as Error).message}`, e);
        return;
      }
      // A connection that ends (a refused handshake, a member that died) fails its calls now.
      const ended = (e?: Error) =>
        fail('PLX_WIRE_UNREACHABLE', `the connection to ${member} ended${e ? `: ${e.message}` : ''}`, e);
      session.once('close', ended);
      session.once('error', ended);
      offSession = () => {
        session.off('close', ended);
        session.off('error', ended);
      };
      const req = session.request({ ':method': 'POST', ':path': CALL_PATH });
      timer = this.clock.setTimeout(() => {
        req.close(http2.constants.NGHTTP2_CANCEL);
        session.destroy();
        fail('PLX_WIRE_DEADLINE', `no answer from ${member} within ${Math.round(ms)} ms`);
      }, ms);
      let status = 0;
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('response', (h) => {
        status = Number(h[':status']);
      });
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_CLIENT_REPLY) req.close(http2.constants.NGHTTP2_CANCEL);
        else chunks.push(c);
      });
      req.on('error', (e) => fail('PLX_WIRE_UNREACHABLE', `call to ${member} failed: ${e.message}`, e));
      req.on('close', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (status === 200 && size <= MAX_CLIENT_REPLY) {
          try {
            const r = JSON.parse(text) as ClientReply;
            if (typeof r === 'object' && r !== null && ('verdict' in r || 'reply' in r)) {
              finish({ ok: true, reply: r });
              return;
            }
          } catch {
            // a bad reply: refused below
          }
          fail('PLX_WIRE_REFUSED', `${member} answered with a reply that is not JSON`);
        } else if (status === 500) {
          try {
            const e = JSON.parse(text) as { code: string; message: string; details?: Record<string, unknown> };
            finish({
              ok: false,
              error: new PlexusError(codeFromPeer(e.code), e.message, { ...(e.details ?? {}), peer: member }),
            });
          } catch {
            fail('PLX_WIRE_REFUSED', `${member} refused the call`);
          }
        } else fail('PLX_WIRE_UNREACHABLE', `call to ${member} ended without an answer (status ${status})`);
      });
      req.end(body);
    });
  }
}

/** Whether an error is the client's deadline refusal (PLX_CLUSTER_DEADLINE from an ActorClient call). */
export function isClientDeadline(e: unknown): boolean {
  return isPlexusError(e) && e.code === ClusterCode.DEADLINE && e.details.event === ERROR_COMMUNICATION;
}
