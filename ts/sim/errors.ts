/** Refusals of the simulator and its checkers; docs/errors.md lists them. */
import { type PlexusCode, PlexusError } from '../core/errors.js';

export const SimErrorCode = {
  /** Bad simulator options (rates outside [0, 1], delays, node ids). */
  BAD_CONFIG: 'PLX_SIM_BAD_CONFIG',
  /** A malformed history: a return without its invoke, a second return, times going backwards. */
  BAD_HISTORY: 'PLX_SIM_BAD_HISTORY',
  /** A run broke a checked property; the message names the seed to replay. */
  VIOLATION: 'PLX_SIM_VIOLATION',
} as const;

export function simError(code: PlexusCode, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(code, message, details);
}
