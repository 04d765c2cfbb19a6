// A real 3-member etcd cluster on loopback for the membership benchmarks, started as
// test/helpers/etcd.ts starts it (which a plain-node bench cannot import): six ports from
// ts/net/ports.ts, one `etcd` process per member with its data directory under a new
// temporary directory (fsync on), ready once every member answers /health and a leader is
// elected. Each process is tracked by its PID (procs.mjs `track`) and `stop()` kills it by PID.
import { spawn, spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { join } from 'node:path';
import { dist, removeDir, sleep, tempDir, track } from './procs.mjs';

export const etcdAvailable = spawnSync('etcd', ['--version'], { stdio: 'ignore' }).status === 0;

export function etcdHttp(url, path, body, timeoutMs = 2000) {
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
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
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

async function healthy(url) {
  try {
    const r = await etcdHttp(url, '/health', undefined, 1000);
    return r.status === 200 && r.json.health === 'true';
  } catch {
    return false;
  }
}

/** Starts the cluster; resolves with `{ clientUrls, members, stop() }`. */
export async function startEtcd({ timeoutMs = 30_000 } = {}) {
  const { freePorts } = await dist('net/ports.js');
  const dir = tempDir('plexus-bench-etcd-');
  const ports = await freePorts(6);
  const members = [0, 1, 2].map((i) => ({
    name: `e${i}`,
    clientUrl: `http://127.0.0.1:${ports[2 * i]}`,
    peerUrl: `http://127.0.0.1:${ports[2 * i + 1]}`,
    dataDir: join(dir, `e${i}`),
    proc: undefined,
    log: '',
  }));
  const initial = members.map((m) => `${m.name}=${m.peerUrl}`).join(',');
  const token = `plexus-bench-${process.pid}-${ports[0]}`;
  for (const m of members) {
    const child = spawn(
      'etcd',
      [
        ...['--name', m.name, '--data-dir', m.dataDir],
        ...['--listen-client-urls', m.clientUrl, '--advertise-client-urls', m.clientUrl],
        ...['--listen-peer-urls', m.peerUrl, '--initial-advertise-peer-urls', m.peerUrl],
        ...['--initial-cluster', initial, '--initial-cluster-token', token, '--initial-cluster-state', 'new'],
        ...['--heartbeat-interval', '100', '--election-timeout', '1000'],
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    m.proc = child;
    track(child.pid, child);
    child.stderr.on('data', (c) => {
      if (m.log.length < 1_000_000) m.log += c.toString('utf8');
    });
  }
  const stop = async () => {
    for (const m of members) {
      const c = m.proc;
      if (c === undefined) continue;
      if (c.exitCode === null && c.signalCode === null) {
        const exited = new Promise((r) => c.once('exit', r));
        try {
          process.kill(c.pid, 'SIGKILL');
        } catch {
          // already gone
        }
        await exited;
      }
      m.proc = undefined;
    }
    removeDir(dir);
  };
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const m of members) {
        if (m.proc.exitCode !== null) throw new Error(`etcd ${m.name} exited: ${m.log.slice(-2000)}`);
      }
      const ok = await Promise.all(members.map((m) => healthy(m.clientUrl)));
      if (ok.every(Boolean)) break;
      if (Date.now() > deadline) throw new Error('no healthy 3-member etcd cluster in time');
      await sleep(50);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { clientUrls: members.map((m) => m.clientUrl), members, stop };
}
