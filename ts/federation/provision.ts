/**
 * `Federation`: the node-side join of DIDs, grants, the admission pipeline and relay mailboxes
 * to the actor runtime. Actors on ordinary IRIs never touch it: only sends of type `didcomm` and
 * actors provisioned here do.
 *
 * ```ts
 * const fed = await Federation.create({ resolver, clock });
 * const node = Node.builder(storage).processor(fed.outbox).build();
 * const shop = await fed.provision(node, shopChart, 'shop', { mediator }, keys);
 * const mailbox = fed.mailbox(shop, mediator);  await mailbox.connect();  await mailbox.pump();
 * ```
 *
 * `provision` creates the actor's keys (in the given KeyManager) and its did:peer:2 DID (whose
 * service is the mediator, with the mediator's key as routing key), and binds the DID to the
 * chart on the node: the DID is the actor's address and the subject of its journal.
 */
import { PlexusError } from '../core/errors.js';
import { systemClock } from '../runtime/clock.js';
import type { Node } from '../runtime/node.js';
import type { Chart, Clock, DeliverResult, Envelope } from '../runtime/types.js';
import {
  Admission,
  type AdmittingActor,
  type AnonymousPolicy,
  checkSchema,
  ERROR_COMMUNICATION_EVENT,
  EVENT_MESSAGE_TYPE,
  type EventType,
} from './admission.js';
import type { DidDocumentSource } from './did/types.js';
import { descriptorTokens, GrantSet } from './grants.js';
import { InboundLog } from './inbound-log.js';
import type { KeyManager } from './keys/types.js';
import { createPeerIdentity, type PeerService } from './mediator/identity.js';
import { PickupClient } from './pickup/client.js';
import { RelayMailbox, type RelayMailboxOptions } from './relay/mailbox.js';
import { DidCommOutbox, type RelayNetwork, type RetryPolicy } from './relay/outbox.js';

export interface FederationOptions {
  /** Resolves DIDs (a ResolverRegistry); `invalidate` is called when an endpoint fails. */
  readonly resolver: DidDocumentSource & { invalidate?(did: string): unknown };
  /** This party's grants (default: a fresh set). */
  readonly grants?: GrantSet;
  /** The inbound log (default: in memory; give one on a FileLog to keep it). */
  readonly inboundLog?: InboundLog;
  /** Time for retries and grant expiry (default the system clock). */
  readonly clock?: Clock;
  /** How packed messages leave (default HTTP). */
  readonly network?: RelayNetwork;
  readonly retry?: Partial<RetryPolicy>;
  /** Message ids the admission cache remembers (default 65 536). */
  readonly dedupCapacity?: number;
}

/** A mediator the actor receives through: its URL and DID. */
export interface MediatorRef {
  readonly url: string;
  readonly did: string;
}

export interface ProvisionConfig {
  /** The mediator that holds the actor's messages; becomes the DID's first service. */
  readonly mediator?: MediatorRef;
  /** Further services, in preference order after the mediator's. */
  readonly services?: readonly PeerService[];
  /** Default `deny`. */
  readonly anonymous?: AnonymousPolicy;
  /** Declared event types by SCXML descriptor (a JSON Schema or a validator function). */
  readonly eventTypes?: Readonly<Record<string, EventType>>;
}

/** A provisioned actor: its DID (its address), keys and admission settings. */
export interface ProvisionedActor extends AdmittingActor {
  /** The local name given to `provision`. */
  readonly name: string;
  readonly signingKid: string;
  readonly agreementKid: string;
  readonly node: Node;
}

export class Federation {
  readonly grants: GrantSet;
  readonly outbox: DidCommOutbox;
  readonly admission: Admission;
  readonly clock: Clock;
  private readonly actors = new Map<string, ProvisionedActor>();

  private constructor(
    private readonly opts: FederationOptions,
    readonly inboundLog: InboundLog,
  ) {
    this.grants = opts.grants ?? new GrantSet();
    this.clock = opts.clock ?? systemClock;
    this.outbox = new DidCommOutbox({
      resolver: opts.resolver,
      grants: this.grants,
      actor: (did) => this.actors.get(did),
      clock: this.clock,
      ...(opts.network === undefined ? {} : { network: opts.network }),
      ...(opts.retry === undefined ? {} : { retry: opts.retry }),
    });
    this.admission = new Admission({
      resolver: opts.resolver,
      grants: this.grants,
      log: inboundLog,
      clock: this.clock,
      ...(opts.dedupCapacity === undefined ? {} : { dedupCapacity: opts.dedupCapacity }),
      answer: (actor, to, refused, thid, sendid) => this.answer(actor, to, refused.code, refused.reason, thid, sendid),
    });
  }

