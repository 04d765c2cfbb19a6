/**
 * `plexus federation mediator` as its own process: --help answers, usage mistakes exit 2, it
 * prints its DID and URL, keeps its DID across restarts with a key file, and loses nothing when
 * SIGKILLed: a message delivered but not acknowledged (messages-received) is delivered again
 * after the restart, and once acknowledged it never comes again. SIGTERM stops it cleanly.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import { KEYLIST_UPDATE } from '../../ts/federation/mediator/protocol.js';
import type { PickupClient } from '../../ts/federation/pickup/client.js';
import { runNode, startNode } from '../helpers/processes.js';
import { expectCode } from './fixtures.js';
import {
  CHILD,
  compileForChild,
  event,
  freePort,
  pickupClient,
  post,
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
  // A command that should have refused its arguments but serves instead is SIGKILLed by its PID.
  return runNode(CHILD, [compiled.commandUrl, ...args], { env: ENV, timeoutMs: 30_000 }).then((r) => ({
    code: r.code,
    stdout: r.stdout,
    stderr: r.stderr,
  }));
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
  const p = startNode(CHILD, [compiled.commandUrl, 'mediator', ...args], { env: ENV });
  const child = p.child;
  children.add(child);
  const exited = p.exited;
  const first = await p
    .line(() => true, { timeoutMs: 20_000, what: 'the mediator starting' })
    .catch(async (e: unknown) => {
      await p.stop('SIGKILL');
      throw e;
    });
  const line = JSON.parse(first) as { event: string; did: string; url: string; queued: number };
  expect(line.event).toBe('serving');
  return { child, did: line.did, url: line.url, queued: line.queued, exited, stdout: p.stdout };
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
    // --allow takes DIDs only, refused before anything is made on disk.
    for (const bad of ['not-a-did', 'did:example:alice#key-1', 'did:example:a/path']) {
      const allow = await run(['mediator', '--port', '0', '--data', `${tmp.dir}/allow`, '--allow', bad]);
      expect(allow.code).toBe(2);
      expect(allow.stderr).toContain('PLX_CLI_USAGE');
      expect(allow.stderr).toContain('--allow takes a DID');
    }
    expect(existsSync(`${tmp.dir}/allow`)).toBe(false);
  });

  it("three clients against the mediator process: mallory's registrations of alice's DID and key id and her replay are refused; forwards reach alice only", async () => {
    const m = await startChild(['--port', String(await freePort()), '--data', `${tmp.dir}/three`, '--fsync', 'never']);
    try {
      const bob = await sender();
      const alice = await recipient(m);
      const mallory = await recipient(m);
      const carol = await recipient(m);
      const [ca, cm, cc] = [alice, mallory, carol].map((p) => pickupClient(p, m)) as [
        PickupClient,
        PickupClient,
        PickupClient,
      ];
      for (const c of [ca, cm, cc]) await c.requestMediation();
      // Mallory first: alice's DID, then alice's key id.
      for (const did of [alice.did, `${alice.did}#key-2`]) {
        const e = await expectCode(cm.addRecipients([did]), 'PLX_PICKUP_KEYLIST');
        expect(e.details.code).toBe('PLX_MEDIATOR_NOT_CONTROLLER');
      }
      // Alice registers with a request mallory captures and replays.
      const reg = await ca.pack({
        id: randomUUID(),
        type: KEYLIST_UPDATE,
        from: alice.did,
        to: [m.did],
        created_time: Math.floor(Date.now() / 1000),
        body: { updates: [{ recipient_did: alice.did, action: 'add' }] },
        return_route: 'all',
      });
      expect((await post(m.url, reg)).status).toBe(200);
      const replay = await post(m.url, reg);
      expect(replay.status).toBe(409);
      expect(JSON.parse(replay.body).code).toBe('PLX_MEDIATOR_REPLAY');
      await cm.addRecipients([mallory.did]);
      await cc.addRecipients([carol.did]);
      for (let i = 0; i < 3; i++) expect((await send(bob, alice, event(bob, alice, i))).status).toBe(202);
      expect((await send(bob, carol, event(bob, carol, 7))).status).toBe(202);
      expect(await cm.fetch(100)).toEqual([]);
      const got = await ca.fetch(100);
      const ids = [];
      for (const g of got) ids.push((await unpack(g.envelope, { resolver, keys: alice.keys })).message.id);
      expect(ids).toEqual(['send-0-c0ffee', 'send-1-c0ffee', 'send-2-c0ffee']);
      expect((await cc.fetch(100)).length).toBe(1);
    } finally {
      expect((await kill(m, 'SIGTERM')).code).toBe(0);
    }
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
