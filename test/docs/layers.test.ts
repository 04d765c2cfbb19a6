/**
 * The layer map of docs/architecture.md, enforced on every import in `ts/`:
 *
 * ```
 * cli                                          6
 * chronacta  cluster  federation  sperli       5  products: never import each other
 * sim/raft  sim/replication (engine harnesses) 4
 * runtime  raft  raft-io  replication          3  engines
 * storage  net  crypto  sim                    2  infrastructure
 * codec                                        1
 * core                                         0
 * ```
 *
 * An import may point to a lower level, never up; sideways (same level, another unit) only
 * where `SIDEWAYS` says so (`raft-io` drives `raft`, `replication` is built on both, and
 * `sim/replication` runs replicated logs on the simulated disk and transport of `sim/raft`).
 * A wire constant (see `isWireConstant`) lives in `ts/codec/` only.
 *
 * Some modules sit today where the map does not put them. `PLACED` classifies them by where
 * the map puts them, so the rules already hold them to their layer; `KNOWN_IMPORTS` and
 * `KNOWN_WIRE_CONSTANTS` list the violations of today's code, one reason each. Each list only
 * shrinks: an entry that no longer matches the code fails the test until it is removed.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';

const TS = join(ROOT, 'ts');

/** Level of each unit (a folder of ts/, or a path the map names on its own). */
const LEVEL: Readonly<Record<string, number>> = {
  core: 0,
  codec: 1,
  storage: 2,
  net: 2,
  crypto: 2,
  sim: 2,
  runtime: 3,
  raft: 3,
  'raft-io': 3,
  replication: 3,
  'sim/raft': 4,
  'sim/replication': 4,
  chronacta: 5,
  cluster: 5,
  federation: 5,
  sperli: 5,
  cli: 6,
};

const PRODUCTS = new Set(['chronacta', 'cluster', 'federation', 'sperli']);

/** The sideways imports the map allows, unit -> units it may import on its own level. */
const SIDEWAYS: Readonly<Record<string, readonly string[]>> = {
  'raft-io': ['raft'],
  replication: ['raft', 'raft-io'],
  'sim/replication': ['sim/raft'],
};

/**
 * Modules whose folder is not yet the one the map gives them: path prefix (under ts/) -> the
 * unit they belong to. Imports are checked against the unit. Remove an entry once the move is done.
 */
const PLACED: Readonly<Record<string, { unit: string; reason: string }>> = {};

/** Today's imports against the map: "from -> to" (paths under ts/) with the reason. */
const KNOWN_IMPORTS: Readonly<Record<string, string>> = {};

/**
 * A wire constant: a top-level `const` or `enum` of a module whose name contains `MAGIC`, is
 * `VERSION` or ends in `_VERSION`, or ends in `HEADER_BYTES`, `HEADER_SIZE` or `HEADER_LEN`:
 * the magic numbers, version bytes and header sizes that pin a wire or disk layout.
 */
function isWireConstant(name: string): boolean {
  return /MAGIC/.test(name) || /(^|_)VERSION$/.test(name) || /HEADER_(BYTES|SIZE|LEN)$/.test(name);
}

/** Today's wire constants outside codec/: "file: NAME" (path under ts/) with the reason. */
const KNOWN_WIRE_CONSTANTS: Readonly<Record<string, string>> = {};

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const posix = (p: string): string => p.split('\\').join('/');

/** The unit of a path under ts/: a PLACED prefix first, then `sim/raft/` or `sim/replication/`, then its top folder. */
function unitOf(rel: string): string {
  for (const [prefix, placed] of Object.entries(PLACED)) if (rel.startsWith(prefix)) return placed.unit;
  if (rel.startsWith('sim/raft/')) return 'sim/raft';
  if (rel.startsWith('sim/replication/')) return 'sim/replication';
  const top = rel.split('/')[0] as string;
  return rel.includes('/') ? top : '(top)';
}

/** Why importing `to` from `from` breaks the map, or undefined when it does not. */
function breach(from: string, to: string): string | undefined {
  if (from === to) return undefined;
  const a = LEVEL[from];
  const b = LEVEL[to];
  if (a === undefined) return `${from} is not on the map`;
  if (b === undefined) return `${to} is not on the map`;
  if (b > a) return `${from} (level ${a}) imports up into ${to} (level ${b})`;
  if (b === a) {
    if (PRODUCTS.has(from) && PRODUCTS.has(to)) return `product ${from} imports product ${to}`;
    if (!(SIDEWAYS[from] ?? []).includes(to)) return `${from} imports sideways into ${to}`;
  }
  return undefined;
}

