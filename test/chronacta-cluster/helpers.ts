/** What the `serve --cluster` process tests share: free ports, polling, and running the CLI. */
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

export const ROOT = resolve(import.meta.dirname, '../..');
export const MAIN = join(ROOT, 'dist/cli/main.js');
const execFileP = promisify(execFile);

/** A loopback port free at the moment of asking. */
export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/** Polls `f` until it gives a value; throws naming `what` (and the last error) after `ms`. */
export async function until<T>(f: () => Promise<T | undefined>, ms: number, what: string): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    const v = await f().catch((e: unknown) => {
      last = e;
      return undefined;
    });
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (${String(last)})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Runs `plexus chronacta ...args`; resolves with its exit code and output (never rejects). */
export async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return execFileP(process.execPath, [MAIN, 'chronacta', ...args]).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}
