/**
 * DID-scoped grants: who may send which events to whom across a trust boundary. A grant names a
 * grantee (a DID, or `*` for anyone), a target (a DID or IRI) and SCXML event descriptors, with an
 * optional expiry. The sender checks its outbound grants before anything leaves; the receiver
 * checks its inbound grants before anything is journaled.
 *
 * Descriptors match as SCXML 1.0 §3.12.1 says: "An event descriptor matches an event name if its
 * string of tokens is an exact match or a prefix of the set of tokens in the event's name", tokens
 * being separated by `.` and compared case-sensitively; a trailing `.*` is ignored, and `*` alone
 * matches every event. So `order` and `order.*` both match `order`, `order.placed` and
 * `order.placed.eu`, but not `orders`.
 *
 * Grants serialise to JSON-LD objects with the `vt-id:` vocabulary (`vt-id:Grant`,
 * `vt-id:grantee`, `vt-id:target`, `vt-id:event`, `vt-id:expires`), so the identity graph can be
 * queried for "who may talk to this agent".
 */
import { PlexusError } from '../core/errors.js';

/** The vt-id vocabulary. */
export const VT_ID = 'https://w3id.org/vertep/vt-id#';

/** The most descriptors one grant holds, and the longest descriptor, grantee or target. */
export const MAX_GRANT_EVENTS = 64;
export const MAX_DESCRIPTOR_LENGTH = 256;
export const MAX_PARTY_LENGTH = 8192;

export interface Grant {
  /** The DID allowed to send, or `*` for any sender. */
  readonly grantee: string;
  /** The DID or IRI the events may be sent to. */
  readonly target: string;
  /** SCXML event descriptors: `order.placed`, `order.*`, `order`, `*`. */
  readonly events: readonly string[];
  /** Milliseconds since the epoch from which the grant no longer holds. */
  readonly expires?: number;
}

/** Why a check refused, as a stable code. */
export type GrantRefusal = 'PLX_GRANT_NONE' | 'PLX_GRANT_EXPIRED';

export type GrantDecision =
  | { readonly allowed: true; readonly grant: Grant }
  | { readonly allowed: false; readonly code: GrantRefusal; readonly reason: string };

const TOKEN_RE = /^[^\s.*]+$/;

function bad(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_GRANT_BAD_GRANT', message, details);
}

/** The tokens a descriptor requires (`[]` for `*`), or a refusal. */
export function descriptorTokens(descriptor: string): string[] {
  if (typeof descriptor !== 'string' || descriptor.length === 0 || descriptor.length > MAX_DESCRIPTOR_LENGTH) {
    throw new PlexusError(
      'PLX_GRANT_BAD_DESCRIPTOR',
      `an event descriptor is a string of 1..${MAX_DESCRIPTOR_LENGTH} characters`,
      {},
    );
  }
  if (descriptor === '*') return [];
  const body = descriptor.endsWith('.*') ? descriptor.slice(0, -2) : descriptor;
  const tokens = body.split('.');
  if (!tokens.every((t) => TOKEN_RE.test(t))) {
    throw new PlexusError(
      'PLX_GRANT_BAD_DESCRIPTOR',
      `'${descriptor.slice(0, 80)}' is not an SCXML event descriptor: use dot-separated tokens without spaces or '*', optionally ending in '.*', or '*' alone`,
      { descriptor: descriptor.slice(0, 80) },
    );
  }
  return tokens;
}

/** The tokens of an event name, or a refusal. */
export function eventTokens(event: string): string[] {
  if (typeof event !== 'string' || event.length === 0 || event.length > MAX_DESCRIPTOR_LENGTH) {
    throw new PlexusError(
      'PLX_GRANT_BAD_EVENT',
      `an event name is a string of 1..${MAX_DESCRIPTOR_LENGTH} characters`,
      {},
    );
  }
  const tokens = event.split('.');
  if (!tokens.every((t) => TOKEN_RE.test(t))) {
    throw new PlexusError(
      'PLX_GRANT_BAD_EVENT',
      `'${event.slice(0, 80)}' is not an event name: use dot-separated tokens without spaces or '*'`,
      {},
    );
  }
  return tokens;
}

/** SCXML descriptor matching on tokens: the descriptor's tokens are a prefix of the event's. */
export function descriptorMatches(descriptor: string, event: string): boolean {
  const d = descriptorTokens(descriptor);
  const e = eventTokens(event);
  if (d.length > e.length) return false;
  for (let i = 0; i < d.length; i++) if (d[i] !== e[i]) return false;
  return true;
}

