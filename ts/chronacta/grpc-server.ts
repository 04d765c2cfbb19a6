/**
 * A lean gRPC server on `node:http2`: the wire protocol of gRPC over HTTP/2 as grpc-js
 * clients speak it, for unary and server-streaming methods, with the message codecs left
 * to the caller (server.ts). One request message per call.
 *
 * - Requests: POST, `content-type: application/grpc[+proto]`, messages framed with a
 *   5-byte prefix (compressed flag, big-endian length). The length is checked against the
 *   limit before the message is buffered; compressed messages are refused (the server
 *   never offers compression; a refusal for it carries `grpc-accept-encoding: identity`).
 * - Responses: headers (`:status 200`, `content-type: application/grpc+proto`), the framed
 *   messages, then trailers `grpc-status` and (unless OK) `grpc-message` (percent-encoded
 *   as grpc-js does) with the call's trailing metadata. A call refused before any message is sent
 *   ends with a trailers-only response (one HEADERS frame, as grpc-js servers do).
 * - `grpc-timeout` (the caller's deadline) ends the call with DEADLINE_EXCEEDED when it
 *   passes first (a deadline beyond a timer's reach, about 24.8 days, waits that long); a
 *   stream reset by the client cancels the call (`onCancel`).
 * - Bounds (limits.ts, docs/chronacta.md "Server limits"): connections in total and per remote
 *   address, streams per connection, bytes buffered per connection and in total, server-streaming
 *   calls, requests that never finish arriving, responses the client stops taking, idle connections.
 * - An unknown path ends with UNIMPLEMENTED.
 * - A handler reads the request's metadata (`header`) and adds trailing metadata to an OK
 *   reply (`setTrailer`); a rejection with a `CallFailure` ends the call with its status as is.
 * - The methods of a running server can be added or wrapped (`routes`): a composition root
 *   that started the server passes its routes to the module that extends it.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { FrameAssembler } from '../codec/frames.js';
import { GRPC_HEADER_BYTES, grpcMessageFormat } from '../codec/grpc-frame.js';
import { type ClockTimers, systemClock, type TimerHandle, type Timers } from '../core/clock.js';
import { ConnectionLoad, type GrpcLimits, grpcLimits, MAX_TIMER_MS, type Refusal, ServerLoad } from './limits.js';

/** gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html). */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** How a call ends: a status code, its message, and trailing metadata (ASCII text values). */
export interface CallStatus {
  readonly code: number;
  readonly details: string;
  readonly metadata?: Readonly<Record<string, string>>;
}

/** What a handler sees of its call besides the request. */
export interface CallContext {
  /** True once the client cancelled, the deadline passed or the call ended. */
  readonly cancelled: boolean;
  onCancel(fn: () => void): void;
  /** A request header (custom metadata), lower-case name; undefined when absent or not text. */
  header(name: string): string | undefined;
  /** Adds trailing metadata (ASCII name and value) to the call's end, OK or not. */
  setTrailer(name: string, value: string): void;
}

/** A handler's rejection that ends the call with exactly this status (no `statusOf` mapping). */
export class CallFailure extends Error {
  constructor(readonly status: CallStatus) {
    super(status.details);
    this.name = 'CallFailure';
  }
}

/** The sending side of a server-streaming call. */
export interface ServerStream extends CallContext {
  /** Sends one framed message (see `frame`); false when the stream's buffer is full. */
  write(framed: Uint8Array): boolean;
  /** Resolves once the stream takes more, or once the call is over. */
  drained(): Promise<void>;
  /** Ends the call with `status` (default OK). */
  end(status?: CallStatus): void;
}

export type GrpcMethod =
  | {
      readonly kind: 'unary';
      /** Resolves with the framed response message; a rejection becomes the call's status. */
      readonly handle: (request: Buffer, ctx: CallContext) => Promise<Uint8Array>;
    }
  | { readonly kind: 'stream'; readonly handle: (request: Buffer, call: ServerStream) => void };

