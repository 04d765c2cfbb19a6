/**
 * The methods of the Chronacta gRPC server (EventStore and ClusterService.GetStatus), by
 * path: each decodes its request, calls the store and encodes the reply; Subscribe runs a
 * subscription per call and keeps its metrics.
 */

import { grpcFrame } from '../codec/grpc-frame.js';
import { every, systemClock, type Timers } from '../core/clock.js';
import { ChronactaCode, chronactaError } from './errors.js';
import type { CallContext, GrpcMethod, ServerStream } from './grpc-server.js';
import type { PreparedDataDir } from './layout.js';
import { type ChronactaMetrics, replicationLagOf } from './metrics.js';
import {
  compactionToWire,
  expectedFromWire,
  messageToWire,
  methodDefinition,
  recordedToWire,
  targetFromWire,
  toBig,
  type WireExpected,
  type WireLong,
  type WireSubscribeRequest,
} from './proto.js';
import { checkTextFields, directionOf, TEXT_FIELDS } from './request-check.js';
import { toCallStatus } from './status.js';
import type { EventStore } from './store.js';
import { checkTarget, Subscription, type SubscriptionLimits, type SubscriptionSink } from './subscription.js';
import type { SubscriptionMessage } from './types.js';
import { decodeAppendRequest, encodeAppendResponseFrame } from './wire.js';

/** What the methods use of the server. */
export interface ServerMethodsDeps {
  readonly store: EventStore;
  readonly metrics: ChronactaMetrics;
  /** The open subscriptions: each Subscribe call adds its own and removes it when it ends. */
  readonly subs: Set<Subscription>;
  readonly subscriptionLimits?: SubscriptionLimits | undefined;
  /** The data directory's cluster and node files as they are now (the address is recorded once bound). */
  readonly cluster: () => PreparedDataDir;
  /** Runs the subscriptions' metrics interval (default `systemClock`: unreferenced process timers). */
  readonly timers?: Timers;
}

function optionalBig(v: WireLong | undefined, what: string): bigint | undefined {
  return v === undefined || v === null ? undefined : toBig(v, what);
}

function count(v: number | undefined): number | undefined {
  return v === undefined || v === 0 ? undefined : v;
}

