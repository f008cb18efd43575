import { createServer, type Server } from "node:https";
import type { Socket } from "node:net";
import { Webhook } from "standardwebhooks";
import type { TestCertificates } from "../../../test/support/https-receiver.js";

/**
 * Test-only: a real HTTPS receiver of signed event deliveries on loopback, as an independent
 * receiver would run one: it verifies each post with the standardwebhooks package and records it.
 * Each endpoint (`/hooks/<name>`) answers as its behaviour says, which a test may change at any
 * time (down, failing every other time, hanging, gone).
 */

export interface ReceivedDelivery {
  endpoint: string;
  webhookId: string;
  timestamp: string;
  signature: string;
  body: string;
  /** The parsed envelope `{type, timestamp, data}`. */
  event: { type: string; timestamp: string; data: Record<string, unknown> };
  /** Whether the receiver answered 2xx to this post. */
  accepted: boolean;
  /** Whether every configured secret of the endpoint verified the signature. */
  verified: boolean;
}

/** What an endpoint does with post number `n` (0-based) it receives. */
export type Behaviour = (n: number) => { status: number; headers?: Record<string, string>; body?: string } | "drop" | "hang";

export interface WebhookReceiver {
  port: number;
  deliveries: ReceivedDelivery[];
  url(endpoint: string): string;
  /** Sets how an endpoint answers, and the secrets that must each verify its posts. */
  endpoint(name: string, secrets: string[], behaviour?: Behaviour): void;
  setBehaviour(name: string, behaviour: Behaviour): void;
  setSecrets(name: string, secrets: string[]): void;
  /** Posts an endpoint left hanging: how many came, how many are open now, the most open at once. */
  hanging(name: string): { total: number; open: number; maxOpen: number };
  /** Accepted posts of an endpoint, by webhook-id (more than one entry: doubled). */
  acceptedIds(name: string): Map<string, number>;
  close(): Promise<void>;
}

export const accept: Behaviour = () => ({ status: 204 });

export async function startWebhookReceiver(certs: TestCertificates): Promise<WebhookReceiver> {
  const deliveries: ReceivedDelivery[] = [];
  const endpoints = new Map<string, { secrets: string[]; behaviour: Behaviour; count: number }>();
  const sockets = new Set<Socket>();
  const hangs = new Map<string, { total: number; open: number; maxOpen: number }>();
  const server: Server = createServer({ key: certs.key, cert: certs.cert }, (req, res) => {
    const name = (req.url ?? "/").split("/")[2] ?? "";
    const endpoint = endpoints.get(name);
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (!endpoint) {
        res.writeHead(404).end();
        return;
      }
      const answer = endpoint.behaviour(endpoint.count++);
      if (answer === "drop") {
        req.socket.destroy();
        return;
      }
      if (answer === "hang") {
        const h = hangs.get(name) ?? { total: 0, open: 0, maxOpen: 0 };
        hangs.set(name, h);
        h.total++;
        h.open++;
        h.maxOpen = Math.max(h.maxOpen, h.open);
        req.socket.once("close", () => h.open--);
        return;
      }
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = {
        "webhook-id": String(req.headers["webhook-id"] ?? ""),
        "webhook-timestamp": String(req.headers["webhook-timestamp"] ?? ""),
        "webhook-signature": String(req.headers["webhook-signature"] ?? ""),
      };
      const verified =
        endpoint.secrets.length > 0 &&
        endpoint.secrets.every((secret) => {
          try {
            new Webhook(secret).verify(body, headers);
            return true;
          } catch {
            return false;
          }
        });
      const accepted = answer.status >= 200 && answer.status < 300;
      deliveries.push({
        endpoint: name,
        webhookId: headers["webhook-id"],
        timestamp: headers["webhook-timestamp"],
        signature: headers["webhook-signature"],
        body,
        event: JSON.parse(body),
        accepted,
        verified,
      });
      res.writeHead(answer.status, answer.headers ?? {}).end(answer.body ?? "");
    });
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    deliveries,
    url: (name) => `https://127.0.0.1:${port}/hooks/${name}`,
    endpoint(name, secrets, behaviour = accept) {
      endpoints.set(name, { secrets, behaviour, count: 0 });
    },
    setBehaviour(name, behaviour) {
      const e = endpoints.get(name);
      if (e) e.behaviour = behaviour;
    },
    setSecrets(name, secrets) {
      const e = endpoints.get(name);
      if (e) e.secrets = secrets;
    },
    hanging: (name) => ({ ...(hangs.get(name) ?? { total: 0, open: 0, maxOpen: 0 }) }),
    acceptedIds(name) {
      const ids = new Map<string, number>();
      for (const d of deliveries) if (d.endpoint === name && d.accepted) ids.set(d.webhookId, (ids.get(d.webhookId) ?? 0) + 1);
      return ids;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
