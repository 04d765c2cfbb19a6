import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FaultProxy, ProxyMesh } from '../helpers/fault-proxy.js';

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
  return { server, port: (server.address() as { port: number }).port };
}

function dial(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
    open.push({ close: () => s.destroy() });
  });
}

/** Sends `text` and resolves with what comes back within `ms`, or 'silence' or 'reset'. */
function roundTrip(s: Socket, text: string, ms = 300): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const done = (v: string) => {
      clearTimeout(t);
      s.removeAllListeners('data');
      resolve(v);
    };
    const t = setTimeout(() => done(got === '' ? 'silence' : got), ms);
    s.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.length >= text.length) done(got);
    });
    s.once('close', () => done('reset'));
    s.once('error', () => done('reset'));
    s.write(text);
  });
}

describe('fault-injecting TCP proxy', () => {
  it('passes bytes, delays them in order, blackholes, partitions and heals', async () => {
    const { port } = await echoServer();
    const proxy = await FaultProxy.start({ port });
    open.push(proxy);
    const a = await dial(proxy.port);
    expect(await roundTrip(a, 'hello')).toBe('hello');

    proxy.delay(80);
    const t0 = Date.now();
    expect(await roundTrip(a, 'slow', 1000)).toBe('slow');
    // Both directions are delayed.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    proxy.heal();

    proxy.blackhole();
    expect(await roundTrip(a, 'lost', 200)).toBe('silence');
    expect(proxy.stats.bytesDiscarded).toBeGreaterThan(0);
    proxy.heal();
    expect(await roundTrip(a, 'back')).toBe('back');

    proxy.partition();
    expect(a.destroyed || (await roundTrip(a, 'x')) === 'reset').toBe(true);
    const b = connect(proxy.port, '127.0.0.1');
    open.push({ close: () => b.destroy() });
    const closed = await new Promise<boolean>((r) => {
      b.once('close', () => r(true));
      setTimeout(() => r(false), 1000);
    });
    expect(closed).toBe(true);

    proxy.heal();
    const c = await dial(proxy.port);
    expect(await roundTrip(c, 'healed')).toBe('healed');
  });

  it('drops connections with the given probability', async () => {
    const { port } = await echoServer();
    const proxy = await FaultProxy.start({ port }, () => 0);
    open.push(proxy);
    proxy.dropConnections(0.5);
    const a = await dial(proxy.port);
    expect(await roundTrip(a, 'x')).toBe('reset');
    expect(proxy.stats.resets).toBe(1);
  });

  it('cuts exactly the links across a mesh partition', async () => {
    const servers = await Promise.all([echoServer(), echoServer(), echoServer()]);
    const mesh = await ProxyMesh.start(servers.map((s) => s.port));
    open.push(mesh);
    mesh.partition([[0, 1], [2]]);
    expect(mesh.link(0, 1).currentMode).toBe('pass');
    expect(mesh.link(1, 0).currentMode).toBe('pass');
    for (const [i, j] of [
      [0, 2],
      [2, 0],
      [1, 2],
      [2, 1],
    ] as const) {
      expect(mesh.link(i, j).currentMode).toBe('partition');
    }
    const s = await dial(mesh.link(0, 1).port);
    expect(await roundTrip(s, 'in')).toBe('in');
    mesh.isolate(0);
    expect(mesh.link(1, 2).currentMode).toBe('pass');
    expect(mesh.link(1, 0).currentMode).toBe('partition');
    mesh.heal();
    expect(mesh.link(2, 0).currentMode).toBe('pass');
    expect(() => mesh.link(1, 1)).toThrow();
  });
});
