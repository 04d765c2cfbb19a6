/**
 * Ports for processes that must know their addresses before they bind (the demos' cluster
 * files and node configs, the SPERLI launcher's rank addresses, the benchmarks' servers, and
 * the tests'): the one port picker of plexus. A port is taken at random below the kernel's
 * ephemeral range and checked free by binding it: the ephemeral range is where `listen(0)`
 * and every outgoing connection's source port come from, so a port found there by
 * `listen(0)` can be handed to some connection (the cluster's own members connecting to
 * each other, say) before the process meant for it binds it, which then fails with
 * EADDRINUSE.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { PlexusError } from '../core/errors.js';

let low: number | undefined;

/** The first port of the ephemeral range (32768 when it cannot be read); read once. */
export function ephemeralLow(): number {
  if (low === undefined) {
    try {
      const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
      low = Number.isInteger(first) && first > 11_000 ? first : 32_768;
    } catch {
      low = 32_768;
    }
  }
  return low;
}

function bindable(port: number, host: string): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.once('error', () => res(false));
    s.listen(port, host, () => s.close(() => res(true)));
  });
}

/** A port free on `host` at the moment of asking, from 10000 up to the ephemeral range. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const top = ephemeralLow();
  for (let i = 0; i < 1000; i++) {
    const port = 10_000 + Math.floor(Math.random() * (top - 10_000));
    if (await bindable(port, host)) return port;
  }
  throw new PlexusError('PLX_NET_NO_FREE_PORT', `no free port below ${top} on ${host} after 1000 tries`, { host });
}

/** `n` distinct free ports on `host`. */
export async function freePorts(n: number, host = '127.0.0.1'): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < n) {
    const p = await freePort(host);
    if (!ports.includes(p)) ports.push(p);
  }
  return ports;
}