export interface GrpcServerOptions {
  /** Largest request message taken (bytes); a larger one ends the call with RESOURCE_EXHAUSTED. */
  readonly maxMessageBytes: number;
  /** The status a handler's failure ends its call with. */
  readonly statusOf: (e: unknown) => CallStatus;
  /** Called when a call ends: its method path and status code. */
  readonly onEnd?: (path: string, code: number) => void;
  /** TLS: serve over `http2.createSecureServer` with these options (client-auth.ts); absent: plaintext. */
  readonly tls?: http2.SecureServerOptions;
  /** Checks a call's headers before its method is looked up; a status refuses the call with it. */
  readonly authenticate?: (headers: http2.IncomingHttpHeaders) => CallStatus | undefined;
  /** The bounds (limits.ts); default `grpcLimits()`. */
  readonly limits?: GrpcLimits;
  /** Called for each connection or call refused or ended by a bound. */
  readonly onLimit?: (reason: Refusal) => void;
  /** Trailing metadata of a call refused or ended by a bound (a coded error for the client). */
  readonly limitMetadata?: (reason: Refusal) => Readonly<Record<string, string>>;
  /** Time of the request, stall and idle bounds and of their sweeps (default `systemClock`). */
  readonly clock?: ClockTimers;
}

/** What a server holds now. */
export interface GrpcLoad {
  readonly connections: number;
  readonly bufferedBytes: number;
  readonly streamingCalls: number;
}

/** The methods of a running server by path: read, add or wrap them while it serves. */
export interface GrpcRoutes {
  get(path: string): GrpcMethod | undefined;
  set(path: string, method: GrpcMethod): void;
}

export interface GrpcServer {
  readonly port: number;
  readonly routes: GrpcRoutes;
  /** The TLS server, when it serves TLS (for `setSecureContext`). */
  readonly secure: http2.Http2SecureServer | undefined;
  readonly limits: GrpcLimits;
  load(): GrpcLoad;
  /** Stops taking connections, lets running calls finish (at most `graceMs`), then closes the rest. */
  close(graceMs?: number): Promise<void>;
}

/** A response larger than this goes out in pieces of this size, so a stalled client shows. */
const PIECE = 64 * 1024;

// Every header less is work saved on both sides, per call: messages are never compressed,
// so no grpc-encoding (identity is the default) and no grpc-accept-encoding (absent means
// identity only; a compressed request is refused with it), no date, and an OK status
// needs no grpc-message.
const RESPONSE_HEADERS = {
  ':status': 200,
  'content-type': 'application/grpc+proto',
};
const OK_TRAILERS = { 'grpc-status': '0' };
const WAIT_FOR_TRAILERS = { waitForTrailers: true, sendDate: false };
const END_STREAM = { endStream: true, sendDate: false };
const IDENTITY_ONLY = { 'grpc-accept-encoding': 'identity' };

function ignore(): void {}

function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