  static async create(opts: FederationOptions): Promise<Federation> {
    return new Federation(opts, opts.inboundLog ?? (await InboundLog.open()));
  }

  /** The `didcomm` Event I/O Processor: register it with `Node.builder(...).processor(...)`. */
  processor(): DidCommOutbox {
    return this.outbox;
  }

  /**
   * Creates an actor's keys and did:peer:2 DID in `keys`, and binds the DID to `chart` on `node`.
   * `name` is a local label. Returns the provisioned actor (`did` is its address).
   */
  async provision(
    node: Node,
    // biome-ignore lint/suspicious/noExplicitAny: charts of any state type
    chart: Chart<any, any>,
    name: string,
    config: ProvisionConfig,
    keys: KeyManager,
  ): Promise<ProvisionedActor> {
    if (typeof name !== 'string' || name.length === 0 || name.length > 256) {
      throw new PlexusError('PLX_ADMISSION_BAD_INPUT', 'provision needs a name of 1..256 characters', {});
    }
    const anonymous = config.anonymous ?? 'deny';
    if (anonymous !== 'deny' && anonymous !== 'allow') {
      throw new PlexusError('PLX_ADMISSION_BAD_INPUT', "AnonymousPolicy is 'deny' or 'allow'", {});
    }
    let eventTypes: Map<string, EventType> | undefined;
    if (config.eventTypes !== undefined) {
      eventTypes = new Map();
      for (const [d, t] of Object.entries(config.eventTypes)) {
        descriptorTokens(d);
        if (typeof t !== 'function') checkSchema(t);
        eventTypes.set(d, t);
      }
    }
    const services: PeerService[] = [
      ...(config.mediator ? [{ uri: config.mediator.url, routingKeys: [`${config.mediator.did}#key-2`] }] : []),
      ...(config.services ?? []),
    ];
    const id = await createPeerIdentity(keys, services);
    node.bindChart(id.did, chart);
    const actor: ProvisionedActor = {
      did: id.did,
      name,
      signingKid: id.signingKid,
      agreementKid: id.agreementKid,
      keys,
      node,
      anonymous,
      ...(eventTypes === undefined ? {} : { eventTypes }),
      deliver: (env: Envelope): Promise<DeliverResult> => node.deliver(env, { whenFull: 'wait' }),
    };
    this.actors.set(id.did, actor);
    return actor;
  }

  /** The provisioned actor of a DID. */
  actor(did: string): ProvisionedActor | undefined {
    return this.actors.get(did);
  }

  /** The actor's receiving mailbox at `mediator` (call `connect()` once, then `pump()`). */
  mailbox(actor: ProvisionedActor, mediator: MediatorRef, opts: RelayMailboxOptions = {}): RelayMailbox {
    const client = new PickupClient({
      mediatorUrl: mediator.url,
      mediatorDid: mediator.did,
      did: actor.did,
      resolver: this.opts.resolver,
      keys: actor.keys,
    });
    return new RelayMailbox(actor, client, this.admission, opts);
  }

  /** Sends error.communication for a refused message (best effort, through the outbox). */
  private answer(actor: AdmittingActor, to: string, code: string, reason: string, thid: string, sendid?: string): void {
    const a = this.actors.get(actor.did);
    if (a === undefined) return;
    const msg = {
      id: `${actor.did}#refused.${crypto.randomUUID()}`,
      type: EVENT_MESSAGE_TYPE,
      from: actor.did,
      to: [to],
      thid,
      body: {
        name: ERROR_COMMUNICATION_EVENT,
        data: { code, reason, ...(sendid === undefined ? {} : { sendid }) },
        ...(sendid === undefined ? {} : { sendid }),
      },
    };
    this.outbox.deliver(a, to, msg, sendid).catch(() => {});
  }

  /** Stops retries; the node closes the outbox itself when it stops. */
  async close(): Promise<void> {
    await this.outbox.close();
  }
}
