/**
 * The one error class of plexus. Every refusal carries a stable `code`
 * (`PLX_<AREA>_<REASON>`, or the SPERLI `H16xx` codes) and a message that says what
 * was wrong and what to do. Match on `err.code`, never on the message.
 * docs/errors.md lists every code; `PlexusCode` (ts/core/codes-catalogue.ts) is
 * generated from it.
 */
import { type DeclaredDetails, PLX_CODES, type PlexusCode, SPERLI_H_CODES } from './codes-catalogue.js';

export type { DeclaredDetails, PlexusCode } from './codes-catalogue.js';
export { PLEXUS_CODE_ALIASES, PLX_CODES, SPERLI_H_CODES } from './codes-catalogue.js';

const CODES: ReadonlySet<string> = new Set<string>([...PLX_CODES, ...SPERLI_H_CODES]);

/**
 * The details a code always carries, by code: generated from docs/errors.md ("Details of each
 * code") into `DeclaredDetails`. A code not listed there has free-form details.
 */
export interface PlexusDetailsMap extends DeclaredDetails {}

/** The details type of a code: its entry in `PlexusDetailsMap`, or a free-form record. */
export type PlexusDetails<C extends PlexusCode = PlexusCode> = C extends keyof PlexusDetailsMap
  ? PlexusDetailsMap[C] & Readonly<Record<string, unknown>>
  : Readonly<Record<string, unknown>>;

/**
 * The brand every PlexusError carries. `Symbol.for` gives the same symbol to every copy of
 * this module (two installed versions of plexus, a bundled and an imported copy), so a
 * PlexusError made by one copy is recognised by the other's `isPlexusError` and `instanceof`.
 */
const BRAND: unique symbol = Symbol.for('plexus.error') as never;

export class PlexusError<C extends PlexusCode = PlexusCode> extends Error {
  readonly code: C;
  readonly details: PlexusDetails<C>;

  constructor(code: C, message: string, details?: PlexusDetails<C>, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PlexusError';
    this.code = code;
    this.details = (details ?? {}) as PlexusDetails<C>;
  }
}
Object.defineProperty(PlexusError.prototype, BRAND, { value: true });
// `err instanceof PlexusError` holds for a PlexusError of any copy of this module; a
// subclass keeps the ordinary prototype check.
Object.defineProperty(PlexusError, Symbol.hasInstance, {
  value: function hasInstance(this: unknown, value: unknown): boolean {
    return this === PlexusError ? hasBrand(value) : Function.prototype[Symbol.hasInstance].call(this, value);
  },
});

function hasBrand(value: unknown): boolean {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    (value as { [BRAND]?: unknown })[BRAND] === true
  );
}

/** Whether `e` is a PlexusError (of any copy of plexus), and of `code` when given. */
export function isPlexusError<C extends PlexusCode>(e: unknown, code: C): e is PlexusError<C>;
export function isPlexusError(e: unknown, code?: string): e is PlexusError;
export function isPlexusError(e: unknown, code?: string): e is PlexusError {
  return hasBrand(e) && (code === undefined || (e as PlexusError).code === code);
}

/**
 * A code another plexus process sent (in a gRPC trailer, a wire answer, a store host's
 * reply), kept as sent so that the caller matches what the peer raised. A peer of a newer
 * version may send a code this build's catalogue does not list yet.
 */
export function codeFromPeer(code: string): PlexusCode {
  return code as PlexusCode;
}

/** The codes of the catalogue that begin with `P`, without it: `CodeSuffix<'PLX_KEYS_'>` is `'EXISTS' | ...`. */
export type CodeSuffix<P extends string> = PlexusCode extends infer C
  ? C extends `${P}${infer R}`
    ? R
    : never
  : never;

/** Whether a string is a code of the catalogue (for codes read from a peer or a file). */
export function isPlexusCode(code: unknown): code is PlexusCode {
  return typeof code === 'string' && CODES.has(code);
}
