// One gossip member as a process (imports dist/: build first): an Http2Wire with mutual TLS 1.3
// (certificates of one cluster CA in --certs), a Swim with the given GossipConfig over
// `wireGossipTransport`, driven by `driveSwim` on the monotonic clock, joined through --seeds.
// It prints one JSON line per event on stdout:
//   {ev:'ready', name, pid, at}
//   {ev:'change', member, from, to, incarnation, at}   (at = Date.now(), the wall clock the
//                                                        parent compares across processes)
//   {ev:'awareness', score, at}                          (the Lifeguard health score moved)
//
// node bench/cluster/gossip-member.mjs --id m0 --port 7001 --certs DIR --cluster bench \
//   --peers m0=127.0.0.1:7001,m1=127.0.0.1:7002 --seeds m1 [--config '{"lifeguard":false}']
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { dist } from './procs.mjs';

const { values: o } = parseArgs({
  options: {
    id: { type: 'string' },
    port: { type: 'string' },
    certs: { type: 'string' },
    cluster: { type: 'string', default: 'bench' },
    peers: { type: 'string' },
    seeds: { type: 'string', default: '' },
    config: { type: 'string', default: '{}' },
  },
});

const [{ Http2Wire }, { Swim }, { driveSwim }, { wireGossipTransport, gossipName, GOSSIP_TAG }, { monotonicClock }] =
  await Promise.all([
    dist('net/http2-wire.js'),
    dist('cluster/gossip/swim.js'),
    dist('cluster/gossip/driver.js'),
    dist('cluster/gossip/transport.js'),
    dist('core/clock.js'),
  ]);

const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
const peers = new Map(o.peers.split(',').map((p) => p.split('=')));
const address = `127.0.0.1:${o.port}`;
const wire = new Http2Wire({
  self: o.id,
  cluster: o.cluster,
  tls: {
    cert: readFileSync(join(o.certs, `${o.id}.pem`), 'utf8'),
    key: readFileSync(join(o.certs, `${o.id}.key`), 'utf8'),
    ca: readFileSync(join(o.certs, 'ca.pem'), 'utf8'),
  },
  host: '127.0.0.1',
  port: Number(o.port),
  resolve: (id) => peers.get(id),
  isMember: (id) => peers.has(id),
  // A call to a paused member gives up after this long (gossip never waits on a call).
  deliveryDeadlineMs: 5_000,
});
const name = gossipName(o.id, address);
const transport = wireGossipTransport(wire, name);
wire.onCall((from, body) => {
  if (body[0] !== GOSSIP_TAG) return Promise.reject(new Error('not a gossip message'));
  return transport.handleCall(from, body);
});
await wire.listen();

const clock = monotonicClock;
let score = 0;
const swim = new Swim({
  name,
  config: JSON.parse(o.config),
  random: { int: (n) => Math.floor(Math.random() * n) },
  send: (to, m) => transport.send(to, m),
  now: clock.now(),
  onChange: (c) => {
    out({ ev: 'change', member: c.member, from: c.from ?? null, to: c.to, incarnation: c.incarnation, at: Date.now() });
  },
});
const driver = driveSwim(swim, clock);
// The Lifeguard health score, looked at four times a second.
setInterval(() => {
  if (swim.awareness === score) return;
  score = swim.awareness;
  out({ ev: 'awareness', score, at: Date.now() });
}, 250);
transport.onMessage((m) => driver.deliver(m));
const seeds = o.seeds
  .split(',')
  .filter((s) => s !== '' && s !== o.id)
  .map((id) => gossipName(id, peers.get(id)));
swim.join(seeds, clock.now());
driver.poke();
out({ ev: 'ready', name, pid: process.pid, config: swim.config, at: Date.now() });

const stop = async () => {
  driver.stop();
  transport.close();
  await wire.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// The parent's end of stdin closing means the parent is gone: so is this member.
process.stdin.on('end', stop);
process.stdin.resume();
