/**
 * How gossip messages travel between members. `GossipTransport` is the seam a `Swim` (through
 * its driver) sends and receives on; `wireGossipTransport` carries the messages over the
 * cluster's Wire (HTTP/2 over mutual TLS 1.3 in a node: a foreign certificate never reaches
 * the handler, and a node the wire's `isMember` refuses is turned away at the handshake), and
 * `MemoryGossipNet` connects members in one process for tests.
 *
 * A gossip member's name is `<node id>@<host:port>`: the id is the node's certificate
 * identity, the address where its wire listens. A message is accepted only when the id in its
 * `from` is the peer the wire authenticated, so no member speaks for another.
 */
import { decodeGossip, encodeGossip, type GossipMessage, MAX_GOSSIP_NAME } from '../../codec/gossip.js';
import { PlexusError } from '../../core/errors.js';
import { isDnsLabel } from '../../core/names.js';
import type { Wire } from '../../net/types.js';

/** The first byte of a wire call that carries a gossip message (authority requests start with `{`). */
export const GOSSIP_TAG = 0x02;

export interface GossipTransport {
  /** This member's gossip name (`<id>@<host:port>`). */
  readonly self: string;
  /** Sends one message to the member named `to`; never throws, a message that cannot go is dropped (SWIM tolerates loss). */
  send(to: string, message: GossipMessage): void;
  /** Sets the receiver of authenticated messages. */
  onMessage(handler: (message: GossipMessage) => void): void;
  close(): void;
}

/** A member's gossip name from its node id and wire address. */
export function gossipName(id: string, address: string): string {
  const name = `${id}@${address}`;
  if (!isDnsLabel(id) || address.length === 0 || new TextEncoder().encode(name).length > MAX_GOSSIP_NAME) {
    throw new PlexusError(
      'PLX_GOSSIP_BAD_CONFIG',
      `gossip member ${JSON.stringify(name)} is not <node id>@<host:port>`,
      {
        field: 'name',
      },
    );
  }
  return name;
}

/** The node id and address in a gossip name, or undefined when it is not one. */
export function parseGossipName(name: string): { readonly id: string; readonly address: string } | undefined {
  const at = name.indexOf('@');
  if (at <= 0 || at === name.length - 1) return undefined;
  const id = name.slice(0, at);
  return isDnsLabel(id) ? { id, address: name.slice(at + 1) } : undefined;
}

/** A transport on a Wire. The node's call handler hands `GOSSIP_TAG` bodies to `handleCall`. */
export interface WireGossipTransport extends GossipTransport {
  /** Takes one inbound call body (its first byte is GOSSIP_TAG) from the authenticated peer `from`. */
  handleCall(from: string, body: Uint8Array): Promise<Uint8Array>;
  /** Where a gossip-known node listens (for the wire's `resolve`), or undefined. */
  addressOf(id: string): string | undefined;
}

const EMPTY = new Uint8Array(0);

export function wireGossipTransport(
  wire: Pick<Wire, 'call'>,
  self: string,
  opts: { readonly onDrop?: (reason: string, error?: unknown) => void } = {},
): WireGossipTransport {
  const addresses = new Map<string, string>();
  let handler: ((m: GossipMessage) => void) | undefined;
  let closed = false;
  const learn = (name: string): string | undefined => {
    const p = parseGossipName(name);
    if (p) addresses.set(p.id, p.address);
    return p?.id;
  };
  learn(self);
  return {
    self,
    send(to, message) {
      if (closed) return;
      const id = learn(to);
      if (id === undefined) {
        opts.onDrop?.('name');
        return;
      }
      let bytes: Uint8Array;
      try {
        const body = encodeGossip(message);
        bytes = new Uint8Array(body.length + 1);
        bytes[0] = GOSSIP_TAG;
        bytes.set(body, 1);
      } catch (e) {
        opts.onDrop?.('encode', e);
        return;
      }
      wire.call(id, bytes).then(
        () => {},
        (e) => opts.onDrop?.('send', e),
      );
    },
    onMessage(h) {
      handler = h;
    },
    async handleCall(from, body) {
      if (closed) return EMPTY;
      const m = decodeGossip(body.subarray(1));
      const claimed = parseGossipName(m.from);
      if (claimed === undefined || claimed.id !== from) {
        throw new PlexusError(
          'PLX_GOSSIP_BAD_MESSAGE',
          `a gossip message from ${from} names ${JSON.stringify(m.from)} as its sender`,
          {
            reason: 'sender',
            peer: from,
          },
        );
      }
      learn(m.from);
      handler?.(m);
      return EMPTY;
    },
    addressOf(id) {
      return addresses.get(id);
    },
    close() {
      closed = true;
      handler = undefined;
    },
  };
}

/** Members in one process: every message is delivered on a later task, in send order, unless the pair is cut. */
export class MemoryGossipNet {
  private readonly handlers = new Map<string, (m: GossipMessage) => void>();
  private readonly cut = new Set<string>();

  /** A transport for member `self`. */
  transport(self: string): GossipTransport {
    const net = this;
    return {
      self,
      send(to, message) {
        if (net.cut.has(`${self}\n${to}`)) return;
        const bytes = encodeGossip(message);
        queueMicrotask(() => net.handlers.get(to)?.(decodeGossip(bytes)));
      },
      onMessage(h) {
        net.handlers.set(self, h);
      },
      close() {
        net.handlers.delete(self);
      },
    };
  }

  /** Drops messages between `a` and `b` in both directions until `heal`. */
  partition(a: string, b: string): void {
    this.cut.add(`${a}\n${b}`);
    this.cut.add(`${b}\n${a}`);
  }

  heal(a: string, b: string): void {
    this.cut.delete(`${a}\n${b}`);
    this.cut.delete(`${b}\n${a}`);
  }
}
