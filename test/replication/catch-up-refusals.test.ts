/**
 * A member at the other end of a catch-up stream that answers out of turn, closes the stream or
 * stays silent is refused with a code (docs/errors.md), over a real loopback connection.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeRecords, encodeRefused } from '../../ts/codec/catch-up.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { catchUpRefusal } from '../../ts/replication/errors.js';
import { queryHolding } from '../../ts/replication/snapshot.js';
import { freePort } from '../helpers/ports.js';

const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A loopback server whose every connection runs `onConnection`; a client socket connected to it. */
async function pair(onConnection: (s: Socket) => void): Promise<Socket> {
  const server = createServer((s) => {
    sockets.push(s);
    onConnection(s);
  });
  servers.push(server);
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const client = connect(port, '127.0.0.1');
  sockets.push(client);
  await new Promise<void>((r, j) => client.once('connect', r).once('error', j));
  return client;
}

async function refusal(p: Promise<unknown>): Promise<PlexusError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isPlexusError(err), String(err)).toBe(true);
  return err as PlexusError;
}

describe('queryHolding', () => {
  it('refuses an answer of another type than HOLDING (PLX_REPLICATION_BAD_FRAME, reason type)', async () => {
    const client = await pair((s) => s.once('data', () => s.write(encodeRefused(1n, 5n, 1, 'compacted'))));
    const e = await refusal(queryHolding(client, 5000));
    expect(e.code).toBe('PLX_REPLICATION_BAD_FRAME');
    expect(e.details.reason).toBe('type');
  });

  it('refuses a RECORDS frame sent in answer to a QUERY', async () => {
    const client = await pair((s) => s.once('data', () => s.write(encodeRecords(1n, 1n, [], catchUpRefusal))));
    const e = await refusal(queryHolding(client, 5000));
    expect(e.code).toBe('PLX_REPLICATION_BAD_FRAME');
  });

  it('a stream closed before the answer is PLX_RAFT_TRANSPORT_UNREACHABLE, reason closed', async () => {
    const client = await pair((s) => s.once('data', () => s.destroy()));
    const e = await refusal(queryHolding(client, 5000));
    expect(e.code).toBe('PLX_RAFT_TRANSPORT_UNREACHABLE');
    expect(e.details.reason).toBe('closed');
  });

  it('no answer within the timeout is PLX_RAFT_TRANSPORT_UNREACHABLE, reason timeout', async () => {
    const client = await pair(() => {});
    const e = await refusal(queryHolding(client, 100));
    expect(e.code).toBe('PLX_RAFT_TRANSPORT_UNREACHABLE');
    expect(e.details.reason).toBe('timeout');
  });
});