function checkParty(what: string, v: unknown, allowAny: boolean): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_PARTY_LENGTH || /\s/.test(v)) {
    throw bad(`a grant's ${what} is a DID or IRI of 1..${MAX_PARTY_LENGTH} characters without spaces`);
  }
  if (v === '*' && !allowAny) throw bad(`a grant's ${what} cannot be '*'`);
  if (v !== '*' && !/^[A-Za-z][A-Za-z0-9+.-]*:/.test(v))
    throw bad(`a grant's ${what} '${v.slice(0, 80)}' is not a DID or IRI`);
  return v;
}

/** Checks a grant's shape; returns a frozen copy. */
export function makeGrant(g: Grant): Grant {
  if (g === null || typeof g !== 'object') throw bad('a grant is an object { grantee, target, events, expires? }');
  const grantee = checkParty('grantee', g.grantee, true);
  const target = checkParty('target', g.target, false);
  if (!Array.isArray(g.events) || g.events.length === 0 || g.events.length > MAX_GRANT_EVENTS) {
    throw bad(`a grant names 1..${MAX_GRANT_EVENTS} event descriptors`);
  }
  for (const d of g.events) descriptorTokens(d);
  if (g.expires !== undefined && (typeof g.expires !== 'number' || !Number.isSafeInteger(g.expires) || g.expires < 0)) {
    throw bad('a grant expires at a whole number of milliseconds since the epoch');
  }
  return Object.freeze({
    grantee,
    target,
    events: Object.freeze([...g.events]),
    ...(g.expires !== undefined ? { expires: g.expires } : {}),
  });
}

/** `Grant` shorthand: `grant(buyer, shop, ['order.*'])`. */
export function grant(grantee: string, target: string, events: readonly string[], expires?: number): Grant {
  return makeGrant({ grantee, target, events, ...(expires !== undefined ? { expires } : {}) });
}

/** One direction's grants, indexed by target. */
class GrantList {
  private readonly byTarget = new Map<string, Grant[]>();

  add(g: Grant): Grant {
    const ok = makeGrant(g);
    const list = this.byTarget.get(ok.target) ?? [];
    list.push(ok);
    this.byTarget.set(ok.target, list);
    return ok;
  }

  /** Removes grants equal to `g` (same grantee, target, events and expiry); returns how many. */
  remove(g: Grant): number {
    const list = this.byTarget.get(g.target);
    if (!list) return 0;
    const key = grantKey(g);
    const kept = list.filter((x) => grantKey(x) !== key);
    if (kept.length === 0) this.byTarget.delete(g.target);
    else this.byTarget.set(g.target, kept);
    return list.length - kept.length;
  }

  all(): Grant[] {
    return [...this.byTarget.values()].flat();
  }

  check(sender: string, target: string, event: string, now: number, direction: string): GrantDecision {
    eventTokens(event);
    let expired: Grant | undefined;
    for (const g of this.byTarget.get(target) ?? []) {
      if (g.grantee !== '*' && g.grantee !== sender) continue;
      if (!g.events.some((d) => descriptorMatches(d, event))) continue;
      if (g.expires !== undefined && now >= g.expires) {
        expired = g;
        continue;
      }
      return { allowed: true, grant: g };
    }
    if (expired) {
      return {
        allowed: false,
        code: 'PLX_GRANT_EXPIRED',
        reason: `the ${direction} grant for ${clipped(sender)} to send ${event} to ${clipped(target)} expired at ${new Date(expired.expires!).toISOString()}`,
      };
    }
    return {
      allowed: false,
      code: 'PLX_GRANT_NONE',
      reason: `no ${direction} grant lets ${clipped(sender)} send ${event} to ${clipped(target)}`,
    };
  }
}

function clipped(s: string): string {
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
}

function grantKey(g: Grant): string {
  return JSON.stringify([g.grantee, g.target, [...g.events], g.expires ?? null]);
}

/**
 * The grants of one party: outbound ones (checked by the sender before a message leaves) and
 * inbound ones (checked by the receiver before anything is journaled).
 */
export class GrantSet {
  private readonly outbound = new GrantList();
  private readonly inbound = new GrantList();

  grantOutbound(g: Grant): Grant {
    return this.outbound.add(g);
  }
  grantInbound(g: Grant): Grant {
    return this.inbound.add(g);
  }
  revokeOutbound(g: Grant): number {
    return this.outbound.remove(g);
  }
  revokeInbound(g: Grant): number {
    return this.inbound.remove(g);
  }
  outboundGrants(): Grant[] {
    return this.outbound.all();
  }
  inboundGrants(): Grant[] {
    return this.inbound.all();
  }

