/**
 * Shared by the Chronacta tests: temporary data directories, a real server on loopback
 * with a client, and the built chronacta command for child processes.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { type ChronactaServer, type ServerOptions, startServer } from '../../ts/chronacta/server.js';
import { ROOT } from '../helpers/paths.js';
import { runNode, startNode } from '../helpers/processes.js';

export const quiet = { warn: () => {} };

export async function tempDir(prefix: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), `plexus-chronacta-${prefix}-`));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

export interface Running {
  readonly server: ChronactaServer;
  readonly client: ChronactaClient;
  stop(): Promise<void>;
}

/** A server on 127.0.0.1 (a free port) with a client connected to it. */
/**
 * The pause of a loop that goes on regardless (a load generator, a compactor, a deleter, a
 * sampler between two rounds): it paces the loop and waits for nothing in particular.
 */
export const pace = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function serve(dataDir: string, opts: Partial<ServerOptions> = {}): Promise<Running> {
  const server = await startServer({ dataDir, logger: quiet, ...opts });
  const client = new ChronactaClient(server.address);
  return {
    server,
    client,
    async stop() {
      client.close();
      await server.close();
    },
  };
}

/**
 * The chronacta command as built in dist/ (`npm test` builds before it runs the tests), for
 * child processes: they run what a user runs, with every module the command imports.
 */
export async function compileForChild(): Promise<{ commandUrl: string; remove: () => Promise<void> }> {
  const built = join(ROOT, 'dist/cli/commands/chronacta.js');
  if (!existsSync(built)) throw new Error(`${built} not found: build plexus first (npm run build)`);
  return { commandUrl: pathToFileURL(built).href, remove: async () => undefined };
}

export const CLI_CHILD = join(ROOT, 'test/fixtures/chronacta/cli-child.mjs');

/** `plexus chronacta ARGS` in a child process; resolves with its output and exit code. */
export function runCli(
  commandUrl: string,
  args: string[],
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runNode(CLI_CHILD, [commandUrl, ...args], { input: input ?? '' }).then((r) => ({
    code: r.code,
    stdout: r.stdout,
    stderr: r.stderr,
  }));
}

export interface ServingChild {
  readonly child: ChildProcess;
  readonly address: string;
  readonly metrics: string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
  stdout(): string;
}

/** `plexus chronacta serve` in a child process, once it prints that it serves. */
export async function serveChild(commandUrl: string, args: string[], nodeArgs: string[] = []): Promise<ServingChild> {
  const p = startNode(CLI_CHILD, [commandUrl, 'serve', ...args], { nodeArgs });
  const first = await p
    .line(() => true, { timeoutMs: 20_000, what: 'serve starting' })
    .catch(async (e: unknown) => {
      await p.stop('SIGKILL');
      throw e;
    });
  const line = JSON.parse(first) as { address: string; metrics: string };
  return {
    child: p.child,
    address: line.address,
    metrics: line.metrics,
    exited: p.exited,
    stderr: p.stderr,
    stdout: p.stdout,
  };
}
