/** Free ports chosen below the ephemeral range (ts/net/ports.ts). */
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ephemeralLow, freePorts } from '../../ts/net/ports.js';

describe('freePorts', () => {
  it('gives distinct ports below the ephemeral range that can be bound', async () => {
    const low = ephemeralLow();
    expect(low).toBeGreaterThan(10_000);
    const ports = await freePorts(8);
    expect(new Set(ports).size).toBe(8);
    for (const p of ports) {
      expect(p).toBeGreaterThanOrEqual(10_000);
      expect(p).toBeLessThan(low);
      const s = createServer();
      await new Promise<void>((res, rej) => {
        s.once('error', rej);
        s.listen(p, '127.0.0.1', () => res());
      });
      await new Promise((r) => s.close(r));
    }
  });

  it('never gives a port that is in use', async () => {
    // hold every port it gives, then ask again: none of the held ones comes back
    const held = [];
    try {
      for (let i = 0; i < 20; i++) {
        const [p] = await freePorts(1);
        const s = createServer();
        await new Promise<void>((res, rej) => {
          s.once('error', rej);
          s.listen(p, '127.0.0.1', () => res());
        });
        held.push(s);
      }
      const ports = held.map((s) => (s.address() as { port: number }).port);
      expect(new Set(ports).size).toBe(20);
    } finally {
      await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
    }
  });
});
