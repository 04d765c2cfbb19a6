/**
 * Journal shipping from a member in a process of its own (test/cluster/fixtures/ship-sender.mjs:
 * a ShipSender from dist/ over a FileLog, mutual TLS 1.3 on loopback with the cluster's node
 * certificates). The receiver here stores into a FileLog (fsync on) with slow appends; the
 * sender process is killed (SIGKILL, by PID) midway, started again on the same directory, and
 * the stream resumes from the receiver's end: in the end the receiver holds exactly the
 * sender's journal. Needs `npm run build` first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ShipReceiver } from '../../ts/cluster/shipping.js';
import { nodeIdentityPolicy } from '../../ts/net/ca.js';
import { freePort } from '../../ts/net/ports.js';
import { tlsEndpoint } from '../../ts/net/tls-endpoint.js';
import { openLog } from '../../ts/storage/index.js';
import { built, type Started, startNode, stopStarted } from '../helpers/processes.js';
import { refusal } from '../helpers/refusal.js';
import { nodeCreds } from '../net/helpers.js';
import { journal, SlowLog, sameRecords } from './shipping-helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/ship-sender.mjs', import.meta.url));
const KIB = 1024;
const dirs: string[] = [];
afterEach(() => stopStarted());
afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'plexus-ship-procs-'));
  dirs.push(d);
  return d;
}

async function startSender(config: string): Promise<Started> {
  const proc = startNode(FIXTURE, [config]);
  await proc.line(/"ev":"listening"/, { what: 'the sender process listening', timeoutMs: 30_000 });
  return proc;
}

describe.skipIf(!built)('journal shipping from a sender process (mutual TLS, SIGKILL and restart)', () => {
  it('resumes from the receiver end after the sender process is killed midway, and ends with the same journal', async () => {
    const sourceDir = tempDir();
    const source = await journal(sourceDir, 512, 8 * KIB); // about 4 MiB
    const last = source.last;
    await source.close();
    const a = await nodeCreds('a');
    const b = await nodeCreds('b');
    const port = await freePort();
    const config = join(tempDir(), 'sender.json');
    writeFileSync(
      config,
      JSON.stringify({
        dir: sourceDir,
        port,
        cluster: 'c1',
        peer: 'b',
        shard: 6,
        epoch: '7',
        window: 256 * KIB,
        maxChunk: 64 * KIB,
        tls: { cert: a.cert, key: a.key, ca: a.ca },
      }),
    );
    const endpoint = tlsEndpoint({ cert: b.cert, key: b.key, ca: b.ca }, nodeIdentityPolicy('c1'));
    const dial = (): Promise<tls.TLSSocket> =>
      new Promise((resolve, reject) => {
        const s = tls.connect(
          endpoint.clientOptions(
            { expect: 'a', mismatch: (n) => new Error(`the server is ${String(n)}`) },
            { host: '127.0.0.1', port },
          ),
        );
        s.once('secureConnect', () => resolve(s));
        s.once('error', reject);
      });

    const target = await openLog(tempDir(), { fsync: 'batch' });
    let sender = await startSender(config);
    let killed = false;
    // The sender process is killed once a quarter of the journal is stored here.
    const slow = new SlowLog(target, 3, (log) => {
      if (!killed && log.last >= last / 4n) {
        killed = true;
        process.kill(sender.pid, 'SIGKILL');
      }
    });
    const conn = await dial();
    conn.on('error', () => {});
    const cut = await refusal(
      new ShipReceiver({ shard: 6, log: slow, window: 256 * KIB, maxChunk: 64 * KIB }).receive(conn),
    );
    expect(cut.code).toBe('PLX_SHIP_CLOSED');
    expect((await sender.exited).signal).toBe('SIGKILL');
    conn.destroy();
    const held = target.last;
    expect(held).toBeGreaterThanOrEqual(last / 4n);
    expect(held).toBeLessThan(last);
    expect(cut.details.held).toBe(Number(held));

    sender = await startSender(config);
    const conn2 = await dial();
    const receiver = new ShipReceiver({ shard: 6, log: target, window: 256 * KIB, maxChunk: 64 * KIB });
    const got = await receiver.receive(conn2);
    expect(got).toMatchObject({ shard: 6, epoch: 7n, from: held, end: last, records: Number(last - held) });
    expect(got.maxHeld).toBeLessThanOrEqual(256 * KIB);
    const served = JSON.parse(await sender.line(/"ev":"served"/, { what: 'the sender to report the stream' }));
    expect(served).toMatchObject({ from: String(held), end: String(last), records: Number(last - held) });
    expect(served.maxInFlight).toBeLessThanOrEqual(256 * KIB);
    conn2.destroy();
    await sender.stop('SIGKILL');

    const reopened = await openLog(sourceDir, { fsync: 'batch' });
    await sameRecords(reopened, target, last);
    await reopened.close();
    await target.close();
  }, 180_000);
});
