import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readBodyAtMost } from "./body-reads.js";

/** Each request's read, as the server saw it: the body, "too-large", or the error it rejected with. */
const reads: Promise<{ result: Buffer | "too-large" | Error; paused: boolean }>[] = [];
let server: Server;
let port: number;

beforeAll(async () => {
  server = createServer((req, res) => {
    const read = readBodyAtMost(req, 10).then(
      (result) => ({ result, paused: req.isPaused() }),
      (err: Error) => ({ result: err, paused: req.isPaused() }),
    );
    reads.push(read);
    void read.then(({ result }) => {
      if (!res.destroyed) res.end(result instanceof Buffer ? `read ${result.byteLength}` : "refused");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** Sends `chunks` one by one (chunked), then ends the request, or destroys it when `cut`. */
async function send(chunks: string[], options: { cut?: boolean; contentLength?: number } = {}) {
  const req = request({
    port,
    method: "POST",
    headers: options.contentLength === undefined ? {} : { "content-length": options.contentLength },
  });
  const answer = new Promise<string | Error>((resolve) => {
    req.on("response", (res: IncomingMessage) => {
      let text = "";
      res.on("data", (c) => {
        text += c;
      });
      res.on("end", () => resolve(text));
    });
    req.on("error", resolve);
  });
  for (const chunk of chunks) {
    req.write(chunk);
    await new Promise((r) => setTimeout(r, 20));
  }
  if (options.cut) req.destroy();
  else req.end();
  const got = await answer;
  return { answer: got, read: await reads.at(-1)! };
}

describe("reading a request body up to a limit", () => {
  it("joins a body sent in several chunks", async () => {
    const { answer, read } = await send(["abc", "def", "ghij"]);
    expect(answer).toBe("read 10");
    expect((read.result as Buffer).toString()).toBe("abcdefghij");
  });

  it("reads an empty body", async () => {
    const { answer } = await send([]);
    expect(answer).toBe("read 0");
  });

  it("stops reading at the first chunk past the limit, and the answer still reaches the client", async () => {
    const { answer, read } = await send(["abcdef", "ghijkl", "mnop"]);
    expect(read.result).toBe("too-large");
    expect(read.paused).toBe(true);
    expect(answer).toBe("refused");
  });

  it("refuses a declared Content-Length over the limit without reading", async () => {
    const { answer, read } = await send(["x".repeat(11)], { contentLength: 11 });
    expect(read.result).toBe("too-large");
    expect(answer).toBe("refused");
  });

  it("rejects when the client goes away before the body's end", async () => {
    const { read } = await send(["abc"], { cut: true });
    expect(read.result).toBeInstanceOf(Error);
  });

  it("reads a request someone paused before", async () => {
    const probe = createServer(async (req, res) => {
      req.pause();
      const body = await readBodyAtMost(req, 10);
      res.end(body instanceof Buffer ? body.toString() : body);
    });
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const { port: probePort } = probe.address() as AddressInfo;
    const answer = await fetch(`http://127.0.0.1:${probePort}/`, { method: "POST", body: "hello" });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    expect(await answer.text()).toBe("hello");
  });

  it("leaves no listener of its own on the request", async () => {
    const seen: number[][] = [];
    const count = (req: IncomingMessage) => ["data", "end", "error", "close"].map((event) => req.listenerCount(event));
    const probe = createServer(async (req, res) => {
      const before = count(req);
      await readBodyAtMost(req, 10);
      seen.push(before, count(req));
      res.end();
    });
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const { port: probePort } = probe.address() as AddressInfo;
    await fetch(`http://127.0.0.1:${probePort}/`, { method: "POST", body: "hello" });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    expect(seen).toHaveLength(2);
    expect(seen[1]).toEqual(seen[0]);
  });
});
