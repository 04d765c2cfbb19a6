/**
 * The error codes of the runtime (PLX_RUNTIME_*) and of the actor journal (PLX_JOURNAL_*).
 * Every refusal is a PlexusError; match on `err.code` (docs/errors.md, docs/runtime.md).
 */
import { type PlexusCode, PlexusError } from '../core/errors.js';

export const RuntimeCode = {
  /** A call with an argument of the wrong type or shape. */
  badInput: 'PLX_RUNTIME_BAD_INPUT',
  /** The target actor's mailbox holds `mailboxBound` messages (with `whenFull: 'refuse'`). */
  mailboxFull: 'PLX_RUNTIME_MAILBOX_FULL',
  /** No chart is registered for the actor's IRI. */
  noChart: 'PLX_RUNTIME_NO_CHART',
  /** No Event I/O Processor for a send's type (or for remote actors). */
  noProcessor: 'PLX_RUNTIME_NO_PROCESSOR',
  /** A chart's transition threw or returned something that is not a step. */
  chartFailed: 'PLX_RUNTIME_CHART_FAILED',
  /** The actor's journal refused or failed an append; the actor was deactivated. */
  journalFailed: 'PLX_RUNTIME_JOURNAL_FAILED',
  /** The node is stopping or stopped. */
  stopped: 'PLX_RUNTIME_STOPPED',
  /** `node.ask` got no reply in time. */
  timeout: 'PLX_RUNTIME_TIMEOUT',
} as const;

export const JournalStoreCode = {
  /** Compare-and-set on the actor's position failed. */
  conflict: 'PLX_JOURNAL_CONFLICT',
  /** The append's fencing epoch is below the shard's highest accepted epoch. */
  fenced: 'PLX_JOURNAL_FENCED',
  /** The data directory was made with another shard count or hash, or is not a journal. */
  layout: 'PLX_JOURNAL_LAYOUT',
  /** A call after `close()`. */
  closed: 'PLX_JOURNAL_CLOSED',
  /** A record in a shard cannot be read back (details: shard, position, cause). */
  corrupt: 'PLX_JOURNAL_CORRUPT',
} as const;

export function runtimeError(
  code: PlexusCode,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}
