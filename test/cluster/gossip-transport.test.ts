import { describe, expect, it } from 'vitest';
import {
  GOSSIP_TAG,
  gossipName,
  MemoryGossipNet,
  parseGossipName,
  wireGossipTransport,
} from '../../ts/cluster/gossip/transport.js';
import type { GossipMessage } from '../../ts/codec/gossip.js';

const ping = (from: string, target: string): GossipMessage => ({ kind: 'ping', from, seq: 7, target, updates: [] });

describe('gossip transport', () => {
  it('names a member <id>@<address> and parses it back; refuses what is not one', () => {
    expect(gossipName('node-a', '127.0.0.1:7001')).toBe('node-a@127.0.0.1:7001');
    expect(parseGossipName('node-a@127.0.0.1:7001')).toEqual({ id: 'node-a', address: '127.0.0.1:7001' });
    expect(parseGossipName('Node_A@x')).toBeUndefined();
    expect(parseGossipName('node-a@')).toBeUndefined();
    expect(() => gossipName('node a', 'x:1')).toThrow(expect.objectContaining({ code: 'PLX_GOSSIP_BAD_CONFIG' }));
  });

  it('sends over a wire call with the gossip tag and accepts only a sender the wire authenticated', async () => {
    const calls: { peer: string; body: Uint8Array }[] = [];
    const a = wireGossipTransport(
      {
        call: async (peer, body) => {
          calls.push({ peer, body });
          return new Uint8Array();
        },
      },
      'a@h:1',
    );
    const b = wireGossipTransport({ call: async () => new Uint8Array() }, 'b@h:2');
    a.send('b@h:2', ping('a@h:1', 'b@h:2'));
    await Promise.resolve();
    expect(calls).toHaveLength(1);
    expect(calls[0]?.peer).toBe('b');
    expect(calls[0]?.body[0]).toBe(GOSSIP_TAG);
    const got: GossipMessage[] = [];
    b.onMessage((m) => got.push(m));
    await b.handleCall('a', calls[0]?.body as Uint8Array);
    expect(got.map((m) => m.from)).toEqual(['a@h:1']);
    expect(b.addressOf('a')).toBe('h:1');
    await expect(b.handleCall('c', calls[0]?.body as Uint8Array)).rejects.toMatchObject({
      code: 'PLX_GOSSIP_BAD_MESSAGE',
      details: { reason: 'sender' },
    });
    expect(got).toHaveLength(1);
  });

  it('delivers in memory unless the pair is cut', async () => {
    const net = new MemoryGossipNet();
    const a = net.transport('a@m:1');
    const b = net.transport('b@m:2');
    const got: string[] = [];
    b.onMessage((m) => got.push(m.kind));
    a.send('b@m:2', ping('a@m:1', 'b@m:2'));
    await new Promise((r) => setImmediate(r));
    net.partition('a@m:1', 'b@m:2');
    a.send('b@m:2', ping('a@m:1', 'b@m:2'));
    await new Promise((r) => setImmediate(r));
    expect(got).toEqual(['ping']);
  });
});