interface Edge {
  readonly from: string;
  readonly to: string;
}

function importsOf(file: string): Edge[] {
  const text = readFileSync(file, 'utf8');
  const info = ts.preProcessFile(text, true, true);
  const from = posix(relative(TS, file));
  const out: Edge[] = [];
  for (const ref of info.importedFiles) {
    if (!ref.fileName.startsWith('.')) continue;
    const target = posix(relative(TS, join(dirname(file), ref.fileName))).replace(/\.js$/, '.ts');
    out.push({ from, to: target });
  }
  return out;
}

function wireConstantsOf(file: string): string[] {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const names: string[] = [];
  for (const st of sf.statements) {
    if (ts.isVariableStatement(st) && (st.declarationList.flags & ts.NodeFlags.Const) !== 0) {
      for (const d of st.declarationList.declarations) if (ts.isIdentifier(d.name)) names.push(d.name.text);
    } else if (ts.isEnumDeclaration(st)) {
      names.push(st.name.text);
    }
  }
  return names.filter(isWireConstant);
}

const FILES = sources(TS);

describe('the layer map (docs/architecture.md)', () => {
  it('reads every module of ts/ and its imports', () => {
    expect(FILES.length).toBeGreaterThan(200);
    const edges = FILES.flatMap(importsOf);
    expect(edges.length).toBeGreaterThan(1000);
    const units = new Set(FILES.map((f) => unitOf(posix(relative(TS, f)))));
    for (const u of units) expect(LEVEL[u], `unit ${u} is on the map`).toBeDefined();
  });

  it('has every import point down the layers, except the known ones', () => {
    const found = new Map<string, string>();
    for (const file of FILES) {
      for (const e of importsOf(file)) {
        const why = breach(unitOf(e.from), unitOf(e.to));
        if (why !== undefined) found.set(`${e.from} -> ${e.to}`, why);
      }
    }
    const unexpected = [...found].filter(([k]) => KNOWN_IMPORTS[k] === undefined).map(([k, why]) => `${k}: ${why}`);
    expect(unexpected, 'imports against the layer map').toEqual([]);
    const gone = Object.keys(KNOWN_IMPORTS).filter((k) => !found.has(k));
    expect(gone, 'known violations that are fixed: remove them from KNOWN_IMPORTS').toEqual([]);
  });

  it('keeps wire constants in codec/, except the known ones', () => {
    const found = new Set<string>();
    for (const file of FILES) {
      const rel = posix(relative(TS, file));
      if (rel.startsWith('codec/')) continue;
      for (const name of wireConstantsOf(file)) found.add(`${rel}: ${name}`);
    }
    const unexpected = [...found].filter((k) => KNOWN_WIRE_CONSTANTS[k] === undefined);
    expect(unexpected, 'wire constants outside codec/').toEqual([]);
    const gone = Object.keys(KNOWN_WIRE_CONSTANTS).filter((k) => !found.has(k));
    expect(gone, 'known wire constants that moved: remove them from KNOWN_WIRE_CONSTANTS').toEqual([]);
  });

  it('names in PLACED only modules that are still where the map does not put them', () => {
    const rels = FILES.map((f) => posix(relative(TS, f)));
    const gone = Object.keys(PLACED).filter((prefix) => !rels.some((r) => r.startsWith(prefix)));
    expect(gone, 'moved modules: remove them from PLACED').toEqual([]);
  });

  it('finds a breach in each direction the map forbids', () => {
    expect(breach('codec', 'storage')).toMatch(/imports up/);
    expect(breach('raft', 'runtime')).toMatch(/sideways/);
    expect(breach('chronacta', 'cluster')).toMatch(/product chronacta imports product cluster/);
    expect(breach('sim', 'raft')).toMatch(/imports up/);
    expect(breach('sim/raft', 'raft')).toBeUndefined();
    expect(breach('sim/replication', 'replication')).toBeUndefined();
    expect(breach('sim/replication', 'sim/raft')).toBeUndefined();
    expect(breach('sim/raft', 'sim/replication')).toMatch(/sideways/);
    expect(breach('replication', 'raft-io')).toBeUndefined();
    expect(breach('raft', 'raft-io')).toMatch(/sideways/);
    expect(breach('cli', 'core')).toBeUndefined();
    expect(isWireConstant('SEGMENT_MAGIC')).toBe(true);
    expect(isWireConstant('RAFT_WIRE_VERSION')).toBe(true);
    expect(isWireConstant('CATCH_UP_HEADER_BYTES')).toBe(true);
    expect(isWireConstant('MAX_TYPE_BYTES')).toBe(false);
  });
});
