/**
 * What every nodelet HTTP(S) server shares against hostile clients: bounds on what a
 * request may cost before a handler sees it, and the answer to a request Node's parser
 * refuses. Only this edge writes raw bytes to a socket.
 *
 * Adding a `clientError` listener turns off Node's own answer, so `answerClientError`
 * gives the same statuses (400 for a parse error, 431 for headers too large, 408 for a
 * request that took too long) with a one-line reason, then closes the connection. It
 * never writes into a connection whose response has already started (a pipelined request
 * after a streamed answer): that one is only destroyed, so the peer never reads a
 * corrupted response.
 */
import type { Duplex } from 'node:stream';
import type { Logger } from '../log.js';

/** Options for http.createServer / https.createServer. */
export interface ServerLimits {
  /** Request line plus headers, bytes; beyond: 431. */
  maxHeaderSize: number;
  /** Time to receive the headers, ms; beyond: 408. */
  headersTimeout: number;
  /** Time to receive the whole request (not to answer it: followers stream for hours), ms. */
  requestTimeout: number;
  /** How often those two timeouts are checked, ms. */
  connectionsCheckingInterval: number;
  keepAliveTimeout: number;
}

/**
 * 16 KiB (Node's default) holds the largest bearer tokens in use; a request arrives in
 * well under 10 s on any link a node agent serves.
 */
export function serverLimits(maxHeaderSize = 16 * 1024): ServerLimits {
  return { maxHeaderSize, headersTimeout: 10_000, requestTimeout: 30_000, connectionsCheckingInterval: 1_000, keepAliveTimeout: 5_000 };
}

/** Status, reason phrase and explanation for an error of Node's HTTP parser. */
export function clientErrorStatus(err: { code?: string; reason?: string; message: string }, maxHeaderSize: number): { status: number; phrase: string; body: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, phrase: 'Request Header Fields Too Large', body: `the request line and headers exceed ${maxHeaderSize} bytes\n` };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, phrase: 'Request Timeout', body: 'the request was not received in time\n' };
    default: {
      // llhttp's reason is a fixed phrase such as "Invalid char in url path"; it never echoes input.
      const why = err.reason ?? 'malformed request';
      return { status: 400, phrase: 'Bad Request', body: `malformed HTTP request: ${why}${err.code ? ` (${err.code})` : ''}\n` };
    }
  }
}

/** The server's `clientError` listener: answers (when it safely can) and closes. */
export function answerClientError(log: Logger, maxHeaderSize: number) {
  return (err: Error & { code?: string; reason?: string }, socket: Duplex): void => {
    // The in-flight response of this connection, if any (Node's own default handler checks the same).
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const { status, phrase, body } = clientErrorStatus(err, maxHeaderSize);
    log.debug({ err: err.message, code: err.code, status }, 'malformed request refused');
    answerRaw(socket, status, phrase, body);
  };
}

/**
 * Writes a whole plain-text answer on a raw socket (no ServerResponse: a parser error, a
 * CONNECT) and closes the connection. `headers`: lines nodelet chose, never input.
 */
export function answerRaw(socket: Duplex, status: number, phrase: string, body: string, headers: Record<string, string> = {}): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const more = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  const head = `HTTP/1.1 ${status} ${phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\n${more}Connection: close\r\n\r\n`;
  socket.end(head + body);
  // A peer that does not read must not hold the socket: give the answer a moment, then drop it.
  const t = setTimeout(() => socket.destroy(), 2_000);
  t.unref();
  socket.once('close', () => clearTimeout(t));
}
