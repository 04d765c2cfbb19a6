/**
 * The sources keep to the error catalogue (docs/errors.md):
 * - every `PLX_*` or H-code written as a string literal anywhere in ts/ is a code of the
 *   catalogue (a template such as `PLX_MEDIATOR_${reason}` must begin at least one code);
 * - the code that handles peers' bytes throws no plain `Error` (nor rejects or destroys with
 *   one): a peer's protocol violation, a connection lost under a read, is a coded refusal.
 * Directories are chosen by glob, not by file list, so files that move between them stay checked.
 * And the details declared per code in docs/errors.md ("Details of each code") are what the
 * generated `DeclaredDetails` says, and what `new PlexusError` checks.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isPlexusError, PLX_CODES, type PlexusDetails, PlexusError, SPERLI_H_CODES } from '../../ts/core/errors.js';
import { ROOT } from '../helpers/paths.js';

/** The directories that read peers' bytes: wire and disk formats, transports, protocol handlers. */
const PEER_PATHS = [
  'ts/codec/**',
  'ts/net/**',
  'ts/raft/**',
  'ts/raft-io/**',
  'ts/replication/**',
  'ts/chronacta/**',
  'ts/sperli/**',
  'ts/federation/**',
];

/** Inside those, code that reads no peer's bytes: the simulator's Raft harness (ts/sim/raft/). */
const NOT_PEER_PATHS = ['ts/sim/raft/**'];

/**
 * Plain errors that may stay on those paths: assertions of plexus's own invariants, which no
 * peer's bytes can reach; a failure there is a defect in plexus, not a refusal. Each entry
 * matches the message argument, so it follows the code when a file moves.
 */
