/**
 * Journal shipping (docs/shard-shipping.md): a `ShipSender` serves the suffix of a shard's
 * journal that a `ShipReceiver` lacks, over one byte stream (a mutual-TLS socket of the
 * cluster, or any `Duplex`), in the frames of ts/codec/shard-shipping.ts.
 *
 * - The receiver opens: the shard, the epoch it has accepted, the end position it holds and
 *   the CRC-32C of its record there (the sender refuses a receiver whose journal diverged), the
 *   window (bytes of chunks it takes before acknowledging) and the largest chunk.
 * - The sender reads its journal from the receiver's end + 1 in chunks of at most that size
 *   (`LogStorage.read` with `maxBytes`), and sends a chunk only while the bytes of the chunks
 *   not yet acknowledged stay within the window (or none is in flight): memory is bounded on
 *   both sides, and a slow receiver slows the sender down. It never holds a whole journal.
 * - The receiver checks every chunk (its shard, its epoch against the accepted one, its first
 *   position against its own end, every record's CRC-32C), appends its records with their
 *   epochs and batch ids (resolved once durable: the log's fsync mode), and acknowledges each
 *   chunk with one ACK after it is stored, in order.
 * - After the last chunk the sender sends END with its end position and the CRC-32C of its
 *   last record; the receiver checks both against what it stored and acknowledges END with one
 *   more ACK. Then both report.
 * - A connection cut midway loses nothing acknowledged: the receiver keeps what it stored, and
 *   a new stream opens at its end (resume).
 *
 * Either side refuses with a REFUSE frame and a `PLX_SHIP_*` code (docs/errors.md); the peer
 * raises the same code. The connection belongs to the caller: a stream that ends well leaves
 * it open; a refused one ends it.
 */
import type { Duplex } from 'node:stream';
import {
  encodeShipAck,
  encodeShipChunk,
  encodeShipEnd,
  encodeShipOpen,
  encodeShipRefuse,
  SHIP_HEADER_BYTES,
  SHIP_MAX_BODY,
  SHIP_MAX_COUNT,
  SHIP_MAX_TEXT,
  SHIP_MIN_WINDOW,
  SHIP_REFUSAL_CODES,
  type ShipCode,
  type ShipFrame,
  ShipRefusal,
  type ShipRefusalReason,
  ShipStream,
  shipChunkBytes,
  shipRecordCrc,
} from '../codec/shard-shipping.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { LogRecord, LogStorage } from '../storage/types.js';

/** Default window: bytes of chunks in flight before the receiver acknowledges (8 MiB). */
export const SHIP_DEFAULT_WINDOW = 8 * 1024 * 1024;
/** Default largest chunk, header included (1 MiB). */
export const SHIP_DEFAULT_CHUNK = 1024 * 1024;

const MAX_U32 = 0xffff_ffff;

function checkSize(v: number | undefined, field: string, fallback: number): number {
  if (v === undefined) return fallback;
  if (!Number.isSafeInteger(v) || v < SHIP_MIN_WINDOW || v > MAX_U32) {
    throw new PlexusError(
      'PLX_SHIP_BAD_CONFIG',
      `${field} must be a whole number of bytes from ${SHIP_MIN_WINDOW} to ${MAX_U32}`,
      {
        field,
      },
    );
  }
  return v;
}

function checkShard(shard: number): void {
  if (!Number.isInteger(shard) || shard < 0 || shard > MAX_U32) {
    throw new PlexusError('PLX_SHIP_BAD_CONFIG', `shard ${shard} is not a u32`, { field: 'shard' });
  }
}

/** A refusal this side decided: sent to the peer as REFUSE, raised here with the same code. */
class Refused extends Error {
  constructor(
    readonly reason: ShipRefusalReason,
    readonly position: bigint,
    message: string,
    readonly causeError?: unknown,
  ) {
    super(message);
  }
}

