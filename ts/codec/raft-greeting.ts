/**
 * The greeting that opens every connection of the Raft TCP/TLS transport (docs/raft.md,
 * "Transport"; docs/formats.md), 24 bytes, integers little endian:
 *
 *   0 u32 magic: "PXRH" (Raft messages follow) or "PXRS" (a side stream: the bytes that follow
 *     belong to the stream's owner, such as the replicated log's catch-up stream)
 *   4 u32 version (1) | 8 u64 sender node id | 16 u64 the node id dialled
 *
 * The transport judges the ids (the one dialled, the one its peer's certificate names).
 */
import { ByteReader, ByteWriter } from './bytes.js';

export const RAFT_GREETING_BYTES = 24;
export const RAFT_GREETING_VERSION = 1;
/** "PXRH" little endian: a connection of Raft messages. */
export const RAFT_GREETING_MAGIC = 0x48525850;
/** "PXRS" little endian: a side stream. */
export const RAFT_STREAM_MAGIC = 0x53525850;

export type RaftGreetingKind = 'messages' | 'stream';

export interface RaftGreeting {
  readonly kind: RaftGreetingKind;
  /** The sender's node id as sent (any u64: the transport judges it). */
  readonly from: bigint;
  /** The node id dialled. */
  readonly to: number;
}

export function encodeRaftGreeting(from: number, to: number, kind: RaftGreetingKind = 'messages'): Uint8Array {
  return new ByteWriter(new Uint8Array(RAFT_GREETING_BYTES))
    .u32(kind === 'stream' ? RAFT_STREAM_MAGIC : RAFT_GREETING_MAGIC)
    .u32(RAFT_GREETING_VERSION)
    .u64n(BigInt(from))
    .u64n(BigInt(to))
    .finish();
}

/**
 * The greeting in the first RAFT_GREETING_BYTES of `bytes` (at least that many), or
 * `undefined` when they are not one (another magic or version).
 */
export function decodeRaftGreeting(bytes: Uint8Array): RaftGreeting | undefined {
  const r = new ByteReader(bytes.subarray(0, RAFT_GREETING_BYTES));
  const magic = r.u32('magic');
  const version = r.u32('version');
  if ((magic !== RAFT_GREETING_MAGIC && magic !== RAFT_STREAM_MAGIC) || version !== RAFT_GREETING_VERSION) {
    return undefined;
  }
  const from = r.u64n('sender');
  const to = Number(r.u64n('dialled'));
  return { kind: magic === RAFT_STREAM_MAGIC ? 'stream' : 'messages', from, to };
}
