/**
 * The inbound admission pipeline: what a message from across a trust boundary passes before the
 * runtime journals it, in this order:
 *
 * 1. decrypt it with the actor's `KeyManager` (a failure is PLX_ADMISSION_UNDECRYPTABLE);
 * 2. verify the sender against its resolved DID document (PLX_ADMISSION_UNVERIFIED); an anonymous
 *    message is refused (PLX_ADMISSION_ANONYMOUS) unless the actor's `AnonymousPolicy` is `allow`;
 * 3. find an inbound grant for sender, target and event (PLX_ADMISSION_NO_GRANT,
 *    PLX_ADMISSION_GRANT_EXPIRED);
 * 4. check the payload against the actor's declared event type (PLX_ADMISSION_PAYLOAD);
 * 5. drop a message id already seen (PLX_ADMISSION_DUPLICATE).
 *
 * An admitted message is delivered to the node with `origin` = the sender's DID,
 * `origintype` = the DIDComm processor IRI and `originverified = true`; these are journaled with
 * the event, so replay never resolves or verifies again. A refusal is recorded in the actor's
 * inbound log with its reason, costs no journal append, and is answered with
 * `error.communication` only when the sender is verified and had contacted the actor before.
 */

import { createHash } from 'node:crypto';
import type { InboundRefusal } from '../codec/inbound-record.js';
import type { Clock } from '../core/clock.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { DeliverResult, Envelope, JsonValue } from '../runtime/types.js';
import type { DidDocumentSource } from './did/types.js';
import type { DidCommMessage } from './didcomm/message.js';
import { unpack } from './didcomm/unpack.js';
import { descriptorMatches, eventTokens, type GrantSet } from './grants.js';
import type { InboundLog } from './inbound-log.js';
import type { KeyManager } from './keys/types.js';

/** The longest runtime message id (the journal record's limit). */
const MAX_RUNTIME_ID_BYTES = 8192;

/** The DIDComm message type plexus events travel in. */
export const EVENT_MESSAGE_TYPE = 'https://w3id.org/plexus/federation/1.0/event';
/** `_event.origintype` of an event admitted from DIDComm. */
export const DIDCOMM_PROCESSOR_TYPE = 'https://w3id.org/vertep/vt-id#DIDCommEventProcessor';
/** The event a refused sender (verified, a prior contact) is answered with. */
export const ERROR_COMMUNICATION_EVENT = 'error.communication';

export const AdmissionCode = {
  undecryptable: 'PLX_ADMISSION_UNDECRYPTABLE',
  unverified: 'PLX_ADMISSION_UNVERIFIED',
  anonymous: 'PLX_ADMISSION_ANONYMOUS',
  noGrant: 'PLX_ADMISSION_NO_GRANT',
  grantExpired: 'PLX_ADMISSION_GRANT_EXPIRED',
  payload: 'PLX_ADMISSION_PAYLOAD',
  duplicate: 'PLX_ADMISSION_DUPLICATE',
  malformed: 'PLX_ADMISSION_MALFORMED',
  wrongTarget: 'PLX_ADMISSION_WRONG_TARGET',
  badInput: 'PLX_ADMISSION_BAD_INPUT',
  badSchema: 'PLX_ADMISSION_BAD_SCHEMA',
} as const;

/** Whether an actor takes messages whose sender is not authenticated. */
export type AnonymousPolicy = 'deny' | 'allow';

/** A validator returns true, or a reason the payload is refused (false = no reason given). */
export type EventValidator = (data: JsonValue | undefined) => true | false | string;
/** A JSON Schema (the subset `checkSchema` documents) or a validator function. */
export type EventType = JsonSchema | EventValidator;

/**
 * The JSON Schema subset checked: `type` (a name or a list), `enum`, `const`, `properties`,
 * `required`, `additionalProperties` (a boolean or a schema), `items`, `minItems`, `maxItems`,
 * `minLength`, `maxLength`, `minimum`, `maximum`, `pattern`. Other keywords are refused when the
 * schema is declared, so a schema never silently checks less than it says.
 */
