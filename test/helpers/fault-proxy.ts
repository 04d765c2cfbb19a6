/**
 * A fault-injecting TCP proxy for tests of several processes on loopback. Each proxy
 * listens on 127.0.0.1 (port 0) and forwards every connection to one target. Faults:
 *
 * - `partition()`: existing connections are destroyed and new ones are accepted and
 *   destroyed at once, so both ends see resets until `heal()` (a cut link);
 * - `blackhole()`: bytes are accepted and discarded in both directions and connections
 *   stay open, so both ends see silence (a link that loses everything);
 * - `delay(ms, jitterMs)`: every chunk is held `ms` (+ up to `jitterMs`, order kept);
 * - `dropConnections(p)`: each chunk ends its connection with probability p (a flaky link);
 * - `heal()`: back to passing everything at once.
 *
 * `ProxyMesh` puts one proxy on every ordered pair of nodes, so node i reaches node j at
 * `addressFor(i, j)`, and partitions are sets of nodes that can still talk.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export type ProxyMode = 'pass' | 'partition' | 'blackhole';

export interface ProxyStats {
  connections: number;
  bytesForwarded: number;
  bytesDiscarded: number;
  resets: number;
}

export class FaultProxy {
  private mode: ProxyMode = 'pass';
  private delayMs = 0;
  private jitterMs = 0;
  private dropP = 0;
  private readonly pairs = new Set<[Socket, Socket]>();
  readonly stats: ProxyStats = { connections: 0, bytesForwarded: 0, bytesDiscarded: 0, resets: 0 };
  private closed = false;

  private constructor(
    private readonly server: Server,
    readonly target: { host: string; port: number },
    private readonly random: () => number,
  ) {}

  /** Starts a proxy to `target`; `random` (default Math.random) drives jitter and drops. */
  static async start(target: { host?: string; port: number }, random: () => number = Math.random): Promise<FaultProxy> {
    const server = createServer();
    const proxy = new FaultProxy(server, { host: target.host ?? '127.0.0.1', port: target.port }, random);
    server.on('connection', (s) => proxy.accept(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  get port(): number {
    const a = this.server.address();
    if (a === null || typeof a === 'string') throw new Error('proxy is not listening');
    return a.port;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get currentMode(): ProxyMode {
    return this.mode;
  }

  partition(): void {
    this.mode = 'partition';
    this.cut();
  }

  blackhole(): void {
    this.mode = 'blackhole';
  }

  heal(): void {
    this.mode = 'pass';
    this.delayMs = 0;
    this.jitterMs = 0;
    this.dropP = 0;
  }

  delay(ms: number, jitterMs = 0): void {
    this.delayMs = ms;
    this.jitterMs = jitterMs;
  }

  dropConnections(p: number): void {
    this.dropP = p;
  }

  /** Destroys every open connection (both ends see a reset). */
  cut(): void {
    for (const [a, b] of this.pairs) {
      a.destroy();
      b.destroy();
      this.stats.resets++;
    }
    this.pairs.clear();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    if (this.mode === 'partition' || this.closed) {
      client.destroy();
      this.stats.resets++;
      return;
    }
    this.stats.connections++;
    const upstream = connect(this.target.port, this.target.host);
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    const end = () => {
      client.destroy();
      upstream.destroy();
      this.pairs.delete(pair);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    this.pipe(client, upstream, end);
    this.pipe(upstream, client, end);
  }

  private pipe(from: Socket, to: Socket, end: () => void): void {
    // Chunks leave in arrival order even when delayed: one queue per direction, drained by
    // one timer at a time (timers of different lengths may fire out of creation order).
    const queue: { at: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = () => {
      timer = undefined;
      while (queue.length > 0 && (queue[0] as { at: number }).at <= Date.now()) {
        const { chunk } = queue.shift() as { chunk: Buffer };
        if (this.mode !== 'pass' || to.destroyed) {
          this.stats.bytesDiscarded += chunk.length;
          continue;
        }
        this.stats.bytesForwarded += chunk.length;
        to.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(drain, Math.max(0, (queue[0] as { at: number }).at - Date.now()));
    };
    from.on('data', (chunk: Buffer) => {
      if (this.mode !== 'pass') {
        this.stats.bytesDiscarded += chunk.length;
        return;
      }
      if (this.dropP > 0 && this.random() < this.dropP) {
        this.stats.resets++;
        end();
        return;
      }
      const hold = this.delayMs + (this.jitterMs > 0 ? this.random() * this.jitterMs : 0);
      if (hold <= 0 && queue.length === 0) {
        this.stats.bytesForwarded += chunk.length;
        to.write(chunk);
        return;
      }
      const last = queue.length > 0 ? (queue[queue.length - 1] as { at: number }).at : 0;
      queue.push({ at: Math.max(Date.now() + hold, last), chunk });
      if (!timer) timer = setTimeout(drain, Math.max(0, (queue[0] as { at: number }).at - Date.now()));
    });
    from.once('close', () => {
      if (timer) clearTimeout(timer);
    });
  }
}

/** One proxy per ordered pair of nodes; node ids are 0 .. n-1. */
export class ProxyMesh {
  private constructor(
    readonly n: number,
    private readonly proxies: Map<string, FaultProxy>,
  ) {}

  /** `targets[j]` is the real port of node j. */
  static async start(targets: readonly number[], random?: () => number): Promise<ProxyMesh> {
    const proxies = new Map<string, FaultProxy>();
    for (let i = 0; i < targets.length; i++) {
      for (let j = 0; j < targets.length; j++) {
        if (i === j) continue;
        proxies.set(`${i}>${j}`, await FaultProxy.start({ port: targets[j] as number }, random));
      }
    }
    return new ProxyMesh(targets.length, proxies);
  }

  /** The proxy node `from` uses to reach node `to`. */
  link(from: number, to: number): FaultProxy {
    const p = this.proxies.get(`${from}>${to}`);
    if (!p) throw new Error(`no link ${from} -> ${to}`);
    return p;
  }

  addressFor(from: number, to: number): string {
    return this.link(from, to).address;
  }

  /** Only nodes in the same group can talk; links across groups are cut. */
  partition(groups: readonly (readonly number[])[]): void {
    const groupOf = new Map<number, number>();
    groups.forEach((g, gi) => {
      for (const id of g) groupOf.set(id, gi);
    });
    for (let i = 0; i < this.n; i++) {
      for (let j = 0; j < this.n; j++) {
        if (i === j) continue;
        const same = groupOf.has(i) && groupOf.get(i) === groupOf.get(j);
        if (same) this.link(i, j).heal();
        else this.link(i, j).partition();
      }
    }
  }

  /** Cuts every link to and from `id`. */
  isolate(id: number): void {
    const rest = [...Array(this.n).keys()].filter((x) => x !== id);
    this.partition([rest, [id]]);
  }

  heal(): void {
    for (const p of this.proxies.values()) p.heal();
  }

  async close(): Promise<void> {
    await Promise.all([...this.proxies.values()].map((p) => p.close()));
  }
}
