/**
 * `plexus federation`: the DIDComm v2 mediator as a process (ts/federation/mediator/), its queue
 * on the log engine in --data, its keys in --key-file.
 */
import { existsSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { PlexusError } from '../../core/errors.js';
import { parseDidUrl } from '../../federation/did/did-url.js';
import { FileKeyManager } from '../../federation/keys/file.js';
import { InMemoryKeyManager } from '../../federation/keys/memory.js';
import type { KeyManager } from '../../federation/keys/types.js';
import { startMediator } from '../../federation/mediator/server.js';
import { type Command, parse, UsageError, untilStopped } from '../command.js';

const HELP = [
  'Usage: plexus federation <subcommand> [options]',
  '',
  'Federation across trust boundaries. Output is JSON, one object per line.',
  '',
  'Subcommands:',
  '  mediator --port N --data DIR [--host H] [--url URL]',
  '           [--key-file F --passphrase-env VAR] [--fsync MODE]',
  '           [--max-message-bytes N] [--max-queue N] [--allow DID]...',
  '        Runs a DIDComm v2 mediator (Coordinate Mediation 2.0, Message Pickup 3.0,',
  '        forward) over HTTP and WebSocket on H:N (default 127.0.0.1; port 0 picks a',
  '        free one). Its queue lives in DIR on the log engine and survives restarts:',
  '        a message is deleted only when its recipient acknowledges it',
  '        (messages-received). Prints {"event":"serving","did","url","ws",...} once it',
  '        serves and {"event":"stopped"} after SIGTERM or SIGINT.',
  '        --url          the URL published in the DID (default http://H:N/; give it',
  '                       when listening on 0.0.0.0 or behind a TLS proxy)',
  '        --key-file     the mediator key file (made on first start), encrypted with',
  '                       the passphrase in the environment variable VAR; without',
  '                       it the keys live in memory and the DID changes on restart',
  '        --fsync        batch (default), always or never (never: tests only)',
  '        --max-message-bytes  largest message taken (default 1048576)',
  '        --max-queue    most queued messages per client (default 10000)',
  '        --allow        grant mediation only to these DIDs (default: to any client);',
  '                       each must be a DID (did:<method>:<id>)',
  '        A client registers (keylist-update) only its own DID and key ids of its own',
  '        DID document, with a fresh request (created_time within 5 minutes, id used',
  '        once); see docs/federation.md.',
  '',
  'Exit status: 0 after SIGTERM or SIGINT; 1 when it cannot start (a coded error:',
  'the data directory or key file refused); 2 for a usage mistake (PLX_CLI_USAGE).',
  '',
  'Examples:',
  '  PLEXUS_MEDIATOR_PASSPHRASE=... plexus federation mediator --port 8080 \\',
  '      --data /var/lib/plexus/mediator --key-file /var/lib/plexus/mediator.keys \\',
  '      --passphrase-env PLEXUS_MEDIATOR_PASSPHRASE',
].join('\n');

function num(name: string, v: string | undefined, min: number, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) {
    throw new UsageError('federation', `--${name} takes a whole number from ${min} to ${max}, got "${v}"`);
  }
  return Number(v);
}

/** A client DID for --allow: a DID, not a DID URL (no path, query or fragment). */
function allowedDid(v: string): string {
  let did: string | undefined;
  try {
    did = parseDidUrl(v).did;
  } catch {}
  if (did !== v)
    throw new UsageError('federation', `--allow takes a DID (did:<method>:<id>), got "${v.slice(0, 200)}"`);
  return v;
}

function out(o: unknown): void {
  process.stdout.write(`${JSON.stringify(o)}\n`);
}