export interface JsonSchema {
  readonly type?: string | readonly string[];
  readonly enum?: readonly JsonValue[];
  readonly const?: JsonValue;
  readonly properties?: Readonly<Record<string, JsonSchema>>;
  readonly required?: readonly string[];
  readonly additionalProperties?: boolean | JsonSchema;
  readonly items?: JsonSchema;
  readonly minItems?: number;
  readonly maxItems?: number;
  readonly minLength?: number;
  readonly maxLength?: number;
  readonly minimum?: number;
  readonly maximum?: number;
  readonly pattern?: string;
  readonly [other: string]: unknown;
}

const SCHEMA_KEYS = new Set([
  'type',
  'enum',
  'const',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'minItems',
  'maxItems',
  'minLength',
  'maxLength',
  'minimum',
  'maximum',
  'pattern',
  '$schema',
  '$id',
  'title',
  'description',
]);
const TYPES = new Set(['null', 'boolean', 'object', 'array', 'number', 'integer', 'string']);

/** Checks a schema's shape (once, when declared); throws PLX_ADMISSION_BAD_SCHEMA. */
export function checkSchema(s: unknown, path = '#', depth = 0): void {
  const bad = (why: string) =>
    new PlexusError(AdmissionCode.badSchema, `event type schema at ${path}: ${why}`, { path });
  if (depth > 32) throw bad('nested deeper than 32');
  if (typeof s !== 'object' || s === null || Array.isArray(s)) throw bad('a schema is an object');
  const o = s as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!SCHEMA_KEYS.has(k)) throw bad(`keyword '${k}' is not supported`);
  if (o.type !== undefined) {
    const ts = Array.isArray(o.type) ? o.type : [o.type];
    if (ts.length === 0 || !ts.every((t) => typeof t === 'string' && TYPES.has(t))) throw bad('unknown type');
  }
  if (o.properties !== undefined) {
    if (typeof o.properties !== 'object' || o.properties === null) throw bad('properties is an object');
    for (const [k, v] of Object.entries(o.properties)) checkSchema(v, `${path}/properties/${k}`, depth + 1);
  }
  if (o.required !== undefined && !(Array.isArray(o.required) && o.required.every((r) => typeof r === 'string'))) {
    throw bad('required is a list of names');
  }
  if (typeof o.additionalProperties === 'object')
    checkSchema(o.additionalProperties, `${path}/additionalProperties`, depth + 1);
  if (o.items !== undefined) checkSchema(o.items, `${path}/items`, depth + 1);
  if (o.pattern !== undefined) {
    if (typeof o.pattern !== 'string') throw bad('pattern is a string');
    new RegExp(o.pattern, 'u');
  }
  for (const k of ['minItems', 'maxItems', 'minLength', 'maxLength', 'minimum', 'maximum']) {
    if (o[k] !== undefined && typeof o[k] !== 'number') throw bad(`${k} is a number`);
  }
}

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/** Validates `v` against a checked schema: undefined when it conforms, else the first problem. */
export function validateSchema(s: JsonSchema, v: unknown, path = '$'): string | undefined {
  if (s.type !== undefined) {
    const ts = (Array.isArray(s.type) ? s.type : [s.type]) as string[];
    const t = typeOf(v);
    const ok = ts.some((x) => x === t || (x === 'integer' && t === 'number' && Number.isInteger(v)));
    if (!ok) return `${path} is ${t}, expected ${ts.join(' or ')}`;
  }
  if (s.const !== undefined && JSON.stringify(s.const) !== JSON.stringify(v)) return `${path} is not the constant`;
  if (s.enum !== undefined && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
    return `${path} is not one of the allowed values`;
  }
  if (typeof v === 'string') {
    if (s.minLength !== undefined && v.length < s.minLength) return `${path} is shorter than ${s.minLength}`;
    if (s.maxLength !== undefined && v.length > s.maxLength) return `${path} is longer than ${s.maxLength}`;
    if (s.pattern !== undefined && !new RegExp(s.pattern, 'u').test(v)) return `${path} does not match its pattern`;
  }
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) return `${path} is below ${s.minimum}`;
    if (s.maximum !== undefined && v > s.maximum) return `${path} is above ${s.maximum}`;
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) return `${path} has fewer than ${s.minItems} items`;
    if (s.maxItems !== undefined && v.length > s.maxItems) return `${path} has more than ${s.maxItems} items`;
    if (s.items !== undefined) {
      for (let i = 0; i < v.length; i++) {
        const p = validateSchema(s.items, v[i], `${path}[${i}]`);
        if (p !== undefined) return p;
      }
    }
  }
  if (typeOf(v) === 'object') {
    const o = v as Record<string, unknown>;
    for (const r of s.required ?? []) if (!Object.hasOwn(o, r)) return `${path}.${r} is missing`;
    for (const [k, val] of Object.entries(o)) {
      const ps = s.properties?.[k];
      if (ps !== undefined) {
        const p = validateSchema(ps, val, `${path}.${k}`);
        if (p !== undefined) return p;
      } else if (s.additionalProperties === false) {
        return `${path}.${k} is not allowed`;
      } else if (typeof s.additionalProperties === 'object') {
        const p = validateSchema(s.additionalProperties, val, `${path}.${k}`);
        if (p !== undefined) return p;
      }
    }
  }
  return undefined;
}

