/**
 * A stand-in for the Kubernetes API server's Lease endpoints, for tests: an HTTPS server
 * (node:https, a certificate of a test CA made here) that serves exactly what KubeAuthority
 * calls through `@kubernetes/client-node`'s CoordinationV1Api:
 *
 * - `GET  /apis/coordination.k8s.io/v1/namespaces/{ns}/leases`         list (LeaseList)
 * - `POST /apis/coordination.k8s.io/v1/namespaces/{ns}/leases`         create (201; 409 AlreadyExists)
 * - `GET  /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}`  read (404 NotFound)
 * - `PUT  /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}`  replace (409 Conflict on a
 *   stale `metadata.resourceVersion`, 404 when there is no such Lease)
 *
 * Every request carries `Authorization: Bearer <token>` or is answered 401. Each Lease object
 * is stored as JSON in a real etcd (through its JSON gateway, ts/cluster/etcd-gateway.ts) under
 * `<etcdPrefix><ns>/<name>`, and its `metadata.resourceVersion` is the key's `mod_revision`, as
 * the real API server does; a replace is one etcd transaction comparing that `mod_revision`, a
 * create one comparing the key's `create_revision` with 0. Refusals are Kubernetes `Status`
 * objects. Every request is recorded in `requests` (method, path, status).
 *
 * What it is not: the API server. No admission, RBAC (one token for everything), field
 * validation, defaulting, watches, label or field selectors, PATCH, server-side apply,
 * DELETE, `generation`, managed fields, or API discovery.
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { EtcdGateway } from '../../ts/cluster/etcd-gateway.js';
import { createCa, issueCertificate } from '../../ts/net/ca.js';
import { freePort } from '../../ts/net/ports.js';

export interface KubeLeaseServerOptions {
  /** Client URLs of the etcd that holds the Lease objects. */
  readonly etcdEndpoints: readonly string[];
  /** Where in etcd the objects live (default `/kube-stand-in/<random>/`). */
  readonly etcdPrefix?: string;
  /** The port (default one from ts/net/ports.ts). */
  readonly port?: number;
}

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly status: number;
  /** The request body as sent (PUT, POST). */
  readonly body?: string;
}

const GROUP = 'coordination.k8s.io';
const ROUTE = /^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/leases(?:\/([^/]+))?$/;
const MAX_BODY = 1 << 20;
/** The name the server's certificate carries (the kubeconfig's `tls-server-name`). */
export const KUBE_STAND_IN_NAME = 'kube-lease-stand-in.test';

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes JSON objects
type Obj = Record<string, any>;

export class KubeLeaseServer {
  readonly requests: RecordedRequest[] = [];
  readonly token = randomBytes(16).toString('hex');
  readonly etcdPrefix: string;
  private readonly gateway: EtcdGateway;

  private constructor(
    private readonly server: Server,
    readonly port: number,
    /** The test CA's certificate (PEM) that signed the server's. */
    readonly ca: string,
    opts: KubeLeaseServerOptions,
  ) {
    this.etcdPrefix = opts.etcdPrefix ?? `/kube-stand-in/${randomBytes(6).toString('hex')}/`;
    this.gateway = new EtcdGateway({ endpoints: opts.etcdEndpoints });
    server.on('request', (req, res) => {
      this.handle(req, res).catch((e: unknown) => {
        this.reply(req, res, 500, status(500, 'InternalError', `the stand-in failed: ${(e as Error).message}`));
      });
    });
  }

  static async start(opts: KubeLeaseServerOptions): Promise<KubeLeaseServer> {
    const ca = await createCa('plexus-test-kube-ca');
    const tls = await issueCertificate(ca, {
      commonName: KUBE_STAND_IN_NAME,
      altNames: [{ type: 'dns', value: KUBE_STAND_IN_NAME }],
    });
    const port = opts.port ?? (await freePort());
    const server = createServer({ cert: tls.cert, key: tls.key, minVersion: 'TLSv1.3' });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    return new KubeLeaseServer(server, port, ca.cert, opts);
  }

