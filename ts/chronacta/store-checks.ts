/**
 * The checks a change passes against the stream heads the store will have once every
 * accepted change is durable: expected versions, tombstones, and idempotency keys reused
 * for other events.
 */
import type { PlexusError } from '../core/errors.js';
import { ChronactaCode, chronactaError } from './errors.js';
import type { StreamHead } from './state.js';
import type { ExpectedVersion } from './types.js';

function describeExpected(v: ExpectedVersion): string {
  return typeof v === 'bigint' ? `version ${v}` : v;
}

/** Whether a stream at `head` meets `expected` (a hard-deleted stream is refused before this). */
export function meetsExpectation(head: StreamHead, expected: ExpectedVersion): boolean {
  switch (expected) {
    case 'any':
      return true;
    case 'no_stream':
      return head.lastVersion < 0 || head.deleted === 'soft';
    case 'exists':
      return head.lastVersion >= 0 && head.deleted === 'none';
    default:
      return BigInt(head.lastVersion) === expected;
  }
}

/** Refuses a change to `stream` at `head` that does not meet `expected` (or a tombstoned stream). */
export function checkExpected(stream: string, head: StreamHead, expected: ExpectedVersion): void {
  if (head.deleted === 'hard') {
    throw chronactaError(
      ChronactaCode.STREAM_DELETED,
      `stream "${stream}" was deleted hard (tombstoned); it takes no more events`,
      { stream },
    );
  }
  if (meetsExpectation(head, expected)) return;
  const actual =
    head.lastVersion < 0
      ? 'the stream does not exist'
      : head.deleted === 'soft'
        ? `the stream is deleted (its last version was ${head.lastVersion})`
        : `its last version is ${head.lastVersion}`;
  throw chronactaError(
    ChronactaCode.WRONG_EXPECTED_VERSION,
    `stream "${stream}": expected ${describeExpected(expected)}, but ${actual}; read the stream and retry`,
    {
      stream,
      expected: typeof expected === 'bigint' ? expected : expected,
      actual: BigInt(head.lastVersion),
      deleted: head.deleted,
    },
  );
}

export function idempotencyConflict(key: string, stream: string): PlexusError {
  return chronactaError(
    ChronactaCode.IDEMPOTENCY_CONFLICT,
    `idempotency key "${key}" was used for a different append (stream "${stream}" or other events); use a new key for a new append`,
    { key, stream },
  );
}
