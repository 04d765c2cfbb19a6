/**
 * Your own actors on a cluster node: a chart module (`plexus cluster node --charts FILE`, the
 * node config's `charts` key, or `launchClusterNode(cfg, { charts })`) and how its charts join
 * the built-in ones (ts/cluster/charts.ts).
 *
 * A chart module is an ES module (or a CommonJS one, whose `module.exports` is taken) that
 * exports:
 * - `charts` (required): an object from IRI prefix (`vt:greeter/`) to a chart, a `{ initial,
 *   transition }` object (ts/runtime/types.ts `Chart`; an XState machine wrapped with
 *   `xstateChart` from `plexus/runtime`);
 * - `replaces` (optional): the built-in prefixes its charts redefine on purpose;
 * - `builtins` (optional): `false` to run without the built-in charts.
 *
 * Refusals: PLX_CLUSTER_CHARTS_LOAD (the module cannot be imported), PLX_CLUSTER_CHARTS_SHAPE
 * (it exports something else; `details.path` names the bad value), PLX_CLUSTER_CHARTS_BUILTIN
 * (a built-in prefix redefined without `replaces` naming it).
 */
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Chart } from '../runtime/types.js';
import { BUILTIN_CHARTS } from './charts.js';
import { ClusterCode, clusterError } from './errors.js';

// biome-ignore lint/suspicious/noExplicitAny: charts of any state type
export type AnyChart = Chart<any, any>;
export type ChartTable = Readonly<Record<string, AnyChart>>;

/** What a chart module exports, checked. */
export interface ChartModule {
  readonly charts: ChartTable;
  /** Built-in prefixes the module's charts redefine on purpose. */
  readonly replaces?: readonly string[];
  /** `false`: the node runs without the built-in charts. */
  readonly builtins?: boolean;
}

/** How a node's charts are put together: the user's, the built-ins, and what may replace what. */
export interface ChartChoice {
  readonly charts?: ChartTable;
  /** Built-in prefixes the user's charts redefine on purpose (any other clash is refused). */
  readonly replaces?: readonly string[];
  /** `false`: no built-in charts (default true). */
  readonly builtins?: boolean;
}

/** An IRI prefix: a scheme, a colon, then printable characters, at most 256 bytes. */
const PREFIX = /^[a-z][a-z0-9+.-]*:[\x21-\x7e]*$/;
const MAX_PREFIX = 256;
const MAX_CHARTS = 4096;

function shape(where: string, path: string, message: string): never {
  throw clusterError(ClusterCode.CHARTS_SHAPE, `chart module ${where}: ${path} ${message}`, {
    file: where,
    path,
    field: path,
  });
}

