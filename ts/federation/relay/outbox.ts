/**
 * The relay outbox: the `didcomm` Event I/O Processor. A send of a provisioned actor to a DID is
 * checked against the sender's outbound grants before anything leaves, packed as a plexus event
 * message (authcrypt, sender protected, wrapped in forwards for the recipient's routing keys) and
 * posted to the recipient's DIDCommMessaging services in the DID document's order, falling back
 * to the next one. An unreachable recipient is retried with backoff (by default 5 attempts, 1 s
 * doubling up to 60 s, on the node's clock); after that the send fails with
 * PLX_RELAY_UNDELIVERABLE and the runtime gives the sending chart `error.communication` with the
 * send id and the reason. The chart never waits for any of this.
 */
import { isPlexusError, type PlexusCode, PlexusError } from '../../core/errors.js';
import { RetryPolicy as Backoffs } from '../../core/retry.js';
import type { Clock, EventIOProcessor, Outgoing } from '../../runtime/types.js';
import { EVENT_MESSAGE_TYPE } from '../admission.js';
import { didcommEndpoints } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { DidCommMessage } from '../didcomm/message.js';
import { packEncrypted } from '../didcomm/pack.js';
import type { GrantSet } from '../grants.js';
import type { KeyManager } from '../keys/types.js';

export const DIDCOMM_SEND_TYPE = 'didcomm';
export const MEDIA_TYPE_DIDCOMM_ENCRYPTED = 'application/didcomm-encrypted+json';

export interface RetryPolicy {
  /** Attempts in all (default 5). */
  readonly attempts: number;
  /** Pause after the first failed attempt, ms (default 1000); doubled after each. */
  readonly initialDelayMs: number;
  /** Longest pause, ms (default 60 000). */
  readonly maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { attempts: 5, initialDelayMs: 1000, maxDelayMs: 60_000 };

/**
 * How packed messages leave: `post` resolves once the endpoint accepted the message (a mediator
 * answers 202 once it is durable), and throws PLX_RELAY_UNREACHABLE (retried) or
 * PLX_RELAY_REFUSED (not retried).
 */
export interface RelayNetwork {
  post(uri: string, body: string): Promise<void>;
}

/** Posts over HTTP(S) with fetch. 2xx accepts; 429 and 5xx are retried; other statuses refuse. */
export const httpNetwork: RelayNetwork = {
  async post(uri, body) {
    let res: Response;
    try {
      res = await fetch(uri, {
        method: 'POST',
        headers: { 'content-type': MEDIA_TYPE_DIDCOMM_ENCRYPTED },
        body,
        signal: AbortSignal.timeout(30_000),
      });
    } catch (e) {
      throw new PlexusError('PLX_RELAY_UNREACHABLE', `${uri} is unreachable: ${(e as Error).message}`, { uri });
    }
    const text = await res.text().catch(() => '');
    if (res.ok) return;
    const code = res.status === 429 || res.status >= 500 ? 'PLX_RELAY_UNREACHABLE' : 'PLX_RELAY_REFUSED';
    throw new PlexusError(code, `${uri} answered ${res.status}: ${text.slice(0, 200)}`, { uri, status: res.status });
  },
};

/** What the outbox needs of a provisioned sender. */
export interface SendingActor {
  readonly did: string;
  readonly keys: KeyManager;
}

export interface OutboxOptions {
  readonly resolver: DidDocumentSource & { invalidate?(did: string): unknown };
  readonly grants: GrantSet;
  readonly actor: (did: string) => SendingActor | undefined;
  readonly clock: Clock;
  readonly network?: RelayNetwork;
  readonly retry?: Partial<RetryPolicy>;
}

function relayError(code: PlexusCode, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(code, message, details);
}

export class DidCommOutbox implements EventIOProcessor {
  readonly type = DIDCOMM_SEND_TYPE;
  readonly policy: RetryPolicy;
  private readonly network: RelayNetwork;
  private closed = false;
  private readonly timers = new Set<{ handle: unknown; wake: () => void }>();
  /** Counters: posts tried, messages accepted by a relay, sends failed for good. */
  readonly stats = { attempts: 0, delivered: 0, failed: 0 };

  constructor(private readonly opts: OutboxOptions) {
    this.network = opts.network ?? httpNetwork;
    this.policy = { ...DEFAULT_RETRY_POLICY, ...opts.retry };
    const p = this.policy;
    if (
      !(Number.isInteger(p.attempts) && p.attempts >= 1 && p.initialDelayMs >= 0 && p.maxDelayMs >= p.initialDelayMs)
    ) {
      throw relayError(
        'PLX_RELAY_BAD_CONFIG',
        'a retry policy needs attempts >= 1 and 0 <= initialDelayMs <= maxDelayMs',
      );
    }
  }