function refusalError(
  reason: ShipRefusalReason,
  position: bigint,
  message: string,
  peer: boolean,
  cause?: unknown,
): PlexusError {
  const code: ShipCode = SHIP_REFUSAL_CODES[reason];
  return new PlexusError(
    code,
    peer ? `the peer refused the shipping stream: ${message}` : message,
    { reason, position: Number(position), peer },
    cause === undefined ? undefined : { cause },
  );
}

function closedError(held: bigint | undefined, cause?: unknown): PlexusError {
  return new PlexusError(
    'PLX_SHIP_CLOSED',
    'the shipping connection closed before the stream ended; open a new stream to resume',
    held === undefined ? {} : { held: Number(held) },
    cause === undefined ? undefined : { cause },
  );
}

/** Frames in, frames out over one Duplex, with the socket's own backpressure on writes. */
class Channel {
  private readonly stream: ShipStream;
  private readonly queue: ShipFrame[] = [];
  private waiter: { resolve: (f: ShipFrame) => void; reject: (e: unknown) => void } | undefined;
  private drainWaiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  failure: unknown;
  private readonly onData = (d: Buffer): void => {
    let frames: ShipFrame[];
    try {
      frames = this.stream.push(new Uint8Array(d.buffer, d.byteOffset, d.length));
    } catch (e) {
      this.fail(e);
      return;
    }
    for (const f of frames) {
      const w = this.waiter;
      if (w) {
        this.waiter = undefined;
        w.resolve(f);
      } else this.queue.push(f);
    }
  };
  /** The connection closed or failed (a frame that did not decode leaves it open for a REFUSE). */
  private closed = false;
  private readonly onClose = (): void => {
    this.closed = true;
    this.fail(closedError(undefined));
  };
  private readonly onError = (e: Error): void => {
    this.closed = true;
    this.fail(closedError(undefined, e));
  };
  private readonly onDrain = (): void => {
    for (const w of this.drainWaiters.splice(0)) w.resolve();
  };

  constructor(
    readonly conn: Duplex,
    maxBody: number,
  ) {
    this.stream = new ShipStream(maxBody);
    conn.on('data', this.onData);
    conn.on('end', this.onClose);
    conn.on('close', this.onClose);
    conn.on('error', this.onError);
    conn.on('drain', this.onDrain);
    if (conn.destroyed) this.fail(closedError(undefined));
  }

  /** Bytes the decoder holds of a frame not yet whole. */
  get buffered(): number {
    return this.stream.buffered;
  }

  private fail(e: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = e;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(e);
    for (const d of this.drainWaiters.splice(0)) d.reject(e);
  }

  next(): Promise<ShipFrame> {
    const f = this.queue.shift();
    if (f) return Promise.resolve(f);
    if (this.failure !== undefined) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** Writes `bytes`; resolves at once, or once the socket drains when its buffer is full. */
  send(bytes: Uint8Array): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.conn.write(bytes)) return Promise.resolve();
    return new Promise((resolve, reject) => this.drainWaiters.push({ resolve, reject }));
  }

  /** Sends a REFUSE (best effort) and ends the connection. */
  refuse(shard: number, r: Refused): void {
    if (!this.closed && !this.conn.destroyed && this.conn.writable) {
      try {
        this.conn.write(encodeShipRefuse(shard, r.reason, r.position, r.message.slice(0, SHIP_MAX_TEXT)));
        this.conn.end();
      } catch {
        // The peer is gone: nothing to tell it.
      }
    }
    this.detach();
  }

  detach(): void {
    this.conn.off('data', this.onData);
    this.conn.off('end', this.onClose);
    this.conn.off('close', this.onClose);
    this.conn.off('error', this.onError);
    this.conn.off('drain', this.onDrain);
    // A late error after the stream is over must not go unhandled.
    this.conn.on('error', () => {});
    this.fail(closedError(undefined));
  }
}

/** Raises what a frame from the peer means when this side did not expect it. */
function unexpected(f: ShipFrame, where: string): Refused | PlexusError {
  if (f.type === 'refuse') return refusalError(f.reason, f.position, f.text, true);
  return new Refused(ShipRefusal.BAD_FRAME, 0n, `a ${f.type.toUpperCase()} frame ${where}`);
}

