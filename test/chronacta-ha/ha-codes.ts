/**
 * The replicated log's catch-up wire (ts/codec/catch-up.ts, refusing with the layer's
 * `catchUpRefusal`) and snapshot descriptor (ts/replication/) as Chronacta reports them: every
 * refusal under its Chronacta code (`PLX_CHRONACTA_HA_*`), through the same translation
 * Chronacta applies at its boundary (ts/chronacta/ha-errors.ts). The tests here were written
 * against those codes; the layer's own codes are in docs/errors.md.
 */
import { toHaError, withHaCodes } from '../../ts/chronacta/ha-errors.js';
import * as wire from '../../ts/codec/catch-up.js';
import { catchUpRefusal } from '../../ts/replication/errors.js';
import * as snap from '../../ts/replication/snapshot.js';

export {
  CATCH_UP_HEADER_BYTES,
  CATCH_UP_MAX_BODY,
  CATCH_UP_MAX_REQUEST_BODY,
  encodeFetch,
  encodeQuery,
  encodeRefused,
} from '../../ts/codec/catch-up.js';
export { encodeDescriptor, queryHolding } from '../../ts/replication/snapshot.js';

/** The encoders refuse with the layer's code, as they always did here. */
export const encodeRecords = (
  sourceFirst: bigint,
  sourceLast: bigint,
  records: readonly wire.CatchUpRecord[],
): Uint8Array => wire.encodeRecords(sourceFirst, sourceLast, records, catchUpRefusal);
export const encodeHolding = (first: bigint, last: bigint, durable: bigint): Uint8Array =>
  wire.encodeHolding(first, last, durable, catchUpRefusal);
export const decodeCatchUp = withHaCodes((bytes: Uint8Array) => wire.decodeCatchUp(bytes, catchUpRefusal));
export const decodeDescriptor: typeof snap.decodeDescriptor = withHaCodes(snap.decodeDescriptor);

export class CatchUpStream extends wire.CatchUpStream {
  constructor(maxBody?: number) {
    super(catchUpRefusal, maxBody);
  }

  override push(chunk: Uint8Array): wire.CatchUpFrame[] {
    try {
      return super.push(chunk);
    } catch (e) {
      throw toHaError(e);
    }
  }
}
