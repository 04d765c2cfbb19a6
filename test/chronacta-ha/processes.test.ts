/**
 * TestLeaderKillCommittedEventsSurvive with real processes: three members, each a child
 * process (fixtures/member.mjs, importing dist/), every link through a fault-injecting proxy.
 * The leader is SIGKILLed by PID; every acknowledged append must be on the survivors at its
 * position, the new leader goes on, and the killed member, restarted on its files, catches up
 * with everything exactly once. Build first: npx tsc -p tsconfig.build.json.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { ROOT } from '../helpers/paths.js';
import { until } from '../helpers/until.js';
import { sleep } from './helpers.js';

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
    readonly proc: ChildProcessWithoutNullStreams,
  ) {}

  static async spawn(id: number, dir: string, n: number, port: number): Promise<Member> {
    const proc = spawn(
      process.execPath,
      [FIXTURE, pathToFileURL(MODULE).href, String(id), dir, String(n), String(port)],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    const m = new Member(id, proc);
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    proc.stdin.on('error', () => undefined); // a killed member: its pending requests are answered below
    proc.on('exit', () => {
      m.exited = true;
      for (const w of m.waiting.values())
        w({ req: 0, error: { code: 'EXITED', message: 'member exited', details: {} } });
      m.waiting.clear();
    });
    const ready = new Promise<void>((res, rej) => {
      proc.once('exit', (code) => rej(new Error(`member ${id} exited (${code}): ${stderr}`)));
      createInterface({ input: proc.stdout }).on('line', (line) => {
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
      this.proc.stdin.write(`${JSON.stringify({ op, req, ...extra })}\n`);
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

  kill(): Promise<void> {
    if (this.exited) return Promise.resolve();
    return new Promise((res) => {
      this.proc.once('exit', () => res());
      process.kill(this.proc.pid as number, 'SIGKILL');
    });
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((res) => this.proc.once('exit', () => res()));
    this.proc.stdin.end();
    const t = setTimeout(() => process.kill(this.proc.pid as number, 'SIGKILL'), 5000);
    await gone;
    clearTimeout(t);
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function leaderAmong(members: Member[], ms = 10_000): Promise<Member> {
  const end = Date.now() + ms;
  for (;;) {
    const live = members.filter((m) => !m.exited);
    const st = await Promise.all(live.map((m) => m.status()));
    const ls = live.filter((_, i) => st[i]?.acceptingWrites);
    if (ls.length === 1) return ls[0] as Member;
    if (Date.now() > end) throw new Error('no leader');
    await sleep(30);
  }
}

describe.skipIf(!existsSync(MODULE))('replicated log: members as processes (build dist first)', () => {
  it('TestLeaderKillCommittedEventsSurvive', async () => {
    const root = mkdtempSync(join(tmpdir(), 'plexus-ha-proc-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const n = 3;
    const members: Member[] = [];
    for (let id = 1; id <= n; id++) {
      const m = await Member.spawn(id, join(root, `m${id}`), n, 0);
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
      const end = Date.now() + 10_000;
      while ((await m.status()).lastPosition !== target) {
        if (Date.now() > end) throw new Error(`member ${m.id} did not apply the new leader's entry`);
        await sleep(20);
      }
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
    const back = await Member.spawn(leader.id, join(root, `m${leader.id}`), n, leader.port);
    members[leader.id - 1] = back;
    await wire(back);
    const last = (await second.status()).lastPosition;
    const end = Date.now() + 10_000;
    while ((await back.status()).lastPosition !== last) {
      if (Date.now() > end) throw new Error('the restarted member did not catch up');
      await sleep(30);
    }
    expect(await back.read()).toEqual(await second.read());
    expect((await back.status()).role).toBe('follower');
  });
});