/** One shard's journal as a sender serves it. */
export interface ShipSource {
  readonly log: LogStorage;
  /** The sender's lease epoch on the shard: every chunk carries it. */
  readonly epoch: bigint;
}

export interface ShipSenderOptions {
  /** The journal of a shard, or undefined when this sender holds none (refused PLX_SHIP_UNKNOWN_SHARD). */
  readonly sourceOf: (shard: number) => ShipSource | undefined;
  /** The most bytes of chunks in flight (default 8 MiB; the receiver's window if smaller). */
  readonly window?: number;
  /** The largest chunk, header included (default 1 MiB; the receiver's if smaller). */
  readonly maxChunk?: number;
}

/** What a stream shipped, as the sender saw it. */
export interface ShipSent {
  readonly shard: number;
  readonly epoch: bigint;
  /** The end the receiver held when it opened: the stream shipped the positions after it. */
  readonly from: bigint;
  /** The sender's end position, which the receiver verified. */
  readonly end: bigint;
  readonly records: number;
  readonly chunks: number;
  /** Wire bytes of the chunks sent. */
  readonly bytes: number;
  /** The most bytes of chunks ever sent and not yet acknowledged. */
  readonly maxInFlight: number;
  /** The window and chunk size the stream ran with (the smaller of both sides'). */
  readonly window: number;
  readonly maxChunk: number;
}

/** Serves shipping streams: one `serve` per connection a receiver opened. */
export class ShipSender {
  private readonly window: number;
  private readonly maxChunk: number;

  constructor(private readonly opts: ShipSenderOptions) {
    this.window = checkSize(opts.window, 'window', SHIP_DEFAULT_WINDOW);
    this.maxChunk = checkSize(opts.maxChunk, 'maxChunk', SHIP_DEFAULT_CHUNK);
  }

  /**
   * Answers the receiver's OPEN on `conn` with the suffix it lacks, then END; resolves once
   * the receiver acknowledged END (it verified the end position and stored everything).
   * Rejects with a `PLX_SHIP_*` PlexusError: a refusal of either side, or PLX_SHIP_CLOSED.
   */
  async serve(conn: Duplex): Promise<ShipSent> {
    // The sender reads OPEN, ACK and REFUSE frames only: small bodies.
    const ch = new Channel(conn, 16 + SHIP_MAX_TEXT);
    let shard = 0;
    try {
      const open = await ch.next();
      if (open.type !== 'open') throw unexpected(open, 'where OPEN was due');
      shard = open.shard;
      const source = this.opts.sourceOf(open.shard);
      if (source === undefined) {
        throw new Refused(ShipRefusal.UNKNOWN_SHARD, 0n, `this member holds no journal of shard ${open.shard}`);
      }
      const { log, epoch } = source;
      if (open.epoch > epoch) {
        throw new Refused(
          ShipRefusal.STALE_EPOCH,
          open.end,
          `shard ${shard}: the receiver accepted epoch ${open.epoch}; this sender holds epoch ${epoch}`,
        );
      }
      if (open.window < SHIP_MIN_WINDOW || open.maxChunk < SHIP_MIN_WINDOW) {
        throw new Refused(
          ShipRefusal.BAD_FRAME,
          0n,
          `a window and a chunk size of at least ${SHIP_MIN_WINDOW} bytes are needed`,
        );
      }
      const end = log.last;
      if (open.end > end) {
        throw new Refused(
          ShipRefusal.BEYOND_END,
          open.end,
          `shard ${shard}: the receiver holds up to ${open.end}, beyond this sender's end ${end}`,
        );
      }
      if (open.end < end && (log.first === 0n || log.first > open.end + 1n)) {
        throw new Refused(
          ShipRefusal.COMPACTED,
          open.end + 1n,
          `shard ${shard}: this sender no longer holds position ${open.end + 1n} (its journal starts at ${log.first})`,
        );
      }
      // The receiver's prefix must end with this sender's record at its end: a receiver whose
      // journal diverged there is refused rather than extended.
      if (open.end > 0n && log.first !== 0n && log.first <= open.end) {
        const [r] = await log.read(open.end, { maxCount: 1 });
        if (r === undefined || shipRecordCrc(r.position, r.epoch, r.batchId, r.payload) !== open.endCrc) {
          throw new Refused(
            ShipRefusal.END_MISMATCH,
            open.end,
            `shard ${shard}: the receiver's record at ${open.end} is not this sender's (CRC-32C differs)`,
          );
        }
      }
      const window = Math.min(this.window, open.window);
      const maxChunk = Math.min(this.maxChunk, open.maxChunk);
      return await this.ship(ch, shard, epoch, log, open.end, end, window, maxChunk);
    } catch (e) {
      if (e instanceof Refused) {
        ch.refuse(shard, e);
        throw refusalError(e.reason, e.position, e.message, false, e.causeError);
      }
      if (isPlexusError(e, 'PLX_SHIP_BAD_FRAME')) ch.refuse(shard, new Refused(ShipRefusal.BAD_FRAME, 0n, e.message));
      else ch.detach();
      throw e;
    }
  }