/** What admission needs to know of a provisioned actor. */
export interface AdmittingActor {
  readonly did: string;
  readonly keys: KeyManager;
  readonly anonymous: AnonymousPolicy;
  /** Declared event types by SCXML descriptor; when given, an event matching none is refused. */
  readonly eventTypes?: ReadonlyMap<string, EventType>;
  /** The node that runs the actor. */
  deliver(envelope: Envelope): Promise<DeliverResult>;
}

export interface AdmissionContext {
  readonly resolver: DidDocumentSource;
  readonly grants: GrantSet;
  readonly log: InboundLog;
  readonly clock: Clock;
  /** Sends error.communication from `actor` to a refused sender (best effort). */
  answer?(actor: AdmittingActor, to: string, refused: InboundRefusal, thid: string, sendid?: string): void;
  /** Message ids remembered by the admission cache (default 65 536). */
  readonly dedupCapacity?: number;
}

/** The outcome of one message: admitted (processed or a runtime duplicate) or refused. */
export type AdmissionOutcome =
  | { readonly kind: 'admitted'; readonly result: DeliverResult; readonly envelope: Envelope }
  | { readonly kind: 'refused'; readonly refusal: InboundRefusal };

const UNDECRYPTABLE = new Set([
  'PLX_DIDCOMM_DECRYPT_FAILED',
  'PLX_DIDCOMM_NO_KEY',
  'PLX_DIDCOMM_NO_RECIPIENT',
  'PLX_DIDCOMM_MALFORMED',
  'PLX_DIDCOMM_TOO_LARGE',
  'PLX_DIDCOMM_UNSUPPORTED_ALG',
  'PLX_DIDCOMM_RECIPIENT_MISMATCH',
]);

/** The body of an event message. */
interface EventBody {
  name: string;
  data?: JsonValue;
  sendid?: string;
}

function eventBody(m: DidCommMessage): EventBody | string {
  if (m.type !== EVENT_MESSAGE_TYPE) return `message type ${String(m.type).slice(0, 120)} is not a plexus event`;
  const b = m.body as Record<string, unknown> | null;
  if (typeof b !== 'object' || b === null || Array.isArray(b)) return 'the event body is not an object';
  if (typeof b.name !== 'string') return 'the event has no name';
  try {
    eventTokens(b.name);
  } catch (e) {
    return (e as Error).message;
  }
  if (b.sendid !== undefined && (typeof b.sendid !== 'string' || b.sendid.length > 1024)) return 'bad sendid';
  return {
    name: b.name,
    ...(b.data === undefined ? {} : { data: b.data as JsonValue }),
    ...(b.sendid === undefined ? {} : { sendid: b.sendid as string }),
  };
}