/** A short description of a value for an error message. */
function kind(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

/**
 * Checks what a chart module exports (`where` names it in errors): the shape above. Throws
 * PLX_CLUSTER_CHARTS_SHAPE naming the first bad value.
 */
export function checkChartModule(exported: unknown, where: string): ChartModule {
  if (exported === null || typeof exported !== 'object') shape(where, 'the module', `is ${kind(exported)}`);
  const m = exported as Record<string, unknown>;
  // A CommonJS module arrives as its `module.exports` in `default`.
  const src =
    m.charts === undefined && m.default !== null && typeof m.default === 'object'
      ? (m.default as Record<string, unknown>)
      : m;
  const charts = src.charts;
  if (charts === undefined) {
    shape(
      where,
      'charts',
      'is not exported: export const charts = { "vt:name/": { initial, transition } } (docs/cluster.md, "Your own actors")',
    );
  }
  if (charts === null || typeof charts !== 'object' || Array.isArray(charts)) {
    shape(where, 'charts', `is ${kind(charts)}, not an object from IRI prefix to chart`);
  }
  const entries = Object.entries(charts as Record<string, unknown>);
  if (entries.length === 0) shape(where, 'charts', 'is empty: it names no chart');
  if (entries.length > MAX_CHARTS) shape(where, 'charts', `has ${entries.length} charts, more than ${MAX_CHARTS}`);
  for (const [prefix, c] of entries) {
    const path = `charts[${JSON.stringify(prefix)}]`;
    if (prefix.length > MAX_PREFIX || !PREFIX.test(prefix)) {
      shape(where, path, 'is not an IRI prefix (a scheme, a colon, printable characters: "vt:greeter/")');
    }
    if (c === null || typeof c !== 'object') shape(where, path, `is ${kind(c)}, not a chart { initial, transition }`);
    const o = c as Record<string, unknown>;
    if (typeof o.transition !== 'function' || typeof o.initial !== 'function') {
      const machine = typeof o.getInitialSnapshot === 'function';
      shape(
        where,
        path,
        machine
          ? 'is an XState machine: wrap it with xstateChart(machine) from plexus/runtime'
          : `has no ${typeof o.initial !== 'function' ? 'initial' : 'transition'} function: a chart is { initial(iri), transition(state, event, ctx) }`,
      );
    }
    if (o.journal !== undefined && o.journal !== 'state' && o.journal !== 'events') {
      shape(where, `${path}.journal`, 'is "state" or "events" when given');
    }
    if (o.revive !== undefined && typeof o.revive !== 'function') shape(where, `${path}.revive`, 'is a function');
  }
  const replaces = src.replaces;
  if (
    replaces !== undefined &&
    (!Array.isArray(replaces) || replaces.some((p) => typeof p !== 'string') || replaces.length > MAX_CHARTS)
  ) {
    shape(where, 'replaces', 'is a list of built-in IRI prefixes when given');
  }
  const builtins = src.builtins;
  if (builtins !== undefined && typeof builtins !== 'boolean') shape(where, 'builtins', 'is true or false when given');
  return {
    charts: Object.fromEntries(entries) as ChartTable,
    ...(replaces === undefined ? {} : { replaces: replaces as string[] }),
    ...(builtins === undefined ? {} : { builtins: builtins as boolean }),
  };
}

/**
 * Imports a chart module from `file` (relative paths against `base`, default the working
 * directory) and checks it. PLX_CLUSTER_CHARTS_LOAD when it cannot be imported (missing, a
 * syntax error, a throw while it loads: the cause is kept), PLX_CLUSTER_CHARTS_SHAPE when its
 * exports are not a chart module.
 */
export async function loadChartModule(file: string, base = process.cwd()): Promise<ChartModule> {
  const path = resolve(base, file);
  try {
    const st = await stat(path);
    if (!st.isFile()) throw new Error('not a file');
  } catch (e) {
    throw clusterError(
      ClusterCode.CHARTS_LOAD,
      `cannot load the chart module ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
      { file: path, field: 'charts' },
      e,
    );
  }
  let exported: unknown;
  try {
    exported = await import(pathToFileURL(path).href);
  } catch (e) {
    throw clusterError(
      ClusterCode.CHARTS_LOAD,
      `cannot load the chart module ${path}: ${(e as Error).message}`,
      { file: path, field: 'charts' },
      e,
    );
  }
  return checkChartModule(exported, path);
}

/**
 * The charts a node runs: the built-ins (unless `builtins` is false) and the user's. A user
 * prefix equal to a built-in one is refused (PLX_CLUSTER_CHARTS_BUILTIN) unless `replaces`
 * names it; `replaces` naming a prefix that is no built-in, or one the user's charts do not
 * define, is refused too (PLX_CLUSTER_CHARTS_SHAPE), so that a typo does not pass.
 */
export function nodeCharts(choice: ChartChoice = {}, builtin: ChartTable = BUILTIN_CHARTS): ChartTable {
  const mine = choice.charts ?? {};
  const replaces = new Set(choice.replaces ?? []);
  for (const p of replaces) {
    if (!(p in builtin)) {
      throw clusterError(ClusterCode.CHARTS_SHAPE, `replaces names ${JSON.stringify(p)}, which is no built-in chart`, {
        path: 'replaces',
        field: 'replaces',
        prefix: p,
        builtins: Object.keys(builtin),
      });
    }
    if (!(p in mine)) {
      throw clusterError(
        ClusterCode.CHARTS_SHAPE,
        `replaces names ${JSON.stringify(p)}, but no chart of yours has that prefix`,
        { path: 'replaces', field: 'replaces', prefix: p },
      );
    }
  }
  if (choice.builtins === false) return { ...mine };
  for (const p of Object.keys(mine)) {
    if (p in builtin && !replaces.has(p)) {
      throw clusterError(
        ClusterCode.CHARTS_BUILTIN,
        `the chart for ${JSON.stringify(p)} would replace the built-in one: name it in replaces (export const replaces = [${JSON.stringify(p)}]) or run without built-ins (builtins: false)`,
        { path: `charts[${JSON.stringify(p)}]`, field: 'charts', prefix: p },
      );
    }
  }
  return { ...builtin, ...mine };
}

/**
 * The charts of a node that `launchClusterNode` starts: the charts given in code (with their
 * `replaces` and `builtins`), else the chart module the node config's `charts` names (an
 * absolute path, as `readNodeConfig` gives it), else the built-ins alone; `builtins: false`
 * in code drops the built-ins whichever source the charts come from.
 */
export async function chartsForNode(configured: string | undefined, choice: ChartChoice): Promise<ChartTable> {
  if (choice.charts !== undefined || configured === undefined) return nodeCharts(choice);
  const m = await loadChartModule(configured);
  return nodeCharts({ ...m, ...(choice.builtins === false ? { builtins: false } : {}) });
}
