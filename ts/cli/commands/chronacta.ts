import { access, open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ChronactaClient, type ReadConsistency } from '../../chronacta/client.js';
import { clientSecurityFromFiles } from '../../chronacta/client-credentials.js';
import { checkAddress, type HaMember } from '../../chronacta/cluster-config.js';
import { findDataLogs, truncateDamagedTail } from '../../chronacta/data-dir-logs.js';
import { ChronactaCode, chronactaError } from '../../chronacta/errors.js';
import {
  clusterFiles,
  dataPaths,
  haConfigOf,
  joinFiles,
  MAX_GROUP_COMMIT_BYTES,
  makeDataDir,
  prepareDataDir,
  writeClusterFiles,
} from '../../chronacta/layout.js';
import { DEFAULT_LIMITS, type GrpcLimits, LIMIT_RANGES } from '../../chronacta/limits.js';
import {
  caPaths,
  checkMemberCertificate,
  createMemberCa,
  issueMemberFiles,
  loadMemberTls,
  memberTlsPaths,
  readCa,
  writeCa,
  writeMemberTls,
} from '../../chronacta/member-tls.js';
import { migrateDataDir } from '../../chronacta/migrate.js';
import { startServer } from '../../chronacta/server.js';
import type { EventData, ExpectedVersion, RecordedEvent, SubscriptionTarget } from '../../chronacta/types.js';
import { MAX_BATCH_BYTES } from '../../chronacta/validate.js';
import { PlexusError } from '../../core/errors.js';
import { StorageCode, storageError } from '../../storage/errors.js';
import type { VerifyProblem } from '../../storage/types.js';
import { verifyLog } from '../../storage/verify.js';
import { type Command, parse, UsageError, untilStopped } from '../command.js';
import { applyHeapGrowingPercent, DEFAULT_HEAP_GROWING_PERCENT, MAX_HEAP_GROWING_PERCENT } from '../heap.js';

const DEFAULT_SERVER = '127.0.0.1:2113';