  async send(out: Outgoing): Promise<void> {
    const from = out.from;
    const target = out.envelope.target;
    const event = out.envelope.event;
    const actor = this.opts.actor(from);
    if (actor === undefined) {
      throw relayError(
        'PLX_RELAY_NOT_PROVISIONED',
        `${from.slice(0, 80)} has no DID provisioned on this node; provision it with Federation.provision before sending with type didcomm`,
        { from },
      );
    }
    if (!target.startsWith('did:')) {
      throw relayError('PLX_RELAY_BAD_TARGET', `a didcomm send needs a DID target, not ${target.slice(0, 80)}`, {
        target,
      });
    }
    // The sender's outbound grant, before anything leaves.
    this.opts.grants.requireOutbound(from, target, event.name, this.opts.clock.now());
    const message: DidCommMessage = {
      id: out.envelope.id,
      type: EVENT_MESSAGE_TYPE,
      from,
      to: [target],
      created_time: Math.floor(this.opts.clock.now() / 1000),
      body: {
        name: event.name,
        ...(event.data === undefined ? {} : { data: event.data }),
        ...(event.sendid === undefined ? {} : { sendid: event.sendid }),
      },
    };
    return this.deliver(actor, target, message, event.sendid);
  }

  /** Sends one message with the retry policy; rejects PLX_RELAY_UNDELIVERABLE after it. */
  async deliver(actor: SendingActor, target: string, message: DidCommMessage, sendid?: string): Promise<void> {
    const name = (message.body as { name?: string } | null)?.name ?? message.type;
    // The documented schedule exactly (no jitter): the first pause, doubled after each, capped.
    const delays = new Backoffs({
      baseMs: this.policy.initialDelayMs,
      capMs: this.policy.maxDelayMs,
      jitter: 'none',
    }).start(this.opts.clock);
    let last: unknown;
    for (let attempt = 1; attempt <= this.policy.attempts; attempt++) {
      if (this.closed) break;
      try {
        await this.attempt(actor, target, message);
        this.stats.delivered++;
        return;
      } catch (e) {
        last = e;
        if (isPlexusError(e) && !retryable(e.code)) break;
        this.opts.resolver.invalidate?.(target);
      }
      if (attempt < this.policy.attempts) {
        await this.sleep(delays.next() ?? this.policy.maxDelayMs);
      }
    }
    this.stats.failed++;
    const why = last instanceof Error ? last.message : String(last);
    throw relayError(
      'PLX_RELAY_UNDELIVERABLE',
      `could not deliver ${name} to ${target.slice(0, 80)} (send id ${sendid ?? 'none'}): ${why}`,
      { target, sendid, cause: isPlexusError(last) ? last.code : undefined },
    );
  }

  /** One attempt: every service of the recipient in preference order. */
  private async attempt(actor: SendingActor, target: string, message: DidCommMessage): Promise<void> {
    const doc = await this.opts.resolver.resolve(target);
    const services = didcommEndpoints(doc);
    if (services.length === 0) {
      throw relayError('PLX_RELAY_NO_SERVICE', `${target.slice(0, 80)} publishes no DIDCommMessaging service`, {
        target,
      });
    }
    let last: unknown;
    for (const s of services) {
      const packed = await packEncrypted(
        message,
        { to: target, from: actor.did, protectSender: true, serviceId: s.serviceId },
        { resolver: this.opts.resolver, keys: actor.keys },
      );
      this.stats.attempts++;
      try {
        await this.network.post(packed.service?.uri ?? s.uri, packed.packed);
        return;
      } catch (e) {
        last = e;
      }
    }
    throw last;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = {
        handle: undefined as unknown,
        wake: () => {
          this.timers.delete(t);
          resolve();
        },
      };
      t.handle = this.opts.clock.setTimeout(t.wake, ms);
      this.timers.add(t);
    });
  }

  /** Stops retrying: sends waiting for a retry fail at once. */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of [...this.timers]) {
      this.opts.clock.clearTimeout(t.handle);
      t.wake();
    }
  }
}

function retryable(code: string): boolean {
  return code === 'PLX_RELAY_UNREACHABLE' || code.startsWith('PLX_DID_') || code === 'PLX_RELAY_NO_SERVICE';
}
