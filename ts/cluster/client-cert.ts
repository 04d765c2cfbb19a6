/**
 * Client certificates for programs outside the cluster (`ActorClient`, ts/cluster/client.ts):
 * `plexus cluster client-cert --dir DIR --name NAME` writes `DIR/clients/NAME/` with the
 * client's certificate (`cert.pem`, naming `NAME.client.<cluster>.plexus.internal`), its key
 * (`key.pem`, mode 0600) and the cluster CA certificate (`ca.pem`), signed by the cluster CA
 * of DIR (`ca.pem`, `ca-key.pem` as `plexus cluster init` wrote them).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { clientName, issueClientCertificate } from '../net/ca.js';
import { ensureDir, writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { readClusterMeta } from './meta.js';

export interface ClientCertFiles {
  readonly client: string;
  /** `<client>.client.<cluster>.plexus.internal`. */
  readonly name: string;
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
}

/**
 * Issues client `client`'s certificate with the CA of cluster directory `dir` and writes it
 * under `dir/clients/<client>/`. Refused: a name that is not a DNS label (PLX_WIRE_BAD_NAME),
 * a directory without a cluster (PLX_CLUSTER_BAD_PATH, PLX_CLUSTER_BAD_META), a client that
 * has files already, unless `force` (PLX_CLUSTER_EXISTS).
 */
export async function writeClientCertificate(opts: {
  readonly dir: string;
  readonly client: string;
  readonly force?: boolean;
}): Promise<ClientCertFiles> {
  const meta = await readClusterMeta(opts.dir);
  const name = clientName(opts.client, meta.id);
  const read = async (f: string) => {
    try {
      return await readFile(join(opts.dir, f), 'utf8');
    } catch (e) {
      throw clusterError(
        ClusterCode.BAD_PATH,
        `cannot read the cluster CA file ${join(opts.dir, f)}: ${(e as Error).message}`,
        { field: 'dir', file: join(opts.dir, f) },
        e,
      );
    }
  };
  const ca = { cluster: meta.id, cert: await read('ca.pem'), key: await read('ca-key.pem') };
  const out = join(opts.dir, 'clients', opts.client);
  const files = { cert: join(out, 'cert.pem'), key: join(out, 'key.pem'), ca: join(out, 'ca.pem') };
  const found = Object.values(files).filter((f) => existsSync(f));
  if (found.length > 0 && opts.force !== true) {
    throw clusterError(
      ClusterCode.EXISTS,
      `client ${opts.client} has certificate files in ${out} already; --force replaces them`,
      { dir: out, found },
    );
  }
  const creds = await issueClientCertificate(ca, opts.client);
  await ensureDir(out);
  await writeFileDurably(files.key, creds.key, 0o600);
  await writeFileDurably(files.cert, creds.cert);
  await writeFileDurably(files.ca, creds.ca);
  return { client: opts.client, name, ...files };
}
