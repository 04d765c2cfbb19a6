import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { genDirName, readPointer } from '../../chronacta/archive.js';
import { ChronactaClient } from '../../chronacta/client.js';
import { startServer } from '../../chronacta/server.js';
import type { EventData, ExpectedVersion, RecordedEvent, SubscriptionTarget } from '../../chronacta/types.js';
import { verifyLog } from '../../storage/verify.js';
import { type Command, parse, UsageError } from '../command.js';

const DEFAULT_SERVER = '127.0.0.1:2113';

const HELP = [
  'Usage: plexus chronacta <subcommand> [options]',
  '',
  'Chronacta, the event store (standalone mode). Output is JSON, one object per line.',
  '',
  'Subcommands:',
  '  serve [--data DIR] [--host H] [--port N] [--metrics-port N] [--fsync MODE]',
  '        [--segment-bytes N] [--compact-every-ms N]',
  '        Serves the store in DIR (default ./data) over gRPC on H:N (default',
  '        127.0.0.1:2113; 0 picks a free port) and /metrics, /healthz, /readyz on',
  '        --metrics-port (default 2114; 0 picks a free port). Prints',
  '        {"event":"serving","address",...} once it serves; stops on SIGINT or SIGTERM.',
  '  verify DIR',
  '        Checks the log (and the compacted archive) of a data directory that no',
  '        server has open, changing nothing. Exit 1 when a problem would stop it opening.',
  '  append STREAM [--type T --data TEXT | --events FILE] [--expected-version V]',
  '        [--idempotency-key K] [--server ADDR]',
  '        Appends one event (--type, --data) or the JSON array of events in FILE',
  '        (- for standard input; each {"type", "data", "metadata"?, "id"?}, where a',
  '        data that is not a string is stored as its JSON text). V is any, no_stream,',
  '        exists or a version.',
  '  read (STREAM | --all) [--from N] [--backwards] [--max-count N] [--prefix P]',
  '        [--type T]... [--server ADDR]',
  '        Prints the events, then {"end", "next"}.',
  '  subscribe (STREAM | --all) [--from N|start|end] [--prefix P] [--type T]...',
  '        [--count N] [--server ADDR]',
  '        Prints events as they come (and {"caughtUp"} once live); with --count,',
  '        exits after N events.',
  '',
  `--server defaults to ${DEFAULT_SERVER}.`,
  '',
  'Examples:',
  '  plexus chronacta serve --data /var/lib/chronacta --port 2113 --metrics-port 2114',
  '  plexus chronacta append orders-1 --type placed --data \'{"total":3}\' --expected-version no_stream',
  '  plexus chronacta read --all --max-count 10',
].join('\n');

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError('chronacta', `--${name} takes a whole number, got "${v}"`);
  return Number(v);
}

function big(name: string, v: string | undefined): bigint | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError('chronacta', `--${name} takes a whole number, got "${v}"`);
  return BigInt(v);
}

