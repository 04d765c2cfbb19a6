/**
 * Refused hosts of SPERLI: the hosts that never run a rank. A launcher and a rank refuse a
 * host list entry that matches one of
 * - the reserved names `host-a.invalid` and `host-b.invalid` (built in, always refused),
 * - the names of the environment variable SPERLI_REFUSED_HOSTS (separated by commas, blanks
 *   or line ends),
 * - the names of the deny file (`--deny-hosts FILE`, one name a line, `#` comments).
 * A name refuses itself and every domain below it, in any letter case; a trailing dot is
 * ignored. A dotted IPv4 address refuses only itself.
 *
 * The caller passes the variable's value in (`process.env.SPERLI_REFUSED_HOSTS`); nothing here
 * reads the environment. docs/crypto.md describes the rules.
 */
import { readFileSync } from 'node:fs';
import { PlexusError } from '../core/errors.js';
import { isDottedIPv4 } from '../crypto/x509.js';

/** The environment variable that lists refused hosts. */
export const REFUSED_HOSTS_VARIABLE = 'SPERLI_REFUSED_HOSTS';
/** Names that are always refused; they name no machine. */
export const RESERVED_HOSTS: readonly string[] = Object.freeze(['host-a.invalid', 'host-b.invalid']);

/** Where a refused name comes from. */
export type RefusalSource = 'reserved' | 'environment' | 'deny-file';

/** Why a host is refused: the listed name it matches and where that name comes from. */
export interface Refusal {
  /** The listed name, normalized (lower case, no trailing dot). */
  name: string;
  source: RefusalSource;
  /** The deny file, when `source` is `deny-file`. */
  file?: string;
}

export interface RefusedHostsOptions {
  /** The value of SPERLI_REFUSED_HOSTS; unset refuses only the reserved names (and the file's). */
  env?: string | undefined;
  /** The deny file; a missing or empty file adds no names. */
  denyFile?: string | undefined;
}

/** A matcher over the refused names. */
export interface RefusedHosts {
  /** Every refused name and its source, the reserved names first. */
  readonly names: readonly Refusal[];
  /** Why `host` is refused, or undefined when it is allowed. */
  refusal(host: string): Refusal | undefined;
  /** Whether `host` is refused. */
  isRefused(host: string): boolean;
  /**
   * Throws H1610 (`details.reason: 'refused-host'`) when `host` is refused; `what` says which
   * entry is checked (for example `host of rank 3`).
   */
  assertAllowed(host: string, what: string): void;
}

/** Lower case (ASCII), surrounding blanks and trailing dots removed; `*.` or `.` in front dropped. */
function _normalize(name: string): string {
  let n = name.trim().replace(/[A-Z]/g, (c) => c.toLowerCase());
  while (n.endsWith('.')) n = n.slice(0, -1);
  if (n.startsWith('*.')) n = n.slice(2);
  while (n.startsWith('.')) n = n.slice(1);
  return n;
}

/** The names of a list: separated by commas, blanks or line ends. */
function _splitNames(text: string): string[] {
  return text
    .split(/[,\s]+/)
    .map(_normalize)
    .filter((n) => n.length > 0);
}

function _readDenyFile(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new PlexusError(
      'PLX_SPERLI_DENY_FILE',
      `the deny-hosts file ${path} cannot be read (${(e as Error).message}); fix its permissions or remove the option`,
      { file: path },
      { cause: e },
    );
  }
  const names: string[] = [];
  for (const line of text.split(/\r?\n|\r/)) {
    const hash = line.indexOf('#');
    names.push(..._splitNames(hash >= 0 ? line.slice(0, hash) : line));
  }
  return names;
}

function _describe(r: Refusal): string {
  if (r.source === 'reserved') return `the reserved name ${r.name}`;
  if (r.source === 'environment') return `${r.name} in ${REFUSED_HOSTS_VARIABLE}`;
  return `${r.name} in the deny-hosts file ${r.file}`;
}

/** Builds the matcher of refused hosts from the variable's value and the deny file. */
export function refusedHosts(opts: RefusedHostsOptions = {}): RefusedHosts {
  const byName = new Map<string, Refusal>();
  const add = (name: string, r: Refusal): void => {
    if (!byName.has(name)) byName.set(name, r);
  };
  for (const name of RESERVED_HOSTS) add(name, { name, source: 'reserved' });
  if (opts.env !== undefined) for (const name of _splitNames(opts.env)) add(name, { name, source: 'environment' });
  if (opts.denyFile !== undefined) {
    const file = opts.denyFile;
    for (const name of _readDenyFile(file)) add(name, { name, source: 'deny-file', file });
  }
  const names = Object.freeze([...byName.values()]);

  const refusal = (host: string): Refusal | undefined => {
    const h = _normalize(String(host));
    if (h.length === 0) return undefined;
    if (isDottedIPv4(h)) return byName.get(h);
    // The host itself, then each domain above it: a.b.example.com, b.example.com, example.com, com.
    let suffix = h;
    for (;;) {
      const r = byName.get(suffix);
      if (r) return r;
      const dot = suffix.indexOf('.');
      if (dot < 0) return undefined;
      suffix = suffix.slice(dot + 1);
    }
  };

  return {
    names,
    refusal,
    isRefused: (host) => refusal(host) !== undefined,
    assertAllowed(host, what) {
      const r = refusal(host);
      if (!r) return;
      throw new PlexusError(
        'H1610',
        `${what} ${host} is a refused host: it matches ${_describe(r)}; take it out of the host list`,
        { reason: 'refused-host', host, what, name: r.name, source: r.source, ...(r.file ? { file: r.file } : {}) },
      );
    },
  };
}

/** Whether a host names this machine (loopback addresses each count as a distinct host). */
export function isLocalHost(name: string): boolean {
  return name === 'localhost' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name);
}