/** The grpc-timeout header in milliseconds (undefined: none or unreadable). */
export function parseTimeout(v: unknown): number | undefined {
  if (typeof v !== 'string') return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(v.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  switch (m[2]) {
    case 'H':
      return n * 3_600_000;
    case 'M':
      return n * 60_000;
    case 'S':
      return n * 1000;
    case 'm':
      return n;
    case 'u':
      return n / 1000;
    default:
      return n / 1_000_000;
  }
}

/** grpc-message: percent-encoded as grpc-js encodes it (and decodes it with decodeURI). */
function encodeMessage(s: string): string {
  try {
    return encodeURI(s);
  } catch {
    return encodeURI(s.replace(/[\ud800-\udfff]/g, '\ufffd'));
  }
}

/** Starts a gRPC server on `host:port` (0: any free port) serving `methods` by path. */
export async function startGrpcServer(
  host: string,
  port: number,
  methods: ReadonlyMap<string, GrpcMethod>,
  opts: GrpcServerOptions,
): Promise<GrpcServer> {
  const sessions = new Set<http2.ServerHttp2Session>();
  const limits = opts.limits ?? grpcLimits();
  const load = new ServerLoad(limits);
  const clock = opts.clock ?? systemClock;
  const bounds: Bounds = {
    clock,
    load,
    receiving: new Set(),
    sending: new Set(),
    onLimit: opts.onLimit ?? ignore,
    metadata: opts.limitMetadata ?? (() => ({})),
  };
  const connOf = new WeakMap<http2.Http2Session, ConnectionLoad>();
  const perClient = new Map<string, number>();
  const table = new Map(methods);
  const routes: GrpcRoutes = {
    get: (path) => table.get(path),
    set: (path, method) => {
      table.set(path, method);
    },
  };
  const serverOptions: http2.ServerOptions = {
    maxSessionMemory: Number.MAX_SAFE_INTEGER,
    maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
    settings: { initialWindowSize: 1 << 20, maxConcurrentStreams: limits.maxConcurrentStreams },
  };
  const secure = opts.tls ? http2.createSecureServer({ ...serverOptions, ...opts.tls }) : undefined;
  const server = secure ?? http2.createServer(serverOptions);
  // Beyond maxConnections the socket is closed before HTTP/2 sees it ('drop').
  server.maxConnections = limits.maxConnections;
  server.on('drop', () => bounds.onLimit('connections'));
  server.on('session', (s) => {
    const conn = new ConnectionLoad(clock);
    connOf.set(s, conn);
    sessions.add(s);
    load.connections++;
    const remote = s.socket?.remoteAddress ?? '';
    const fromRemote = (perClient.get(remote) ?? 0) + 1;
    perClient.set(remote, fromRemote);
    s.on('close', () => {
      sessions.delete(s);
      load.connections--;
      const left = (perClient.get(remote) ?? 1) - 1;
      if (left > 0) perClient.set(remote, left);
      else perClient.delete(remote);
    });
    s.on('error', () => {});
    if (fromRemote > limits.maxConnectionsPerClient) {
      bounds.onLimit('connections_per_client');
      refuseSession(s, clock);
      return;
    }
    // A larger connection window than the 64 KiB default: large appends arrive sooner.
    s.on('connect', () => {
      try {
        s.setLocalWindowSize(8 << 20);
      } catch {
        // a session closed at once
      }
    });
  });
  server.on('stream', (stream, headers) => {
    const path = headers[':path'] ?? '';
    const ct = headers['content-type'];
    if (headers[':method'] !== 'POST' || typeof ct !== 'string' || !ct.startsWith('application/grpc')) {
      stream.on('error', ignore);
      if (!stream.destroyed) stream.respond({ ':status': 415 }, { endStream: true });
      return;
    }
    const conn = (stream.session && connOf.get(stream.session)) || new ConnectionLoad(clock);
    const call = new Call(stream, path, opts, headers, bounds, conn);
    const refused = opts.authenticate?.(headers);
    if (refused) {
      call.finish(refused);
      return;
    }
    const method = table.get(path);
    if (!method) {
      call.finish({ code: GrpcStatus.UNIMPLEMENTED, details: `the server has no method ${path}` });
      return;
    }
    const enc = headers['grpc-encoding'];
    if (enc !== undefined && enc !== 'identity') {
      call.finish({
        code: GrpcStatus.UNIMPLEMENTED,
        details: `grpc-encoding ${String(enc)} is not supported`,
        metadata: IDENTITY_ONLY,
      });
      return;
    }
    const timeout = headers['grpc-timeout'];
    if (timeout !== undefined) {
      const ms = parseTimeout(timeout);
      if (ms === undefined) {
        call.finish({ code: GrpcStatus.INTERNAL, details: `invalid grpc-timeout "${String(timeout)}"` });
        return;
      }
      call.setDeadline(ms);
    }
    if (load.full(conn)) {
      bounds.onLimit('buffered_bytes');
      call.finish({
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        metadata: bounds.metadata('buffered_bytes'),
        details: `the server holds ${conn.buffered} bytes for this connection and ${load.buffered} in total, at its limit (${limits.maxBufferedBytesPerConnection} per connection, ${limits.maxBufferedBytes} in total): read the responses already sent`,
      });
      return;
    }
    if (method.kind === 'stream' && !call.startStreaming()) {
      bounds.onLimit('subscriptions');
      call.finish({
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        metadata: bounds.metadata('subscriptions'),
        details: `too many subscriptions: ${conn.streaming} open on this connection (limit ${limits.maxSubscriptionsPerConnection}), ${load.streaming} in total (limit ${limits.maxSubscriptions})`,
      });
      return;
    }
    call.read(method);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const sweepEvery = Math.max(
    25,
    Math.min(1000, Math.floor(Math.min(limits.stallTimeoutMs, limits.requestTimeoutMs, limits.idleTimeoutMs) / 4)),
  );
  let sweeping = true;
  const sweepRound = () => {
    if (!sweeping) return;
    sweeper = clock.setTimeout(sweepRound, sweepEvery);
    sweep(bounds, limits, sessions, connOf);
  };
  let sweeper = clock.setTimeout(sweepRound, sweepEvery);
  return {
    port: bound,
    routes,
    secure,
    limits,
    load: () => ({ connections: load.connections, bufferedBytes: load.buffered, streamingCalls: load.streaming }),
    close(graceMs = 2000) {
      sweeping = false;
      clock.clearTimeout(sweeper);
      return new Promise<void>((resolve) => {
        // The open sessions keep the process alive until the force timer fires.
        const force = clock.setTimeout(() => {
          for (const s of sessions) s.destroy();
        }, graceMs);
        server.close(() => {
          clock.clearTimeout(force);
          resolve();
        });
        for (const s of sessions) s.close();
      });
    },
  };
}

/** The accounting one server's calls share. */
interface Bounds {
  readonly clock: ClockTimers;
  readonly load: ServerLoad;
  /** Calls whose request has not fully arrived. */
  readonly receiving: Set<Call>;
  /** Calls with response bytes the client has not taken yet. */
  readonly sending: Set<Call>;
  readonly onLimit: (reason: Refusal) => void;
  readonly metadata: (reason: Refusal) => Readonly<Record<string, string>>;
}

/** Refuses a connection beyond a bound: GOAWAY (ENHANCE_YOUR_CALM), then closed. */
function refuseSession(s: http2.ServerHttp2Session, clock: Timers): void {
  try {
    s.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 0);
    s.close();
  } catch {
    s.destroy();
  }
  clock.setTimeout(() => {
    if (!s.destroyed) s.destroy();
  }, 1000);
}

/** Ends the calls and connections past a time bound (run every fraction of the shortest one). */
function sweep(
  bounds: Bounds,
  limits: GrpcLimits,
  sessions: ReadonlySet<http2.ServerHttp2Session>,
  connOf: WeakMap<http2.Http2Session, ConnectionLoad>,
): void {
  const now = bounds.clock.now();
  for (const call of bounds.receiving) {
    if (now - call.startedAt > limits.requestTimeoutMs) call.requestTimedOut(limits.requestTimeoutMs);
  }
  for (const call of bounds.sending) {
    if (now - call.progressAt > limits.stallTimeoutMs) call.stalled();
  }
  for (const s of sessions) {
    const conn = connOf.get(s);
    if (conn && conn.calls === 0 && now - conn.idleSince > limits.idleTimeoutMs && !s.closed) {
      bounds.onLimit('idle');
      s.close();
    }
  }
}

/** One call: reads its request message, runs its method and ends it with a status. */
class Call implements ServerStream {
  private done = false;
  private headersSent = false;
  private timer: TimerHandle | undefined;
  private cancelFns: (() => void)[] | undefined;
  private drainFns: (() => void)[] | undefined;
  private trailers: Record<string, string> = OK_TRAILERS;
  private extra: Record<string, string> | undefined;
  /** Bytes of this call counted in its connection's load; all given back when the stream closes. */
  private held = 0;
  private pending = 0;
  private closed = false;
  private streaming = false;
  readonly startedAt: number;
  /** When the client last took response bytes (or the first were sent). */
  progressAt = 0;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly path: string,
    private readonly opts: GrpcServerOptions,
    private readonly headers: http2.IncomingHttpHeaders,
    private readonly bounds: Bounds,
    private readonly conn: ConnectionLoad,
  ) {
    this.startedAt = bounds.clock.now();
    conn.calls++;
    stream.on('error', ignore);
    stream.once('close', () => {
      this.closed = true;
      if (!this.done) {
        this.done = true;
        this.opts.onEnd?.(this.path, GrpcStatus.CANCELLED);
      }
      this.release();
      this.cancelled$();
    });
  }

  /** Gives back what the call held: bytes, its streaming slot, its place in the sweeps. */
  private release(): void {
    const b = this.bounds;
    if (this.held > 0) b.load.give(this.conn, this.held);
    this.held = 0;
    this.pending = 0;
    if (this.streaming) b.load.endStreaming(this.conn);
    this.streaming = false;
    b.receiving.delete(this);
    b.sending.delete(this);
    if (--this.conn.calls === 0) this.conn.idleSince = this.bounds.clock.now();
  }

  /** Takes a server-streaming slot on the connection; false beyond a bound. */
  startStreaming(): boolean {
    if (!this.bounds.load.startStreaming(this.conn)) return false;
    this.streaming = true;
    return true;
  }

  /** The request did not arrive in full in time: DEADLINE_EXCEEDED, and the stream is reset so the client stops sending. */
  requestTimedOut(ms: number): void {
    this.bounds.receiving.delete(this);
    this.bounds.onLimit('request_timeout');
    this.finish({
      code: GrpcStatus.DEADLINE_EXCEEDED,
      details: `the request did not arrive in full within ${ms} ms`,
      metadata: this.bounds.metadata('request_timeout'),
    });
    this.reset(http2.constants.NGHTTP2_NO_ERROR);
  }

  /** The client took none of the pending response for the stall timeout: the stream is reset with ENHANCE_YOUR_CALM (RESOURCE_EXHAUSTED at a grpc-js client). */
  stalled(): void {
    this.bounds.sending.delete(this);
    this.bounds.onLimit('stalled');
    if (!this.done) {
      this.done = true;
      this.opts.onEnd?.(this.path, GrpcStatus.RESOURCE_EXHAUSTED);
    }
    this.reset(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }

  private reset(code: number): void {
    const stream = this.stream;
    if (!stream.destroyed && !stream.closed) stream.close(code);
  }

  /** Holds `n` response bytes until the client takes them (`sent`). */
  private hold(n: number): void {
    this.bounds.load.take(this.conn, n);
    this.held += n;
    if (this.pending === 0) {
      this.progressAt = this.bounds.clock.now();
      this.bounds.sending.add(this);
    }
    this.pending += n;
  }

  private sent(n: number): void {
    if (this.closed) return;
    this.bounds.load.give(this.conn, n);
    this.held -= n;
    this.pending -= n;
    this.progressAt = this.bounds.clock.now();
    if (this.pending === 0) this.bounds.sending.delete(this);
  }

  get cancelled(): boolean {
    return this.done;
  }

  header(name: string): string | undefined {
    const v = this.headers[name.toLowerCase()];
    return typeof v === 'string' ? v : undefined;
  }

  setTrailer(name: string, value: string): void {
    if (this.done) return;
    (this.extra ??= {})[name.toLowerCase()] = value;
    this.trailers = { ...OK_TRAILERS, ...this.extra };
  }

  onCancel(fn: () => void): void {
    if (this.done) fn();
    else (this.cancelFns ??= []).push(fn);
  }

  private cancelled$(): void {
    if (this.timer !== undefined) this.bounds.clock.clearTimeout(this.timer);
    this.timer = undefined;
    const fns = this.cancelFns;
    this.cancelFns = undefined;
    if (fns) for (const f of fns) f();
    const d = this.drainFns;
    this.drainFns = undefined;
    if (d) for (const f of d) f();
  }

  setDeadline(ms: number): void {
    // A longer delay would make the timer fire at once (Node.js takes 1 ms instead).
    this.timer = this.bounds.clock.setTimeout(
      () => {
        this.timer = undefined;
        this.finish({ code: GrpcStatus.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
      },
      Math.min(ms, MAX_TIMER_MS),
    );
  }

  /**
   * Reads the one request message, then runs `method`. The message is assembled length first
   * (the gRPC prefix of ts/codec/grpc-frame.ts on the shared FrameAssembler): a compressed or
   * too large message is refused from its prefix alone. A message that arrives in one chunk
   * is taken as it is; one spread over chunks counts against the connection's and the
   * server's buffered bytes while it arrives.
   */
  read(method: GrpcMethod): void {
    const stream = this.stream;
    const max = this.opts.maxMessageBytes;
    let message: Buffer | undefined;
    let refused = false;
    const bounds = this.bounds;
    bounds.receiving.add(this);
    let frames: FrameAssembler | undefined = new FrameAssembler(
      grpcMessageFormat(max, {
        compressed: () =>
          new CallFailure({
            code: GrpcStatus.UNIMPLEMENTED,
            details: 'compressed messages are not supported',
            metadata: IDENTITY_ONLY,
          }),
        tooLarge: (len) =>
          new CallFailure({
            code: GrpcStatus.RESOURCE_EXHAUSTED,
            details: `a request message of ${len} bytes is above the limit of ${max}`,
          }),
      }),
    );
    const refuse = (status: CallStatus) => {
      // What else the client sends is read and dropped, and what was kept is given back.
      refused = true;
      frames = undefined;
      if (this.held > 0) bounds.load.give(this.conn, this.held);
      this.held = 0;
      this.finish(status);
    };
    const moreThanOne = new CallFailure({
      code: GrpcStatus.UNIMPLEMENTED,
      details: 'more than one request message in a call',
    });
    const sink = {
      // A second message starts where the first ends: refused before its prefix is judged.
      whole: () => {
        if (message !== undefined) throw moreThanOne;
        return 0;
      },
      frame: (f: Uint8Array) => {
        message = Buffer.from(f.buffer, f.byteOffset + GRPC_HEADER_BYTES, f.length - GRPC_HEADER_BYTES);
      },
    };
    /** Feeds the assembler; false when the call was refused. */
    const feed = (chunk: Buffer, into: FrameAssembler): boolean => {
      try {
        into.feed(chunk, sink);
      } catch (e) {
        refuse(e instanceof CallFailure ? e.status : this.opts.statusOf(e));
        return false;
      }
      if (message !== undefined && into.midFrame) {
        refuse(moreThanOne.status);
        return false;
      }
      return true;
    };
    const fits = (n: number): boolean => {
      if (bounds.load.fits(this.conn, n)) return true;
      bounds.onLimit('buffered_bytes');
      refuse({
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        metadata: bounds.metadata('buffered_bytes'),
        details: `the server holds ${this.conn.buffered} bytes for this connection and ${bounds.load.buffered} in total, at its limit (${bounds.load.limits.maxBufferedBytesPerConnection} per connection, ${bounds.load.limits.maxBufferedBytes} in total)`,
      });
      return false;
    };
    const hold = (n: number) => {
      bounds.load.take(this.conn, n);
      this.held += n;
    };
    stream.on('data', (chunk: Buffer) => {
      if (refused || frames === undefined) return;
      if (message !== undefined) {
        refuse(moreThanOne.status);
        return;
      }
      // The usual case: the whole message in one chunk. Its prefix is judged before anything
      // else, and the chunk is held (and counted) only if the message goes on in later chunks.
      if (!frames.midFrame && chunk.length >= GRPC_HEADER_BYTES) {
        if (!feed(chunk, frames)) return;
        if (message === undefined && fits(chunk.length)) hold(chunk.length);
        return;
      }
      if (!fits(chunk.length)) return;
      hold(chunk.length);
      feed(chunk, frames);
    });
    stream.once('end', () => {
      bounds.receiving.delete(this);
      if (refused || this.done) return;
      if (message === undefined) {
        this.finish({ code: GrpcStatus.UNIMPLEMENTED, details: 'the call has no request message' });
        return;
      }
      if (method.kind === 'unary') {
        method.handle(message, this).then(
          (framed) => this.reply(framed),
          (e: unknown) => this.finish(e instanceof CallFailure ? e.status : this.opts.statusOf(e)),
        );
      } else {
        try {
          method.handle(message, this);
        } catch (e) {
          this.finish(e instanceof CallFailure ? e.status : this.opts.statusOf(e));
        }
      }
    });
  }

  /** Ends a unary call with its one response message and OK. */
  private reply(framed: Uint8Array): void {
    if (this.done) return;
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return;
    const n = framed.length;
    const load = this.bounds.load;
    if (!load.fits(this.conn, n)) {
      this.bounds.onLimit('buffered_bytes');
      this.finish({
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        metadata: this.bounds.metadata('buffered_bytes'),
        details: `a response of ${n} bytes is above what the server may hold for this connection (${this.conn.buffered} of ${load.limits.maxBufferedBytesPerConnection} bytes) or in total (${load.buffered} of ${load.limits.maxBufferedBytes}): read the responses already sent`,
      });
      return;
    }
    this.done = true;
    if (this.timer !== undefined) this.bounds.clock.clearTimeout(this.timer);
    this.timer = undefined;
    stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
    if (this.extra) {
      const trailers = this.trailers;
      stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    } else stream.on('wantTrailers', sendOkTrailers);
    if (n <= PIECE) {
      this.hold(n);
      stream.end(framed, () => this.sent(n));
    } else {
      this.hold(n);
      for (let at = 0; at < n; at += PIECE) {
        const piece = framed.subarray(at, Math.min(n, at + PIECE));
        stream.write(piece, () => this.sent(piece.length));
      }
      stream.end();
    }
    this.opts.onEnd?.(this.path, GrpcStatus.OK);
  }

  write(framed: Uint8Array): boolean {
    if (this.done) return true;
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return true;
    if (!this.headersSent) {
      this.headersSent = true;
      stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
      stream.once('wantTrailers', () => stream.sendTrailers(this.trailers));
    }
    const n = framed.length;
    this.hold(n);
    return stream.write(framed, () => this.sent(n));
  }

  drained(): Promise<void> {
    if (this.done) return Promise.resolve();
    return new Promise<void>((resolve) => {
      if (!this.drainFns) {
        this.drainFns = [];
        this.stream.once('drain', () => {
          const d = this.drainFns;
          this.drainFns = undefined;
          if (d) for (const f of d) f();
        });
      }
      this.drainFns.push(resolve);
    });
  }

  end(status: CallStatus = { code: GrpcStatus.OK, details: '' }): void {
    this.finish(status);
  }

  /** Ends the call with `status`: trailers after what was sent, or a trailers-only response. */
  finish(status: CallStatus): void {
    if (this.done) return;
    this.done = true;
    const stream = this.stream;
    this.opts.onEnd?.(this.path, status.code);
    if (!stream.destroyed && !stream.closed) {
      const trailers: Record<string, string> = {
        ...this.extra,
        'grpc-status': String(status.code),
        'grpc-message': encodeMessage(status.details),
        ...status.metadata,
      };
      if (this.headersSent) {
        this.trailers = trailers;
        stream.end();
      } else {
        stream.respond({ ...RESPONSE_HEADERS, ...trailers }, END_STREAM);
      }
    }
    this.cancelled$();
  }
}
