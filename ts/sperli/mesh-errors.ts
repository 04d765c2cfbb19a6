/**
 * The refusals and failures of a rank's transport (the TLS mesh and the in-memory
 * transport alike), and the checks of what a caller may send.
 *
 * - H1610 (docs/sperli.md): a refused frame or HELLO (from the codecs), and two refusals
 *   of a connection: `tls-handshake` (the TLS 1.3 handshake with a peer failed) and
 *   `peer-certificate` (the peer's certificate does not name this job, the expected
 *   rank, or the dialled host; `details.rule` says which).
 * - H1612: the job ended because of another rank: `lost-peer` (heartbeat silence, a
 *   close without BYE, or a peer that never connected; `details.peer`, `details.cause`)
 *   or `abort` (an ABORT arrived; `details.abortReason`, `abortCode`, `rank`, `text`).
 * - PLX_SPERLI_BAD_ARGUMENT: a send, abort or option the caller got wrong.
 * - PLX_SPERLI_CLOSED: a send after `close()`, or to a peer that left with BYE.
 * - PLX_SPERLI_LISTEN: the rank cannot listen on its host list entry.
 */

import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import { carriesEpoch, FrameType, frameTypeName, MAX_USER_TAG, payloadBounds } from '../codec/sperli-frame.js';
import { type Abort, AbortReason, MAX_ABORT_TEXT } from '../codec/sperli-payloads.js';
import { PlexusError } from '../core/errors.js';

/** Why a connection was taken as lost. */
export type LostCause = 'silence' | 'close' | 'connect' | 'left';

const CAUSE_TEXT: Record<LostCause, string> = {
  silence: 'sent no frame within the silence limit',
  close: 'closed its connection without BYE',
  connect: 'did not connect in time',
  left: 'has left the job (BYE)',
};

/**
 * H1612 `lost-peer`: `peer` is lost, and the job with it. Cause `left`: the peer said BYE
 * while this rank still needs a frame from it (`waiting` says which call, `rank` is this
 * rank), or a collective would send to it.
 */
export function lostPeerError(
  peer: number,
  cause: LostCause,
  silenceMs?: number,
  error?: unknown,
  left?: { readonly rank: number; readonly waiting: string },
): PlexusError {
  const hint =
    cause === 'silence'
      ? ` (${silenceMs ?? '?'} ms); it is lost and the job stops (a program that computes longer than the limit raises the silence setting)`
      : cause === 'left' && left !== undefined
        ? ` while rank ${left.rank} still needs it (${left.waiting}), which can never complete; the job stops`
        : '; it is lost and the job stops';
  return sperliError(
    SperliCode.aborted,
    'lost-peer',
    `rank ${peer} ${CAUSE_TEXT[cause]}${hint}`,
    { peer, cause },
    error,
  );
}

/** H1612 `abort`: `peer` sent an ABORT. */
export function abortReceivedError(peer: number, a: Abort): PlexusError {
  const code = a.code === 0 ? 'no code' : `H${a.code}`;
  return sperliError(
    SperliCode.aborted,
    'abort',
    `rank ${peer} aborted the job (reason ${a.reason}, ${code}, first stopped at rank ${a.rank})${a.text === '' ? '' : `: ${a.text}`}`,
    { peer, abortReason: a.reason, abortCode: a.code, rank: a.rank, text: a.text },
  );
}

/** PLX_SPERLI_CLOSED: the transport was closed, or `peer` left with BYE. */
export function closedError(peer?: number): PlexusError {
  if (peer === undefined) {
    return new PlexusError('PLX_SPERLI_CLOSED', 'the transport is closed; nothing more can be sent', {});
  }
  return new PlexusError(
    'PLX_SPERLI_CLOSED',
    `rank ${peer} has left the job normally (BYE); nothing more can be sent to it`,
    { peer },
  );
}

/** PLX_SPERLI_BAD_ARGUMENT with `details.reason` naming the argument. */
export function badArgument(reason: string, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_SPERLI_BAD_ARGUMENT', message, { ...details, reason });
}

/** The frame types a caller sends through a transport: DATA, COLLECTIVE and the checkpoint types. */
export function isUserFrameType(type: number): boolean {
  return type === FrameType.DATA || type === FrameType.COLLECTIVE || carriesEpoch(type);
}

