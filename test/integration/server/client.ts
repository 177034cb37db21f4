/** A one-shot HTTPS/HTTP request for the server tests (fresh connection each time, so TLS is negotiated per request). */
import http from 'node:http';
import https from 'node:https';

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json(): unknown;
}

export function request(
  url: string,
  o: { method?: string; ca?: string; cert?: string; key?: string; token?: string } = {},
): Promise<Reply> {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      {
        method: o.method ?? 'GET',
        hostname: u.hostname,
        port: u.port,
        // Raw path: tests send `..` and `%2F` exactly as written.
        path: url.slice(url.indexOf('/', u.protocol.length + 2)),
        agent: false,
        ...(u.protocol === 'https:' ? { ca: o.ca, cert: o.cert, key: o.key, servername: 'localhost' } : {}),
        headers: o.token ? { Authorization: `Bearer ${o.token}` } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json: () => JSON.parse(body) as unknown });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}
