/**
 * `plexus federation mediator` as its own process: --help answers, usage mistakes exit 2, it
 * prints its DID and URL, keeps its DID across restarts with a key file, and loses nothing when
 * SIGKILLed: a message delivered but not acknowledged (messages-received) is delivered again
 * after the restart, and once acknowledged it never comes again. SIGTERM stops it cleanly.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import {
  CHILD,
  compileForChild,
  event,
  freePort,
  pickupClient,
  recipient,
  resolver,
  send,
  sender,
  tempDir,
} from './mediator-fixtures.js';

let compiled: { commandUrl: string; remove: () => Promise<void> };
let tmp: { dir: string; remove: () => Promise<void> };
const children = new Set<ChildProcess>();

beforeAll(async () => {
  compiled = await compileForChild();
  tmp = await tempDir('proc');
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.pid !== undefined) process.kill(c.pid, 'SIGKILL');
  await compiled?.remove();
  await tmp?.remove();
});

const ENV = { ...process.env, PLX_TEST_MEDIATOR_PASS: 'correct horse battery staple' };

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CHILD, compiled.commandUrl, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: ENV,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

interface Running {
  child: ChildProcess;
  did: string;
  url: string;
  queued: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
}

async function startChild(args: string[]): Promise<Running> {
  const child = spawn(process.execPath, [CHILD, compiled.commandUrl, 'mediator', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: ENV,
  });
  children.add(child);
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
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, 'SIGKILL');
      throw new Error(`the mediator did not start: ${out} ${err}`);
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const line = JSON.parse(out.split('\n')[0]!) as { event: string; did: string; url: string; queued: number };
  expect(line.event).toBe('serving');
  return { child, did: line.did, url: line.url, queued: line.queued, exited, stdout: () => out };
}

async function kill(
  r: Running,
  signal: NodeJS.Signals,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  process.kill(r.child.pid!, signal);
  const e = await r.exited;
  children.delete(r.child);
  return e;
}

describe('plexus federation mediator (a separate process)', () => {
  it('answers --help and refuses bad usage with exit code 2', async () => {
    const h = await run(['mediator', '--help']);
    expect(h.code).toBe(0);
    expect(h.stdout).toContain('Usage: plexus federation');
    expect(h.stdout).toContain('--port N --data DIR');
    expect((await run(['--help'])).code).toBe(0);
    const noData = await run(['mediator', '--port', '0']);
    expect(noData.code).toBe(2);
    expect(noData.stderr).toContain('--data DIR');
    const noPass = await run(['mediator', '--port', '0', '--data', `${tmp.dir}/x`, '--key-file', `${tmp.dir}/k`]);
    expect(noPass.code).toBe(2);
    expect(noPass.stderr).toContain('--passphrase-env');
    expect((await run(['nonsense'])).code).toBe(2);
  });

  it('SIGKILL after a delivery and before messages-received: the message comes again; after it, never', async () => {
    const port = await freePort();
    const args = [
      '--port',
      String(port),
      '--data',
      `${tmp.dir}/data`,
      '--key-file',
      `${tmp.dir}/mediator.keys`,
      '--passphrase-env',
      'PLX_TEST_MEDIATOR_PASS',
    ];
    let m = await startChild(args);
    expect(m.url).toBe(`http://127.0.0.1:${port}/`);
    expect(m.did.startsWith('did:peer:2.')).toBe(true);
    const alice = await sender();
    const bob = await recipient(m);
    const c = pickupClient(bob, m);
    await c.requestMediation();
    await c.addRecipients([bob.did]);
    expect((await send(alice, bob, event(alice, bob, 1))).status).toBe(202);
    const first = await c.fetch(10);
    expect(first).toHaveLength(1);
    expect((await unpack(first[0]!.envelope, { resolver, keys: bob.keys })).message.id).toBe('send-1-c0ffee');

    // Killed after the delivery, before messages-received.
    expect((await kill(m, 'SIGKILL')).signal).toBe('SIGKILL');
    m = await startChild(args);
    expect(m.did).toBe(c.mediatorDid);
    expect(m.queued).toBe(1);
    const again = await c.fetch(10);
    expect(again.map((x) => x.id)).toEqual([first[0]!.id]);
    expect(again[0]!.envelope).toBe(first[0]!.envelope);
    // The keylist survived too: a new forward is routed.
    expect((await send(alice, bob, event(alice, bob, 2))).status).toBe(202);
    expect((await c.acknowledge([first[0]!.id])).messageCount).toBe(1);

    // Killed right after messages-received: the acknowledged message never comes again.
    expect((await kill(m, 'SIGKILL')).signal).toBe('SIGKILL');
    m = await startChild(args);
    expect(m.queued).toBe(1);
    const rest = await c.fetch(10);
    expect(rest).toHaveLength(1);
    expect((await unpack(rest[0]!.envelope, { resolver, keys: bob.keys })).message.id).toBe('send-2-c0ffee');
    await c.acknowledge([rest[0]!.id]);

    // SIGTERM stops it cleanly; after a restart the queue is empty.
    const stopped = await kill(m, 'SIGTERM');
    expect(stopped.code).toBe(0);
    expect(m.stdout()).toContain('"event":"stopped"');
    m = await startChild(args);
    expect(m.queued).toBe(0);
    expect(await c.fetch(10)).toEqual([]);
    expect((await kill(m, 'SIGTERM')).code).toBe(0);
  });
});