async function mediator(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  const { values, positionals } = parse('federation', {
    args,
    allowPositionals: true,
    options: {
      port: { type: 'string' },
      data: { type: 'string' },
      host: { type: 'string' },
      url: { type: 'string' },
      'key-file': { type: 'string' },
      'passphrase-env': { type: 'string' },
      fsync: { type: 'string' },
      'max-message-bytes': { type: 'string' },
      'max-queue': { type: 'string' },
      allow: { type: 'string', multiple: true },
    },
  });
  if (positionals.length > 0) throw new UsageError('federation', `unexpected argument "${positionals[0]}"`);
  const port = num('port', values.port, 0, 65535);
  if (port === undefined) throw new UsageError('federation', 'mediator needs --port N (0..65535)');
  if (values.data === undefined || values.data === '') throw new UsageError('federation', 'mediator needs --data DIR');
  const fsync = values.fsync;
  if (fsync !== undefined && fsync !== 'batch' && fsync !== 'always' && fsync !== 'never') {
    throw new UsageError('federation', `--fsync is batch, always or never, got "${fsync}"`);
  }
  if (values.url !== undefined && !/^https?:\/\/[^/\s]+/.test(values.url)) {
    throw new UsageError('federation', `--url must be an http: or https: URL, got "${values.url}"`);
  }
  const host = values.host ?? '127.0.0.1';
  if (isIP(host) === 0 && !/^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$/.test(host)) {
    throw new UsageError('federation', `--host takes an IP address or a host name, got "${host.slice(0, 200)}"`);
  }
  // Every argument is checked before anything is made on disk (the key file, the data directory).
  const maxMessageBytes = num('max-message-bytes', values['max-message-bytes'], 1, 1 << 30);
  const maxQueue = num('max-queue', values['max-queue'], 1, 100_000_000);
  const allow = values.allow ? new Set(values.allow.map(allowedDid)) : undefined;
  if (existsSync(values.data) && !statSync(values.data).isDirectory()) {
    throw new PlexusError('PLX_MEDIATOR_BAD_INPUT', `--data ${values.data} is not a directory`, { dir: values.data });
  }
  let keys: KeyManager;
  if (values['key-file'] !== undefined) {
    const envName = values['passphrase-env'];
    if (envName === undefined) throw new UsageError('federation', '--key-file needs --passphrase-env VAR');
    const pass = process.env[envName];
    if (!pass) throw new UsageError('federation', `the environment variable ${envName} (--passphrase-env) is not set`);
    keys = await FileKeyManager.open(values['key-file'], pass);
  } else {
    if (values['passphrase-env'] !== undefined)
      throw new UsageError('federation', '--passphrase-env goes with --key-file F');
    keys = new InMemoryKeyManager();
    process.stderr.write(
      'plexus federation: no --key-file: the mediator keys live in memory and its DID changes on restart\n',
    );
  }
  const server = await startMediator({
    keys,
    dataDir: values.data,
    port,
    host,
    ...(values.url !== undefined ? { url: values.url } : {}),
    ...(fsync ? { fsync } : {}),
    limits: {
      ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
      ...(maxQueue !== undefined ? { maxMessages: maxQueue } : {}),
    },
    ...(allow ? { allowClient: (did: string) => allow.has(did) } : {}),
    logger: {
      warn: (message, details) =>
        process.stderr.write(`plexus federation: ${message} ${JSON.stringify(details ?? {})}\n`),
    },
  });
  // The signal handlers go in before the serving line: whoever reads it may send SIGTERM at once.
  const stopped = untilStopped();
  out({
    event: 'serving',
    did: server.did,
    url: server.url,
    ws: server.wsUrl,
    port: server.port,
    dataDir: values.data,
    queued: server.mediator.queue.size,
  });
  await stopped;
  await server.close();
  out({ event: 'stopped' });
  return 0;
}

export const federation: Command = {
  name: 'federation',
  summary: 'federation across trust boundaries: the DIDComm mediator',
  help: HELP,
  async run(args) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'mediator':
        return mediator(rest);
      case '-h':
      case '--help':
        process.stdout.write(`${HELP}\n`);
        return 0;
      default:
        throw new UsageError('federation', sub ? `unknown subcommand "${sub}"` : 'missing subcommand: mediator');
    }
  },
};