const ALLOWED: readonly { readonly message: RegExp; readonly why: string }[] = [
  {
    message: /^`raft invariant: /,
    why: "the Raft log's own bookkeeping (append below commit, commit past the last index, applied outside commit): reached only through the core's checked paths; a leader's conflicting append is PLX_RAFT_BAD_MESSAGE before it",
  },
  {
    message: /^'sha256 returned the wrong length'/,
    why: 'a SHA-256 kernel that returns other than 32 bytes is a defect of the kernel, not input',
  },
  {
    message: /^`encodeTable: wrote /,
    why: "the encoder's size computation disagrees with what it wrote: a defect of the encoder",
  },
  {
    message: /^`proto\/chronacta\.proto has no /,
    why: 'the bundled .proto file lacks a method the server registers: a packaging defect, found at start',
  },
  {
    message: /^'entries do not start after the pending last position'/,
    why: "the store's own group-commit bookkeeping; positions are assigned by the store, never by a peer",
  },
];

/** A glob of paths (`**` any depth, `*` within one name) as a regular expression. */
function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === '*' && glob[i + 1] === '*') {
      re += '.*';
      i++;
    } else if (c === '*') re += '[^/]*';
    else re += /[.+?^${}()|[\]\\]/.test(c) ? `\\${c}` : c;
  }
  return new RegExp(`^${re}$`);
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [relative(ROOT, p)] : [];
  });
}

/** Source text with comments blanked (line numbers kept); string contents are left alone. */
function withoutComments(text: string): string {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/(^|[\s;{}(),])\/\/.*$/gm, (_, lead: string) => lead);
}

const lineOf = (text: string, index: number): number => text.slice(0, index).split('\n').length;

/** String literals that look like error codes and are not in the catalogue: `line: code`. */
function unknownCodes(text: string, catalogue: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/(['"`])(PLX_[A-Z0-9_]*[A-Z0-9]|H16\d\d)\1/g)) {
    if (!catalogue.has(m[2] as string)) out.push(`${lineOf(text, m.index)}: ${m[2]}`);
  }
  for (const m of text.matchAll(/`(PLX_[A-Z0-9_]*)\$\{/g)) {
    const prefix = m[1] as string;
    if (![...catalogue].some((c) => c.startsWith(prefix))) out.push(`${lineOf(text, m.index)}: ${prefix}\${...}`);
  }
  return out;
}

/** Plain `Error`s made in a source (`new Error(`, `Error(` thrown), minus the allowed: `line: text`. */
function plainErrors(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/(?:\bnew\s+Error|\bthrow\s+Error)\s*\(\s*/g)) {
    const after = text.slice(m.index + m[0].length);
    if (ALLOWED.some((a) => a.message.test(after))) continue;
    const line = text.split('\n')[lineOf(text, m.index) - 1] as string;
    out.push(`${lineOf(text, m.index)}: ${line.trim()}`);
  }
  return out;
}

const CATALOGUE: ReadonlySet<string> = new Set<string>([...PLX_CODES, ...SPERLI_H_CODES]);
const ALL = sources(join(ROOT, 'ts'));

describe('the sources keep to the error catalogue', () => {
  it('every code written as a string literal in ts/ is in docs/errors.md', () => {
    expect(ALL.length).toBeGreaterThan(200);
    const bad: string[] = [];
    for (const file of ALL) {
      if (file === join('ts', 'core', 'codes-catalogue.ts')) continue;
      for (const hit of unknownCodes(withoutComments(readFileSync(join(ROOT, file), 'utf8')), CATALOGUE)) {
        bad.push(`${file}:${hit}`);
      }
    }
    expect(bad, 'codes not in docs/errors.md: add a row there and run node scripts/gen-error-codes.mjs').toEqual([]);
  });

  it('the code that handles peers’ bytes makes no plain Error', () => {
    const globs = PEER_PATHS.map(globToRegExp);
    const skip = NOT_PEER_PATHS.map(globToRegExp);
    const scanned = ALL.map((f) => f.split('\\').join('/')).filter(
      (f) => globs.some((g) => g.test(f)) && !skip.some((g) => g.test(f)),
    );
    // The globs reach the codecs, the transports and the protocol handlers of every product.
    for (const dir of ['ts/codec/', 'ts/net/', 'ts/raft', 'ts/chronacta/', 'ts/sperli/', 'ts/federation/']) {
      expect(
        scanned.some((f) => f.startsWith(dir)),
        dir,
      ).toBe(true);
    }
    expect(scanned.length).toBeGreaterThan(100);
    const bad: string[] = [];
    for (const file of scanned) {
      for (const hit of plainErrors(withoutComments(readFileSync(join(ROOT, file), 'utf8'))))
        bad.push(`${file}:${hit}`);
    }
    expect(
      bad,
      'a refusal on a peer path is a PlexusError with a code of docs/errors.md (an invariant of plexus itself goes in ALLOWED, with why)',
    ).toEqual([]);
  });

  it('every allowed plain Error is still in the sources (the list stays short and current)', () => {
    const texts = ALL.map((f) => withoutComments(readFileSync(join(ROOT, f), 'utf8')));
    for (const a of ALLOWED) {
      const found = texts.some((t) =>
        [...t.matchAll(/\bnew\s+Error\s*\(\s*/g)].some((m) => a.message.test(t.slice(m.index + m[0].length))),
      );
      expect(found, `${a.message} (${a.why})`).toBe(true);
    }
  });
});

describe('the scanners find what they look for', () => {
  it('unknownCodes: literals and template prefixes outside the catalogue', () => {
    const cat = new Set(['PLX_WIRE_BAD_FRAME', 'H1610']);
    const src = [
      "throw new PlexusError('PLX_WIRE_BAD_FRAME', 'ok');",
      "throw new PlexusError('PLX_WIRE_BAD_FRAMES', 'typo');",
      'const c = "H1613";',
      `fail(\`PLX_WIRE_\${reason}\`);`,
      `fail(\`PLX_NOWHERE_\${reason}\`);`,
      "const env = 'PLEXUS_BACKEND';",
    ].join('\n');
    expect(unknownCodes(src, cat)).toEqual(['2: PLX_WIRE_BAD_FRAMES', '3: H1613', `5: PLX_NOWHERE_\${...}`]);
  });

  it('plainErrors: thrown, rejected and destroyed plain Errors, not comments, not the allowed', () => {
    const src = withoutComments(
      [
        "if (x) throw new Error('bad frame');",
        '// throw new Error("in a comment")',
        "reject(new Error('no answer'));",
        "socket.destroy(new Error('late'));",
        "throw new PlexusError('PLX_WIRE_BAD_FRAME', 'coded');",
        `throw new Error(\`raft invariant: commit \${c} past last index\`);`,
        "throw Error('without new');",
        "throw new TypeError('a caller passed a number');",
      ].join('\n'),
    );
    expect(plainErrors(src).map((h) => h.split(':')[0])).toEqual(['1', '3', '4', '7']);
  });

  it('globs: ** crosses directories, * stays within one name', () => {
    expect(globToRegExp('ts/raft/**').test('ts/raft/net/driver.ts')).toBe(true);
    expect(globToRegExp('ts/raft/**').test('ts/raft-io/driver.ts')).toBe(false);
    expect(globToRegExp('ts/raft-io/**').test('ts/raft-io/driver.ts')).toBe(true);
    expect(globToRegExp('ts/*.ts').test('ts/net/x.ts')).toBe(false);
  });
});