const HELP = [
  'Usage: plexus chronacta <subcommand> [options]',
  '',
  'Chronacta, the event store (standalone or cluster mode). Output is JSON, one object per line.',
  '',
  'Subcommands:',
  '  serve [--data DIR] [--host H] [--port N] [--metrics-port N] [--fsync MODE]',
  '        [--segment-bytes N] [--compact-every-ms N] [--heap-growing-percent N]',
  '        Serves the store in DIR (default ./data) over gRPC on H:N (default',
  '        127.0.0.1:2113; 0 picks a free port) and /metrics, /healthz, /readyz on',
  '        --metrics-port (default 2114; 0 picks a free port). Prints',
  '        {"event":"serving","address",...} once it serves; stops on SIGINT or SIGTERM.',
  '        --heap-growing-percent N (0 to 1000, default 300; also with --cluster): V8 may',
  '        let the heap grow to 1 + N/100 times what is live before its next full',
  '        collection (0: V8 chooses). Fewer full collections under load, for more',
  '        memory. A value given to node itself (node --heap-growing-percent=N) wins.',
  '        --truncate-damaged-tail (also with --cluster): before serving, cut off a last',
  '        record that lies whole in its log but fails its CRC (it may have been',
  '        acknowledged, so without this flag the store refuses to open with',
  '        PLX_CHRONACTA_CORRUPT naming the file and offset); each cut is reported on',
  '        standard error. For a deliberate repair, once no replica or backup has it.',
  '  serve --cluster [--data DIR] [--metrics-port N] [--tick-ms N]',
  '        [--readiness-max-replication-lag N] [--max-read-lag N]',
  '        [--max-read-staleness-ms N] [--group-commit-bytes N] [--heap-growing-percent N]',
  '        Serves a cluster member: DIR/cluster/cluster.json (mode "cluster") lists the',
  '        members, node.json names this one; gRPC binds the port of its advertise',
  '        address, Raft its raftAddress. Only the leader takes writes; a follower',
  '        refuses them with PLX_CHRONACTA_HA_NOT_LEADER naming the leader. --tick-ms is',
  '        the Raft tick (default 100; an election takes 10 to 20 ticks). /readyz fails',
  '        on a leader while a voter lags more than N positions (default 0). A follower',
  "        serves a follower read only if it heard its leader's last committed position",
  '        within --max-read-staleness-ms (default 10 ticks, one election timeout) and',
  '        has applied up to it minus --max-read-lag positions (default 0); otherwise',
  '        it refuses with PLX_CHRONACTA_STALE_READ naming the leader. cluster.json is',
  '        rewritten (epoch + 1) whenever the membership the member applied changes.',
  '        --group-commit-bytes N (0 to 1048576, 0 is off): as leader, propose the',
  '        appends that arrive while a Raft write is under way as one entry of up to',
  '        N bytes. Default: cluster.json\'s "groupCommitBytes" (131072 in clusters',
  '        made by `cluster init` of this version; absent, so off, in older ones: set',
  '        it only once every member runs a plexus that applies several appends per',
  '        entry, this one or later).',
  '  serve ... [--cert-file F --key-file F] [--trusted-ca-file F] [--client-cert-auth]',
  '        [--auth-tokens-file F]                        (also with --cluster)',
  '        Secures the gRPC port (etcd\'s flags; docs/chronacta.md, "Securing the client',
  '        port"). --cert-file and --key-file (PEM): serve TLS 1.3 with this certificate.',
  '        --client-cert-auth: refuse, in the TLS handshake, a client without a',
  '        certificate that chains to --trusted-ca-file (PEM CA certificates; in',
  '        cluster mode also what a member trusts when it calls the leader).',
  '        --auth-tokens-file: a call must carry "authorization: Bearer T" with a',
  '        token T of the file (one a line, 16 to 4096 printable ASCII characters, # for',
  '        comments), or it ends UNAUTHENTICATED (PLX_CHRONACTA_UNAUTHENTICATED). With',
  '        both, a call needs both. The files are checked every second: a changed',
  '        certificate, key, CA or tokens file is taken for new connections and calls; a',
  '        changed file that cannot be used is not (the old one stays, a warning says',
  '        why). Default: plaintext, no authentication; on an address that is not',
  '        loopback, serve warns on stderr at start.',
  '  serve limits (standalone and --cluster; docs/chronacta.md, "Server limits"):',
  '        --max-connections N (default 4096, at most half the open-file limit),',
  `        --max-connections-per-client N (${DEFAULT_LIMITS.maxConnectionsPerClient}; per remote address),`,
  `        --max-concurrent-streams N (${DEFAULT_LIMITS.maxConcurrentStreams}; calls per connection),`,
  `        --max-buffered-bytes-per-connection N (${DEFAULT_LIMITS.maxBufferedBytesPerConnection}),`,
  `        --max-buffered-bytes N (${DEFAULT_LIMITS.maxBufferedBytes}; requests being received plus`,
  '        responses not yet read), --max-subscriptions N',
  `        (${DEFAULT_LIMITS.maxSubscriptions}), --max-subscriptions-per-connection N (${DEFAULT_LIMITS.maxSubscriptionsPerConnection}),`,
  `        --stall-timeout-ms N (${DEFAULT_LIMITS.stallTimeoutMs}; a call whose client reads none of its`,
  `        response is reset), --request-timeout-ms N (${DEFAULT_LIMITS.requestTimeoutMs}; a request not`,
  `        received in full ends with DEADLINE_EXCEEDED), --idle-timeout-ms N (${DEFAULT_LIMITS.idleTimeoutMs};`,
  '        a connection with no call is closed). Beyond a bound: RESOURCE_EXHAUSTED, or',
  '        the connection is closed at once; chronacta_grpc_limited_total counts each.',
  '        Raft and catch-up traffic between members is mutual TLS 1.3 from the',
  '        cluster CA, with DIR/cluster/tls/{ca.pem,member.pem,member-key.pem}: a peer',
  '        is the member its certificate names; plaintext is refused. Without these',
  '        files the member does not start (PLX_CHRONACTA_HA_NO_CERTIFICATE).',
  '        --raft-tls permissive also takes plaintext peers (and dials a peer in',
  '        plaintext when TLS fails): only while a plaintext cluster moves to TLS',
  '        (docs/chronacta-ha.md, "From plaintext to TLS"). Default: required. A',
  '        member whose node stops (a divergence, a failed write) exits with its code.',
  '  cluster init --members N --root DIR [--base-port P] [--cluster-id ID]',
  '        [--advertise A1,A2,...] [--raft R1,R2,...] [--force]',
  '        Writes the cluster files of N members on loopback into DIR/node-1 ..',
  '        DIR/node-N: member i advertises 127.0.0.1:P+2(i-1) and runs Raft on',
  '        127.0.0.1:P+2(i-1)+1 (P default 2213), unless --advertise and --raft list',
  '        the addresses. Refuses directories that have cluster files, unless --force.',
  '        Also makes the cluster CA (Ed25519) in DIR/ca.pem and DIR/ca-key.pem (keep',
  "        the key off the members) and each member's certificate in its cluster/tls/.",
  '  cluster certs --ca-dir CA --data DIR [--data DIR]... [--force]',
  '        Issues the certificate of the member in each DIR (its id from node.json)',
  '        from the CA in CA (ca.pem, ca-key.pem), making the CA there first when CA',
  '        holds none. For clusters made before members spoke TLS; refuses a DIR that',
  '        has a certificate, unless --force (a new one, e.g. before it expires).',
  '  cluster status [--server ADDR]',
  "        Prints the member's view: mode, role, leader, term, commit and applied",
  '        indexes, last position, and each member with its lag (on the leader).',
  '  cluster join-files --server ADDR --id N --raft-address H:P --advertise H:P',
  '        --data DIR (--ca-dir CA | --cert F --key F --ca F) [--force]',
  '        Writes the cluster files of a new member N into DIR from the membership',
  '        ADDR reports; node.json marks it as joining, so `serve --cluster --data DIR`',
  '        starts it empty, without a configuration of its own. Start it, then add it.',
  "        Its certificate: issued with the cluster CA's key in CA (--ca-dir), or one",
  '        the operator had signed (--cert, --key, and the CA certificate --ca), checked',
  '        to name member N and chain to the CA.',
  '  cluster add --server ADDR --id N --raft-address H:P --advertise H:P',
  '        [--learner] [--catch-up-ms MS]',
  '        Adds member N on the leader (a follower at ADDR redirects): first a learner',
  '        that catches up (within MS, default 10000), then a voter unless --learner.',
  '        One change at a time; ids are never reused. A learner whose catch-up wait',
  '        timed out stays a learner: promote it once it has caught up.',
  '  cluster promote --server ADDR --id N [--catch-up-ms MS]',
  '        Makes learner N a voter on the leader (a follower at ADDR redirects) once it',
  '        has every committed entry, waiting up to MS (default 10000) for that.',
  '  cluster transfer --server ADDR [--to N] [--timeout-ms MS]',
  '        Hands leadership to voter N (default: the most caught-up other voter) and',
  '        waits up to MS (default 10000) until N leads; prints the new leader. A',
  '        follower at ADDR redirects to the leader. Refuses an unknown id, a learner,',
  '        a cluster with one voter, and a target that did not take over in time.',
  '  cluster remove --server ADDR --id N',
  '        Removes member N (a voter or a learner) on the leader; never the last voter.',
  '        A leader that removes itself steps down once the change commits.',
  '  verify DIR [--truncate-damaged-tail]',
  '        Checks every log of a data directory that no server has open, changing',
  "        nothing: the log of a standalone store, or a cluster member's replicated log",
  '        (replica/log) and Raft journal with its snapshots (replica/raft), and the',
  '        compacted archive. Prints one JSON line per log ({"log": "log" | "replica-log"',
  '        | "raft-log" | "archive", "ok", "openable", "problems", ...}). Exit 1 with',
  '        PLX_STORAGE_CORRUPT (naming the file and offset) when a problem would stop the',
  '        store opening, and with PLX_CHRONACTA_BAD_DATA_DIR when DIR holds no log.',
  '        --truncate-damaged-tail: cut off a damaged last record (reason damaged-tail)',
  '        on purpose, print {"event":"truncated-damaged-tail", "dropped"} for it, and',
  '        check again.',
  '  migrate [--data DIR]',
  '        Raises the data directory DIR (default ./data) of a stopped node to the',
  '        current data format (2: node.json records its cluster id). Idempotent;',
  '        refuses a directory a running node has open, and a newer format.',
  '  append STREAM [--type T --data TEXT | --events FILE] [--expected-version V]',
  '        [--idempotency-key K] [--server ADDR]',
  '        Appends one event (--type, --data) or the JSON array of events in FILE',
  '        (- for standard input; each {"type", "data", "metadata"?, "id"?}, where a',
  '        data that is not a string is stored as its JSON text). V is any, no_stream,',
  '        exists or a version.',
  '  read (STREAM | --all) [--from N] [--backwards] [--max-count N] [--prefix P]',
  '        [--type T]... [--consistency leader|follower] [--server ADDR]',
  '        Prints the events, then {"end", "next"} (in cluster mode also who served the',
  '        read and its applied position). --consistency follower lets a follower serve',
  '        it within its staleness bound (never linearizable); the default, leader,',
  '        reads at the leader.',
  '  subscribe (STREAM | --all) [--from N|start|end] [--prefix P] [--type T]...',
  '        [--count N] [--server ADDR]',
  '        Prints events as they come (and {"caughtUp"} once live); with --count,',
  '        exits after N events.',
  '',
  `--server defaults to ${DEFAULT_SERVER} (host:port, a port from 1 to 65535). Every command that`,
  'calls a server (append, read, subscribe, cluster status, join-files, add, promote, transfer,',
  'remove) also takes:',
  '  --cacert F       TLS: trust the CA certificates in F (PEM) for the server',
  '  --tls            TLS with the system CA list (implied by --cacert, --cert)',
  '  --cert F --key F TLS: present this client certificate and key (PEM)',
  '  --server-name N  the name the server certificate must carry, when not the host',
  '  --token-file F   send the bearer token on the first line of F; without it, the',
  '                   token in PLEXUS_CHRONACTA_TOKEN (if set). Never printed.',
  'A redirect to the leader is followed with the same TLS settings and token.',
  '',
  'Exit status: 0 on success; 1 when the work failed, with "plexus: error CODE: message" on',
  'standard error (a refused call, a bad --events file: PLX_CHRONACTA_BAD_INPUT or',
  'PLX_CHRONACTA_TOO_LARGE above 128 MiB, a data directory that cannot be one:',
  'PLX_CHRONACTA_BAD_DATA_DIR, damage found by verify: PLX_STORAGE_CORRUPT); 2 for a usage',
  'mistake (an unknown option, a number out of range: ports 0 to 65535, --segment-bytes 128',
  'to 1073741824, --compact-every-ms 1 to 2147483647).',
  '',
  'Examples:',
  '  plexus chronacta serve --data /var/lib/chronacta --port 2113 --metrics-port 2114',
  '  plexus chronacta serve --host 0.0.0.0 --cert-file server.pem --key-file server-key.pem \\',
  '      --trusted-ca-file clients-ca.pem --client-cert-auth',
  '  plexus chronacta read --all --server db1.example:2113 --cacert ca.pem \\',
  '      --cert me.pem --key me-key.pem',
  '  plexus chronacta append orders-1 --type placed --data \'{"total":3}\' --expected-version no_stream',
  '  plexus chronacta read --all --max-count 10',
  '  plexus chronacta cluster init --members 3 --root /var/lib/chronacta',
  '  plexus chronacta serve --cluster --data /var/lib/chronacta/node-1 --metrics-port 2114',
  '  plexus chronacta cluster status --server 127.0.0.1:2213',
  '  plexus chronacta cluster join-files --server 127.0.0.1:2213 --id 4 --raft-address 127.0.0.1:2220 \\',
  '      --advertise 127.0.0.1:2219 --data /var/lib/chronacta/node-4 --ca-dir /var/lib/chronacta',
  '  plexus chronacta serve --cluster --data /var/lib/chronacta/node-4 --metrics-port 2120',
  '  plexus chronacta cluster add --server 127.0.0.1:2213 --id 4 --raft-address 127.0.0.1:2220 \\',
  '      --advertise 127.0.0.1:2219',
  '  plexus chronacta cluster remove --server 127.0.0.1:2213 --id 2',
].join('\n');

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError('chronacta', `--${name} takes a whole number, got "${v}"`);
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new UsageError('chronacta', `--${name} ${v} is above 2^53 - 1`);
  return n;
}

