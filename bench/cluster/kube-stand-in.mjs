// The Lease-API stand-in of the tests (test/helpers/kube-lease-server.ts: HTTPS with a test CA,
// a bearer token, Lease objects kept in a real etcd with resourceVersion = mod_revision) for
// the membership benchmarks, which run under plain node. The TypeScript source is not copied:
// `loadKubeLeaseServer()` transpiles that one file with the TypeScript compiler API (a dev
// dependency) into a temporary directory, its `../../ts/*.js` imports pointed at the built
// dist/ (build first), and imports it.
//
// Run as a script it is the stand-in process a bench starts (and stops by its PID, procs.mjs
// `Child`): it serves until SIGTERM, SIGINT or the end of stdin, and prints one JSON line
//   {ev:'ready', pid, url, kubeconfig, at}
//
// node bench/cluster/kube-stand-in.mjs --etcd http://127.0.0.1:2379,... --kubeconfig FILE [--prefix /k/]
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { HERE, ROOT, removeDir, tempDir } from './procs.mjs';

export const STAND_IN_SOURCE = resolve(ROOT, 'test/helpers/kube-lease-server.ts');

/** The stand-in's module (KubeLeaseServer, KUBE_STAND_IN_NAME), transpiled from test/helpers. */
export async function loadKubeLeaseServer() {
  const ts = createRequire(import.meta.url)('typescript');
  const source = readFileSync(STAND_IN_SOURCE, 'utf8').replace(
    /(from\s+)'\.\.\/\.\.\/ts\/([^']+)'/g,
    (_, from, path) => `${from}'${pathToFileURL(resolve(ROOT, 'dist', path)).href}'`,
  );
  const out = ts.transpileModule(source, {
    fileName: STAND_IN_SOURCE,
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ES2022,
      verbatimModuleSyntax: false,
      isolatedModules: true,
    },
  });
  const errors = (out.diagnostics ?? []).filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (errors.length > 0) {
    throw new Error(
      `cannot transpile ${STAND_IN_SOURCE}: ${errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('; ')}`,
    );
  }
  const dir = tempDir('plexus-bench-kube-stand-in-');
  const file = join(dir, 'kube-lease-server.mjs');
  writeFileSync(file, out.outputText);
  try {
    return await import(pathToFileURL(file).href);
  } finally {
    removeDir(dir);
  }
}

/** The script that runs the stand-in as its own process (for procs.mjs `Child`). */
export const STAND_IN_SCRIPT = join(HERE, 'kube-stand-in.mjs');

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values: o } = parseArgs({
    options: {
      etcd: { type: 'string' },
      kubeconfig: { type: 'string' },
      prefix: { type: 'string' },
    },
  });
  if (!o.etcd || !o.kubeconfig) {
    console.error('node bench/cluster/kube-stand-in.mjs --etcd URL[,URL...] --kubeconfig FILE [--prefix /k/]');
    process.exit(2);
  }
  const { KubeLeaseServer } = await loadKubeLeaseServer();
  const server = await KubeLeaseServer.start({
    etcdEndpoints: o.etcd.split(','),
    ...(o.prefix ? { etcdPrefix: o.prefix } : {}),
  });
  // The bench runs for minutes: keep the request log from growing without bound.
  setInterval(() => server.requests.splice(0), 10_000).unref();
  await server.writeKubeconfig(o.kubeconfig);
  process.stdout.write(
    `${JSON.stringify({ ev: 'ready', pid: process.pid, url: server.url, kubeconfig: o.kubeconfig, at: Date.now() })}\n`,
  );
  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.resume();
}