/** The rows of docs/errors.md's "Details of each code": code and its `name: type` cells. */
function declaredInDocs(): [code: string, fields: string[]][] {
  const text = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8');
  const section = text.split(/^(?=## )/m).find((p) => p.startsWith('## Details of each code')) ?? '';
  const out: [string, string[]][] = [];
  for (const line of section.split('\n')) {
    const m = /^\| `([A-Z0-9_]+)` \| (.+) \|$/.exec(line.trim());
    if (m) out.push([m[1] as string, [...(m[2] as string).matchAll(/`([^`]+)`/g)].map((f) => f[1] as string)]);
  }
  return out;
}

describe('details declared per code', () => {
  it('docs/errors.md declares details only for codes of the catalogue, each once', () => {
    const rows = declaredInDocs();
    expect(rows.length).toBeGreaterThan(20);
    const known = new Set<string>([...PLX_CODES, ...SPERLI_H_CODES]);
    expect(rows.map(([c]) => c).filter((c) => !known.has(c))).toEqual([]);
    expect(new Set(rows.map(([c]) => c)).size).toBe(rows.length);
  });

  it('the generated DeclaredDetails has exactly the declared fields and types of the docs', () => {
    const generated = readFileSync(join(ROOT, 'ts/core/codes-catalogue.ts'), 'utf8');
    const body = /export interface DeclaredDetails \{\n([\s\S]*?)\n\}/.exec(generated)?.[1] ?? '';
    const entries = body.split('\n').filter((l) => l.trim() !== '');
    const expected = declaredInDocs()
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([code, fields]) => {
        const typed = fields.map((f) => {
          const [name, type] = f.split(': ') as [string, string];
          return `readonly ${name}: ${type.split(' or ').join(' | ')}`;
        });
        return `  ${code}: { ${typed.join('; ')} };`;
      });
    expect(entries).toEqual(expected);
  });

  it('new PlexusError checks the declared fields of its code, and leaves others free', () => {
    const deadline = new PlexusError('PLX_WIRE_DEADLINE', 'no acknowledgement', { peer: 'b', attempts: 3 });
    const peer: string = deadline.details.peer;
    expect(peer).toBe('b');
    expect(isPlexusError(deadline, 'PLX_WIRE_DEADLINE')).toBe(true);
    const listen: PlexusDetails<'PLX_SPERLI_LISTEN'> = { host: '127.0.0.1', port: 7000, code: 'EADDRINUSE' };
    expect(new PlexusError('PLX_SPERLI_LISTEN', 'taken', listen).details.port).toBe(7000);
    // @ts-expect-error a declared field of another type
    const wrongType = new PlexusError('PLX_WIRE_DEADLINE', 'm', { peer: 2 });
    // @ts-expect-error a declared field missing
    const missing = new PlexusError('PLX_WIRE_FRAME_TOO_LARGE', 'm', { length: 5 });
    // A code without declared details takes any record.
    const free = new PlexusError('PLX_CHRONACTA_BAD_INPUT', 'm', { anything: [1, 2] });
    expect([wrongType.details.peer, missing.details.max, free.details.anything]).toEqual([2, undefined, [1, 2]]);
  });
});
