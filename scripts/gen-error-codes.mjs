// Writes ts/core/codes-catalogue.ts, the `PlexusCode` union, from the error catalogue in the docs:
// every code in the first column of a table of docs/errors.md, and the SPERLI H-codes of the
// "Error codes (H-codes)" table of docs/sperli.md. A row whose second column begins with
// "alias of `CODE`" declares its first-column code an alias of CODE (a code kept for clients
// after a rename); aliases are in the union too. The section "Details of each code" of
// docs/errors.md declares, one row per code, the fields a code's details carry
// (`name: type`, `name?: type`); it gives `DECLARED_DETAILS`, the details type per code.
//   node scripts/gen-error-codes.mjs           rewrite ts/core/codes-catalogue.ts
//   node scripts/gen-error-codes.mjs --check   exit 1 if the file is not what the docs give
//   --root DIR                                 read and write under DIR instead of this checkout
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const OUT = 'ts/core/codes-catalogue.ts';
export const COMMAND = 'node scripts/gen-error-codes.mjs';
const CODE = /^(PLX_[A-Z0-9]+(?:_[A-Z0-9]+)+|H\d{4})$/;
/** The heading of the section of docs/errors.md that declares details. */
export const DETAILS_HEADING = 'Details of each code';
/**
 * One declared field: a name, `?` when it may be absent, and a primitive type or a union of
 * them written with `or` (a `|` would split the table cell).
 */
const FIELD =
  /^([A-Za-z_][A-Za-z0-9_]*)(\?)?: ((?:string|number|bigint|boolean|null)(?: or (?:string|number|bigint|boolean|null))*)$/;

/** The table rows of a markdown text, each as its list of trimmed cells. */
function rows(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t.startsWith('|') || /^\|\s*:?-{3,}/.test(t)) continue;
    out.push(
      t
        .slice(1, t.endsWith('|') ? -1 : undefined)
        .split('|')
        .map((c) => c.trim()),
    );
  }
  return out;
}

/** The backticked codes of one cell, in order. */
function codesIn(cell) {
  return [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]).filter((c) => CODE.test(c));
}

/** docs/errors.md without its details section, and that section. */
function splitDetails(errors) {
  const parts = errors.split(/^(?=## )/m);
  const isDetails = (p) => p.startsWith(`## ${DETAILS_HEADING}`);
  return { catalogue: parts.filter((p) => !isDetails(p)).join(''), details: parts.find(isDetails) ?? '' };
}

/**
 * The declared details of the section "Details of each code": [code, fields] with fields as
 * [name, optional, type], in the docs' order; malformed rows go to `problems`.
 */
export function readDetails(section, problems = []) {
  const out = [];
  for (const [first = '', second = ''] of rows(section)) {
    if (first === 'code') continue;
    const code = first.replace(/`/g, '');
    if (!CODE.test(code)) {
      problems.push(`"${first}" in "${DETAILS_HEADING}" is not a code`);
      continue;
    }
    const fields = [];
    for (const [, decl] of second.matchAll(/`([^`]+)`/g)) {
      const m = FIELD.exec(decl);
      if (!m) problems.push(`${code}: "${decl}" is not a field declaration (name: type, name?: type)`);
      else fields.push([m[1], m[2] === '?', m[3].split(' or ').join(' | ')]);
    }
    if (fields.length === 0) problems.push(`${code}: "${DETAILS_HEADING}" declares no field`);
    out.push([code, fields]);
  }
  return out;
}

/** The codes, SPERLI H-codes, aliases and declared details the docs list. */
export function readCatalogue(root = ROOT) {
  const text = readFileSync(join(root, 'docs/errors.md'), 'utf8');
  const { catalogue: errors, details: detailsSection } = splitDetails(text);
  const sperli = readFileSync(join(root, 'docs/sperli.md'), 'utf8');
  const codes = new Set();
  const aliases = new Map();
  for (const [first = '', second = ''] of rows(errors)) {
    const found = codesIn(first).filter((c) => c.startsWith('PLX_'));
    for (const c of found) codes.add(c);
    const alias = /^alias of `([^`]+)`/.exec(second);
    if (alias && found.length === 1) aliases.set(found[0], alias[1]);
  }
  const hSection = sperli.split(/^#+ /m).find((s) => s.startsWith('Error codes (H-codes)')) ?? '';
  const hCodes = new Set();
  for (const [first = ''] of rows(hSection)) {
    const c = first.replace(/`/g, '');
    if (/^H\d{4}$/.test(c)) hCodes.add(c);
  }
  const problems = [];
  for (const [alias, target] of aliases) {
    if (!codes.has(target)) problems.push(`${alias} is an alias of ${target}, which docs/errors.md does not list`);
  }
  if (hCodes.size === 0) problems.push('docs/sperli.md has no "Error codes (H-codes)" table');
  const details = readDetails(detailsSection, problems);
  const declared = new Set();
  for (const [code] of details) {
    if (declared.has(code)) problems.push(`${code} is declared twice in "${DETAILS_HEADING}"`);
    declared.add(code);
    if (!codes.has(code) && !hCodes.has(code)) problems.push(`${code} has declared details but is not a listed code`);
  }
  return {
    codes: [...codes].sort(),
    hCodes: [...hCodes].sort(),
    aliases: [...aliases].sort(([a], [b]) => (a < b ? -1 : 1)),
    details: [...details].sort(([a], [b]) => (a < b ? -1 : 1)),
    problems,
  };
}

