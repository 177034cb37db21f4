/**
 * A TCP proxy a test controls, to put between nodelet and the test control plane: it
 * forwards bytes both ways (TLS passes through untouched), and on demand drops every open
 * connection (`dropAll`), refuses new ones as a server that is gone would (`refuse`: the
 * port is closed, so connects fail with ECONNREFUSED), and comes back on the same port
 * (`restore`). Loopback only. `silence()` accepts connections and never answers (a
 * server that hangs, or a black hole on the way): bytes are read and dropped, nothing is
 * forwarded, until `restore()`, which drops those connections.
 */
import net from 'node:net';

export class TcpProxy {
  readonly #target: { host: string; port: number };
  readonly #sockets = new Set<net.Socket>();
  #server: net.Server | undefined;
  #port = 0;
  #silent = false;
  /** Connections accepted since start. */
  accepted = 0;

  private constructor(target: { host: string; port: number }) {
    this.#target = target;
  }

  /** Starts a proxy on 127.0.0.1 (an ephemeral port) to `target` (e.g. the control plane's URL). */
  static async start(target: string | { host: string; port: number }): Promise<TcpProxy> {
    const t = typeof target === 'string' ? { host: new URL(target).hostname, port: Number(new URL(target).port) } : target;
    const p = new TcpProxy(t);
    await p.#listen(0);
    return p;
  }

  get port(): number {
    return this.#port;
  }

  /** `https://127.0.0.1:<port>`: the URL clients are given instead of the server's. */
  get url(): string {
    return `https://127.0.0.1:${this.#port}`;
  }

  get listening(): boolean {
    return this.#server !== undefined;
  }

  #listen(port: number): Promise<void> {
    const server = net.createServer((client) => {
      this.accepted++;
      if (this.#silent) {
        // Accepted, read, never answered; closed only by dropAll/restore.
        this.#sockets.add(client);
        client.on('data', () => {}).on('error', () => {}).on('close', () => this.#sockets.delete(client));
        return;
      }
      const upstream = net.connect(this.#target.port, this.#target.host);
      this.#sockets.add(client);
      this.#sockets.add(upstream);
      const end = () => {
        client.destroy();
        upstream.destroy();
        this.#sockets.delete(client);
        this.#sockets.delete(upstream);
      };
      client.on('error', end).on('close', end);
      upstream.on('error', end).on('close', end);
      // Forwarded unless silenced: then bytes of open connections are dropped too (a black hole).
      client.on('data', (d: Buffer) => this.#silent || upstream.write(d));
      upstream.on('data', (d: Buffer) => this.#silent || client.write(d));
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        this.#server = server;
        this.#port = (server.address() as net.AddressInfo).port;
        resolve();
      });
    });
  }

  /** Destroys every open connection, both sides (a reset, as a network fault does). */
  dropAll(): void {
    for (const s of [...this.#sockets]) s.destroy();
    this.#sockets.clear();
  }

  /** Drops every connection and stops listening: new connects are refused until restore(). */
  async refuse(): Promise<void> {
    const s = this.#server;
    this.#server = undefined;
    this.dropAll();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  /** Listens again on the same port; after silence(), drops the silent connections and forwards again. */
  async restore(): Promise<void> {
    if (this.#silent) {
      this.#silent = false;
      this.dropAll();
    }
    if (!this.#server) await this.#listen(this.#port);
  }

  /** From now on nothing is forwarded: open connections go quiet, new ones are accepted and never answered, until restore(). */
  silence(): void {
    this.#silent = true;
  }

  async close(): Promise<void> {
    await this.refuse();
  }
}
