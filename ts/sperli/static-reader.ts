/**
 * The reads of a connection that decrypts into one buffer used again for every read.
 *
 * node:tls takes the `onread` option only on a connection it opens itself (`tls.connect`
 * without a `socket`): the mesh's dialled connections. A connection that a `tls.Server`
 * accepted gets the same through `StaticReader.adopt`, which installs the buffer the way
 * node:net does for `onread` (the socket's user-buffer slots and the handle's
 * `useUserBuffer`); where this node:net keeps no such slots, `adopt` returns undefined
 * and the connection's reads stay `'data'` events.
 */
import * as net from 'node:net';

/** Bytes of that buffer: one TLS record holds at most 16 KiB of data, so every read fits. */
export const READ_BUFFER = 16 * 1024;

interface UserBufferKeys {
  readonly buffer: symbol;
  readonly callback: symbol;
}

let keys: UserBufferKeys | null | undefined;

/**
 * The slots where node:net keeps an `onread` buffer and callback, found on a socket made
 * with both (it has no handle, so nothing is read or opened); null when there are none.
 */
function userBufferKeys(): UserBufferKeys | null {
  if (keys !== undefined) return keys;
  const buffer = Buffer.alloc(1);
  const callback = (): boolean => true;
  const probe = new net.Socket({ onread: { buffer, callback } } as net.SocketConstructorOpts);
  let b: symbol | undefined;
  let c: symbol | undefined;
  const slots = probe as unknown as Record<symbol, unknown>;
  for (const k of Object.getOwnPropertySymbols(probe)) {
    if (slots[k] === buffer) b = k;
    else if (slots[k] === callback) c = k;
  }
  probe.destroy();
  keys = b !== undefined && c !== undefined ? { buffer: b, callback: c } : null;
  return keys;
}

/**
 * The reads of a connection, decrypted into one buffer that is used again for the next
 * read (node:tls `onread`), instead of a fresh buffer per TLS record: the receiver takes
 * each read before the callback returns (PeerLinks copies what it keeps), so a large
 * message costs no allocation per record and no garbage collection of them. Reads that
 * arrive before the connection is attached are copied and held.
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

  /**
   * Gives an established connection that node:tls accepted (no `onread` of its own, no
   * `'data'` listener yet) a StaticReader: what it already decrypted and holds is taken
   * first, in order, then every later read lands in the reader's buffer. Undefined, with
   * the socket untouched, when this node:net offers no user buffer for it.
   */
  static adopt(socket: net.Socket): StaticReader | undefined {
    const k = userBufferKeys();
    const handle = (socket as unknown as { _handle?: { useUserBuffer?: (b: Uint8Array) => void } })._handle;
    if (k === null || typeof handle?.useUserBuffer !== 'function' || socket.listenerCount('data') > 0) {
      return undefined;
    }
    const slots = socket as unknown as Record<symbol, unknown>;
    if (slots[k.buffer] !== undefined && slots[k.buffer] !== null) return undefined;
    const reader = new StaticReader();
    // Bytes decrypted before now wait in the socket's readable buffer.
    for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) {
      reader.early.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length));
    }
    slots[k.buffer] = reader.buffer;
    slots[k.callback] = reader.onread.callback;
    handle.useUserBuffer(reader.buffer);
    return reader;
  }

  /** From now on, reads go to `sink` (the bytes held so far first, as their own copies). */
  attach(sink: (bytes: Uint8Array, transient: boolean) => void): void {
    for (const b of this.early) sink(b, false);
    this.early = [];
    this.sink = (bytes) => sink(bytes, true);
  }
}