/** The TypeScript type of one code's declared fields. */
export function detailsType(fields) {
  return `{ ${fields.map(([name, optional, type]) => `readonly ${name}${optional ? '?' : ''}: ${type}`).join('; ')} }`;
}

/** The text of ts/core/codes-catalogue.ts for a catalogue. */
export function render({ codes, hCodes, aliases, details = [] }) {
  const list = (xs) => xs.map((c) => `  '${c}',`).join('\n');
  return `// Generated by ${COMMAND} from docs/errors.md and docs/sperli.md; do not edit by hand.
/**
 * Every error code plexus raises (docs/errors.md). A code is added by adding a row to a table
 * of docs/errors.md (a SPERLI H-code: to the H-code table of docs/sperli.md) and running
 * \`${COMMAND}\`; test/core/codes-catalogue.test.ts fails while the two disagree.
 */

/** The \`PLX_<AREA>_<REASON>\` codes, aliases included. */
export const PLX_CODES = [
${list(codes)}
] as const;

/** The SPERLI protocol's own codes (docs/sperli.md, "Error codes (H-codes)"). */
export const SPERLI_H_CODES = [
${list(hCodes)}
] as const;

/** Codes kept for clients after a rename, each with the code that replaced it. */
export const PLEXUS_CODE_ALIASES = ${aliases.length === 0 ? '{}' : `{\n${aliases.map(([a, t]) => `  ${a}: '${t}',`).join('\n')}\n}`} as const satisfies Readonly<Record<string, (typeof PLX_CODES)[number]>>;

export type PlxCode = (typeof PLX_CODES)[number];
export type SperliHCode = (typeof SPERLI_H_CODES)[number];
/** Every code of the catalogue: a \`PlexusError\`'s \`code\` is one of these. */
export type PlexusCode = PlxCode | SperliHCode;

/**
 * The fields each code's details carry (docs/errors.md, "${DETAILS_HEADING}"): given details
 * of a code listed here must have these fields with these types; others may be added.
 */
export interface DeclaredDetails {
${details.map(([code, fields]) => `  ${code}: ${detailsType(fields)};`).join('\n')}
}
`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const at = process.argv.indexOf('--root');
  const root = at === -1 ? ROOT : process.argv[at + 1];
  if (root === undefined) {
    console.error('gen-error-codes: --root takes a directory');
    process.exit(2);
  }
  const cat = readCatalogue(root);
  if (cat.problems.length > 0) {
    for (const p of cat.problems) console.error(`gen-error-codes: ${p}`);
    process.exit(1);
  }
  const text = render(cat);
  const path = join(root, OUT);
  if (process.argv.includes('--check')) {
    let now = '';
    try {
      now = readFileSync(path, 'utf8');
    } catch {}
    if (now !== text) {
      console.error(`${OUT} is not what docs/errors.md gives: run ${COMMAND}`);
      process.exit(1);
    }
  } else {
    writeFileSync(path, text);
    console.log(
      `${OUT}: ${cat.codes.length} codes, ${cat.hCodes.length} H-codes, ${cat.aliases.length} aliases, ${cat.details.length} with declared details`,
    );
  }
}