function expectedVersion(v: string | undefined): ExpectedVersion | undefined {
  if (v === undefined) return undefined;
  if (v === 'any' || v === 'no_stream' || v === 'exists') return v;
  if (/^\d+$/.test(v)) return BigInt(v);
  throw new UsageError('chronacta', `--expected-version is any, no_stream, exists or a version, got "${v}"`);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function text(b: Uint8Array): { text: string } | { base64: string } {
  try {
    return { text: utf8.decode(b) };
  } catch {
    return { base64: Buffer.from(b).toString('base64') };
  }
}

/** An event as one JSON line: data and metadata as text when they are UTF-8, else base64. */
export function eventJson(e: RecordedEvent): Record<string, unknown> {
  const d = text(e.data);
  const m = text(e.metadata);
  return {
    stream: e.stream,
    version: Number(e.version),
    position: Number(e.position),
    id: e.id,
    type: e.type,
    ...('text' in d ? { data: d.text } : { dataBase64: d.base64 }),
    ...('text' in m ? { metadata: m.text } : { metadataBase64: m.base64 }),
    recordedMs: e.recordedMs,
    batchId: e.batchId,
  };
}

function out(o: unknown): void {
  process.stdout.write(`${JSON.stringify(o, (_k, v) => (typeof v === 'bigint' ? Number(v) : v))}\n`);
}

async function readEvents(file: string): Promise<EventData[]> {
  let raw: string;
  if (file === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    raw = Buffer.concat(chunks).toString('utf8');
  } else raw = await readFile(file, 'utf8');
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (e) {
    throw new UsageError('chronacta', `--events ${file} is not JSON: ${(e as Error).message}`);
  }
  if (!Array.isArray(v)) throw new UsageError('chronacta', `--events ${file} must hold a JSON array of events`);
  return v.map((e: Record<string, unknown>, i) => {
    if (typeof e !== 'object' || e === null || typeof e.type !== 'string') {
      throw new UsageError('chronacta', `event ${i} of ${file} needs a "type" string`);
    }
    const asText = (x: unknown) => (x === undefined ? undefined : typeof x === 'string' ? x : JSON.stringify(x));
    const data = asText(e.data);
    const metadata = asText(e.metadata);
    return {
      type: e.type,
      ...(typeof e.id === 'string' ? { id: e.id } : {}),
      ...(data !== undefined ? { data } : {}),
      ...(metadata !== undefined ? { metadata } : {}),
    };
  });
}

async function serve(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      data: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      'metrics-port': { type: 'string' },
      fsync: { type: 'string' },
      'segment-bytes': { type: 'string' },
      'compact-every-ms': { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const fsync = values.fsync;
  if (fsync !== undefined && fsync !== 'batch' && fsync !== 'always' && fsync !== 'never') {
    throw new UsageError('chronacta', `--fsync is batch, always or never, got "${fsync}"`);
  }
  const segmentBytes = num('segment-bytes', values['segment-bytes']);
  const compactEveryMs = num('compact-every-ms', values['compact-every-ms']);
  const server = await startServer({
    dataDir: values.data ?? 'data',
    host: values.host ?? '127.0.0.1',
    port: num('port', values.port) ?? 2113,
    metricsPort: num('metrics-port', values['metrics-port']) ?? 2114,
    ...(fsync ? { fsync } : {}),
    ...(segmentBytes !== undefined ? { segmentBytes } : {}),
    ...(compactEveryMs !== undefined ? { compactEveryMs } : {}),
    logger: {
      warn: (message, details) =>
        process.stderr.write(
          `plexus chronacta: ${message} ${JSON.stringify(details ?? {}, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}\n`,
        ),
    },
  });
  out({
    event: 'serving',
    address: server.address,
    metrics: server.metricsAddress,
    dataDir: server.store.dataDir,
    lastPosition: server.store.lastPosition,
  });
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await server.close();
  out({ event: 'stopped' });
  return 0;
}

async function verify(args: string[]): Promise<number> {
  const { positionals } = parse('chronacta', { args, allowPositionals: true, options: {} });
  if (positionals.length !== 1) throw new UsageError('chronacta', 'verify takes one data directory');
  const root = positionals[0] as string;
  const logs = [join(root, 'log')];
  const pointer = await readPointer(join(root, 'archive')).catch(() => undefined);
  if (pointer && pointer.generation > 0) logs.push(join(root, 'archive', genDirName(pointer.generation)));
  let openable = true;
  for (const dir of logs) {
    const r = await verifyLog(dir);
    openable &&= r.openable;
    out({
      dir: r.dir,
      ok: r.ok,
      openable: r.openable,
      segments: r.segments,
      records: r.records,
      first: r.first,
      last: r.last,
      bytes: r.bytes,
      problems: r.problems,
    });
  }
  return openable ? 0 : 1;
}

function target(
  command: string,
  positionals: string[],
  values: { all?: boolean; from?: string; prefix?: string; type?: string[] },
): SubscriptionTarget {
  if (values.all && positionals.length > 0)
    throw new UsageError('chronacta', `${command}: give a STREAM or --all, not both`);
  if (!values.all && positionals.length !== 1)
    throw new UsageError('chronacta', `${command}: give one STREAM or --all`);
  const from = values.from;
  const f = from === undefined || from === 'start' ? 'start' : from === 'end' ? 'end' : big('from', from);
  if (values.all) {
    return {
      all: true,
      fromPosition: f ?? 'start',
      ...(values.prefix ? { streamPrefix: values.prefix } : {}),
      ...(values.type ? { types: values.type } : {}),
    };
  }
  return { stream: positionals[0] as string, fromVersion: f ?? 'start' };
}

async function withClient<T>(server: string | undefined, fn: (c: ChronactaClient) => Promise<T>): Promise<T> {
  const client = new ChronactaClient(server ?? DEFAULT_SERVER);
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

async function append(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      server: { type: 'string' },
      type: { type: 'string' },
      data: { type: 'string' },
      metadata: { type: 'string' },
      events: { type: 'string' },
      'expected-version': { type: 'string' },
      'idempotency-key': { type: 'string' },
    },
  });
  if (positionals.length !== 1) throw new UsageError('chronacta', 'append takes one STREAM');
  let events: EventData[];
  if (values.events !== undefined) {
    if (values.type !== undefined || values.data !== undefined) {
      throw new UsageError('chronacta', 'give --events FILE or --type/--data, not both');
    }
    events = await readEvents(values.events);
  } else {
    if (values.type === undefined) throw new UsageError('chronacta', 'append needs --type T (or --events FILE)');
    events = [
      {
        type: values.type,
        ...(values.data !== undefined ? { data: values.data } : {}),
        ...(values.metadata !== undefined ? { metadata: values.metadata } : {}),
      },
    ];
  }
  const expected = expectedVersion(values['expected-version']);
  const r = await withClient(values.server, (c) =>
    c.append(positionals[0] as string, events, {
      ...(expected !== undefined ? { expectedVersion: expected } : {}),
      ...(values['idempotency-key'] ? { idempotencyKey: values['idempotency-key'] } : {}),
    }),
  );
  out(r);
  return 0;
}

