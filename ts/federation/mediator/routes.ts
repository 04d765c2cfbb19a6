/**
 * The mediator's routing table: which clients it granted mediation, and which recipient DIDs (or
 * key ids) each registered with keylist-update. Kept in its own log, one record per change
 * (ts/codec/mediator-queue.ts), and rebuilt from it on open. Changes are rare, so the log is never compacted.
 *
 * A client may hold only its own DID and key ids of it (the mediator checks that before it adds
 * one). Registrations of another DID that older versions took (first come) are dropped when the
 * table is opened and counted in `dropped`: the owner of that DID registers it again.
 */
import { decodeRoute, encodeRoute, ROUTE_ADD, ROUTE_GRANT, ROUTE_REMOVE } from '../../codec/mediator-queue.js';
import type { LogStorage } from '../../storage/types.js';

const GRANT = ROUTE_GRANT;
const ADD = ROUTE_ADD;
const REMOVE = ROUTE_REMOVE;

export interface RouteLimits {
  /** Most clients granted mediation (default 100,000). */
  maxClients: number;
  /** Most recipient keys per client (default 1,000). */
  maxKeysPerClient: number;
}

export const DEFAULT_ROUTE_LIMITS: RouteLimits = { maxClients: 100_000, maxKeysPerClient: 1000 };

const encode = encodeRoute;
const decode = decodeRoute;

export type KeyChange = 'success' | 'no_change' | 'client_error';

export class RouteTable {
  /** client DID -> its recipient keys, in registration order. */
  private readonly clients = new Map<string, Set<string>>();
  /** recipient key -> client DID. */
  private readonly recipients = new Map<string, string>();
  /** Registrations of another client's DID found in the log and not applied. */
  dropped = 0;

  private constructor(
    private readonly log: LogStorage,
    readonly limits: RouteLimits,
  ) {}

  static async open(log: LogStorage, limits: Partial<RouteLimits> = {}): Promise<RouteTable> {
    const t = new RouteTable(log, { ...DEFAULT_ROUTE_LIMITS, ...limits });
    let from = log.first === 0n ? 1n : log.first;
    while (from <= log.last) {
      const recs = await log.read(from);
      if (recs.length === 0) break;
      for (const r of recs) {
        const d = decode(r.payload, r.position);
        if (d.kind === GRANT) t.clients.set(d.client, t.clients.get(d.client) ?? new Set());
        else if (d.kind === ADD) {
          if (ownDid(d.client, d.recipient)) t.applyAdd(d.client, d.recipient);
          else t.dropped++;
        } else t.applyRemove(d.client, d.recipient);
        from = r.position + 1n;
      }
    }
    return t;
  }

  private applyAdd(client: string, recipient: string): void {
    const keys = this.clients.get(client) ?? new Set<string>();
    this.clients.set(client, keys);
    keys.add(recipient);
    this.recipients.set(recipient, client);
  }

  private applyRemove(client: string, recipient: string): void {
    this.clients.get(client)?.delete(recipient);
    if (this.recipients.get(recipient) === client) this.recipients.delete(recipient);
  }

  isGranted(client: string): boolean {
    return this.clients.has(client);
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Records a grant durably; false when the table is full. */
  async grant(client: string): Promise<boolean> {
    if (this.clients.has(client)) return true;
    if (this.clients.size >= this.limits.maxClients) return false;
    await this.log.append([encode(GRANT, client, '')]);
    if (!this.clients.has(client)) this.clients.set(client, new Set());
    return true;
  }

  /** Registers a recipient DID or key id for a granted client, durably. */
  async add(client: string, recipient: string): Promise<KeyChange> {
    const keys = this.clients.get(client);
    if (!keys) return 'client_error';
    const owner = this.recipients.get(recipient);
    if (owner === client) return 'no_change';
    if (owner !== undefined) return 'client_error';
    if (keys.size >= this.limits.maxKeysPerClient) return 'client_error';
    this.applyAdd(client, recipient);
    try {
      await this.log.append([encode(ADD, client, recipient)]);
    } catch (e) {
      this.applyRemove(client, recipient);
      throw e;
    }
    return 'success';
  }

  async remove(client: string, recipient: string): Promise<KeyChange> {
    if (!this.clients.get(client)?.has(recipient)) return 'no_change';
    await this.log.append([encode(REMOVE, client, recipient)]);
    this.applyRemove(client, recipient);
    return 'success';
  }

  /** The client that registered exactly `recipient`. */
  owner(recipient: string): string | undefined {
    return this.recipients.get(recipient);
  }

  keys(client: string): string[] {
    return [...(this.clients.get(client) ?? [])];
  }

  /** The client a forward's `next` belongs to: an exact registered key, else its DID. */
  route(next: string): { client: string; recipient: string } | undefined {
    const exact = this.recipients.get(next);
    if (exact !== undefined) return { client: exact, recipient: next };
    const hash = next.indexOf('#');
    if (hash > 0) {
      const did = next.slice(0, hash);
      const c = this.recipients.get(did);
      if (c !== undefined) return { client: c, recipient: did };
    }
    return undefined;
  }

  async close(): Promise<void> {
    await this.log.close();
  }
}

/** Whether `recipient` is `client` itself or one of its key ids (`<client>#fragment`). */
function ownDid(client: string, recipient: string): boolean {
  return recipient === client || recipient.startsWith(`${client}#`);
}
