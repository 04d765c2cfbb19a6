/**
 * AuthorityHost: the driver that runs a MemoryAuthority on real time in one process: the
 * in-memory implementation of the LeaseAuthority seam (ts/cluster/lease-authority.ts). It ticks
 * the authority on a timer with the process's monotonic clock and answers requests, either
 * directly (`call`, for the hosting node's own membership) or as bytes from the cluster wire
 * (`handle`, bound to the wire's call handler).
 *
 * With `stateDir` (`AuthorityHost.open`), it persists what the authority reports as
 * `durable` in `<stateDir>/authority.state` before it answers any request (persist first,
 * then send), restores it on start, and grants no lease for one lease length after a restart.
 * When persisting fails, the host answers nothing more (PLX_CLUSTER_AUTHORITY_STATE): a
 * grant it could not make durable is never handed out.
 */
import { type Clock, type ClockTimers, every, monotonicClock, type Repeating, timersOf } from '../core/clock.js';
import { type AuthorityOptions, type AuthorityReady, MemoryAuthority } from './authority.js';
import { loadAuthorityState, saveAuthorityState } from './authority-state.js';
import { serveAuthority } from './codec.js';
import { leaseConfig } from './config.js';
import { ClusterCode, clusterError } from './errors.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from './lease-authority.js';
import { clusterMeta } from './meta.js';

export interface AuthorityHostOptions extends AuthorityOptions {
  /**
   * Monotonic milliseconds (default `monotonicClock`); a `ClockTimers` also runs the tick timer
   * (else the process's timers, unreferenced).
   */
  readonly clock?: Clock | ClockTimers;
  /** Tick period (default 50 ms). */
  readonly tickEveryMs?: number;
  /** Sees what each tick and request changed (grants, freed leases, health). */
  readonly onReady?: (r: AuthorityReady) => void;
  /** Called once when the state cannot be persisted (the host then refuses every request). */
  readonly onFatal?: (e: unknown) => void;
}

export interface PersistentAuthorityHostOptions extends Omit<AuthorityHostOptions, 'restored' | 'grantsFrom'> {
  /** The directory of `authority.state` (the data directory of the authority's node). */
  readonly stateDir: string;
}

export class AuthorityHost implements LeaseAuthority {
  readonly authority: MemoryAuthority;
  private readonly clock: Clock;
  private readonly timer: Repeating;
  private readonly onReady: (r: AuthorityReady) => void;
  private readonly onFatal: (e: unknown) => void;
  private stateDir: string | undefined;
  private persisting: Promise<void> = Promise.resolve();
  private failed: unknown;

  /**
   * A host whose authority state survives restarts: restores `<stateDir>/authority.state`
   * (refusing a damaged one with PLX_CLUSTER_AUTHORITY_STATE) and persists it from then on.
   */
  static async open(opts: PersistentAuthorityHostOptions): Promise<AuthorityHost> {
    const meta = clusterMeta(opts.meta);
    const restored = await loadAuthorityState(opts.stateDir, meta);
    const clock = opts.clock ?? monotonicClock;
    const ttl = leaseConfig(opts.lease).ttlMs;
    const host = new AuthorityHost({
      ...opts,
      clock,
      ...(restored ? { restored, grantsFrom: clock.now() + ttl } : {}),
    });
    host.stateDir = opts.stateDir;
    // A new cluster's first state (its epoch floor) is on disk before any request is answered.
    host.persist(host.authority.durable());
    await host.persisting;
    if (host.failed !== undefined) {
      host.close();
      throw host.failed;
    }
    return host;
  }

  constructor(opts: AuthorityHostOptions) {
    this.authority = new MemoryAuthority(opts);
    this.clock = opts.clock ?? monotonicClock;
    this.onReady = opts.onReady ?? (() => {});
    this.onFatal = opts.onFatal ?? (() => {});
    this.authority.tick(this.clock.now());
    this.timer = every(timersOf(opts.clock, monotonicClock), opts.tickEveryMs ?? 50, () => {
      if (this.failed !== undefined) return;
      this.authority.tick(this.clock.now());
      this.flush();
    });
  }

  /** Answers one request at the current time, once what it changed is durable. */
  call = async (req: AuthorityRequest): Promise<AuthorityReply> => {
    if (this.failed !== undefined) throw this.failed;
    this.authority.tick(this.clock.now());
    const r = this.authority.step(req);
    this.flush();
    await this.persisting;
    if (this.failed !== undefined) throw this.failed;
    return r;
  };

  /** Answers one request given as bytes (from the wire). */
  handle = serveAuthority(this);

  /** Whether `node` is a current member: the wire's admission check. */
  isMember = (node: string): boolean => this.authority.isMember(node);

  /** Whether `node` may connect to the authority (listed and not removed). */
  isAdmitted = (node: string): boolean => this.authority.isAdmitted(node);

  close(): void {
    this.timer.stop();
  }

  private flush(): void {
    const r = this.authority.ready();
    if (r.durable) this.persist(r.durable);
    if (r.view || r.grants.length || r.freed.length || r.health.length) this.onReady(r);
    this.authority.advance();
  }

  private persist(state: NonNullable<AuthorityReady['durable']>): void {
    const dir = this.stateDir;
    if (dir === undefined) return;
    this.persisting = this.persisting.then(async () => {
      if (this.failed !== undefined) return;
      try {
        await saveAuthorityState(dir, this.authority.meta, state);
      } catch (e) {
        this.failed = clusterError(
          ClusterCode.AUTHORITY_STATE,
          `the lease authority cannot persist its state in ${dir}: ${(e as Error).message}; it answers no more requests`,
          { file: dir, reason: 'write' },
          e,
        );
        this.onFatal(this.failed);
      }
    });
  }
}
