/**
 * The one error class of plexus. Every refusal carries a stable `code`
 * (`PLX_<AREA>_<REASON>`, or the SPERLI `H16xx` codes) and a message that says what
 * was wrong and what to do. Match on `err.code`, never on the message.
 * docs/errors.md lists every code.
 */
export class PlexusError extends Error {
  readonly code: string;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: string, message: string, details: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PlexusError';
    this.code = code;
    this.details = details;
  }
}

export function isPlexusError(e: unknown, code?: string): e is PlexusError {
  return e instanceof PlexusError && (code === undefined || e.code === code);
}
