// Mutual TLS 1.3 options of the benchmarks' bare peers (raw TLS socket, bare node:http2, the
// durable floor): node b serves, node a connects, both with certificates of one cluster CA
// (`creds` is `{ a, b }` from `issueNodeCertificate`).

/** TLS options of the serving process (node b): it asks for and checks the client's certificate. */
export function serverTls(creds) {
  return {
    key: creds.b.key,
    cert: creds.b.cert,
    ca: creds.b.ca,
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: 'TLSv1.3',
  };
}

/** TLS options of the sending process (node a's certificate, b's name). */
export function clientTls(creds) {
  return {
    key: creds.a.key,
    cert: creds.a.cert,
    ca: creds.a.ca,
    servername: 'b.bench.plexus.internal',
    minVersion: 'TLSv1.3',
    checkServerIdentity: () => undefined,
  };
}

/** An HTTP/2 session from node a to node b on loopback `port`, connected, with Nagle off. */
export async function connectH2(port, creds) {
  const http2 = await import('node:http2');
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, clientTls(creds));
    session.on('error', reject);
    session.on('connect', (_session, socket) => {
      socket.setNoDelay?.(true);
      resolve(session);
    });
  });
}