  get url(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  /** How many requests had `method` (and `status`, when given). */
  count(method: string, statusCode?: number): number {
    return this.requests.filter((r) => r.method === method && (statusCode === undefined || r.status === statusCode))
      .length;
  }

  /**
   * The kubeconfig (JSON, which is YAML too) a client reaches this server with, written to
   * `file`; `server` another URL that leads here (a fault proxy in front of it, say).
   */
  async writeKubeconfig(file: string, token = this.token, server = this.url): Promise<string> {
    const cfg = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'stand-in',
          cluster: {
            server,
            'certificate-authority-data': Buffer.from(this.ca).toString('base64'),
            'tls-server-name': KUBE_STAND_IN_NAME,
          },
        },
      ],
      users: [{ name: 'plexus', user: { token } }],
      contexts: [{ name: 'stand-in', context: { cluster: 'stand-in', user: 'plexus' } }],
      'current-context': 'stand-in',
    };
    await writeFile(file, `${JSON.stringify(cfg, null, 2)}\n`);
    return file;
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  // ---- requests ----

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readBody(req);
    if (body === undefined) return this.reply(req, res, 413, status(413, 'RequestEntityTooLarge', 'body too large'));
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      return this.reply(req, res, 401, status(401, 'Unauthorized', 'Unauthorized'), body);
    }
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const m = ROUTE.exec(url.pathname);
    if (!m)
      return this.reply(req, res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
    const ns = m[1] as string;
    const name = m[3];
    const method = req.method ?? 'GET';
    if (name === undefined && method === 'GET') return this.reply(req, res, 200, await this.list(ns));
    if (name === undefined && method === 'POST') return this.create(req, res, ns, body);
    if (name !== undefined && method === 'GET') return this.read(req, res, ns, name);
    if (name !== undefined && method === 'PUT') return this.replace(req, res, ns, name, body);
    return this.reply(req, res, 405, status(405, 'MethodNotAllowed', `${method} is not served here`), body);
  }

  private key(ns: string, name: string): string {
    return `${this.etcdPrefix}${ns}/${name}`;
  }

  private async list(ns: string): Promise<Obj> {
    const r = await this.gateway.range(`${this.etcdPrefix}${ns}/`, true);
    return {
      kind: 'LeaseList',
      apiVersion: `${GROUP}/v1`,
      metadata: { resourceVersion: String(r.revision) },
      // As the API server lists them: items without kind and apiVersion.
      items: r.kvs.map((kv) => {
        const { kind: _k, apiVersion: _v, ...item } = JSON.parse(kv.value.toString('utf8')) as Obj;
        return withVersion(item, kv.modRevision);
      }),
    };
  }

  private async read(req: IncomingMessage, res: ServerResponse, ns: string, name: string): Promise<void> {
    const kv = (await this.gateway.range(this.key(ns, name))).kvs[0];
    if (kv === undefined) return this.reply(req, res, 404, notFound(name));
    return this.reply(req, res, 200, withVersion(JSON.parse(kv.value.toString('utf8')) as Obj, kv.modRevision));
  }

  private async create(req: IncomingMessage, res: ServerResponse, ns: string, body: string): Promise<void> {
    const obj = parseLease(body);
    if (typeof obj === 'string') return this.reply(req, res, 400, status(400, 'BadRequest', obj), body);
    const name = obj.metadata.name as string;
    if (obj.metadata.resourceVersion) {
      return this.reply(
        req,
        res,
        500,
        status(500, 'InternalError', 'resourceVersion should not be set on objects to be created'),
        body,
      );
    }
    const stored = {
      ...obj,
      metadata: {
        ...obj.metadata,
        namespace: ns,
        uid: randomUuid(),
        creationTimestamp: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      },
    };
    const key = this.key(ns, name);
    const r = await this.gateway.txn(
      [{ key, target: 'CREATE', createRevision: 0n }],
      [{ put: key, value: JSON.stringify(stored) }],
    );
    if (!r.succeeded) {
      return this.reply(
        req,
        res,
        409,
        status(409, 'AlreadyExists', `leases.${GROUP} "${name}" already exists`, name),
        body,
      );
    }
    return this.reply(req, res, 201, withVersion(stored, r.revision), body);
  }

  private async replace(req: IncomingMessage, res: ServerResponse, ns: string, name: string, body: string) {
    const obj = parseLease(body);
    if (typeof obj === 'string') return this.reply(req, res, 400, status(400, 'BadRequest', obj), body);
    if (obj.metadata.name !== name) {
      return this.reply(
        req,
        res,
        400,
        status(
          400,
          'BadRequest',
          `the name of the object (${obj.metadata.name}) does not match the name on the URL (${name})`,
        ),
        body,
      );
    }
    const key = this.key(ns, name);
    const rv = obj.metadata.resourceVersion as unknown;
    if (rv !== undefined && (typeof rv !== 'string' || !/^\d{1,19}$/.test(rv))) {
      return this.reply(
        req,
        res,
        400,
        status(400, 'BadRequest', `invalid resourceVersion ${JSON.stringify(rv)}`),
        body,
      );
    }
    const current = (await this.gateway.range(key)).kvs[0];
    if (current === undefined) return this.reply(req, res, 404, notFound(name), body);
    const old = JSON.parse(current.value.toString('utf8')) as Obj;
    const { resourceVersion: _rv, ...meta } = obj.metadata as Obj;
    // Fields the server owns are kept from the stored object.
    const stored = {
      ...obj,
      metadata: { ...meta, namespace: ns, uid: old.metadata.uid, creationTimestamp: old.metadata.creationTimestamp },
    };
    // Without a resourceVersion a replace is unconditional (it compares the revision just read).
    const expected = rv === undefined ? current.modRevision : BigInt(rv as string);
    const r = await this.gateway.txn(
      [{ key, target: 'MOD', modRevision: expected }],
      [{ put: key, value: JSON.stringify(stored) }],
      [{ range: key }],
    );
    if (!r.succeeded) {
      if (r.ranges[0]?.kvs.length === 0) return this.reply(req, res, 404, notFound(name), body);
      return this.reply(
        req,
        res,
        409,
        status(
          409,
          'Conflict',
          `Operation cannot be fulfilled on leases.${GROUP} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
          name,
        ),
        body,
      );
    }
    return this.reply(req, res, 200, withVersion(stored, r.revision), body);
  }

  private reply(req: IncomingMessage, res: ServerResponse, code: number, obj: Obj, body?: string): void {
    this.requests.push({
      method: req.method ?? '?',
      path: req.url ?? '?',
      status: code,
      ...(body ? { body } : {}),
    });
    const data = Buffer.from(JSON.stringify(obj));
    res.writeHead(code, { 'content-type': 'application/json', 'content-length': data.length });
    res.end(data);
  }
}

function withVersion(obj: Obj, rev: bigint): Obj {
  return { ...obj, metadata: { ...obj.metadata, resourceVersion: String(rev) } };
}

function status(code: number, reason: string, message: string, name?: string): Obj {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    ...(name === undefined ? {} : { details: { name, group: GROUP, kind: 'leases' } }),
    code,
  };
}

function notFound(name: string): Obj {
  return status(404, 'NotFound', `leases.${GROUP} "${name}" not found`, name);
}

/** A Lease object of the request body, or what is wrong with it. */
function parseLease(body: string): Obj | string {
  let o: unknown;
  try {
    o = JSON.parse(body);
  } catch {
    return 'the body is not JSON';
  }
  const obj = o as Obj;
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return 'the body is not an object';
  if (obj.kind !== undefined && obj.kind !== 'Lease') return `kind ${JSON.stringify(obj.kind)} is not Lease`;
  if (typeof obj.metadata?.name !== 'string' || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(obj.metadata.name)) {
    return 'metadata.name must be a DNS subdomain';
  }
  return { ...obj, kind: 'Lease', apiVersion: `${GROUP}/v1` };
}

function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_BODY) chunks.push(c);
    });
    req.on('end', () => resolve(size > MAX_BODY ? undefined : Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function randomUuid(): string {
  const h = randomBytes(16).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
