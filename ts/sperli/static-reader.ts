/**
 * The reads of a connection that decrypts into one buffer used again for every read
 * (node:tls `onread`, which node:tls offers on the connections it opens itself: the
 * mesh's dialled ones).
 */

/** Bytes of that buffer: one TLS record holds at most 16 KiB of data, so every read fits. */
export const READ_BUFFER = 16 * 1024;

/**
 * The reads of a dialled connection, decrypted into one buffer that is used again for
 * the next read (node:tls `onread`), instead of a fresh buffer per TLS record: the
 * receiver takes each read before the callback returns (PeerLinks copies what it keeps),
 * so a large message costs no allocation per record and no garbage collection of them.
 * Reads that arrive before the connection is attached are copied and held.
 */
export class StaticReader {
  readonly buffer = Buffer.allocUnsafeSlow(READ_BUFFER);
  private sink: ((bytes: Uint8Array) => void) | undefined;
  private early: Uint8Array[] = [];

  readonly onread = {
    buffer: this.buffer,
    callback: (n: number, buf: Uint8Array): boolean => {
      const bytes = new Uint8Array(buf.buffer, buf.byteOffset, n);
      if (this.sink !== undefined) this.sink(bytes);
      else this.early.push(bytes.slice());
      return true;
    },
  };

  /** From now on, reads go to `sink` (the bytes held so far first, as their own copies). */
  attach(sink: (bytes: Uint8Array, transient: boolean) => void): void {
    for (const b of this.early) sink(b, false);
    this.early = [];
    this.sink = (bytes) => sink(bytes, true);
  }
}