/** A whole number from `min` to `max`, or undefined when the option is absent. */
function ranged(name: string, v: string | undefined, min: number, max: number): number | undefined {
  const n = num(name, v);
  if (n !== undefined && (n < min || n > max)) throw new UsageError('chronacta', `--${name} takes ${min} to ${max}`);
  return n;
}

/** A port to listen on: 0 (any free port) to 65535. */
const port = (name: string, v: string | undefined) => ranged(name, v, 0, 65535);

/** --server: host:port with a port from 1 to 65535. */
function serverAddress(v: string | undefined): string {
  if (v === undefined) return DEFAULT_SERVER;
  const i = v.lastIndexOf(':');
  const p = i > 0 && /^\d{1,5}$/.test(v.slice(i + 1)) ? Number(v.slice(i + 1)) : 0;
  if (p < 1 || p > 65535) {
    throw new UsageError('chronacta', `--server takes host:port with a port from 1 to 65535, got "${v}"`);
  }
  return v;
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

/** The `serve` flags of the gRPC port's bounds (limits.ts). */
const LIMIT_FLAGS: readonly (readonly [string, keyof GrpcLimits])[] = [
  ['max-connections', 'maxConnections'],
  ['max-connections-per-client', 'maxConnectionsPerClient'],
  ['max-concurrent-streams', 'maxConcurrentStreams'],
  ['max-buffered-bytes-per-connection', 'maxBufferedBytesPerConnection'],
  ['max-buffered-bytes', 'maxBufferedBytes'],
  ['max-subscriptions', 'maxSubscriptions'],
  ['max-subscriptions-per-connection', 'maxSubscriptionsPerConnection'],
  ['stall-timeout-ms', 'stallTimeoutMs'],
  ['request-timeout-ms', 'requestTimeoutMs'],
  ['idle-timeout-ms', 'idleTimeoutMs'],
];

function limitsOf(values: Record<string, string | boolean | undefined>): Partial<GrpcLimits> {
  const out: Partial<Record<keyof GrpcLimits, number>> = {};
  for (const [flag, key] of LIMIT_FLAGS) {
    const v = num(flag, values[flag] as string | undefined);
    if (v === undefined) continue;
    const [lo, hi] = LIMIT_RANGES[key];
    if (v < lo || v > hi) throw new UsageError('chronacta', `--${flag} takes ${lo} to ${hi}, got ${v}`);
    out[key] = v;
  }
  return out;
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
      cluster: { type: 'boolean' },
      'tick-ms': { type: 'string' },
      'readiness-max-replication-lag': { type: 'string' },
      'max-read-lag': { type: 'string' },
      'max-read-staleness-ms': { type: 'string' },
      'group-commit-bytes': { type: 'string' },
      'heap-growing-percent': { type: 'string' },
      'truncate-damaged-tail': { type: 'boolean' },
      'cert-file': { type: 'string' },
      'key-file': { type: 'string' },
      'trusted-ca-file': { type: 'string' },
      'client-cert-auth': { type: 'boolean' },
      'auth-tokens-file': { type: 'string' },
      ...Object.fromEntries(LIMIT_FLAGS.map(([flag]) => [flag, { type: 'string' as const }])),
      'raft-tls': { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const limits = limitsOf(values as Record<string, string | boolean | undefined>);
  const clustered = values.cluster === true;
  const clientAuth = {
    ...(values['cert-file'] !== undefined ? { certFile: values['cert-file'] } : {}),
    ...(values['key-file'] !== undefined ? { keyFile: values['key-file'] } : {}),
    ...(values['trusted-ca-file'] !== undefined ? { trustedCaFile: values['trusted-ca-file'] } : {}),
    ...(values['client-cert-auth'] ? { clientCertAuth: true } : {}),
    ...(values['auth-tokens-file'] !== undefined ? { authTokensFile: values['auth-tokens-file'] } : {}),
  };
  const raftTls = values['raft-tls'];
  if (raftTls !== undefined && !clustered) throw new UsageError('chronacta', '--raft-tls goes with --cluster');
  if (raftTls !== undefined && raftTls !== 'required' && raftTls !== 'permissive') {
    throw new UsageError('chronacta', `--raft-tls is required or permissive, got "${raftTls}"`);
  }
  const tickMs = num('tick-ms', values['tick-ms']);
  const maxLag = num('readiness-max-replication-lag', values['readiness-max-replication-lag']);
  const maxReadLag = num('max-read-lag', values['max-read-lag']);
  const maxReadStalenessMs = num('max-read-staleness-ms', values['max-read-staleness-ms']);
  const groupCommitBytes = num('group-commit-bytes', values['group-commit-bytes']);
  if (
    !clustered &&
    (tickMs !== undefined ||
      maxLag !== undefined ||
      maxReadLag !== undefined ||
      maxReadStalenessMs !== undefined ||
      groupCommitBytes !== undefined)
  ) {
    throw new UsageError(
      'chronacta',
      '--tick-ms, --readiness-max-replication-lag, --max-read-lag, --max-read-staleness-ms and --group-commit-bytes go with --cluster',
    );
  }
  if (groupCommitBytes !== undefined && groupCommitBytes > MAX_GROUP_COMMIT_BYTES) {
    throw new UsageError('chronacta', `--group-commit-bytes takes 0 to ${MAX_GROUP_COMMIT_BYTES}`);
  }
  if (maxReadStalenessMs !== undefined && (maxReadStalenessMs < 1 || maxReadStalenessMs > 3_600_000)) {
    throw new UsageError('chronacta', '--max-read-staleness-ms takes 1 to 3600000');
  }
  if (tickMs !== undefined && (tickMs < 1 || tickMs > 10_000)) {
    throw new UsageError('chronacta', '--tick-ms takes 1 to 10000');
  }
  if (clustered) {
    // A member's directory is made by `cluster init` or `cluster join-files`; anything else is
    // refused before a file is written into it.
    const file = dataPaths(values.data ?? 'data').clusterFile;
    const member = await access(file).then(
      () => true,
      () => false,
    );
    if (!member) {
      throw chronactaError(
        ChronactaCode.BAD_DATA_DIR,
        `${values.data ?? 'data'} is not a cluster member's data directory (no ${file}): make one with ` +
          '`plexus chronacta cluster init` or `plexus chronacta cluster join-files`',
        { file },
      );
    }
  }
  // A member made by `cluster join-files` starts empty and never bootstraps a configuration.
  const ha = clustered ? haConfigOf(await prepareDataDir(values.data ?? 'data')) : undefined;
  const joining = ha?.join === true;
  // Members speak mutual TLS with the certificates in the data directory; none, no start.
  const tls = ha ? await loadMemberTls(values.data ?? 'data', ha.id) : undefined;
  let fatal: (err: PlexusError) => void = () => undefined;
  const failed = new Promise<PlexusError>((resolve) => {
    fatal = resolve;
  });
  const fsync = values.fsync;
  if (fsync !== undefined && fsync !== 'batch' && fsync !== 'always' && fsync !== 'never') {
    throw new UsageError('chronacta', `--fsync is batch, always or never, got "${fsync}"`);
  }
  const segmentBytes = ranged('segment-bytes', values['segment-bytes'], 128, 1024 * 1024 * 1024);
  // A timer's longest delay (about 24.8 days); 0 would compact in a busy loop.
  const compactEveryMs = ranged('compact-every-ms', values['compact-every-ms'], 1, 2 ** 31 - 1);
  const heapGrowing = num('heap-growing-percent', values['heap-growing-percent']) ?? DEFAULT_HEAP_GROWING_PERCENT;
  if (heapGrowing > MAX_HEAP_GROWING_PERCENT) {
    throw new UsageError('chronacta', `--heap-growing-percent takes 0 to ${MAX_HEAP_GROWING_PERCENT}`);
  }
  const heapGrowingPercent = applyHeapGrowingPercent(heapGrowing);
  if (values['truncate-damaged-tail'] === true) {
    // Cut on purpose, before the store opens its logs: each cut is reported on standard error.
    for (const l of await findDataLogs(values.data ?? 'data', { allowEmpty: true })) {
      await truncateDamagedTail(l.dir, warnLogger);
    }
  }
  // A member with TLS dials its leader's client port by IP address (follower-read probes).
  if (clientAuth.certFile !== undefined) quietIpServerName();
  const server = await startServer({
    dataDir: values.data ?? 'data',
    host: values.host ?? '127.0.0.1',
    ...(clustered ? {} : { port: port('port', values.port) ?? 2113 }),
    ...(clustered && values.port !== undefined ? { port: port('port', values.port) } : {}),
    ...(clustered
      ? {
          cluster: true,
          replication: {
            ...(tickMs !== undefined ? { tickMs } : {}),
            ...(groupCommitBytes !== undefined ? { groupCommitBytes } : {}),
            ...(tls
              ? { tls: { ...tls, mode: raftTls === 'permissive' ? ('permissive' as const) : ('required' as const) } }
              : {}),
            onFatal: (err: PlexusError) => fatal(err),
          },
          ...(maxLag !== undefined ? { readinessMaxReplicationLag: maxLag } : {}),
          ...(maxReadLag !== undefined ? { maxReadLag } : {}),
          ...(maxReadStalenessMs !== undefined ? { maxReadStalenessMs } : {}),
        }
      : {}),
    metricsPort: port('metrics-port', values['metrics-port']) ?? 2114,
    clientAuth,
    limits,
    ...(fsync ? { fsync } : {}),
    ...(segmentBytes !== undefined ? { segmentBytes } : {}),
    ...(compactEveryMs !== undefined ? { compactEveryMs } : {}),
    logger: {
      warn: (message, details) =>
        process.stderr.write(
          `plexus chronacta: ${message}${details === undefined ? '' : ` ${JSON.stringify(details, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`}\n`,
        ),
    },
  });
  const api = server.clusterApi;
  // The signal handlers go in before the serving line: whoever reads it may send SIGTERM at once.
  const stopped = untilStopped();
  out({
    event: 'serving',
    address: server.address,
    metrics: server.metricsAddress,
    dataDir: server.store.dataDir,
    lastPosition: server.store.lastPosition,
    heapGrowingPercent,
    security: server.security,
    ...(clustered
      ? { cluster: true, id: server.store.clusterStatus()?.id, join: joining, raftTls: raftTls ?? 'required' }
      : {}),
    ...(api ? { followerReads: api.bounds } : {}),
  });
  // A member whose node stopped for good does not run on doing nothing: it exits with the code.
  const failure = await Promise.race([stopped.then(() => undefined), failed]);
  await server.close();
  if (failure) {
    out({ event: 'failed', code: failure.code, message: failure.message });
    throw failure;
  }
  out({ event: 'stopped' });
  return 0;
}

async function migrate(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { data: { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  out({ event: 'migrated', ...(await migrateDataDir(values.data ?? 'data')) });
  return 0;
}

/** Warnings of the log engine and the store, one line each on standard error. */
const warnLogger = {
  warn: (message: string, details?: Record<string, unknown>) =>
    process.stderr.write(
      `plexus chronacta: ${message} ${JSON.stringify(details ?? {}, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}\n`,
    ),
};

async function verify(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { 'truncate-damaged-tail': { type: 'boolean' } },
  });
  if (positionals.length !== 1) throw new UsageError('chronacta', 'verify takes one data directory');
  const root = positionals[0] as string;
  const repair = values['truncate-damaged-tail'] === true;
  const fatal: (VerifyProblem & { dir: string })[] = [];
  const check = (dir: string) =>
    verifyLog(dir).catch((e: unknown) => {
      if (e instanceof PlexusError) throw e;
      throw storageError(StorageCode.IO, `cannot read the log in ${dir}: ${(e as Error).message}`, { dir }, e);
    });
  for (const { kind, dir } of await findDataLogs(root)) {
    let r = await check(dir);
    const isFatal = (p: VerifyProblem) => p.severity === 'fatal';
    // Only a damaged tail is cut on purpose; any other damage stays for the operator to restore.
    if (repair && r.problems.some(isFatal) && r.problems.filter(isFatal).every((p) => p.reason === 'damaged-tail')) {
      const dropped = await truncateDamagedTail(dir, warnLogger);
      out({ event: 'truncated-damaged-tail', log: kind, dir: r.dir, dropped });
      r = await check(dir);
    }
    out({
      log: kind,
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
    for (const p of r.problems) if (isFatal(p)) fatal.push({ ...p, dir: r.dir });
  }
  const first = fatal[0];
  if (first) {
    const tail = fatal.some((p) => p.reason === 'damaged-tail') && !repair;
    throw storageError(
      StorageCode.CORRUPT,
      `${fatal.length} problem${fatal.length === 1 ? '' : 's'} would stop the store opening; the first: ` +
        `${join(first.dir, first.file)} is damaged at byte offset ${first.offset} (${first.reason}): ${first.message}. ` +
        `Restore the directory from a replica or a backup${tail ? ', or run verify --truncate-damaged-tail' : ''}`,
      { dir: first.dir, file: first.file, offset: first.offset, reason: first.reason, problems: fatal.length },
    );
  }
  return 0;
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

/** The flags of every command that calls a server: its address, TLS and bearer token. */
const CLIENT_FLAGS = {
  server: { type: 'string' },
  tls: { type: 'boolean' },
  cacert: { type: 'string' },
  cert: { type: 'string' },
  key: { type: 'string' },
  'server-name': { type: 'string' },
  'token-file': { type: 'string' },
} as const;

interface ClientFlagValues {
  server?: string | undefined;
  tls?: boolean | undefined;
  cacert?: string | undefined;
  cert?: string | undefined;
  key?: string | undefined;
  'server-name'?: string | undefined;
  'token-file'?: string | undefined;
}

/**
 * grpc-js sends the host it dials as the TLS server name (SNI) even when it is an IP address,
 * which RFC 6066 does not allow: Node ignores it (the certificate is still checked against the
 * IP address) and prints a DeprecationWarning (DEP0123) that would end up in every TLS
 * command's output. This drops that one warning, and only in the CLI.
 */
function quietIpServerName(): void {
  const emit = process.emitWarning;
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const code = typeof rest[0] === 'object' && rest[0] !== null ? (rest[0] as { code?: string }).code : rest[1];
    if (code === 'DEP0123') return;
    (emit as (...a: unknown[]) => void).call(process, warning, ...rest);
  }) as typeof process.emitWarning;
}

/** A client of --server with the TLS files and token the flags (or PLEXUS_CHRONACTA_TOKEN) give. */
async function withClient<T>(flags: ClientFlagValues, fn: (c: ChronactaClient) => Promise<T>): Promise<T> {
  const security = clientSecurityFromFiles({
    ...(flags.tls ? { tls: true } : {}),
    ...(flags.cacert !== undefined ? { caFile: flags.cacert } : {}),
    ...(flags.cert !== undefined ? { certFile: flags.cert } : {}),
    ...(flags.key !== undefined ? { keyFile: flags.key } : {}),
    ...(flags['server-name'] !== undefined ? { serverName: flags['server-name'] } : {}),
    ...(flags['token-file'] !== undefined ? { tokenFile: flags['token-file'] } : {}),
  });
  if (security.tls) quietIpServerName();
  const client = new ChronactaClient(serverAddress(flags.server), security);
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

async function read(args: string[]): Promise<number> {
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

async function subscribe(args: string[]): Promise<number> {
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

function addressList(name: string, v: string | undefined, n: number): string[] | undefined {
  if (v === undefined) return undefined;
  const list = v.split(',');
  if (list.length !== n) throw new UsageError('chronacta', `--${name} lists ${list.length} addresses for ${n} members`);
  for (const a of list) {
    try {
      checkAddress(`--${name}`, a);
    } catch (e) {
      throw new UsageError('chronacta', (e as Error).message);
    }
  }
  return list;
}

async function cluster(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'init') return clusterInit(rest);
  if (sub === 'status') return clusterStatus(rest);
  if (sub === 'add') return clusterAdd(rest);
  if (sub === 'remove') return clusterRemove(rest);
  if (sub === 'promote') return clusterPromote(rest);
  if (sub === 'transfer') return clusterTransfer(rest);
  if (sub === 'join-files') return clusterJoinFiles(rest);
  if (sub === 'certs') return clusterCerts(rest);
  throw new UsageError(
    'chronacta',
    sub
      ? `unknown cluster subcommand "${sub}"`
      : 'missing cluster subcommand: init, certs, status, join-files, add, remove, promote or transfer',
  );
}

async function clusterInit(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      members: { type: 'string' },
      root: { type: 'string' },
      'base-port': { type: 'string' },
      'cluster-id': { type: 'string' },
      advertise: { type: 'string' },
      raft: { type: 'string' },
      force: { type: 'boolean' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const n = num('members', values.members);
  if (n === undefined || n < 1 || n > 64) throw new UsageError('chronacta', 'cluster init needs --members 1 to 64');
  if (!values.root) throw new UsageError('chronacta', 'cluster init needs --root DIR');
  const base = num('base-port', values['base-port']) ?? 2213;
  if (base < 1 || base + 2 * n > 65535) throw new UsageError('chronacta', '--base-port leaves no room for the ports');
  const advertise = addressList('advertise', values.advertise, n);
  const raft = addressList('raft', values.raft, n);
  const members: HaMember[] = Array.from({ length: n }, (_, i) => ({
    id: i + 1,
    advertise: advertise?.[i] ?? `127.0.0.1:${base + 2 * i}`,
    raftAddress: raft?.[i] ?? `127.0.0.1:${base + 2 * i + 1}`,
  }));
  const clusterId = values['cluster-id'] ?? `chronacta-${Date.now().toString(36)}`;
  const dirs = members.map((m) => join(values.root as string, `node-${m.id}`));
  if (!values.force) {
    for (const d of dirs) {
      const exists = await access(dataPaths(d).clusterFile).then(
        () => true,
        () => false,
      );
      if (exists) throw new UsageError('chronacta', `${d} already has cluster files; pass --force to replace them`);
    }
  }
  for (const d of dirs) await makeDataDir(d, dataPaths(d).cluster);
  // The cluster CA at the root (its key signs members added later), a certificate per member.
  const ca = await createMemberCa(clusterId);
  await writeCa(values.root, ca);
  for (let i = 0; i < n; i++) {
    const m = members[i] as HaMember;
    await writeClusterFiles(dirs[i] as string, clusterFiles(clusterId, members, m.id));
    await issueMemberFiles(dirs[i] as string, ca, m.id);
    out({
      id: m.id,
      dataDir: dirs[i],
      advertise: m.advertise,
      raftAddress: m.raftAddress,
      clusterId,
      certificate: memberTlsPaths(dirs[i] as string).cert,
    });
  }
  return 0;
}

async function readGiven(flag: string, file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw new UsageError('chronacta', `--${flag} ${file} cannot be read: ${(e as Error).message}`);
  }
}

const exists = (file: string) =>
  access(file).then(
    () => true,
    () => false,
  );

async function clusterCerts(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { 'ca-dir': { type: 'string' }, data: { type: 'string', multiple: true }, force: { type: 'boolean' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const caDir = values['ca-dir'];
  if (!caDir) throw new UsageError('chronacta', 'cluster certs needs --ca-dir CA');
  const dirs = values.data ?? [];
  if (dirs.length === 0) throw new UsageError('chronacta', 'cluster certs needs --data DIR (one or more)');
  const members: { dir: string; id: number; clusterId: string }[] = [];
  for (const dir of dirs) {
    const ha = haConfigOf(await prepareDataDir(dir));
    if (!values.force && (await exists(memberTlsPaths(dir).cert))) {
      throw new UsageError('chronacta', `${dir} already has a member certificate; pass --force to replace it`);
    }
    members.push({ dir, id: ha.id, clusterId: ha.clusterId });
  }
  const p = caPaths(caDir);
  const haveCa = (await exists(p.cert)) || (await exists(p.key));
  const ca = haveCa ? await readCa(caDir) : await createMemberCa(members[0]?.clusterId ?? 'chronacta');
  if (!haveCa) await writeCa(caDir, ca);
  for (const m of members) {
    await issueMemberFiles(m.dir, ca, m.id);
    out({ id: m.id, dataDir: m.dir, certificate: memberTlsPaths(m.dir).cert, ca: p.cert, caCreated: !haveCa });
  }
  return 0;
}

async function clusterStatus(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const s = await withClient(values, (c) => c.clusterStatus());
  out(s as unknown as Record<string, unknown>);
  return 0;
}

export const chronacta: Command = {
  name: 'chronacta',
  summary: 'the event store: serve, verify, append, read, subscribe, cluster',
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
      case 'cluster':
        return cluster(rest);
      case 'migrate':
        return migrate(rest);
      default:
        throw new UsageError(
          'chronacta',
          sub
            ? `unknown subcommand "${sub}"`
            : 'missing subcommand: serve, verify, migrate, append, read, subscribe or cluster',
        );
    }
  },
};

function memberId(v: string | undefined): number {
  if (v === undefined) throw new UsageError('chronacta', 'give the member id with --id N');
  const n = num('id', v) as number;
  if (n < 1 || !Number.isSafeInteger(n)) throw new UsageError('chronacta', '--id takes a whole number from 1');
  return n;
}

function address(name: string, v: string | undefined): string {
  if (v === undefined) throw new UsageError('chronacta', `give --${name} H:P`);
  try {
    checkAddress(`--${name}`, v);
  } catch (e) {
    throw new UsageError('chronacta', (e as Error).message);
  }
  if (Number(v.slice(v.lastIndexOf(':') + 1)) === 0) throw new UsageError('chronacta', `--${name} needs a port from 1`);
  return v;
}

const MEMBER_OPTIONS = {
  ...CLIENT_FLAGS,
  id: { type: 'string' },
  'raft-address': { type: 'string' },
  advertise: { type: 'string' },
} as const;

function newMember(values: { id?: string; 'raft-address'?: string; advertise?: string }): HaMember {
  return {
    id: memberId(values.id),
    raftAddress: address('raft-address', values['raft-address']),
    advertise: address('advertise', values.advertise),
  };
}

async function clusterJoinFiles(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      ...MEMBER_OPTIONS,
      data: { type: 'string' },
      force: { type: 'boolean' },
      'ca-dir': { type: 'string' },
      cert: { type: 'string' },
      key: { type: 'string' },
      ca: { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const self = newMember(values);
  if (!values.data) throw new UsageError('chronacta', 'cluster join-files needs --data DIR');
  // The new member's certificate: issued here with the CA key, or signed by the operator.
  const given = [values.cert, values.key, values.ca].filter((v) => v !== undefined).length;
  if ((values['ca-dir'] === undefined) === (given === 0) || (given !== 0 && given !== 3)) {
    throw new UsageError(
      'chronacta',
      "cluster join-files needs the member's certificate: --ca-dir CA (the cluster CA's ca.pem and ca-key.pem), or --cert F --key F --ca F",
    );
  }
  const signed =
    given === 3
      ? {
          cert: await readGiven('cert', values.cert as string),
          key: await readGiven('key', values.key as string),
          ca: await readGiven('ca', values.ca as string),
        }
      : undefined;
  if (signed) checkMemberCertificate(signed, self.id, values.cert);
  const ca = values['ca-dir'] !== undefined ? await readCa(values['ca-dir']) : undefined;
  const dir = values.data;
  if (!values.force) {
    const exists = await access(dataPaths(dir).clusterFile).then(
      () => true,
      () => false,
    );
    if (exists) throw new UsageError('chronacta', `${dir} already has cluster files; pass --force to replace them`);
  }
  const s = await withClient(values, (c) => c.clusterStatus());
  if (s.mode !== 'cluster') {
    throw new UsageError('chronacta', `the server at ${values.server ?? DEFAULT_SERVER} is not a cluster member`);
  }
  const current: HaMember[] = s.members.map((m) => ({
    id: Number(m.id),
    raftAddress: (m as { raftAddress?: string }).raftAddress ?? '',
    advertise: m.address,
  }));
  if (current.some((m) => m.id === self.id)) {
    throw new UsageError('chronacta', `member ${self.id} is already in the cluster; pick another id`);
  }
  for (const m of current) {
    for (const a of [self.raftAddress, self.advertise]) {
      if (a === m.raftAddress || a === m.advertise) {
        throw new UsageError('chronacta', `address ${a} is already used by member ${m.id}`);
      }
    }
  }
  await makeDataDir(dir, dataPaths(dir).cluster);
  await writeClusterFiles(dir, joinFiles(s.clusterId, current, self));
  if (ca) await issueMemberFiles(dir, ca, self.id);
  else await writeMemberTls(dir, signed as { cert: string; key: string; ca: string });
  out({
    id: self.id,
    dataDir: dir,
    advertise: self.advertise,
    raftAddress: self.raftAddress,
    clusterId: s.clusterId,
    certificate: memberTlsPaths(dir).cert,
  });
  return 0;
}

async function clusterAdd(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...MEMBER_OPTIONS, learner: { type: 'boolean' }, 'catch-up-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const m = newMember(values);
  const catchUpMs = num('catch-up-ms', values['catch-up-ms']);
  if (catchUpMs !== undefined && (catchUpMs < 1 || catchUpMs > 3_600_000)) {
    throw new UsageError('chronacta', '--catch-up-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) =>
    c.addMember(m, { learner: values.learner === true, ...(catchUpMs !== undefined ? { catchUpMs } : {}) }),
  );
  out({ added: m.id, learner: values.learner === true, ...r });
  return 0;
}

async function clusterRemove(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, id: { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const id = memberId(values.id);
  const r = await withClient(values, (c) => c.removeMember(id));
  out({ removed: id, ...r });
  return 0;
}

async function clusterPromote(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, id: { type: 'string' }, 'catch-up-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const id = memberId(values.id);
  const catchUpMs = num('catch-up-ms', values['catch-up-ms']);
  if (catchUpMs !== undefined && (catchUpMs < 1 || catchUpMs > 3_600_000)) {
    throw new UsageError('chronacta', '--catch-up-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) => c.promoteMember(id, catchUpMs !== undefined ? { catchUpMs } : {}));
  out({ promoted: id, ...r });
  return 0;
}

async function clusterTransfer(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { ...CLIENT_FLAGS, to: { type: 'string' }, 'timeout-ms': { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  let to: number | undefined;
  if (values.to !== undefined) {
    to = num('to', values.to) as number;
    if (to < 1 || !Number.isSafeInteger(to)) throw new UsageError('chronacta', '--to takes a member id from 1');
  }
  const timeoutMs = num('timeout-ms', values['timeout-ms']);
  if (timeoutMs !== undefined && (timeoutMs < 1 || timeoutMs > 3_600_000)) {
    throw new UsageError('chronacta', '--timeout-ms takes 1 to 3600000');
  }
  const r = await withClient(values, (c) =>
    c.transferLeader({ ...(to !== undefined ? { to } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) }),
  );
  out({ transferred: true, ...r });
  return 0;
}
