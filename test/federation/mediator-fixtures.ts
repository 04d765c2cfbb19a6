/**
 * Shared by the mediator and pickup tests: parties with did:peer:2 identities, a sender that
 * posts forwards over real HTTP, what a relay can see in stored bytes, and the federation
 * command compiled for child processes.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import type { DidCommMessage } from '../../ts/federation/didcomm/message.js';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { createPeerIdentity, type PeerIdentity } from '../../ts/federation/mediator/identity.js';
import { MEDIA_TYPE_ENCRYPTED } from '../../ts/federation/mediator/protocol.js';
import { PickupClient } from '../../ts/federation/pickup/client.js';
import { ROOT } from '../helpers/paths.js';
import { distFile } from '../helpers/processes.js';

export const resolver = new ResolverRegistry();

export async function tempDir(prefix: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), `plexus-mediator-${prefix}-`));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

export interface Party extends PeerIdentity {
  keys: InMemoryKeyManager;
}

/** A sender with no service of its own. */
export async function sender(): Promise<Party> {
  const keys = new InMemoryKeyManager();
  return { ...(await createPeerIdentity(keys)), keys };
}

/** A recipient reached through the mediator: its service is the mediator's URL and routing key. */
export async function recipient(mediator: { url: string; did: string }): Promise<Party> {
  const keys = new InMemoryKeyManager();
  const id = await createPeerIdentity(keys, [{ uri: mediator.url, routingKeys: [`${mediator.did}#key-2`] }]);
  return { ...id, keys };
}

export function pickupClient(p: Party, mediator: { url: string; did: string }): PickupClient {
  return new PickupClient({ mediatorUrl: mediator.url, mediatorDid: mediator.did, did: p.did, resolver, keys: p.keys });
}

export function event(from: Party, to: Party, n: number): DidCommMessage {
  return {
    id: `send-${n}-c0ffee`,
    type: 'https://plexus.example/events/order.placed',
    from: from.did,
    to: [to.did],
    body: { secretPayload: `forty-two cups of tea #${n}` },
  };
}

/** Packs `msg` for `to` (authcrypt, sender protected, forward-wrapped) and posts it to its service. */
export async function send(from: Party, to: Party, msg: DidCommMessage): Promise<{ status: number; body: string }> {
  const r = await packEncrypted(
    msg,
    { to: to.did, from: from.did, protectSender: true },
    { resolver, keys: from.keys },
  );
  return post(r.service!.uri, r.packed);
}

export async function post(
  url: string,
  body: string,
  type = MEDIA_TYPE_ENCRYPTED,
): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': type }, body });
  return { status: res.status, body: await res.text() };
}

/** The text a relay could read in `bytes`: the bytes themselves and every base64url run decoded. */
export function visible(bytes: Buffer): string {
  const text = bytes.toString('latin1');
  const decoded = (text.match(/[A-Za-z0-9_-]{12,}/g) ?? []).map((t) => Buffer.from(t, 'base64url').toString('latin1'));
  return [text, ...decoded].join('\n');
}

/** Every file under `dir`, read. */
export async function filesUnder(dir: string): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(await readFile(p));
  }
  return out;
}

export { freePort } from '../helpers/ports.js';

/**
 * The federation command as built in dist/ (`npm test` builds before it runs the tests), for
 * child processes: they run what a user runs, with every module the command imports.
 */
export async function compileForChild(): Promise<{ commandUrl: string; remove: () => Promise<void> }> {
  return { commandUrl: pathToFileURL(distFile('cli/commands/federation.js')).href, remove: async () => undefined };
}

export const CHILD = join(ROOT, 'test/federation/mediator-child.mjs');