  private async ship(
    ch: Channel,
    shard: number,
    epoch: bigint,
    log: LogStorage,
    from: bigint,
    end: bigint,
    window: number,
    maxChunk: number,
  ): Promise<ShipSent> {
    // Chunks sent and not yet acknowledged, oldest first: their last positions and wire bytes.
    const inFlight: { last: bigint; bytes: number }[] = [];
    let inFlightBytes = 0;
    let maxInFlight = 0;
    let endSent = false;
    let finished = false;
    let failure: unknown;
    let wake: (() => void) | undefined;
    const woken = (): void => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    // Acknowledgements arrive while chunks are being read and sent.
    const acks = (async () => {
      for (;;) {
        const f = await ch.next();
        if (f.type !== 'ack') throw unexpected(f, 'from a receiver where ACK was due');
        if (f.shard !== shard)
          throw new Refused(
            ShipRefusal.BAD_FRAME,
            f.durable,
            `an ACK of shard ${f.shard} on a stream of shard ${shard}`,
          );
        const oldest = inFlight.shift();
        if (oldest !== undefined) {
          if (f.durable !== oldest.last) {
            throw new Refused(ShipRefusal.BAD_FRAME, f.durable, `an ACK of ${f.durable} where ${oldest.last} was due`);
          }
          inFlightBytes -= oldest.bytes;
        } else if (endSent && f.durable === end) {
          finished = true;
          woken();
          return;
        } else {
          throw new Refused(ShipRefusal.BAD_FRAME, f.durable, `an ACK of ${f.durable} with nothing in flight`);
        }
        woken();
      }
    })().catch((e: unknown) => {
      failure = e;
      woken();
    });
    const waitFor = async (ready: () => boolean): Promise<void> => {
      while (!ready()) {
        if (failure !== undefined) throw failure;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
      if (failure !== undefined) throw failure;
    };

    try {
      return await run();
    } catch (e) {
      if (!(e instanceof Refused)) {
        // A write that failed because the receiver refused and closed: its REFUSE, received
        // before the close, is the reason to report.
        ch.detach();
        await acks;
        if (isPlexusError(failure) && failure.details.peer === true) throw failure;
      }
      throw e;
    }

    async function run(): Promise<ShipSent> {
      let pos = from + 1n;
      let records = 0;
      let chunks = 0;
      let bytes = 0;
      let last: LogRecord | undefined;
      // What one chunk's records may take besides its header and heads: the read's payload budget.
      const payloadBudget = maxChunk - SHIP_HEADER_BYTES - 32;
      while (pos <= end) {
        await waitFor(() => inFlightBytes === 0 || inFlightBytes + maxChunk <= window);
        const left = end - pos + 1n;
        const read = await log.read(pos, {
          maxBytes: Math.max(1, payloadBudget),
          maxCount: Number(left < BigInt(SHIP_MAX_COUNT) ? left : BigInt(SHIP_MAX_COUNT)),
        });
        // Keep the records that fit one chunk of maxChunk bytes (at least one).
        let take = 0;
        let payload = 0;
        for (const r of read) {
          if (r.position !== pos + BigInt(take)) {
            throw new PlexusError(
              'PLX_SHIP_BAD_FRAME',
              `shard ${shard}: the journal read returned ${r.position} where ${pos + BigInt(take)} was due`,
              {
                reason: 'position',
              },
            );
          }
          if (take > 0 && shipChunkBytes(payload + r.payload.length, take + 1) > maxChunk) break;
          if (r.epoch > epoch) {
            throw new Refused(
              ShipRefusal.STALE_EPOCH,
              r.position,
              `shard ${shard}: the record at ${r.position} was written at epoch ${r.epoch}, above this sender's epoch ${epoch}`,
            );
          }
          payload += r.payload.length;
          take++;
        }
        if (take === 0)
          throw closedError(undefined, new Error(`shard ${shard}: the journal returned no record at ${pos}`));
        const recs = take === read.length ? read : read.slice(0, take);
        const frame = encodeShipChunk(shard, epoch, recs);
        // A chunk of one record larger than maxChunk goes alone.
        await waitFor(() => inFlightBytes === 0 || inFlightBytes + frame.length <= window);
        last = recs[recs.length - 1] as LogRecord;
        inFlight.push({ last: last.position, bytes: frame.length });
        inFlightBytes += frame.length;
        if (inFlightBytes > maxInFlight) maxInFlight = inFlightBytes;
        await ch.send(frame);
        records += take;
        chunks++;
        bytes += frame.length;
        pos = last.position + 1n;
      }
      if (last === undefined && end > 0n) {
        const at = await log.read(end, { maxCount: 1 });
        last = at[0];
      }
      const lastCrc = last === undefined ? 0 : shipRecordCrc(last.position, last.epoch, last.batchId, last.payload);
      endSent = true;
      await ch.send(encodeShipEnd(shard, epoch, end, lastCrc));
      await waitFor(() => finished);
      await acks;
      ch.detach();
      return { shard, epoch, from, end, records, chunks, bytes, maxInFlight, window, maxChunk };
    }
  }
}

export interface ShipReceiverOptions {
  readonly shard: number;
  /** The log the shard's journal is stored in: its `last` is where a stream resumes. */
  readonly log: LogStorage;
  /**
   * The highest epoch this member has accepted for the shard (kept by its caller); a stream
   * below it, or below the log's highest epoch, is refused PLX_SHIP_STALE_EPOCH.
   */
  readonly acceptedEpoch?: bigint;
  /** The most bytes of chunks this receiver takes before it acknowledges (default 8 MiB). */
  readonly window?: number;
  /** The largest chunk it takes, header included (default 1 MiB); a chunk of one record may be larger. */
  readonly maxChunk?: number;
}

/** What a stream stored, as the receiver saw it. */
export interface ShipReceived {
  readonly shard: number;
  /** The epoch of the stream (now accepted). */
  readonly epoch: bigint;
  /** The end it held when it opened. */
  readonly from: bigint;
  /** The verified end position: the log's last position now. */
  readonly end: bigint;
  readonly records: number;
  readonly chunks: number;
  /** The most bytes of chunks ever held here, received and not yet stored and acknowledged. */
  readonly maxHeld: number;
}

/** Receives a shard's journal suffix into a log: one `receive` per connection. */
export class ShipReceiver {
  private readonly window: number;
  private readonly maxChunk: number;
  private accepted: bigint;