/** The runtime message id: the sender's own ids are scoped by the sender's DID. */
export function runtimeMessageId(sender: string | undefined, id: string): string {
  if (sender === undefined) return `anonymous|${id}`;
  return id.startsWith(`${sender}#`) ? id : `${sender}|${id}`;
}

export class Admission {
  private readonly seen = new Map<string, true>();
  private readonly capacity: number;
  readonly stats = { admitted: 0, refused: 0 };

  constructor(private readonly ctx: AdmissionContext) {
    this.capacity = ctx.dedupCapacity ?? 65_536;
  }

  private remember(id: string): void {
    this.seen.delete(id);
    this.seen.set(id, true);
    if (this.seen.size > this.capacity) this.seen.delete(this.seen.keys().next().value as string);
  }

  private async refuse(
    actor: AdmittingActor,
    r: Omit<InboundRefusal, 'kind' | 'at' | 'actor'>,
    answer?: { thid: string; sendid?: string },
  ): Promise<AdmissionOutcome> {
    const refusal: InboundRefusal = { kind: 'refused', at: this.ctx.clock.now(), actor: actor.did, ...r };
    await this.ctx.log.record(refusal);
    this.stats.refused++;
    if (
      answer !== undefined &&
      refusal.senderVerified === true &&
      refusal.sender !== undefined &&
      refusal.event !== ERROR_COMMUNICATION_EVENT &&
      this.ctx.log.hasContact(actor.did, refusal.sender)
    ) {
      this.ctx.answer?.(actor, refusal.sender, refusal, answer.thid, answer.sendid);
    }
    return { kind: 'refused', refusal };
  }

