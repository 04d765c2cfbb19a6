/**
 * The message types and bodies of the protocols the mediator speaks, shared by the mediator and
 * the pickup client:
 * - Coordinate Mediation 2.0 (https://didcomm.org/coordinate-mediation/2.0): mediate-request,
 *   mediate-grant { routing_did }, mediate-deny, keylist-update { updates: [{ recipient_did,
 *   action }] }, keylist-update-response { updated: [{ recipient_did, action, result }] },
 *   keylist-query { paginate?: { limit, offset } }, keylist { keys: [{ recipient_did }],
 *   pagination?: { count, offset, remaining } };
 * - Message Pickup 3.0 (https://didcomm.org/messagepickup/3.0): status-request { recipient_did? },
 *   status { message_count, ... }, delivery-request { limit, recipient_did? }, delivery (the
 *   queued messages as attachments { id, data: { base64 } }), messages-received
 *   { message_id_list }, live-delivery-change { live_delivery };
 * - Report Problem 2.0 problem-report { code, comment }.
 * Requests carry the `return_route: "all"` header so that answers come back on the same HTTP
 * exchange or WebSocket.
 */

export const COORDINATE = 'https://didcomm.org/coordinate-mediation/2.0';
export const PICKUP = 'https://didcomm.org/messagepickup/3.0';

export const MEDIATE_REQUEST = `${COORDINATE}/mediate-request`;
export const MEDIATE_GRANT = `${COORDINATE}/mediate-grant`;
export const MEDIATE_DENY = `${COORDINATE}/mediate-deny`;
export const KEYLIST_UPDATE = `${COORDINATE}/keylist-update`;
export const KEYLIST_UPDATE_RESPONSE = `${COORDINATE}/keylist-update-response`;
export const KEYLIST_QUERY = `${COORDINATE}/keylist-query`;
export const KEYLIST = `${COORDINATE}/keylist`;

export const STATUS_REQUEST = `${PICKUP}/status-request`;
export const STATUS = `${PICKUP}/status`;
export const DELIVERY_REQUEST = `${PICKUP}/delivery-request`;
export const DELIVERY = `${PICKUP}/delivery`;
export const MESSAGES_RECEIVED = `${PICKUP}/messages-received`;
export const LIVE_DELIVERY_CHANGE = `${PICKUP}/live-delivery-change`;

export const PROBLEM_REPORT = 'https://didcomm.org/report-problem/2.0/problem-report';

/** DIDComm's HTTP and WebSocket media type of encrypted messages. */
export const MEDIA_TYPE_ENCRYPTED = 'application/didcomm-encrypted+json';

export type KeylistAction = 'add' | 'remove';
export type KeylistResult = 'client_error' | 'server_error' | 'no_change' | 'success';

export interface KeylistUpdate {
  recipient_did: string;
  action: KeylistAction;
}
export interface KeylistUpdated extends KeylistUpdate {
  result: KeylistResult;
  /**
   * Why a `client_error` (a plexus extension the protocol lets a receiver ignore):
   * PLX_MEDIATOR_NOT_CONTROLLER, PLX_MEDIATOR_UNKNOWN_KEY, PLX_MEDIATOR_TAKEN,
   * PLX_MEDIATOR_TOO_MANY_KEYS or PLX_MEDIATOR_BAD_INPUT.
   */
  code?: string;
}

/** The body of a pickup status message. `message_count` is the only required member. */
export interface StatusBody {
  recipient_did?: string;
  message_count: number;
  longest_waited_seconds?: number;
  newest_received_time?: number;
  oldest_received_time?: number;
  total_bytes?: number;
  live_delivery?: boolean;
}

/** Problem codes the mediator answers with (Report Problem 2.0 `e.p.*` codes). */
export const PROBLEM = {
  notGranted: 'e.p.req.not-granted',
  badRequest: 'e.p.msg.bad-request',
  unsupported: 'e.p.msg.unsupported',
  unknownRecipient: 'e.p.req.unknown-recipient',
  liveNotSupported: 'e.m.live-mode-not-supported',
  otherConnection: 'e.p.req.connection-bound',
  server: 'e.p.me.server',
} as const;