  constructor(private readonly opts: ShipReceiverOptions) {
    checkShard(opts.shard);
    this.window = checkSize(opts.window, 'window', SHIP_DEFAULT_WINDOW);
    this.maxChunk = checkSize(opts.maxChunk, 'maxChunk', SHIP_DEFAULT_CHUNK);
    this.accepted = opts.acceptedEpoch ?? 0n;
  }

  /** The highest epoch accepted so far (the option, the log's, and every stream's since). */
  get acceptedEpoch(): bigint {
    return higher(this.accepted, this.opts.log.highestEpoch);
  }

  /**
   * Opens a stream on `conn` at the end the log holds and stores what the sender ships; resolves
   * once END is verified and acknowledged. Rejects with a `PLX_SHIP_*` PlexusError: a refusal
   * of either side, or PLX_SHIP_CLOSED (`details.held`: the end it holds; call again on a new
   * connection to resume).
   */
  async receive(conn: Duplex): Promise<ShipReceived> {
    const { shard, log } = this.opts;
    const ch = new Channel(conn, SHIP_MAX_BODY);
    const from = log.last;
    const window = this.window;
    const maxChunk = this.maxChunk;
    let expected = from + 1n;
    let held = 0;
    let heldChunks = 0;
    let maxHeld = 0;
    let records = 0;
    let chunks = 0;
    let streamEpoch = this.acceptedEpoch;
    // Appends run one chunk after another; a failed one stops the stream.
    let stored: Promise<void> = Promise.resolve();
    let storeFailure: unknown;
    try {
      let endCrc = 0;
      if (from > 0n && log.first !== 0n && log.first <= from) {
        const [r] = await log.read(from, { maxCount: 1 });
        if (r !== undefined) endCrc = shipRecordCrc(r.position, r.epoch, r.batchId, r.payload);
      }
      await ch.send(encodeShipOpen({ shard, epoch: this.acceptedEpoch, end: from, window, maxChunk, endCrc }));
      for (;;) {
        if (storeFailure !== undefined) throw storeFailure;
        let f: ShipFrame;
        try {
          f = await ch.next();
        } catch (e) {
          if (isPlexusError(e, 'PLX_SHIP_CLOSED')) {
            await stored.catch(() => undefined);
            if (storeFailure !== undefined) throw storeFailure;
            throw closedError(log.last, e.cause);
          }
          throw e;
        }
        if (storeFailure !== undefined) throw storeFailure;
        if (f.type === 'chunk') {
          if (f.shard !== shard)
            throw new Refused(
              ShipRefusal.BAD_FRAME,
              f.first,
              `a chunk of shard ${f.shard} on a stream of shard ${shard}`,
            );
          if (f.epoch < this.acceptedEpoch) {
            throw new Refused(
              ShipRefusal.STALE_EPOCH,
              f.first,
              `shard ${shard}: a chunk of epoch ${f.epoch}, below the accepted epoch ${this.acceptedEpoch}`,
            );
          }
          if (f.first !== expected) {
            throw new Refused(
              ShipRefusal.BAD_FRAME,
              f.first,
              `shard ${shard}: a chunk from ${f.first} where ${expected} was due`,
            );
          }
          let payload = 0;
          for (const r of f.records) payload += r.payload.length;
          const size = shipChunkBytes(payload, f.records.length);
          if (f.records.length > 1 && size > maxChunk) {
            throw new Refused(
              ShipRefusal.BAD_FRAME,
              f.first,
              `a chunk of ${size} bytes is above the ${maxChunk} this receiver takes`,
            );
          }
          if (heldChunks > 0 && held + size > window) {
            throw new Refused(ShipRefusal.BAD_FRAME, f.first, `the sender overran the window of ${window} bytes`);
          }
          for (const r of f.records) {
            if (r.epoch > f.epoch) {
              throw new Refused(
                ShipRefusal.BAD_FRAME,
                r.position,
                `shard ${shard}: the record at ${r.position} has epoch ${r.epoch}, above its chunk's ${f.epoch}`,
              );
            }
            if (shipRecordCrc(r.position, r.epoch, r.batchId, r.payload) !== r.crc) {
              throw new Refused(
                ShipRefusal.BAD_CRC,
                r.position,
                `shard ${shard}: the record at ${r.position} does not match its CRC-32C`,
              );
            }
          }
          this.accepted = higher(f.epoch, this.accepted);
          streamEpoch = f.epoch;
          expected = f.last + 1n;
          held += size;
          heldChunks++;
          if (held > maxHeld) maxHeld = held;
          const chunk = f;
          stored = stored.then(async () => {
            if (storeFailure !== undefined) return;
            try {
              await appendChunk(log, chunk.records);
            } catch (e) {
              storeFailure = new Refused(
                ShipRefusal.STORE_FAILED,
                chunk.first,
                `shard ${shard}: the log refused the chunk from ${chunk.first}`,
                e,
              );
              return;
            }
            held -= size;
            heldChunks--;
            records += chunk.records.length;
            chunks++;
            await ch.send(encodeShipAck(shard, chunk.last)).catch(() => undefined);
          });
          continue;
        }
        if (f.type === 'end') {
          if (f.shard !== shard)
            throw new Refused(ShipRefusal.BAD_FRAME, f.end, `an END of shard ${f.shard} on a stream of shard ${shard}`);
          if (f.epoch < this.acceptedEpoch) {
            throw new Refused(
              ShipRefusal.STALE_EPOCH,
              f.end,
              `shard ${shard}: an END of epoch ${f.epoch}, below the accepted epoch ${this.acceptedEpoch}`,
            );
          }
          await stored;
          if (storeFailure !== undefined) throw storeFailure;
          if (log.last !== f.end) {
            throw new Refused(
              ShipRefusal.END_MISMATCH,
              log.last,
              `shard ${shard}: the sender ends at ${f.end}, this receiver at ${log.last}`,
            );
          }
          let crc = 0;
          if (f.end > 0n) {
            const [r] = await log.read(f.end, { maxCount: 1 });
            if (r === undefined)
              throw new Refused(ShipRefusal.END_MISMATCH, f.end, `shard ${shard}: no record at ${f.end}`);
            crc = shipRecordCrc(r.position, r.epoch, r.batchId, r.payload);
          }
          if (crc !== f.lastCrc) {
            throw new Refused(
              ShipRefusal.END_MISMATCH,
              f.end,
              `shard ${shard}: the record at ${f.end} is not the sender's (CRC-32C differs)`,
            );
          }
          this.accepted = higher(f.epoch, this.accepted);
          streamEpoch = f.epoch;
          await ch.send(encodeShipAck(shard, f.end));
          ch.detach();
          return { shard, epoch: streamEpoch, from, end: f.end, records, chunks, maxHeld };
        }
        throw unexpected(f, 'from a sender');
      }
    } catch (e) {
      if (e instanceof Refused) {
        // Nothing after a refused chunk is stored: the appends before it finish first.
        await stored.catch(() => undefined);
        ch.refuse(shard, e);
        throw refusalError(e.reason, e.position, e.message, false, e.causeError);
      }
      if (isPlexusError(e, 'PLX_SHIP_BAD_FRAME')) ch.refuse(shard, new Refused(ShipRefusal.BAD_FRAME, 0n, e.message));
      else ch.detach();
      throw e;
    }
  }
}

/**
 * Appends a chunk's records with their own epochs and batch ids: one append per run of records
 * of one batch, each at the position it had (`expectedLast`), all called at once so that they
 * share the log's group commit; resolves once every one is durable.
 */
async function appendChunk(
  log: LogStorage,
  records: readonly { position: bigint; epoch: bigint; batchId: Uint8Array; payload: Uint8Array }[],
): Promise<void> {
  const appends: Promise<unknown>[] = [];
  let i = 0;
  while (i < records.length) {
    const head = records[i] as (typeof records)[number];
    let j = i + 1;
    while (j < records.length) {
      const r = records[j] as (typeof records)[number];
      if (r.epoch !== head.epoch || !sameBytes(r.batchId, head.batchId)) break;
      j++;
    }
    const payloads = records.slice(i, j).map((r) => r.payload);
    appends.push(
      log.append(
        payloads,
        head.epoch === 0n
          ? { batchId: head.batchId, expectedLast: head.position - 1n }
          : { batchId: head.batchId, expectedLast: head.position - 1n, epoch: head.epoch },
      ),
    );
    i = j;
  }
  const settled = await Promise.allSettled(appends);
  for (const s of settled) if (s.status === 'rejected') throw s.reason;
}

/** The higher of two epochs. */
function higher(a: bigint, b: bigint): bigint {
  if (a > b) return a;
  return b;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
