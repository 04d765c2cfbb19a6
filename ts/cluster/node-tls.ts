/**
 * The TLS files of a node config, read and checked before a node listens or `status` dials:
 * each file readable and PEM (PLX_CLUSTER_BAD_PATH naming the file and its key), then the
 * material usable (PLX_CLUSTER_BAD_TLS): node:tls accepts the key with the certificate, the
 * CA signed the certificate, and the certificate names this node of this cluster. All checks
 * are node:crypto's and node:tls's own.
 */

import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, type PeerCertificate } from 'node:tls';
import { nodeIdentityPolicy } from '../net/ca.js';
import { ClusterCode, clusterError } from './errors.js';

export interface NodeTlsFiles {
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
}

const WHAT = { cert: 'certificate', key: 'key', ca: 'CA certificate' } as const;

/** Reads the PEM files of `cfg.tls` (absolute paths) and checks they fit together and name `cfg.self`. */
export function readNodeTls(cfg: {
  readonly self: string;
  readonly meta: { readonly id: string };
  readonly tls: NodeTlsFiles;
}): NodeTlsFiles {
  const read = (field: keyof NodeTlsFiles) => {
    const file = cfg.tls[field];
    try {
      const text = readFileSync(file, 'utf8');
      if (!text.includes('-----BEGIN ')) throw new Error('it holds no PEM block');
      return text;
    } catch (e) {
      throw clusterError(
        ClusterCode.BAD_PATH,
        `cannot read the TLS ${WHAT[field]} ${file} (tls.${field} of the node config): ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
        { field: `tls.${field}`, path: `tls.${field}`, file },
        e,
      );
    }
  };
  const pem = { cert: read('cert'), key: read('key'), ca: read('ca') };
  const bad = (field: keyof NodeTlsFiles, why: string, cause?: unknown) =>
    clusterError(
      ClusterCode.BAD_TLS,
      `the TLS ${WHAT[field]} ${cfg.tls[field]} (tls.${field}) ${why}`,
      { field: `tls.${field}`, path: `tls.${field}`, file: cfg.tls[field] },
      cause,
    );
  const x509 = (field: 'cert' | 'ca') => {
    try {
      return new X509Certificate(pem[field]);
    } catch (e) {
      throw bad(field, `is not an X.509 certificate: ${(e as Error).message}`, e);
    }
  };
  const cert = x509('cert');
  const ca = x509('ca');
  try {
    createSecureContext({ cert: pem.cert, key: pem.key, ca: pem.ca });
  } catch (e) {
    throw bad('key', `cannot be used with the certificate ${cfg.tls.cert}: ${(e as Error).message}`, e);
  }
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) {
    throw bad('cert', `is not signed by the CA in ${cfg.tls.ca}`);
  }
  // The identity the cluster wire's TLS endpoint will bind this certificate to.
  const named = nodeIdentityPolicy(cfg.meta.id).identify({
    subjectaltname: cert.subjectAltName ?? '',
  } as PeerCertificate);
  if (named !== cfg.self) {
    throw bad(
      'cert',
      `names ${named === undefined ? 'no node' : `node ${JSON.stringify(named)}`} of cluster ${cfg.meta.id}, not this node ${JSON.stringify(cfg.self)}`,
    );
  }
  return pem;
}
