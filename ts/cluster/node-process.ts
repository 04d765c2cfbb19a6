/**
 * One cluster node as its own process, below the actor runtime: the HTTP/2 mutual-TLS wire,
 * static membership (hosting the MemoryAuthority when it is the configured authority), the
 * receive-side epoch gate with a dead-letter log, and a bounded mailbox. It reads a JSON
 * config file (argv[2]), prints what happens as JSON lines on stdout and takes JSON commands
 * on stdin. Multi-process tests drive it; the runtime's ClusterNode replaces it later.
 *
 * Commands: {"cmd":"send","to":node,"shard":n,"target":iri,"delayMs":ms} sends one frame
 * stamped with the epoch this node holds for the shard when the command arrives (after the
 * delay, so a paused process sends a frame of the epoch it held before the pause);
 * {"cmd":"revoke","shard":n}; {"cmd":"remove","node":id}; {"cmd":"leave"}.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Http2Wire } from '../net/http2-wire.js';
import { WIRE_SPIN_VARIABLE, wireSpinMs } from '../net/http2-wire-shared.js';
import { openLog } from '../storage/index.js';
import { decodeReply, encodeRequest, serveAuthority } from './codec.js';
import type { DetectorConfig, LeaseConfig } from './config.js';
import { DEAD_LETTER_LOG, DeadLetters, EpochGate } from './fencing.js';
import { AuthorityHost } from './host.js';
import type { AuthorityCall, LeaseAuthority } from './lease-authority.js';
import { BoundedMailbox } from './mailbox.js';
import type { ClusterMeta } from './meta.js';
import { fencedReceiver } from './receive.js';
import { StaticMembership } from './static.js';
import type { MemberInfo, View } from './types.js';

interface NodeProcessConfig {
  readonly meta: ClusterMeta;
  readonly self: string;
  readonly members: readonly MemberInfo[];
  readonly authority: string;
  /** host:port of the authority's wire (for nodes other than the authority). */
  readonly authorityAddress?: string;
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  readonly dataDir: string;
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  readonly heartbeatEveryMs?: number;
}

const out = (o: Record<string, unknown>) =>
  process.stdout.write(`${JSON.stringify(o, (_k, v) => (typeof v === 'bigint' ? `${v}` : v))}\n`);

async function main(): Promise<void> {
  const cfg = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as NodeProcessConfig;
  const isAuthority = cfg.self === cfg.authority;
  let view: View | undefined;
  const host: LeaseAuthority | undefined = isAuthority
    ? new AuthorityHost({
        meta: cfg.meta,
        members: cfg.members,
        ...(cfg.lease ? { lease: cfg.lease } : {}),
        ...(cfg.detector ? { detector: cfg.detector } : {}),
        tickEveryMs: 20,
      })
    : undefined;
  const addressOf = (node: string) =>
    node === cfg.authority && cfg.authorityAddress
      ? cfg.authorityAddress
      : view?.members.find((m) => m.id === node)?.address;
  const wire = new Http2Wire({
    self: cfg.self,
    cluster: cfg.meta.id,
    tls: cfg.tls,
    resolve: addressOf,
    isMember: (node) =>
      host ? host.isAdmitted(node) : node === cfg.authority || (view?.members.some((m) => m.id === node) ?? false),
    deliveryDeadlineMs: 5000,
    spinMs: wireSpinMs(undefined, process.env[WIRE_SPIN_VARIABLE]),
  });
  const address = await wire.listen();
  const gate = new EpochGate();
  const dead = new DeadLetters(await openLog(join(cfg.dataDir, DEAD_LETTER_LOG), { fsync: 'batch' }));
  const mailbox = new BoundedMailbox<string>(1024);
  const receive = fencedReceiver(gate, dead, async (from, f) => {
    await mailbox.put(f.target);
    mailbox.take();
    out({ ev: 'frame', from, shard: f.shard, epoch: f.epoch, target: f.target });
  });
  wire.onFrame(async (from, f) => {
    const v = await receive(from, f);
    if (v === 'stale') out({ ev: 'dead', from, shard: f.shard, epoch: f.epoch, current: gate.epochOf(f.shard) });
    return v;
  });
  if (host) wire.onCall(serveAuthority(host));
  const call: AuthorityCall = host
    ? host.call
    : async (req) => decodeReply(await wire.call(cfg.authority, encodeRequest(req)));
  const membership = new StaticMembership({
    config: {
      meta: cfg.meta,
      self: { id: cfg.self, address },
      members: cfg.members,
      authority: cfg.authority,
    },
    call,
    ...(cfg.lease ? { lease: cfg.lease } : {}),
    ...(cfg.heartbeatEveryMs ? { heartbeatEveryMs: cfg.heartbeatEveryMs } : {}),
    onError: (e) => out({ ev: 'error', code: (e as { code?: string }).code, message: (e as Error).message }),
  });
  let lastHeld = '';
  const report = () => {
    const held = membership
      .held()
      .map((l) => `${l.shard}@${l.epoch}`)
      .sort()
      .join(',');
    if (held !== lastHeld) {
      lastHeld = held;
      out({ ev: 'held', held: held ? held.split(',') : [] });
    }
  };
  membership.subscribe((v) => {
    view = v;
    gate.observe(v);
    out({ ev: 'view', version: v.version, members: v.members, leases: v.leases });
  });
  setInterval(report, 50).unref();
  out({ ev: 'listening', address, self: cfg.self });
  await membership.join();
  out({ ev: 'joined' });

  const rl = createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    let c: Record<string, unknown>;
    try {
      c = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if (c.cmd === 'send') {
      const shard = Number(c.shard);
      const lease = membership.held().find((l) => l.shard === shard);
      const epoch = lease?.epoch ?? 0n;
      out({ ev: 'prepared', shard, epoch });
      setTimeout(
        () => {
          wire
            .send(String(c.to), {
              shard,
              epoch,
              messageId: randomBytes(16),
              sender: `vt:${cfg.self}/actor`,
              target: String(c.target ?? 'vt:target'),
              payload: new Uint8Array(16),
            })
            .then(
              (verdict) => out({ ev: 'sent', verdict, shard, epoch }),
              (e) => out({ ev: 'sent', error: (e as { code?: string }).code, shard, epoch }),
            );
        },
        Number(c.delayMs ?? 0),
      );
    } else if (c.cmd === 'revoke') {
      membership.revoke(Number(c.shard)).then(
        () => out({ ev: 'revoked', shard: c.shard }),
        (e) => out({ ev: 'error', code: (e as { code?: string }).code }),
      );
    } else if (c.cmd === 'leave') {
      membership.leave().then(() => out({ ev: 'left' }));
    }
  });
  const stop = () => {
    void membership.close();
    host?.close();
    void wire.close().finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  rl.on('close', stop);
}

main().catch((e) => {
  out({ ev: 'fatal', code: (e as { code?: string }).code, message: (e as Error).message });
  process.exit(1);
});