  /**
   * Runs the pipeline on one packed envelope for `actor` and delivers an admitted event.
   * Resolves with the outcome once it is durable (the event journaled, or the refusal recorded):
   * then the relay may be acknowledged. Rejects only when neither could be made durable (the node
   * stopping, a journal failure): the message must then stay at the relay.
   */
  async receive(actor: AdmittingActor, envelope: string): Promise<AdmissionOutcome> {
    // 1. decrypt; 2. verify the sender against its DID document (unpack resolves it).
    let message: DidCommMessage;
    let authenticated: boolean;
    try {
      const u = await unpack(envelope, { resolver: this.ctx.resolver, keys: actor.keys, clock: this.ctx.clock });
      message = u.message;
      authenticated = u.metadata.authenticated;
    } catch (e) {
      const code = isPlexusError(e) ? e.code : 'unknown';
      const why = e instanceof Error ? e.message : String(e);
      const sha = createHash('sha256').update(envelope).digest('hex');
      if (UNDECRYPTABLE.has(code) || code.startsWith('PLX_KEYS_')) {
        return this.refuse(actor, {
          code: AdmissionCode.undecryptable,
          reason: `not decryptable by ${actor.did.slice(0, 80)}: ${why} (${code})`,
          envelopeSha256: sha,
        });
      }
      return this.refuse(actor, {
        code: AdmissionCode.unverified,
        reason: `the sender could not be verified against its DID document: ${why} (${code})`,
        envelopeSha256: sha,
      });
    }
    const sender = authenticated ? message.from : undefined;
    const body = eventBody(message);
    const base = {
      messageId: message.id.slice(0, 8192),
      ...(sender === undefined ? {} : { sender, senderVerified: true }),
      ...(typeof body === 'string' ? {} : { event: body.name }),
    };
    const answer = { thid: message.id, ...(typeof body !== 'string' && body.sendid ? { sendid: body.sendid } : {}) };
    if (message.to !== undefined && !message.to.includes(actor.did)) {
      return this.refuse(actor, {
        ...base,
        code: AdmissionCode.wrongTarget,
        reason: `not addressed to ${actor.did.slice(0, 80)}`,
      });
    }
    if (sender === undefined && actor.anonymous !== 'allow') {
      return this.refuse(actor, {
        ...base,
        code: AdmissionCode.anonymous,
        reason: `an anonymous message, and ${actor.did.slice(0, 80)} takes none (AnonymousPolicy deny)`,
      });
    }
    if (typeof body === 'string') {
      return this.refuse(actor, { ...base, code: AdmissionCode.malformed, reason: body }, answer);
    }
    // 3. the grant. An error.communication is taken from a party the actor may send to.
    const now = this.ctx.clock.now();
    const isError = body.name === ERROR_COMMUNICATION_EVENT;
    const answersOurs =
      isError &&
      sender !== undefined &&
      this.ctx.grants.outboundGrants().some((g) => g.grantee === actor.did && g.target === sender);
    if (!answersOurs) {
      const d = this.ctx.grants.allowsInbound(sender ?? '*', actor.did, body.name, now);
      if (!d.allowed) {
        return this.refuse(
          actor,
          {
            ...base,
            code: d.code === 'PLX_GRANT_EXPIRED' ? AdmissionCode.grantExpired : AdmissionCode.noGrant,
            reason: d.reason,
          },
          answer,
        );
      }
    }
    // 4. the payload against the declared event type.
    if (actor.eventTypes !== undefined && !answersOurs) {
      let type: EventType | undefined;
      for (const [d, t] of actor.eventTypes) {
        if (descriptorMatches(d, body.name)) {
          type = t;
          break;
        }
      }
      const problem =
        type === undefined
          ? `${actor.did.slice(0, 80)} declares no event type for ${body.name}`
          : typeof type === 'function'
            ? validatorProblem(type, body.data)
            : validateSchema(type, body.data);
      if (problem !== undefined) {
        return this.refuse(
          actor,
          { ...base, code: AdmissionCode.payload, reason: `the payload of ${body.name} is refused: ${problem}` },
          answer,
        );
      }
    }
    // 5. a message id already seen.
    const id = runtimeMessageId(sender, message.id);
    if (Buffer.byteLength(id) > MAX_RUNTIME_ID_BYTES) {
      return this.refuse(actor, {
        ...base,
        messageId: message.id.slice(0, 200),
        code: AdmissionCode.malformed,
        reason: `the message id is longer than the runtime takes (${MAX_RUNTIME_ID_BYTES} bytes with the sender's DID)`,
      });
    }
    if (this.seen.has(`${actor.did}\n${id}`)) {
      return this.refuse(actor, {
        ...base,
        code: AdmissionCode.duplicate,
        reason: `message ${id.slice(0, 200)} was already taken`,
      });
    }
    const env: Envelope = {
      id,
      target: actor.did,
      event: {
        name: body.name,
        ...(body.data === undefined ? {} : { data: body.data }),
        ...(body.sendid === undefined ? {} : { sendid: body.sendid }),
        ...(sender === undefined ? {} : { origin: sender, originverified: true }),
        origintype: DIDCOMM_PROCESSOR_TYPE,
      },
    };
    let result: DeliverResult;
    try {
      result = await actor.deliver(env);
    } catch (e) {
      // A chart that throws still consumed the event durably: that is an outcome, not a loss.
      if (!isPlexusError(e, 'PLX_RUNTIME_CHART_FAILED')) throw e;
      result = 'processed';
    }
    this.remember(`${actor.did}\n${id}`);
    if (result === 'duplicate') {
      return this.refuse(actor, {
        ...base,
        code: AdmissionCode.duplicate,
        reason: `message ${id.slice(0, 200)} was already journaled`,
      });
    }
    this.stats.admitted++;
    if (sender !== undefined) await this.ctx.log.contact(actor.did, sender, now);
    return { kind: 'admitted', result, envelope: env };
  }
}

function validatorProblem(v: EventValidator, data: JsonValue | undefined): string | undefined {
  try {
    const r = v(data);
    if (r === true) return undefined;
    return typeof r === 'string' ? r : 'the validator refused it';
  } catch (e) {
    return `the validator threw: ${(e as Error)?.message ?? String(e)}`;
  }
}
