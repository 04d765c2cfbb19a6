/**
 * A COLLECTIVE or CKPT_DATA frame whose payload arrives piece by piece
 * (ts/codec/sperli-mesh-stream.ts): the transport hands it to the communicator at its header,
 * in frame order, and then feeds its payload bytes as they arrive. The first bytes are
 * the payload's fixed header (16 for the collective header, 24 for CKPT_DATA's); the
 * rest is data, which the collective or the checkpoint step that takes the frame copies,
 * reduces or writes piece by piece (`drain`). Pieces that come before anyone drains are held, so what it holds
 * never exceeds the bytes received (at most one frame's payload). A sink takes each piece
 * before it returns and keeps no view of it: pieces may be views of a read buffer that is
 * used again for the next read.
 */
import { COLLECTIVE_HEADER_SIZE } from '../codec/sperli-payloads.js';
import type { PlexusError } from '../core/errors.js';

/** Takes `chunk`, the data bytes at offset `at` of the frame's data. */
export type PieceSink = (at: number, chunk: Uint8Array) => void;

export class IncomingFrame {
  /** Data bytes of the frame (its payload less the fixed header). */
  readonly dataLength: number;
  private readonly headBytes: Uint8Array;
  private headFill = 0;
  private held: Uint8Array[] = [];
  /** Data bytes received so far. */
  private received = 0;
  private ended = false;
  private error: PlexusError | undefined;
  private sink: PieceSink | undefined;
  private headWaiter: { resolve: (h: Uint8Array) => void; reject: (e: PlexusError) => void } | undefined;
  private endWaiter: { resolve: () => void; reject: (e: PlexusError) => void } | undefined;

  /**
   * `length` is the frame's payload length (at least `headSize`), `headSize` the length
   * of the payload's fixed header (the collective header unless given).
   */
  constructor(
    readonly length: number,
    readonly headSize: number = COLLECTIVE_HEADER_SIZE,
  ) {
    this.dataLength = length - headSize;
    this.headBytes = new Uint8Array(headSize);
  }

  /**
   * Payload bytes as they arrive, in order. `transient` bytes are used again by the
   * caller once this returns: they are copied if they must be held.
   */
  push(bytes: Uint8Array, transient = false): void {
    if (this.error !== undefined) return;
    let pos = 0;
    if (this.headFill < this.headSize) {
      const take = Math.min(this.headSize - this.headFill, bytes.length);
      this.headBytes.set(bytes.subarray(0, take), this.headFill);
      this.headFill += take;
      pos = take;
      if (this.headFill === this.headSize && this.headWaiter !== undefined) {
        const w = this.headWaiter;
        this.headWaiter = undefined;
        w.resolve(this.headBytes);
      }
      if (pos === bytes.length) return;
    }
    const chunk = pos === 0 ? bytes : bytes.subarray(pos);
    if (this.sink !== undefined) this.sink(this.received, chunk);
    else this.held.push(transient ? Uint8Array.prototype.slice.call(chunk) : chunk);
    this.received += chunk.length;
  }

  /** The whole payload has arrived. */
  end(): void {
    if (this.error !== undefined) return;
    this.ended = true;
    if (this.sink !== undefined && this.endWaiter !== undefined) {
      const w = this.endWaiter;
      this.endWaiter = undefined;
      this.sink = undefined;
      w.resolve();
    }
  }

  /** The job failed before the payload was complete. */
  fail(error: PlexusError): void {
    if (this.error !== undefined || this.ended) return;
    this.error = error;
    this.held = [];
    this.headWaiter?.reject(error);
    this.endWaiter?.reject(error);
    this.headWaiter = undefined;
    this.endWaiter = undefined;
  }

  /** The payload's fixed header (`headSize` bytes), once it has arrived. */
  header(): Promise<Uint8Array> {
    if (this.headFill === this.headSize) return Promise.resolve(this.headBytes);
    if (this.error !== undefined) return Promise.reject(this.error);
    return new Promise((resolve, reject) => {
      this.headWaiter = { resolve, reject };
    });
  }

  /**
   * Hands every data byte to `sink` (the bytes held so far at once, the rest as they
   * arrive), with its offset in the frame's data; resolves once the last one is handed.
   */
  drain(sink: PieceSink): Promise<void> {
    if (this.error !== undefined) return Promise.reject(this.error);
    let at = 0;
    for (const c of this.held) {
      sink(at, c);
      at += c.length;
    }
    this.held = [];
    if (this.ended) return Promise.resolve();
    this.sink = sink;
    return new Promise((resolve, reject) => {
      this.endWaiter = { resolve, reject };
    });
  }
}
