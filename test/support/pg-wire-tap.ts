import { createServer, type Server, type Socket, connect } from "node:net";

/**
 * A TCP relay in front of a Postgres server that reads the client's side of the wire protocol and
 * records each statement the service executes: the text of every extended-protocol statement it
 * binds (named by its earlier Parse) and every simple query. It lets a test say which statements a
 * request ran, on the service's own connections, without timing anything.
 *
 * Only plain connections are read (the test servers speak no TLS); a client that asks for TLS is
 * told no, as a server without it would.
 */
export interface PgWireTap {
  /** The database URL to give the service: the same as the target's, on the relay's port. */
  url: string;
  /** Statements executed since the last call, oldest first; clears the record. */
  take(): string[];
  close(): Promise<void>;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;

export async function startPgWireTap(targetUrl: string): Promise<PgWireTap> {
  const target = new URL(targetUrl);
  const targetPort = Number(target.port || 5432);
  let executed: string[] = [];
  const sockets = new Set<Socket>();

  const server: Server = createServer((client) => {
    sockets.add(client);
    const upstream = connect(targetPort, target.hostname);
    sockets.add(upstream);
    // Per connection: statement name → text, from Parse; the unnamed statement is "".
    const statements = new Map<string, string>();
    let pending: Buffer = Buffer.alloc(0);
    let started = false;

    const read = (chunk: Buffer): Buffer => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      let forward: Buffer = Buffer.alloc(0);
      for (;;) {
        if (!started) {
          if (pending.length < 8) break;
          const length = pending.readInt32BE(0);
          if (pending.length < length) break;
          const code = pending.readInt32BE(4);
          const message = pending.subarray(0, length);
          pending = pending.subarray(length);
          if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
            client.write("N");
            continue;
          }
          started = true;
          forward = Buffer.concat([forward, message]);
          continue;
        }
        if (pending.length < 5) break;
        const length = pending.readInt32BE(1);
        if (pending.length < length + 1) break;
        const type = String.fromCharCode(pending[0]!);
        const body = pending.subarray(5, length + 1);
        if (type === "P") {
          const nameEnd = body.indexOf(0);
          const textEnd = body.indexOf(0, nameEnd + 1);
          statements.set(body.subarray(0, nameEnd).toString(), body.subarray(nameEnd + 1, textEnd).toString());
        } else if (type === "B") {
          const portalEnd = body.indexOf(0);
          const nameEnd = body.indexOf(0, portalEnd + 1);
          executed.push(normalize(statements.get(body.subarray(portalEnd + 1, nameEnd).toString()) ?? "?"));
        } else if (type === "Q") {
          executed.push(normalize(body.subarray(0, body.length - 1).toString()));
        }
        forward = Buffer.concat([forward, pending.subarray(0, length + 1)]);
        pending = pending.subarray(length + 1);
      }
      return forward;
    };

    client.on("data", (chunk: Buffer) => {
      const out = read(chunk);
      if (out.length) upstream.write(out);
    });
    upstream.on("data", (chunk) => client.write(chunk));
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("the wire tap has no port");
  const url = new URL(targetUrl);
  url.hostname = "127.0.0.1";
  url.port = String(address.port);

  return {
    url: url.toString(),
    take() {
      const taken = executed;
      executed = [];
      return taken;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function normalize(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}
