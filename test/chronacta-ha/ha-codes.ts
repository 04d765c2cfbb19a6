/**
 * The replicated log's catch-up wire and snapshot descriptor (ts/replication/) as Chronacta
 * reports them: every refusal under its Chronacta code (`PLX_CHRONACTA_HA_*`), through the
 * same translation Chronacta applies at its boundary (ts/chronacta/ha-errors.ts). The tests
 * here were written against those codes; the layer's own codes are in docs/errors.md.
 */
import { toHaError, withHaCodes } from '../../ts/chronacta/ha-errors.js';
import * as wire from '../../ts/replication/catch-up-wire.js';
import * as snap from '../../ts/replication/snapshot.js';

export {
  CATCH_UP_HEADER_BYTES,
  CATCH_UP_MAX_BODY,
  CATCH_UP_MAX_REQUEST_BODY,
  encodeFetch,
  encodeHolding,
  encodeQuery,
  encodeRecords,
  encodeRefused,
} from '../../ts/replication/catch-up-wire.js';
export { encodeDescriptor, queryHolding } from '../../ts/replication/snapshot.js';

export const decodeCatchUp: typeof wire.decodeCatchUp = withHaCodes(wire.decodeCatchUp);
export const decodeDescriptor: typeof snap.decodeDescriptor = withHaCodes(snap.decodeDescriptor);

export class CatchUpStream extends wire.CatchUpStream {
  override push(chunk: Uint8Array): wire.CatchUpFrame[] {
    try {
      return super.push(chunk);
    } catch (e) {
      throw toHaError(e);
    }
  }
}
