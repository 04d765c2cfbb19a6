/**
 * The decoders of the Raft and catch-up connections refuse a frame from its header when it
 * announces more than the reader takes, before any of its body is held (the member's bound on
 * memory per connection; docs/raft-wire.md).
 */
import { describe, expect, it } from 'vitest';
import { encodeRaftMessage, RAFT_HEADER_BYTES, RaftMessageStream } from '../../ts/codec/raft-wire.js';
import {
  CATCH_UP_HEADER_BYTES,
  CATCH_UP_MAX_REQUEST_BODY,
  CatchUpStream,
  encodeFetch,
  encodeRecords,
} from './ha-codes.js';

describe('bounded decoders', () => {
  it('a Raft stream refuses a header announcing more than its maximum body', () => {
    const m = encodeRaftMessage({
      type: 'MsgApp',
      from: 1,
      to: 2,
      term: 1,
      logTerm: 0,
      index: 0,
      commit: 0,
      reject: false,
      rejectHint: 0,
      entries: [{ index: 1, term: 1, type: 'normal', data: new Uint8Array(4096) }],
    });
    expect(new RaftMessageStream(8192).push(m)).toHaveLength(1);
    const small = new RaftMessageStream(1024);
    // Only the header: refused before the body arrives.
    expect(() => small.push(m.subarray(0, RAFT_HEADER_BYTES))).toThrow(
      expect.objectContaining({ code: 'PLX_RAFT_WIRE_BAD_MESSAGE' }),
    );
  });

  it('a catch-up source takes requests of a few bytes only', () => {
    const reader = new CatchUpStream(CATCH_UP_MAX_REQUEST_BODY);
    expect(reader.push(encodeFetch(1, 10, 1024))).toHaveLength(1);
    const records = encodeRecords(1n, 1n, [
      { position: 1n, epoch: 1n, batchId: new Uint8Array(16), payload: new Uint8Array(1000) },
    ]);
    expect(() => reader.push(records.subarray(0, CATCH_UP_HEADER_BYTES))).toThrow(
      expect.objectContaining({ code: 'PLX_CHRONACTA_HA_BAD_FRAME' }),
    );
    expect(new CatchUpStream().push(records)).toHaveLength(1);
  });
});
