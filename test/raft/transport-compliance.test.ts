/**
 * RaftTcpTransport runs the Raft transport compliance suite on loopback: three members on
 * ports picked by ts/net/ports.ts, once over plain TCP and once over mutual TLS 1.3 with
 * certificates of one CA (each naming its member), every member connected to the others.
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { certificateIdentity, createJobCa, issueRankCertificate } from '../../ts/crypto/x509.js';
import { freePorts } from '../../ts/net/ports.js';
import type { Message } from '../../ts/raft/types.js';
import { RaftTcpTransport, type RaftTlsOptions } from '../../ts/raft-io/tcp-transport.js';
import { type RaftTransportHarness, raftTransportSuite } from '../compliance/raft-transport.suite.js';
import { until } from '../helpers/until.js';

const MAX_MESSAGE = 64 * 1024;

function greeting(from: number, to: number): Uint8Array {
  const b = new Uint8Array(24);
  const dv = new DataView(b.buffer);
  dv.setUint32(0, 0x48525850, true); // "PXRH"
  dv.setUint32(4, 1, true);
  dv.setBigUint64(8, BigInt(from), true);
  dv.setBigUint64(16, BigInt(to), true);
  return b;
}

function heartbeat(from: number, to: number): Message {
  return {
    type: 'MsgHeartbeat',
    from,
    to,
    term: 1,
    logTerm: 0,
    index: 0,
    commit: 0,
    reject: false,
    rejectHint: 0,
    entries: [],
  };
}

async function open(tls: boolean): Promise<RaftTransportHarness & { close(): Promise<void> }> {
  let creds: RaftTlsOptions[] | undefined;
  if (tls) {
    const jobId = randomBytes(16);
    const ca = await createJobCa({ jobId });
    creds = [];
    for (const rank of [1, 2, 3]) {
      const r = await issueRankCertificate(ca, { jobId, rank, host: '127.0.0.1' });
      creds.push({ key: r.key, cert: r.cert, ca: ca.cert, peerId: (c) => certificateIdentity(c).rank });
    }
  }
  const ports = await freePorts(3);
  const peers = new Map(ports.map((p, i) => [i + 1, `127.0.0.1:${p}`]));
  const refusals: { code: unknown }[] = [];
  const transports: RaftTcpTransport[] = [];
  for (const id of [1, 2, 3]) {
    transports.push(
      await RaftTcpTransport.start({
        id,
        port: ports[id - 1],
        peers: new Map([...peers].filter(([p]) => p !== id)),
        tls: creds?.[id - 1],
        retryMs: 20,
        maxRetryMs: 100,
        maxMessageBytes: MAX_MESSAGE,
        logger: { warn: (_m, d) => refusals.push({ code: d?.code }) },
      }),
    );
  }
  // Dial every peer (the first message to a peer not yet connected is dropped and starts the dial).
  await until(
    () => {
      let all = true;
      transports.forEach((t, i) => {
        for (const id of [1, 2, 3]) {
          if (id === i + 1 || t.connected(id)) continue;
          all = false;
          t.send([heartbeat(i + 1, id)]);
        }
      });
      return all;
    },
    { timeoutMs: 10_000, intervalMs: 10, what: 'the members to connect' },
  );
  const raw = (from: number, to: number, bytes: Uint8Array) =>
    new Promise<void>((resolve) => {
      const port = ports[to - 1] as number;
      const payload = Buffer.concat([greeting(from, to), bytes]);
      const c = creds?.[from - 1];
      const s = c
        ? tlsConnect(
            { host: '127.0.0.1', port, key: c.key, cert: c.cert, ca: c.ca, checkServerIdentity: () => undefined },
            () => s.write(payload),
          )
        : connect(port, '127.0.0.1', () => s.write(payload));
      s.on('close', () => resolve());
      s.on('error', () => undefined);
    });
  return {
    transports,
    refusals,
    maxMessageBytes: MAX_MESSAGE,
    raw,
    // The pause between two looks of the suite's waits for a delivery (real sockets).
    settle: () => new Promise((r) => setTimeout(r, 5)),
    close: async () => {
      for (const t of transports) await t.close();
    },
  };
}

for (const tls of [false, true]) {
  raftTransportSuite(
    `RaftTcpTransport (${tls ? 'mutual TLS 1.3' : 'plain TCP'} on loopback)`,
    { setup: () => open(tls), teardown: (h) => h.close() },
    { ordered: true, bytes: true },
  );
}
