/**
 * Operator requests to a running node over its own mutual-TLS wire (`plexus cluster leave`).
 * The operator's tool dials the node with the node's own certificate and key (the files of
 * its node config), so the wire's handshake has already bound the caller to the node's id:
 * a request is taken only when the authenticated caller *is* this node (`from === self`);
 * any other member, though admitted to the wire, is refused. Whoever can read the node's key
 * can stop the node anyway.
 *
 * Requests are one tag byte (CONTROL_TAG) and JSON; replies are JSON. Shapes and sizes are
 * checked before use.
 */
import { ClusterCode, clusterError } from './errors.js';

/** The first byte of an operator request on the call channel (authority requests start with `{`). */
export const CONTROL_TAG = 0x03;
const MAX_CONTROL_BYTES = 4096;
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

export type ControlRequest = { readonly op: 'leave' };

export function encodeControl(r: ControlRequest): Uint8Array {
  const json = enc.encode(JSON.stringify(r));
  const out = new Uint8Array(json.length + 1);
  out[0] = CONTROL_TAG;
  out.set(json, 1);
  return out;
}

export function decodeControl(body: Uint8Array): ControlRequest {
  const bad = (why: string) => clusterError(ClusterCode.BAD_REQUEST, `operator request: ${why}`, { reason: 'control' });
  if (body.length > MAX_CONTROL_BYTES) throw bad(`${body.length} bytes is above ${MAX_CONTROL_BYTES}`);
  if (body[0] !== CONTROL_TAG) throw bad('not an operator request');
  let r: unknown;
  try {
    r = JSON.parse(dec.decode(body.subarray(1)));
  } catch {
    throw bad('not UTF-8 JSON');
  }
  if (typeof r !== 'object' || r === null || (r as { op?: unknown }).op !== 'leave') throw bad('unknown op');
  return { op: 'leave' };
}

/** What a node does for an operator. */
export interface ControlHandlers {
  /** Leaves the cluster (drain, hand-over, leave); resolves with the reply's fields once it left. */
  leave(): Promise<Record<string, unknown>>;
}

/** The call handler for CONTROL_TAG bodies of node `self`: only `self`'s own certificate is obeyed. */
export function serveControl(
  self: string,
  handlers: ControlHandlers,
): (from: string, body: Uint8Array) => Promise<Uint8Array> {
  return async (from, body) => {
    if (from !== self) {
      throw clusterError(
        ClusterCode.BAD_REQUEST,
        `node ${self} takes operator requests only with its own certificate; ${from} asked`,
        { reason: 'control', from },
      );
    }
    const req = decodeControl(body);
    const reply = await handlers[req.op]();
    return enc.encode(JSON.stringify({ ok: true, ...reply }, (_k, v) => (typeof v === 'bigint' ? `${v}` : v)));
  };
}

/** Reads a control reply. */
export function decodeControlReply(body: Uint8Array): Record<string, unknown> {
  try {
    const r = JSON.parse(dec.decode(body)) as unknown;
    if (typeof r === 'object' && r !== null) return r as Record<string, unknown>;
  } catch {
    // refused below
  }
  throw clusterError(ClusterCode.BAD_REQUEST, 'an operator reply that is not a JSON object', { reason: 'control' });
}
