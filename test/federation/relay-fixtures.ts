/**
 * What the relay and two-organisation tests share: the mediator run as its own process
 * (`mediator-child.mjs` on a compiled copy of the sources, every process stopped by its PID),
 * a journal that fails on demand, and an HTTP front that forwards POSTs to an in-process
 * mediator (the tests decide what happens to WebSocket upgrades).
 */
import type { ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { PlexusError } from '../../ts/core/errors.js';
import type { ActorHistory, JournalStorage, MacrostepEntry } from '../../ts/runtime/types.js';
import { startNode } from '../helpers/processes.js';
import { CHILD, compileForChild } from './mediator-fixtures.js';

export interface MediatorProcess {
  child: ChildProcess;
  did: string;
  url: string;
  exited: Promise<unknown>;
}

/**
 * Starts and stops `plexus federation mediator` processes whose key file passphrase is
 * `passphrase` (in PLX_TEST_MEDIATOR_PASS). Call `setup()` in beforeAll (it compiles the
 * sources once) and `teardown()` in afterAll (it SIGKILLs by PID whatever is still running in
 * `children`, which the tests may add their own processes to).
 */
export class MediatorProcesses {
  readonly children = new Set<ChildProcess>();
  private compiled: { commandUrl: string; remove: () => Promise<void> } | undefined;

  constructor(private readonly passphrase: string) {}

  async setup(): Promise<void> {
    this.compiled = await compileForChild();
  }

  async teardown(): Promise<void> {
    for (const c of this.children) if (c.exitCode === null && c.pid !== undefined) process.kill(c.pid, 'SIGKILL');
    await this.compiled?.remove();
  }

  /** The arguments of a mediator on `port` whose data directory and key file are under `dir`. */
  static args(port: number, dir: string): string[] {
    return [
      '--port',
      String(port),
      '--data',
      join(dir, 'mediator'),
      '--key-file',
      join(dir, 'mediator.keys'),
      '--passphrase-env',
      'PLX_TEST_MEDIATOR_PASS',
    ];
  }

  /** A mediator process; resolves with its DID and URL once it printed its first line. */
  async start(args: readonly string[]): Promise<MediatorProcess> {
    if (!this.compiled) throw new Error('MediatorProcesses.setup() has not run');
    const p = startNode(CHILD, [this.compiled.commandUrl, 'mediator', ...args], {
      env: { ...process.env, PLX_TEST_MEDIATOR_PASS: this.passphrase },
    });
    const child = p.child;
    this.children.add(child);
    const exited = p.exited;
    const first = await p.line(() => true, { timeoutMs: 20_000, what: 'the mediator starting' });
    const line = JSON.parse(first) as { did: string; url: string };
    return { child, did: line.did, url: line.url, exited };
  }

  /** Sends `signal` to the mediator by its PID and waits for it to exit. */
  async stop(m: MediatorProcess, signal: NodeJS.Signals): Promise<void> {
    if (m.child.pid !== undefined && m.child.exitCode === null) process.kill(m.child.pid, signal);
    await m.exited;
    this.children.delete(m.child);
  }
}

/** A journal whose next append fails when `failNext` is set (a disk error, say). */
export class FlakyJournal implements JournalStorage {
  failNext = false;
  constructor(private readonly inner: JournalStorage) {}
  get shardCount() {
    return this.inner.shardCount;
  }
  append(iri: string, e: MacrostepEntry, o: { expectedSeq: number }): Promise<void> {
    if (this.failNext) {
      this.failNext = false;
      return Promise.reject(new PlexusError('PLX_STORAGE_IO', 'simulated write failure', {}));
    }
    return this.inner.append(iri, e, o);
  }
  snapshot(...a: Parameters<JournalStorage['snapshot']>) {
    return this.inner.snapshot(...a);
  }
  history(iri: string): Promise<ActorHistory> {
    return this.inner.history(iri);
  }
  close() {
    return this.inner.close();
  }
}

/**
 * An HTTP server (not listening yet) that forwards each POST to `target` and answers with the
 * target's status, content type and body (502 when the target cannot be reached). Add an
 * 'upgrade' listener to decide what happens to WebSocket upgrades.
 */
export function postForwarder(target: string): Server {
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void fetch(target, {
        method: 'POST',
        headers: { 'content-type': String(req.headers['content-type']) },
        body: Buffer.concat(chunks),
      }).then(
        async (r) => {
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'text/plain' });
          res.end(Buffer.from(await r.arrayBuffer()));
        },
        () => res.writeHead(502).end(),
      );
    });
  });
}