  /** May `sender` send `event` to `target`? Checked by the sender before anything leaves. */
  allowsOutbound(sender: string, target: string, event: string, now: number): GrantDecision {
    return this.outbound.check(sender, target, event, now, 'outbound');
  }
  /** May `sender` send `event` to `target`? Checked by the receiver. */
  allowsInbound(sender: string, target: string, event: string, now: number): GrantDecision {
    return this.inbound.check(sender, target, event, now, 'inbound');
  }

  /** Throws the refusal as a PlexusError (`PLX_GRANT_NONE`, `PLX_GRANT_EXPIRED`). */
  requireOutbound(sender: string, target: string, event: string, now: number): Grant {
    return orThrow(this.allowsOutbound(sender, target, event, now), sender, target, event);
  }
  requireInbound(sender: string, target: string, event: string, now: number): Grant {
    return orThrow(this.allowsInbound(sender, target, event, now), sender, target, event);
  }
}

function orThrow(d: GrantDecision, sender: string, target: string, event: string): Grant {
  if (d.allowed) return d.grant;
  throw new PlexusError(d.code, d.reason, { sender: clipped(sender), target: clipped(target), event });
}

/** The JSON-LD context of serialised grants. */
export const GRANT_CONTEXT = { 'vt-id': VT_ID, xsd: 'http://www.w3.org/2001/XMLSchema#' } as const;

export interface GrantJsonLd {
  '@id'?: string;
  '@type': 'vt-id:Grant';
  'vt-id:grantee': { '@id': string } | '*';
  'vt-id:target': { '@id': string };
  'vt-id:event': string[];
  'vt-id:expires'?: { '@value': string; '@type': 'xsd:dateTime' };
}

/** A grant as a JSON-LD node (compacted against `GRANT_CONTEXT`). */
export function grantToJsonLd(g: Grant, id?: string): GrantJsonLd {
  const ok = makeGrant(g);
  return {
    ...(id !== undefined ? { '@id': id } : {}),
    '@type': 'vt-id:Grant',
    'vt-id:grantee': ok.grantee === '*' ? '*' : { '@id': ok.grantee },
    'vt-id:target': { '@id': ok.target },
    'vt-id:event': [...ok.events],
    ...(ok.expires !== undefined
      ? { 'vt-id:expires': { '@value': new Date(ok.expires).toISOString(), '@type': 'xsd:dateTime' as const } }
      : {}),
  };
}

/** A graph of grants: `{ '@context', '@graph': [...] }`. */
export function grantsToJsonLd(grants: readonly Grant[]): {
  '@context': typeof GRANT_CONTEXT;
  '@graph': GrantJsonLd[];
} {
  return { '@context': GRANT_CONTEXT, '@graph': grants.map((g) => grantToJsonLd(g)) };
}

function iriOf(v: unknown, what: string): string {
  if (typeof v === 'object' && v !== null && typeof (v as { '@id'?: unknown })['@id'] === 'string') {
    return (v as { '@id': string })['@id'];
  }
  throw bad(`vt-id:${what} must be a node { "@id": ... }`);
}

/** Reads a grant node, accepting the compact `vt-id:` names or the full vocabulary IRIs. */
export function grantFromJsonLd(node: unknown): Grant {
  if (node === null || typeof node !== 'object' || Array.isArray(node)) throw bad('a grant node is a JSON object');
  const o = node as Record<string, unknown>;
  const get = (name: string) => o[`vt-id:${name}`] ?? o[`${VT_ID}${name}`];
  const type = o['@type'];
  const types = Array.isArray(type) ? type : [type];
  if (!types.includes('vt-id:Grant') && !types.includes(`${VT_ID}Grant`)) throw bad('the node is not a vt-id:Grant');
  const granteeRaw = get('grantee');
  const grantee = granteeRaw === '*' ? '*' : iriOf(granteeRaw, 'grantee');
  const target = iriOf(get('target'), 'target');
  const ev = get('event');
  const events = Array.isArray(ev) ? ev : [ev];
  if (!events.every((e) => typeof e === 'string')) throw bad('vt-id:event holds descriptor strings');
  const exp = get('expires');
  let expires: number | undefined;
  if (exp !== undefined) {
    const text = typeof exp === 'string' ? exp : (exp as { '@value'?: unknown })?.['@value'];
    const t = typeof text === 'string' ? Date.parse(text) : Number.NaN;
    if (!Number.isFinite(t)) throw bad('vt-id:expires must be an xsd:dateTime');
    expires = t;
  }
  return makeGrant({ grantee, target, events: events as string[], ...(expires !== undefined ? { expires } : {}) });
}
