// The CPU a checkpoint cannot avoid, per rank, measured on this machine (bench/checkpoint.mjs
// prints it next to the results): for a state of `mib` MiB, three SHA-256 passes
// (node:crypto: the state for the header, the file for the COMMIT, the buddy's copy), the
// TLS 1.3 encryption and decryption of the file (one connection on loopback in this
// process, Ed25519 certificates as the mesh uses, the socket copies included) and two
// durable writes with fileStore (the rank file and the buddy copy: write, fsync, rename,
// directory fsync). Each is the median CPU time (user + system, all threads) of 3 runs.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { createJobCa, issueRankCertificate } from 'plexus/crypto';
import { fileStore } from 'plexus/sperli';

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

async function cpuOf(fn, reps = 3) {
  const out = [];
  for (let r = 0; r < reps; r++) {
    const c0 = process.cpuUsage();
    await fn(r);
    const c = process.cpuUsage(c0);
    out.push((c.user + c.system) / 1000);
  }
  return median(out);
}

async function tlsPair() {
  const jobId = new Uint8Array(16).fill(7);
  const ca = await createJobCa({ jobId });
  const a = await issueRankCertificate(ca, { jobId, rank: 0, host: '127.0.0.1' });
  const b = await issueRankCertificate(ca, { jobId, rank: 1, host: '127.0.0.1' });
  const server = tls.createServer({
    ca: [ca.cert],
    cert: a.cert,
    key: a.key,
    minVersion: 'TLSv1.3',
    requestCert: true,
  });
  let onData = () => {};
  server.on('secureConnection', (s) => s.on('data', (d) => onData(d.length)));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = tls.connect({
    port: server.address().port,
    host: '127.0.0.1',
    ca: [ca.cert],
    cert: b.cert,
    key: b.key,
  });
  await new Promise((resolve, reject) => {
    client.once('secureConnect', resolve);
    client.once('error', reject);
  });
  return {
    /** Sends `bytes` in 1 MiB writes; resolves once the server has read them all. */
    send(bytes) {
      let got = 0;
      const done = new Promise((resolve) => {
        onData = (n) => {
          got += n;
          if (got >= bytes.length) resolve();
        };
      });
      for (let at = 0; at < bytes.length; at += 2 ** 20) client.write(bytes.subarray(at, at + 2 ** 20));
      return done;
    },
    close() {
      client.destroy();
      server.close();
    },
  };
}

/** CPU ms per rank of the floor's parts for `mib` MiB of state. */
export async function measureFloor(mib) {
  const state = new Uint8Array(mib * 2 ** 20);
  for (let i = 0; i < state.length; i += 4096) state[i] = i / 4096;
  const sha256 = await cpuOf(() => createHash('sha256').update(state).digest());
  const pair = await tlsPair();
  let tlsMs;
  try {
    tlsMs = await cpuOf(() => pair.send(state));
  } finally {
    pair.close();
  }
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bench-floor-'));
  let write;
  try {
    write = await cpuOf((r) => fileStore.write(join(dir, `f${r}`), state));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { sha256, tls: tlsMs, write, total: 3 * sha256 + tlsMs + 2 * write };
}
