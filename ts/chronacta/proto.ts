/**
 * The gRPC definitions (proto/chronacta.proto, loaded at run time with proto-loader) and
 * the conversions between wire messages and the typed shapes of types.ts, shared by the
 * server and the client. uint64 fields travel as decimal strings and become bigints here.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { badInput } from './errors.js';
import type {
  ClusterStatus,
  CompactionReport,
  ExpectedVersion,
  RecordedEvent,
  SubscriptionMessage,
  SubscriptionTarget,
} from './types.js';

export const PROTO_PATH = fileURLToPath(new URL('../../proto/chronacta.proto', import.meta.url));

/** Largest message either side sends or takes: an append of the largest batch, with room for framing. */
export const MAX_MESSAGE_BYTES = 80 * 1024 * 1024;

export const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
} as const;

export interface ChronactaDefinitions {
  readonly EventStore: grpc.ServiceClientConstructor;
  readonly ClusterService: grpc.ServiceClientConstructor;
}

let loaded: ChronactaDefinitions | undefined;
let pkgDef: protoLoader.PackageDefinition | undefined;

/** The services and messages of proto/chronacta.proto as proto-loader reads them (protobufjs codecs). */
export function packageDefinition(): protoLoader.PackageDefinition {
  pkgDef ??= protoLoader.loadSync(PROTO_PATH, {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return pkgDef;
}

/** One method of a service: its path and the protobufjs codecs of its messages. */
export function methodDefinition(
  service: 'EventStore' | 'ClusterService',
  method: string,
): protoLoader.MethodDefinition<object, object> {
  const svc = packageDefinition()[`plexus.chronacta.v1.${service}`] as protoLoader.ServiceDefinition;
  const m = svc[method];
  if (!m) throw new Error(`proto/chronacta.proto has no ${service}.${method}`);
  return m as protoLoader.MethodDefinition<object, object>;
}

export function definitions(): ChronactaDefinitions {
  if (!loaded) {
    const def = packageDefinition();
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      plexus: { chronacta: { v1: ChronactaDefinitions } };
    };
    loaded = pkg.plexus.chronacta.v1;
  }
  return loaded;
}

// ------------------------------------------------------------------ wire shapes

/** A uint64 as proto-loader hands it over (longs: String) or takes it. */
export type WireLong = string | number;

export interface WireExpected {
  kind?: 'any' | 'noStream' | 'exists' | 'exact';
  any?: object;
  noStream?: object;
  exists?: object;
  exact?: WireLong;
}

export interface WireEvent {
  id: string;
  type: string;
  data: Uint8Array;
  metadata: Uint8Array;
}

export interface WireRecorded {
  stream: string;
  version: WireLong;
  position: WireLong;
  id: string;
  type: string;
  data: Uint8Array;
  metadata: Uint8Array;
  recordedMs: WireLong;
  batchId: string;
}

export interface WireSubscribeResponse {
  message?: 'event' | 'caughtUp' | 'fellBehind';
  event?: WireRecorded;
  caughtUp?: { position: WireLong };
  fellBehind?: { position: WireLong };
}

export interface WireFrom {
  from?: string;
  fromVersion?: WireLong;
  fromPosition?: WireLong;
  start?: object;
  end?: object;
}

export interface WireSubscribeRequest {
  target?: 'stream' | 'all';
  stream?: WireFrom & { stream: string };
  all?: WireFrom & { streamPrefix: string; types: string[] };
}

// ------------------------------------------------------------------ conversions

/** A uint64 from the wire as a bigint; refuses anything but decimal digits. */
export function toBig(v: WireLong | undefined | null, what: string): bigint {
  if (v === undefined || v === null) return 0n;
  const s = String(v);
  if (!/^-?\d+$/.test(s)) throw badInput(`${what} is not a whole number`);
  return BigInt(s);
}

export function expectedToWire(v: ExpectedVersion | undefined): WireExpected | undefined {
  if (v === undefined) return undefined;
  if (v === 'any') return { any: {} };
  if (v === 'no_stream') return { noStream: {} };
  if (v === 'exists') return { exists: {} };
  return { exact: v.toString() };
}

export function expectedFromWire(w: WireExpected | null | undefined): ExpectedVersion {
  if (!w?.kind) return 'any';
  switch (w.kind) {
    case 'any':
      return 'any';
    case 'noStream':
      return 'no_stream';
    case 'exists':
      return 'exists';
    case 'exact':
      return toBig(w.exact, 'expected version');
    default:
      throw badInput('unknown expected version kind');
  }
}

export function recordedToWire(e: RecordedEvent): WireRecorded {
  return {
    stream: e.stream,
    version: e.version.toString(),
    position: e.position.toString(),
    id: e.id,
    type: e.type,
    data: e.data,
    metadata: e.metadata,
    recordedMs: String(e.recordedMs),
    batchId: e.batchId,
  };
}

function bytes(b: Uint8Array | undefined | null): Uint8Array {
  if (!b) return new Uint8Array(0);
  return b instanceof Buffer ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : b;
}

export function recordedFromWire(w: WireRecorded): RecordedEvent {
  return {
    stream: w.stream,
    version: toBig(w.version, 'version'),
    position: toBig(w.position, 'position'),
    id: w.id,
    type: w.type,
    data: bytes(w.data),
    metadata: bytes(w.metadata),
    recordedMs: Number(w.recordedMs),
    batchId: w.batchId,
  };
}

export function messageToWire(m: SubscriptionMessage): WireSubscribeResponse {
  switch (m.kind) {
    case 'event':
      return { event: recordedToWire(m.event) };
    case 'caughtUp':
      return { caughtUp: { position: m.position.toString() } };
    case 'fellBehind':
      return { fellBehind: { position: m.position.toString() } };
  }
}

export function messageFromWire(w: WireSubscribeResponse): SubscriptionMessage | undefined {
  if (w.message === 'event' && w.event) return { kind: 'event', event: recordedFromWire(w.event) };
  if (w.message === 'caughtUp' && w.caughtUp)
    return { kind: 'caughtUp', position: toBig(w.caughtUp.position, 'position') };
  if (w.message === 'fellBehind' && w.fellBehind) {
    return { kind: 'fellBehind', position: toBig(w.fellBehind.position, 'position') };
  }
  return undefined;
}

function fromToWire(v: bigint | 'start' | 'end' | undefined, field: 'fromVersion' | 'fromPosition'): object {
  if (v === undefined || v === 'start') return { start: {} };
  if (v === 'end') return { end: {} };
  return { [field]: v.toString() };
}

export function targetToWire(t: SubscriptionTarget): WireSubscribeRequest {
  if ('all' in t) {
    return {
      all: {
        ...fromToWire(t.fromPosition, 'fromPosition'),
        streamPrefix: t.streamPrefix ?? '',
        types: [...(t.types ?? [])],
      },
    };
  }
  return { stream: { stream: t.stream, ...fromToWire(t.fromVersion, 'fromVersion') } };
}

export function targetFromWire(w: WireSubscribeRequest): SubscriptionTarget {
  const from = (f: WireFrom, field: 'fromVersion' | 'fromPosition'): bigint | 'start' | 'end' => {
    if (f.from === field) return toBig(f[field], field);
    if (f.from === 'end') return 'end';
    return 'start';
  };
  if (w.target === 'all' && w.all) {
    return {
      all: true,
      fromPosition: from(w.all, 'fromPosition'),
      ...(w.all.streamPrefix ? { streamPrefix: w.all.streamPrefix } : {}),
      ...(w.all.types.length > 0 ? { types: w.all.types } : {}),
    };
  }
  if (w.target === 'stream' && w.stream) {
    return { stream: w.stream.stream, fromVersion: from(w.stream, 'fromVersion') };
  }
  throw badInput('a subscription needs a target: stream or all');
}

export function compactionToWire(r: CompactionReport): Record<string, string> {
  return {
    cutoff: r.cutoff.toString(),
    kept: String(r.kept),
    dropped: String(r.dropped),
    bytesBefore: String(r.bytesBefore),
    bytesAfter: String(r.bytesAfter),
  };
}

export function compactionFromWire(w: Record<string, WireLong>): CompactionReport {
  return {
    cutoff: toBig(w.cutoff, 'cutoff'),
    kept: Number(w.kept),
    dropped: Number(w.dropped),
    bytesBefore: Number(w.bytesBefore),
    bytesAfter: Number(w.bytesAfter),
  };
}

export function clusterFromWire(w: {
  mode: string;
  clusterId: string;
  nodeId: string;
  leaderId: string;
  epoch: WireLong;
  members: { id: string; address: string; raftAddress?: string; lagPositions?: WireLong }[];
  role?: string;
  leaderAddress?: string;
  term?: WireLong;
  commitIndex?: WireLong;
  appliedIndex?: WireLong;
  lastPosition?: WireLong;
  replicationLagPositions?: WireLong;
  acceptingWrites?: boolean;
}): ClusterStatus {
  if (w.mode !== 'cluster') {
    return {
      mode: 'standalone',
      clusterId: w.clusterId,
      nodeId: w.nodeId,
      leaderId: w.leaderId,
      epoch: toBig(w.epoch, 'epoch'),
      members: w.members.map((m) => ({ id: m.id, address: m.address })),
    };
  }
  const big = (v: WireLong | undefined, what: string) => toBig(v ?? '0', what);
  return {
    mode: 'cluster',
    clusterId: w.clusterId,
    nodeId: w.nodeId,
    leaderId: w.leaderId,
    epoch: toBig(w.epoch, 'epoch'),
    members: w.members.map((m) => ({
      id: m.id,
      address: m.address,
      raftAddress: m.raftAddress ?? '',
      lagPositions: big(m.lagPositions, 'lagPositions'),
    })),
    role: w.role ?? '',
    leaderAddress: w.leaderAddress ?? '',
    term: big(w.term, 'term'),
    commitIndex: big(w.commitIndex, 'commitIndex'),
    appliedIndex: big(w.appliedIndex, 'appliedIndex'),
    lastPosition: big(w.lastPosition, 'lastPosition'),
    replicationLagPositions: big(w.replicationLagPositions, 'replicationLagPositions'),
    acceptingWrites: w.acceptingWrites ?? false,
  };
}
