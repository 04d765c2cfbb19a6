/**
 * Shared by the Chronacta tests: temporary data directories, a real server on loopback
 * with a client, and the built chronacta command for child processes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { type ChronactaServer, type ServerOptions, startServer } from '../../ts/chronacta/server.js';
import { ROOT } from '../helpers/paths.js';

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
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI_CHILD, commandUrl, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    child.stdin.end(input ?? '');
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
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
  const child = spawn(process.execPath, [...nodeArgs, CLI_CHILD, commandUrl, 'serve', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const deadline = Date.now() + 20_000;
  while (!out.includes('\n')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`serve did not start: ${out} ${err}`);
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const line = JSON.parse(out.split('\n')[0] as string) as { address: string; metrics: string };
  return { child, address: line.address, metrics: line.metrics, exited, stderr: () => err, stdout: () => out };
}
