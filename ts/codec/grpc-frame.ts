/**
 * The gRPC message framing of gRPC over HTTP/2 (the gRPC protocol's "Length-Prefixed-Message"):
 * a 5-byte prefix, one byte compressed flag (0: not compressed) and the message length as a
 * big-endian u32, then the message. Big-endian because gRPC defines it so; every plexus format
 * of its own is little-endian.
 *
 * `grpcFrame` and `putGrpcPrefix` write it; `grpcMessageFormat` is its header for the shared
 * `FrameAssembler` (frames.ts), so a message arriving in chunks is assembled length first: the
 * flag and length are judged from the prefix alone, before any message byte is held. plexus
 * never compresses: a set flag is refused, with the refusal the caller names (the Chronacta
 * server answers UNIMPLEMENTED with `grpc-accept-encoding: identity`).
 */
import type { FrameFormat } from './frames.js';

/** Bytes of the gRPC message prefix. */
export const GRPC_HEADER_BYTES = 5;

/** Writes the prefix of an uncompressed message of `length` bytes at `out[pos..pos + 5)`. */
export function putGrpcPrefix(out: Uint8Array, pos: number, length: number): void {
  out[pos] = 0;
  out[pos + 1] = length >>> 24;
  out[pos + 2] = (length >>> 16) & 0xff;
  out[pos + 3] = (length >>> 8) & 0xff;
  out[pos + 4] = length & 0xff;
}

/** A buffer for a message of `length` bytes with its prefix written (the message goes from offset 5). */
export function grpcFrameOf(length: number): Buffer {
  const out = Buffer.allocUnsafe(GRPC_HEADER_BYTES + length);
  putGrpcPrefix(out, 0, length);
  return out;
}

/** A message with its 5-byte gRPC prefix (not compressed). */
export function grpcFrame(message: Uint8Array): Buffer {
  const out = grpcFrameOf(message.length);
  out.set(message, GRPC_HEADER_BYTES);
  return out;
}

/** The message length of the prefix at `b[pos..pos + 5)` (the flag is not looked at). */
export function grpcMessageLength(b: Uint8Array, pos = 0): number {
  return (
    (b[pos + 1] as number) * 0x100_0000 +
    (((b[pos + 2] as number) << 16) | ((b[pos + 3] as number) << 8) | (b[pos + 4] as number))
  );
}

/** How a reader of gRPC messages refuses what it does not take. */
export interface GrpcRefusals {
  /** A message with the compressed flag set (any flag byte but 0). */
  compressed(flag: number): Error;
  /** A message of `length` bytes, above `max`. */
  tooLarge(length: number, max: number): Error;
}

/**
 * The gRPC prefix as a `FrameFormat`: a frame is the prefix and its message, at most
 * `maxMessageBytes` of message. Assembled frames include the prefix; the message is
 * `frame.subarray(GRPC_HEADER_BYTES)`.
 */
export function grpcMessageFormat(maxMessageBytes: number, refusals: GrpcRefusals): FrameFormat {
  return {
    headerBytes: GRPC_HEADER_BYTES,
    maxFrame: GRPC_HEADER_BYTES + maxMessageBytes,
    frameLength(header: Uint8Array): number {
      const flag = header[0] as number;
      if (flag !== 0) throw refusals.compressed(flag);
      return GRPC_HEADER_BYTES + grpcMessageLength(header);
    },
    tooLarge: (length, max) => refusals.tooLarge(length - GRPC_HEADER_BYTES, max - GRPC_HEADER_BYTES),
  };
}