async function read(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      server: { type: 'string' },
      all: { type: 'boolean' },
      from: { type: 'string' },
      backwards: { type: 'boolean' },
      'max-count': { type: 'string' },
      prefix: { type: 'string' },
      type: { type: 'string', multiple: true },
    },
  });
  const t = target('read', positionals, values);
  const maxCount = num('max-count', values['max-count']);
  const direction = values.backwards ? 'backwards' : 'forwards';
  const from = values.from === undefined ? undefined : big('from', values.from);
  await withClient(values.server, async (c) => {
    if ('all' in t) {
      const r = await c.readAll({
        direction,
        ...(from !== undefined ? { fromPosition: from } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(t.streamPrefix ? { streamPrefix: t.streamPrefix } : {}),
        ...(t.types ? { types: t.types } : {}),
      });
      for (const e of r.events) out(eventJson(e));
      out({ end: r.end, next: r.nextPosition, lastPosition: r.lastPosition });
    } else {
      const r = await c.readStream(t.stream, {
        direction,
        ...(from !== undefined ? { fromVersion: from } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(values.type ? { types: values.type } : {}),
      });
      for (const e of r.events) out(eventJson(e));
      out({ end: r.end, next: r.nextVersion ?? null, lastVersion: r.lastVersion, deleted: r.deleted });
    }
  });
  return 0;
}

async function subscribe(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      server: { type: 'string' },
      all: { type: 'boolean' },
      from: { type: 'string' },
      prefix: { type: 'string' },
      type: { type: 'string', multiple: true },
      count: { type: 'string' },
    },
  });
  const t = target('subscribe', positionals, values);
  const limit = num('count', values.count);
  await withClient(values.server, async (c) => {
    const sub = c.subscribe(t);
    const stop = () => sub.close();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    let n = 0;
    try {
      if (limit === 0) return;
      for await (const m of sub) {
        if (m.kind === 'event') {
          out(eventJson(m.event));
          if (limit !== undefined && ++n >= limit) break;
        } else out({ [m.kind]: true, position: m.position });
      }
    } finally {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      sub.close();
    }
  });
  return 0;
}

export const chronacta: Command = {
  name: 'chronacta',
  summary: 'the event store: serve, verify, append, read, subscribe',
  help: HELP,
  async run(args) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'serve':
        return serve(rest);
      case 'verify':
        return verify(rest);
      case 'append':
        return append(rest);
      case 'read':
        return read(rest);
      case 'subscribe':
        return subscribe(rest);
      default:
        throw new UsageError(
          'chronacta',
          sub ? `unknown subcommand "${sub}"` : 'missing subcommand: serve, verify, append, read or subscribe',
        );
    }
  },
};
