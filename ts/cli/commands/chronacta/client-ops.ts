/** `plexus chronacta append`, `read` and `subscribe`: the client operations against a running server. */
import { open } from 'node:fs/promises';
import type { ReadConsistency } from '../../../chronacta/client.js';
import { ChronactaCode, chronactaError } from '../../../chronacta/errors.js';
import type { EventData, RecordedEvent } from '../../../chronacta/types.js';
import { MAX_BATCH_BYTES } from '../../../chronacta/validate.js';
import { PlexusError } from '../../../core/errors.js';
import { parse, UsageError } from '../../command.js';
import { big, CLIENT_FLAGS, expectedVersion, num, out, target, text, withClient } from './shared.js';

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

/** The largest --events file read: twice an append's largest batch, room for JSON's escapes. */
const MAX_EVENTS_FILE_BYTES = 2 * MAX_BATCH_BYTES;

/** The text of an --events file (or standard input for `-`), read up to MAX_EVENTS_FILE_BYTES. */
async function readEventsText(file: string): Promise<string> {
  const tooLarge = () =>
    chronactaError(
      ChronactaCode.TOO_LARGE,
      `--events ${file} holds more than ${MAX_EVENTS_FILE_BYTES} bytes; split the events over several appends`,
      { file, maxBytes: MAX_EVENTS_FILE_BYTES },
    );
  const chunks: Buffer[] = [];
  let total = 0;
  let stream: AsyncIterable<Buffer>;
  if (file === '-') stream = process.stdin;
  else {
    try {
      const fh = await open(file, 'r');
      if ((await fh.stat()).isDirectory()) {
        await fh.close();
        throw Object.assign(new Error('it is a directory'), { code: 'EISDIR' });
      }
      stream = fh.createReadStream();
    } catch (e) {
      throw chronactaError(
        ChronactaCode.BAD_INPUT,
        `--events ${file} cannot be read: ${(e as Error).message}`,
        { file, errno: (e as { code?: string }).code },
        e,
      );
    }
  }
  try {
    for await (const c of stream) {
      total += c.length;
      if (total > MAX_EVENTS_FILE_BYTES) throw tooLarge();
      chunks.push(c);
    }
  } catch (e) {
    if (e instanceof PlexusError) throw e;
    throw chronactaError(ChronactaCode.BAD_INPUT, `--events ${file} cannot be read: ${(e as Error).message}`, {
      file,
    });
  } finally {
    if (file !== '-') (stream as { destroy?: () => void }).destroy?.();
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function readEvents(file: string): Promise<EventData[]> {
  const raw = await readEventsText(file);
  const bad = (message: string) => chronactaError(ChronactaCode.BAD_INPUT, message, { file });
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (e) {
    throw bad(`--events ${file} is not JSON: ${(e as Error).message}`);
  }
  if (!Array.isArray(v)) throw bad(`--events ${file} must hold a JSON array of events`);
  return v.map((e: Record<string, unknown>, i) => {
    if (typeof e !== 'object' || e === null || typeof e.type !== 'string') {
      throw bad(`event ${i} of ${file} needs a "type" string`);
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

export async function append(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      ...CLIENT_FLAGS,
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
  const r = await withClient(values, (c) =>
    c.append(positionals[0] as string, events, {
      ...(expected !== undefined ? { expectedVersion: expected } : {}),
      ...(values['idempotency-key'] ? { idempotencyKey: values['idempotency-key'] } : {}),
    }),
  );
  out(r);
  return 0;
}

export async function read(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      ...CLIENT_FLAGS,
      all: { type: 'boolean' },
      from: { type: 'string' },
      backwards: { type: 'boolean' },
      'max-count': { type: 'string' },
      prefix: { type: 'string' },
      type: { type: 'string', multiple: true },
      consistency: { type: 'string' },
    },
  });
  const t = target('read', positionals, values);
  const consistency = values.consistency;
  if (consistency !== undefined && consistency !== 'leader' && consistency !== 'follower') {
    throw new UsageError('chronacta', `--consistency is leader or follower, got "${consistency}"`);
  }
  const rc = consistency ? { readConsistency: consistency as ReadConsistency } : {};
  const served = (r: { read?: { servedBy: string; appliedPosition: bigint; address: string } }) =>
    r.read ? { servedBy: r.read.servedBy, appliedPosition: r.read.appliedPosition, servedAt: r.read.address } : {};
  const maxCount = num('max-count', values['max-count']);
  const direction = values.backwards ? 'backwards' : 'forwards';
  const from = values.from === undefined ? undefined : big('from', values.from);
  await withClient(values, async (c) => {
    if ('all' in t) {
      const r = await c.readAll({
        direction,
        ...(from !== undefined ? { fromPosition: from } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(t.streamPrefix ? { streamPrefix: t.streamPrefix } : {}),
        ...(t.types ? { types: t.types } : {}),
        ...rc,
      });
      for (const e of r.events) out(eventJson(e));
      out({ end: r.end, next: r.nextPosition, lastPosition: r.lastPosition, ...served(r) });
    } else {
      const r = await c.readStream(t.stream, {
        direction,
        ...(from !== undefined ? { fromVersion: from } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(values.type ? { types: values.type } : {}),
        ...rc,
      });
      for (const e of r.events) out(eventJson(e));
      out({ end: r.end, next: r.nextVersion ?? null, lastVersion: r.lastVersion, deleted: r.deleted, ...served(r) });
    }
  });
  return 0;
}

export async function subscribe(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      ...CLIENT_FLAGS,
      all: { type: 'boolean' },
      from: { type: 'string' },
      prefix: { type: 'string' },
      type: { type: 'string', multiple: true },
      count: { type: 'string' },
    },
  });
  const t = target('subscribe', positionals, values);
  const limit = num('count', values.count);
  await withClient(values, async (c) => {
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