/** The server's methods by path. */
export function serverMethods({
  store,
  metrics,
  subs,
  subscriptionLimits,
  cluster,
  timers = systemClock,
}: ServerMethodsDeps): Map<string, GrpcMethod> {
  const methods = new Map<string, GrpcMethod>();
  /** A unary method whose messages go through protobufjs. */
  function unary<Req>(service: 'EventStore' | 'ClusterService', name: string, fn: (req: Req) => Promise<object>): void {
    const def = methodDefinition(service, name);
    methods.set(def.path, {
      kind: 'unary',
      handle: async (request: Buffer) => {
        const text = TEXT_FIELDS[name];
        if (text) checkTextFields(request, name, text);
        const res = await fn(decodeRequest(def, name, request) as Req);
        return grpcFrame(def.responseSerialize(res));
      },
    });
  }

  methods.set(methodDefinition('EventStore', 'Append').path, {
    kind: 'unary',
    handle: async (request: Buffer, _ctx: CallContext) => {
      const reply = await store.appendWire(decodeAppendRequest(request));
      return encodeAppendResponseFrame(reply);
    },
  });
  unary(
    'EventStore',
    'ReadStream',
    async (req: {
      stream: string;
      direction: string;
      from?: string;
      fromVersion?: WireLong;
      maxCount: number;
      types: string[];
    }) => {
      const fromVersion = req.from === 'fromVersion' ? optionalBig(req.fromVersion, 'fromVersion') : undefined;
      const maxCount = count(req.maxCount);
      const r = await store.readStream(req.stream, {
        direction: directionOf(req.direction, 'ReadStream'),
        ...(fromVersion !== undefined ? { fromVersion } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        types: req.types ?? [],
      });
      return {
        events: r.events.map(recordedToWire),
        lastVersion: r.lastVersion.toString(),
        ...(r.nextVersion !== undefined ? { nextVersion: r.nextVersion.toString() } : {}),
        end: r.end,
        deleted: r.deleted,
      };
    },
  );
  unary(
    'EventStore',
    'ReadAll',
    async (req: {
      direction: string;
      from?: string;
      fromPosition?: WireLong;
      maxCount: number;
      streamPrefix: string;
      types: string[];
    }) => {
      const fromPosition = req.from === 'fromPosition' ? optionalBig(req.fromPosition, 'fromPosition') : undefined;
      const maxCount = count(req.maxCount);
      const r = await store.readAll({
        direction: directionOf(req.direction, 'ReadAll'),
        ...(fromPosition !== undefined ? { fromPosition } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(req.streamPrefix ? { streamPrefix: req.streamPrefix } : {}),
        types: req.types ?? [],
      });
      return {
        events: r.events.map(recordedToWire),
        nextPosition: r.nextPosition.toString(),
        end: r.end,
        lastPosition: r.lastPosition.toString(),
      };
    },
  );
  unary('EventStore', 'Delete', async (req: { stream: string; expectedVersion?: WireExpected; hard: boolean }) => {
    const r = await store.deleteStream(req.stream, {
      expectedVersion: expectedFromWire(req.expectedVersion),
      hard: req.hard === true,
    });
    return { position: r.position.toString(), lastVersion: r.lastVersion.toString() };
  });
  unary(
    'EventStore',
    'Truncate',
    async (req: {
      stream: string;
      count?: string;
      maxCount?: WireLong;
      age?: string;
      maxAgeMs?: WireLong;
      before?: string;
      beforeVersion?: WireLong;
      expectedVersion?: WireExpected;
    }) => {
      const maxCount = req.count === 'maxCount' ? optionalBig(req.maxCount, 'maxCount') : undefined;
      const maxAgeMs = req.age === 'maxAgeMs' ? optionalBig(req.maxAgeMs, 'maxAgeMs') : undefined;
      const beforeVersion =
        req.before === 'beforeVersion' ? optionalBig(req.beforeVersion, 'beforeVersion') : undefined;
      const r = await store.truncateStream(req.stream, {
        ...(maxCount !== undefined ? { maxCount: Number(maxCount) } : {}),
        ...(maxAgeMs !== undefined ? { maxAgeMs: Number(maxAgeMs) } : {}),
        ...(beforeVersion !== undefined ? { beforeVersion } : {}),
        expectedVersion: expectedFromWire(req.expectedVersion),
      });
      return { position: r.position.toString(), truncateBefore: r.truncateBefore.toString() };
    },
  );
  unary('EventStore', 'Compact', async () => compactionToWire(await store.compact()));
  unary('ClusterService', 'GetStatus', async () => {
    const s = store.clusterStatus();
    if (!s) return standaloneStatus();
    const lag = new Map((s.followers ?? []).map((f) => [f.id, f.lagPositions]));
    return {
      mode: 'cluster',
      clusterId: cluster().cluster.clusterId,
      nodeId: String(s.id),
      leaderId: s.leader === 0 ? '' : String(s.leader),
      epoch: String(s.term),
      members: s.members.map((m) => ({
        id: String(m.id),
        address: m.advertise,
        raftAddress: m.raftAddress,
        lagPositions: String(lag.get(m.id) ?? 0),
      })),
      role: s.role,
      leaderAddress: s.leaderAddress ?? '',
      term: String(s.term),
      commitIndex: String(s.commit),
      appliedIndex: String(s.applied),
      lastPosition: String(s.lastPosition),
      replicationLagPositions: String(replicationLagOf(s)),
      acceptingWrites: s.acceptingWrites,
    };
  });
  const standaloneStatus = () => ({
    mode: cluster().cluster.mode,
    clusterId: cluster().cluster.clusterId,
    nodeId: cluster().node.id,
    leaderId: cluster().cluster.leader,
    epoch: String(cluster().cluster.epoch),
    members: cluster().cluster.members.map((m) => ({ id: m.id, address: m.address })),
  });

  const subscribeDef = methodDefinition('EventStore', 'Subscribe');
  methods.set(subscribeDef.path, {
    kind: 'stream',
    handle: (request: Buffer, call: ServerStream) => {
      // A refusal here (a bad target) ends the call with its status, as a thrown error.
      const target = checkTarget(
        targetFromWire(decodeRequest(subscribeDef, 'Subscribe', request) as WireSubscribeRequest),
      );
      const sub = new Subscription(
        store,
        target,
        sinkOf(call, (m) => grpcFrame(subscribeDef.responseSerialize(messageToWire(m)))),
        subscriptionLimits,
      );
      subs.add(sub);
      metrics.subscriptionsStarted.inc();
      metrics.subscriptionsActive.inc();
      let delivered = 0;
      let fallbacks = 0;
      const tick = every(timers, 1000, () => account());
      const account = () => {
        metrics.subscriptionEvents.inc(sub.stats.delivered - delivered);
        metrics.subscriptionFallbacks.inc(sub.stats.fallbacks - fallbacks);
        delivered = sub.stats.delivered;
        fallbacks = sub.stats.fallbacks;
      };
      call.onCancel(() => sub.close());
      sub
        .run()
        .then(
          () => call.end(),
          (e: unknown) => call.end(toCallStatus(e)),
        )
        .finally(() => {
          tick.stop();
          account();
          subs.delete(sub);
          metrics.subscriptionsActive.dec();
        });
    },
  });
  return methods;
}

/** A request message through protobufjs; one it cannot read is PLX_CHRONACTA_BAD_INPUT. */
function decodeRequest(def: { requestDeserialize(b: Buffer): object }, method: string, request: Buffer): object {
  try {
    return def.requestDeserialize(request);
  } catch (e) {
    throw chronactaError(
      ChronactaCode.BAD_INPUT,
      `the ${method} request is not a well-formed protobuf message: ${(e as Error).message}`,
    );
  }
}

/** A server stream as a subscription sink: full when its write buffer is. */
function sinkOf(call: ServerStream, encode: (m: SubscriptionMessage) => Uint8Array): SubscriptionSink {
  return {
    get closed() {
      return call.cancelled;
    },
    write(msg: SubscriptionMessage) {
      return call.write(encode(msg));
    },
    drained() {
      return call.drained();
    },
  };
}
