/**
 * TestLeaderKillCommittedEventsSurvive with real processes: three members, each a child
 * process (fixtures/member.mjs, importing dist/), every link through a fault-injecting proxy.
 * The leader is SIGKILLed by PID; every acknowledged append must be on the survivors at its
 * position, the new leader goes on, and the killed member, restarted on its files, catches up
 * with everything exactly once. Build first: npx tsc -p tsconfig.build.json.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { ROOT } from '../helpers/paths.js';
import { type Started, startNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

const MODULE = resolve(ROOT, 'dist/chronacta/cluster-log.js');
const FIXTURE = resolve(ROOT, 'test/chronacta-ha/fixtures/member.mjs');

interface Answer {
  req: number;
  ok?: unknown;
  error?: { code: string; message: string; details: Record<string, unknown> };
}

class Member {
  private req = 0;
  private readonly waiting = new Map<number, (a: Answer) => void>();
  port = 0;
  exited = false;
  private constructor(
    readonly id: number,
    readonly started: Started,
  ) {}

  get proc(): ChildProcess {
    return this.started.child;
  }

  static async start(id: number, dir: string, n: number, port: number): Promise<Member> {
    const started = startNode(FIXTURE, [pathToFileURL(MODULE).href, String(id), dir, String(n), String(port)]);
    const m = new Member(id, started);
    const proc = started.child;
    // A killed member: its pending requests are answered below (startNode ignores stdin errors).
    proc.on('exit', () => {
      m.exited = true;
      for (const w of m.waiting.values())
        w({ req: 0, error: { code: 'EXITED', message: 'member exited', details: {} } });
      m.waiting.clear();
    });
    const ready = new Promise<void>((res, rej) => {
      proc.once('exit', (code) => rej(new Error(`member ${id} exited (${code}): ${started.stderr()}`)));
      createInterface({ input: proc.stdout as Readable }).on('line', (line) => {
        const a = JSON.parse(line) as Answer & { port?: number };
        if (a.port !== undefined && a.req === undefined) {
          m.port = a.port;
          res();
          return;
        }
        m.waiting.get(a.req)?.(a);
        m.waiting.delete(a.req);
      });
    });
    await ready;
    return m;
  }

  ask(op: string, extra: Record<string, unknown> = {}): Promise<Answer> {
    const req = ++this.req;
    if (this.exited) return Promise.resolve({ req, error: { code: 'EXITED', message: 'member exited', details: {} } });
    return new Promise((res) => {
      this.waiting.set(req, res);
      this.proc.stdin?.write(`${JSON.stringify({ op, req, ...extra })}\n`);
    });
  }

  async status(): Promise<{
    role: string;
    term: number;
    lastPosition: string;
    acceptingWrites: boolean;
    leader: number;
  }> {
    return (await this.ask('status')).ok as never;
  }

  async read(): Promise<string[]> {
    return (await this.ask('read')).ok as string[];
  }

  /** SIGKILL by its PID; resolves once it has exited. */
  async kill(): Promise<void> {
    await this.started.stop('SIGKILL');
  }

  /** Closes its stdin (it ends by itself), SIGKILL by PID after 5 s. */
  async stop(): Promise<void> {
    if (!this.started.running()) return;
    this.proc.stdin?.end();
    const t = setTimeout(() => this.started.stop('SIGKILL'), 5000);
    await this.started.exited;
    clearTimeout(t);
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await stopStarted();
});

async function leaderAmong(members: Member[], ms = 10_000): Promise<Member> {
  return until(
    async () => {
      const live = members.filter((m) => !m.exited);
      const st = await Promise.all(live.map((m) => m.status()));
      const ls = live.filter((_, i) => st[i]?.acceptingWrites);
      return ls.length === 1 && (ls[0] as Member);
    },
    { timeoutMs: ms, what: 'one leader', intervalMs: 30 },
  );
}

describe.skipIf(!existsSync(MODULE))('replicated log: members as processes (build dist first)', () => {
  it('TestLeaderKillCommittedEventsSurvive', async () => {
    const root = mkdtempSync(join(tmpdir(), 'plexus-ha-proc-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const n = 3;
    const members: Member[] = [];
    for (let id = 1; id <= n; id++) {
      const m = await Member.start(id, join(root, `m${id}`), n, 0);
      members.push(m);
      cleanups.push(() => (members[id - 1] as Member).stop());
    }
    const mesh = await ProxyMesh.start(members.map((m) => m.port));
    cleanups.push(() => mesh.close());
    const wire = async (m: Member) => {
      const peers: Record<string, string> = {};
      for (let j = 1; j <= n; j++) if (j !== m.id) peers[j] = mesh.addressFor(m.id - 1, j - 1);
      await m.ask('dial', { peers });
    };
    for (const m of members) await wire(m);

    const leader = await leaderAmong(members);
    // Appends in flight when the leader dies: acknowledged ones must survive.
    const acked: { first: string; text: string }[] = [];
    let stop = false;
    const writer = (async () => {
      for (let i = 0; !stop; i++) {
        const a = await leader.ask('append', { payloads: [`k${i}`] });
        if (a.error) return a.error.code;
        acked.push({ first: String((a.ok as { first: string }).first), text: `k${i}` });
      }
      return 'stopped';
    })();
    await until(() => acked.length >= 30, { timeoutMs: 10_000, what: 'appends before the kill' });
    await leader.kill();
    stop = true;
    expect(leader.exited).toBe(true);
    const rest = members.filter((m) => m !== leader);
    const second = await leaderAmong(rest);
    const after = await second.ask('append', { payloads: ['after-kill'] });
    expect(after.error).toBeUndefined();
    // Every acknowledged append is on both survivors at the position it was acknowledged with.
    const target = (await second.status()).lastPosition;
    for (const m of rest) {
      await until(async () => (await m.status()).lastPosition === target, {
        what: `member ${m.id} to apply the new leader's entry`,
      });
    }
    const reads = await Promise.all(rest.map((m) => m.read()));
    expect(reads[1]).toEqual(reads[0]);
    const byPos = new Map((reads[0] as string[]).map((r) => [r.split('|')[0], r.split('|')[3]]));
    for (const a of acked) expect(byPos.get(a.first)).toBe(a.text);
    expect(reads[0]?.[reads[0].length - 1]?.split('|')[3]).toBe('after-kill');
    const texts = (reads[0] as string[]).map((r) => r.split('|')[3]);
    expect(new Set(texts).size).toBe(texts.length); // nothing twice
    expect(await writer).not.toBe('stopped'); // it was cut off by the kill, not by `stop`

    // The killed member restarts on its files (same port, behind the same proxies) and catches up.
    const back = await Member.start(leader.id, join(root, `m${leader.id}`), n, leader.port);
    members[leader.id - 1] = back;
    await wire(back);
    const last = (await second.status()).lastPosition;
    await until(async () => (await back.status()).lastPosition === last, {
      what: 'the restarted member to catch up',
    });
    expect(await back.read()).toEqual(await second.read());
    expect((await back.status()).role).toBe('follower');
  });
});
