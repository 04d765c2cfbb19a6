/**
 * A real 3-member etcd cluster on loopback for tests: `startEtcd()` picks six ports
 * (ts/net/ports.ts), starts one `etcd` process per member with its data directory under a new
 * temporary directory (fsync on: `--unsafe-no-fsync` is never passed), and resolves once every
 * member answers `/health` and the cluster has a leader. `leader()` finds the leader member
 * (by `/v3/maintenance/status`), `kill(member)` SIGKILLs a member by its PID, `restart(member)`
 * starts it again on its data directory, and `stop()` kills every process by PID and removes
 * the directories. A test file starts one cluster in `beforeAll` and isolates its tests by key
 * prefix; `etcdAvailable` tells whether `etcd` is on PATH at all.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from '../../ts/net/ports.js';
import { until } from './until.js';

/** Whether an `etcd` binary is on PATH (tests that need one skip with that reason otherwise). */
export const etcdAvailable: boolean = spawnSync('etcd', ['--version'], { stdio: 'ignore' }).status === 0;

export interface EtcdMember {
  readonly name: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  /** The PID of the running process (undefined while killed). */
  pid: number | undefined;
  child: ChildProcess | undefined;
  /** Everything the process wrote on stderr (etcd logs there). */
  log: string;
}

export interface EtcdCluster {
  readonly members: readonly EtcdMember[];
  /** Every member's client URL. */
  readonly clientUrls: readonly string[];
  /** The member that is the Raft leader now (waits for one). */
  leader(timeoutMs?: number): Promise<EtcdMember>;
  /** SIGKILLs `m` by its PID and waits for it to exit. */
  kill(m: EtcdMember): Promise<void>;
  /** Starts a killed member again on its data directory and waits until it answers `/health`. */
  restart(m: EtcdMember): Promise<void>;
  /** Kills every process by PID and removes the data directories. */
  stop(): Promise<void>;
}

/** POSTs (or GETs, without a body) `path` on `url`; resolves with the status and parsed JSON. */
export function etcdHttp(
  url: string,
  path: string,
  body?: unknown,
  timeoutMs = 2000,
): Promise<{ status: number; json: unknown }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request(
      new URL(path, url),
      {
        method: data ? 'POST' : 'GET',
        headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {},
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          try {
            resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
          } catch (e) {
            reject(e);
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${url}${path} timed out`)));
    req.on('error', reject);
    req.end(data);
  });
}

async function healthy(m: EtcdMember): Promise<boolean> {
  try {
    const r = await etcdHttp(m.clientUrl, '/health', undefined, 1000);
    return r.status === 200 && (r.json as { health?: string }).health === 'true';
  } catch {
    return false;
  }
}

export async function startEtcd(opts: { readonly timeoutMs?: number } = {}): Promise<EtcdCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-etcd-'));
  const ports = await freePorts(6);
  const members: EtcdMember[] = [0, 1, 2].map((i) => ({
    name: `e${i}`,
    clientUrl: `http://127.0.0.1:${ports[2 * i]}`,
    peerUrl: `http://127.0.0.1:${ports[2 * i + 1]}`,
    dataDir: join(dir, `e${i}`),
    pid: undefined,
    child: undefined,
    log: '',
  }));
  const initial = members.map((m) => `${m.name}=${m.peerUrl}`).join(',');
  const token = `plexus-test-${process.pid}-${ports[0]}`;

  const launch = (m: EtcdMember, state: 'new' | 'existing') => {
    const child = spawn(
      'etcd',
      [
        '--name',
        m.name,
        '--data-dir',
        m.dataDir,
        '--listen-client-urls',
        m.clientUrl,
        '--advertise-client-urls',
        m.clientUrl,
        '--listen-peer-urls',
        m.peerUrl,
        '--initial-advertise-peer-urls',
        m.peerUrl,
        '--initial-cluster',
        initial,
        '--initial-cluster-token',
        token,
        '--initial-cluster-state',
        state,
        // Elections quick enough for a test, slow enough for a loaded machine.
        '--heartbeat-interval',
        '100',
        '--election-timeout',
        '1000',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    m.child = child;
    m.pid = child.pid;
    m.log = '';
    child.stderr?.on('data', (c: Buffer) => {
      if (m.log.length < 1_000_000) m.log += c.toString('utf8');
    });
    child.once('exit', () => {
      if (m.child === child) {
        m.pid = undefined;
        m.child = undefined;
      }
    });
  };

  const killPid = async (m: EtcdMember) => {
    const child = m.child;
    const pid = m.pid;
    if (child === undefined || pid === undefined) return;
    const exited = new Promise<void>((res) => {
      if (child.exitCode !== null || child.signalCode !== null) res();
      else child.once('exit', () => res());
    });
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
    await exited;
  };

  const cluster: EtcdCluster = {
    members,
    clientUrls: members.map((m) => m.clientUrl),
    async leader(timeoutMs = 20_000) {
      return until(
        async () => {
          for (const m of members) {
            if (m.pid === undefined) continue;
            try {
              const r = await etcdHttp(m.clientUrl, '/v3/maintenance/status', {}, 1000);
              const s = r.json as { header?: { member_id?: string }; leader?: string };
              if (s.leader !== undefined && s.leader === s.header?.member_id) return m;
            } catch {
              // this member does not answer now; ask the next
            }
          }
          return undefined;
        },
        { timeoutMs, what: 'an etcd leader', intervalMs: 50 },
      );
    },
    kill: killPid,
    async restart(m) {
      if (m.pid !== undefined) throw new Error(`${m.name} still runs (PID ${m.pid})`);
      launch(m, 'existing');
      await until(() => healthy(m), {
        timeoutMs: opts.timeoutMs ?? 30_000,
        what: `${m.name} healthy again`,
        intervalMs: 50,
      });
    },
    async stop() {
      for (const m of members) await killPid(m);
      await rm(dir, { recursive: true, force: true });
    },
  };

  try {
    for (const m of members) launch(m, 'new');
    await until(
      async () => {
        for (const m of members) {
          if (m.pid === undefined) throw new Error(`${m.name} exited: ${m.log.slice(-2000)}`);
          if (!(await healthy(m))) return false;
        }
        return true;
      },
      { timeoutMs: opts.timeoutMs ?? 30_000, what: 'a healthy 3-member etcd cluster', intervalMs: 50 },
    );
    await cluster.leader();
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  return cluster;
}
