/**
 * AuthorityHost: the driver that runs a MemoryAuthority on real time in one process. It ticks
 * the authority on a timer with the process's monotonic clock and answers requests, either
 * directly (`call`, for the hosting node's own membership) or as bytes from the cluster wire
 * (`handle`, bound to the wire's call handler).
 */
import {
  type AuthorityOptions,
  type AuthorityReady,
  type AuthorityReply,
  type AuthorityRequest,
  MemoryAuthority,
} from './authority.js';
import { decodeRequest, encodeReply } from './codec.js';

export interface AuthorityHostOptions extends AuthorityOptions {
  /** Monotonic milliseconds (default performance.now). */
  readonly clock?: () => number;
  /** Tick period (default 50 ms). */
  readonly tickEveryMs?: number;
  /** Sees what each tick and request changed (grants, freed leases, health). */
  readonly onReady?: (r: AuthorityReady) => void;
}

export class AuthorityHost {
  readonly authority: MemoryAuthority;
  private readonly clock: () => number;
  private readonly timer: NodeJS.Timeout;
  private readonly onReady: (r: AuthorityReady) => void;

  constructor(opts: AuthorityHostOptions) {
    this.authority = new MemoryAuthority(opts);
    this.clock = opts.clock ?? (() => performance.now());
    this.onReady = opts.onReady ?? (() => {});
    this.authority.tick(this.clock());
    this.timer = setInterval(() => {
      this.authority.tick(this.clock());
      this.flush();
    }, opts.tickEveryMs ?? 50);
    this.timer.unref();
  }

  /** Answers one request at the current time. */
  call = async (req: AuthorityRequest): Promise<AuthorityReply> => {
    this.authority.tick(this.clock());
    const r = this.authority.step(req);
    this.flush();
    return r;
  };

  /** Answers one request given as bytes (from the wire). */
  handle = async (_from: string, body: Uint8Array): Promise<Uint8Array> =>
    encodeReply(await this.call(decodeRequest(body)));

  /** Whether `node` is a current member: the wire's admission check. */
  isMember = (node: string): boolean => this.authority.isMember(node);

  /** Whether `node` may connect to the authority (listed and not removed). */
  isAdmitted = (node: string): boolean => this.authority.isAdmitted(node);

  close(): void {
    clearInterval(this.timer);
  }

  private flush(): void {
    const r = this.authority.ready();
    if (r.view || r.grants.length || r.freed.length || r.health.length) this.onReady(r);
    this.authority.advance();
  }
}