/**
 * Checks what a caller sends, so that nothing leaves that the peer would refuse:
 * `peer` another rank of the job, a DATA, COLLECTIVE or checkpoint type, a DATA tag of
 * 0..2^31-1 (0 for every other type), an epoch only on the checkpoint types, a payload
 * within the bounds of its type (at most 16 MiB; a COLLECTIVE at least its 16-byte
 * header). Throws PLX_SPERLI_BAD_ARGUMENT.
 */
export function checkSend(
  rank: number,
  size: number,
  peer: unknown,
  type: unknown,
  tag: unknown,
  payload: unknown,
  epoch: unknown,
  prefix?: unknown,
): void {
  if (typeof peer !== 'number' || !Number.isInteger(peer) || peer < 0 || peer >= size || peer === rank) {
    throw badArgument('peer', `peer ${String(peer)} is not another rank of this job (0..${size - 1}, not ${rank})`, {
      peer: typeof peer === 'number' ? peer : null,
    });
  }
  if (typeof type !== 'number' || !isUserFrameType(type)) {
    throw badArgument(
      'type',
      `frame type ${String(type)} is not sent by a caller: only DATA (2), COLLECTIVE (3) and the checkpoint types (6..10); HELLO, HEARTBEAT, ABORT and BYE are the transport's own`,
      { type: typeof type === 'number' ? type : null },
    );
  }
  const name = frameTypeName(type);
  if (typeof tag !== 'number' || !Number.isInteger(tag) || tag < 0) {
    throw badArgument('tag', `tag ${String(tag)} is not an integer of 0 or more`, { tag: null });
  }
  if (type === FrameType.DATA && tag > MAX_USER_TAG) {
    throw badArgument('tag', `DATA tag ${tag} is reserved; user tags are 0..${MAX_USER_TAG}`, { tag });
  }
  if (type !== FrameType.DATA && tag !== 0) {
    throw badArgument('tag', `a ${name} frame carries tag 0, not ${tag}; only DATA frames have a tag`, { tag });
  }
  if (typeof epoch !== 'bigint' || epoch < 0n || epoch > 0xffff_ffff_ffff_ffffn) {
    throw badArgument('epoch', `epoch ${String(epoch)} is not a bigint from 0 to 2^64 - 1`, {});
  }
  if (!carriesEpoch(type) && epoch !== 0n) {
    throw badArgument('epoch', `a ${name} frame carries epoch 0, not ${epoch}; only the checkpoint types carry one`, {
      epoch,
    });
  }
  if (!(payload instanceof Uint8Array)) throw badArgument('payload', 'the payload must be a Uint8Array', {});
  if (prefix !== undefined && !(prefix instanceof Uint8Array)) {
    throw badArgument('payload', 'the payload prefix must be a Uint8Array', {});
  }
  const length = payload.length + ((prefix as Uint8Array | undefined)?.length ?? 0);
  const b = payloadBounds(type);
  if (b !== undefined && (length < b.min || length > b.max)) {
    throw badArgument(
      'payload',
      `a ${name} payload of ${length} bytes is outside ${b.min}..${b.max}; a larger message is split into frames`,
      { length, min: b.min, max: b.max },
    );
  }
}

/** Checks the arguments of `abort(reason, error)`. */
export function checkAbort(reason: unknown, error: unknown): void {
  if (typeof reason !== 'number' || !Number.isInteger(reason) || reason < 1 || reason > 5) {
    throw badArgument('abort-reason', `ABORT reason ${String(reason)} is not one of 1..5`, {});
  }
  if (!(error instanceof PlexusError)) {
    throw badArgument('abort-error', 'abort() takes the PlexusError that ends the job', {});
  }
}

/** The number of an H-code (1617 for H1617), or 0 for any other code. */
export function hCodeNumber(code: string): number {
  const m = /^H(\d{4})$/.exec(code);
  return m ? Number(m[1]) : 0;
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8');

/** `text` cut to at most 1024 bytes of UTF-8, at a character boundary. */
export function abortText(text: string): string {
  const b = utf8.encode(text);
  if (b.length <= MAX_ABORT_TEXT) return text;
  let end = MAX_ABORT_TEXT;
  while (end > 0 && ((b[end] as number) & 0xc0) === 0x80) end--;
  return utf8Decoder.decode(b.subarray(0, end));
}

/** The ABORT a rank sends for a failure of its own. */
export function abortFor(reason: number, error: PlexusError, firstRank: number): Abort {
  return { reason, code: hCodeNumber(error.code), rank: firstRank, text: abortText(error.message) };
}

export { AbortReason };
