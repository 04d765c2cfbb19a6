/**
 * Names: the one rule for the identifiers plexus puts in DNS-shaped places (cluster ids, node
 * ids, certificate names): a DNS label of lower-case letters, digits and hyphens, 1 to 63
 * characters, neither starting nor ending with a hyphen.
 */

/** A DNS label (lower-case letters, digits, hyphens; 1 to 63; no hyphen at either end). */
export const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Whether `s` is a DNS label (`DNS_LABEL`). */
export function isDnsLabel(s: unknown): s is string {
  return typeof s === 'string' && DNS_LABEL.test(s);
}
