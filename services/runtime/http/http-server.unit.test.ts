import http2 from "node:http2";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listenHttp, sendJson, type ConnectionDeadlines, type HttpServer } from "./http-server.js";

/**
 * Every phase of a connection has a deadline: a peer that sends nothing, or drips, is closed. The
 * deadlines here are short so the test is quick; the production defaults are in docs/SECURITY.md.
 */
const DEADLINES: ConnectionDeadlines = { firstByteMs: 500, headersMs: 900, bodyMs: 1500, keepAliveMs: 700, http2IdleMs: 700, sendMs: 1000 };
/** Answer bytes a connection may have waiting on its peer, here. */
const MAX_BUFFERED = 256 * 1024;
/**
 * How long a test waits for the server to close a connection before calling it left open: a hang
 * bound far past every deadline (the machine is shared), not a budget. Closes are asserted as events.
 */
const HANG_MS = 30_000;

/**
 * That a deadline does not cut early is asserted as an order of events, not by reading a clock: the
 * server runs in this process, so its timers and the test's share one event loop, which runs timers
 * in the order they fall due. A witness set just before the deadline's timer is armed, due 1 ms
 * before the deadline, has run by the time the server closes the connection, however loaded the
 * machine; a close that came early finds it still waiting.
 */
function witness(deadlineMs: number): { ran: () => boolean } {
  let ran = false;
  setTimeout(() => {
    ran = true;
  }, deadlineMs - 1).unref();
  return { ran: () => ran };
}

/** Sets a witness when the server's handler next answers: the keep-alive and idle deadlines run from the answer. */
let onAnswer: (() => void) | undefined;

let server: HttpServer;
let port: number;

beforeAll(async () => {
  server = await listenHttp({
    host: "127.0.0.1",
    port: 0,
    deadlines: DEADLINES,
    maxBufferedResponseBytes: MAX_BUFFERED,
    handler: (req, res) => {
      const url = req.url ?? "/";
      if (url === "/big") {
        // Written without waiting for drain, as a careless handler would: 4 MiB queued at once.
        res.writeHead(200, { "content-type": "application/octet-stream" });
        for (let i = 0; i < 64; i++) (res as { write(chunk: Buffer): boolean }).write(Buffer.alloc(64 * 1024, 97));
        res.end();
        return;
      }
      if (url === "/paced") {
        // The same 4 MiB written as the connection drains, as a careful handler writes.
        res.writeHead(200, { "content-type": "application/octet-stream" });
        const out = res as unknown as { write(chunk: Buffer): boolean; once(event: "drain", f: () => void): void };
        let left = 64;
        const more = () => {
          while (left-- > 0) if (!out.write(Buffer.alloc(64 * 1024, 97))) return out.once("drain", more);
          res.end();
        };
        more();
        return;
      }
      if (url === "/stream") {
        // A long-lived answer with its own heartbeat, like the console's event stream.
        res.writeHead(200, { "content-type": "text/event-stream" });
        const beat = setInterval(() => (res as { write(text: string): boolean }).write(": beat\n\n"), 150);
        res.on("close", () => clearInterval(beat));
        return;
      }
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        onAnswer?.();
        onAnswer = undefined;
        if (!res.headersSent) sendJson(res, 200, { bytes: Buffer.concat(chunks).length });
      });
    },
  });
  port = server.port;
});

afterAll(async () => {
  await server?.close(0);
});

/**
 * Opens a raw TCP connection and resolves, when the server closes it, with what it got and whether
 * it outlived `outlive` ms from its opening (a witness, above: false when not asked).
 */
function rawConnection(
  onOpen: (socket: net.Socket) => void,
  options: { to?: number; outlive?: number } = {},
): Promise<{ outlived: boolean; received: string }> {
  return new Promise((resolve, reject) => {
    const opened = options.outlive === undefined ? undefined : witness(options.outlive);
    let received = "";
    const socket = net.connect(options.to ?? port, "127.0.0.1", () => onOpen(socket));
    socket.on("data", (d) => {
      received += d.toString("latin1");
    });
    socket.on("error", () => {});
    socket.on("close", () => resolve({ outlived: opened?.ran() ?? false, received }));
    setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server left the connection open for ${HANG_MS} ms (got ${JSON.stringify(received.slice(0, 80))})`));
    }, HANG_MS).unref();
  });
}

/** Writes `pieces` one at a time, `everyMs` apart, until the socket closes. */
function drip(socket: net.Socket, pieces: string[], everyMs: number): void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= pieces.length) return clearInterval(timer);
    socket.write(pieces[i++]!);
  }, everyMs);
  socket.on("close", () => clearInterval(timer));
}

describe("connection deadlines", () => {
  it("closes a connection that sends nothing, after the first-byte deadline", async () => {
    const { outlived } = await rawConnection(() => {}, { outlive: DEADLINES.firstByteMs });
    expect(outlived, "closed before the first-byte deadline").toBe(true);
  });

  it("closes an HTTP/1.1 request whose headers drip, after the headers deadline, with 408", async () => {
    const lines = Array.from({ length: 100 }, (_, i) => `x-drip-${i}: y\r\n`);
    const { received } = await rawConnection((s) => {
      s.write("GET /healthz HTTP/1.1\r\nhost: x\r\n");
      drip(s, lines, 100);
    });
    expect(received).toMatch(/^HTTP\/1\.1 408/);
  });

  it("closes an HTTP/1.1 request whose body drips, after the body deadline", async () => {
    const body = Array.from({ length: 1000 }, () => "a");
    const { outlived, received } = await rawConnection(
      (s) => {
        s.write("POST /x HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n");
        drip(s, body, 100);
      },
      { outlive: DEADLINES.headersMs },
    );
    expect(received).not.toMatch(/^HTTP\/1\.1 200/);
    expect(outlived, "closed before the headers deadline").toBe(true);
  });

  it("closes a kept-alive HTTP/1.1 connection that goes idle, after the keep-alive deadline", async () => {
    let answered: { ran: () => boolean } | undefined;
    onAnswer = () => {
      answered = witness(DEADLINES.keepAliveMs);
    };
    const { received } = await rawConnection((s) => s.write("GET /x HTTP/1.1\r\nhost: x\r\n\r\n"));
    expect(received).toMatch(/^HTTP\/1\.1 200/);
    expect(answered?.ran(), "closed before the keep-alive deadline").toBe(true);
  });

  it("closes an HTTP/2 connection that sends the preface and never its SETTINGS, after the headers deadline", async () => {
    const { outlived } = await rawConnection((s) => s.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), { outlive: DEADLINES.headersMs });
    expect(outlived, "closed before the headers deadline").toBe(true);
  });

  it("closes an HTTP/2 preface dripped a byte at a time, after the headers deadline", async () => {
    const { outlived } = await rawConnection((s) => drip(s, [..."PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"], 100), { outlive: DEADLINES.headersMs });
    expect(outlived, "closed before the headers deadline").toBe(true);
  });

  it("closes an HTTP/2 session with no open stream, after the HTTP/2 idle deadline", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => {});
    let answered: { ran: () => boolean } | undefined;
    onAnswer = () => {
      answered = witness(DEADLINES.http2IdleMs);
    };
    const closed = new Promise<void>((resolve) => session.once("close", resolve));
    await new Promise<void>((resolve, reject) => {
      const req = session.request({ ":path": "/x" });
      req.on("response", () => {});
      req.resume();
      req.on("end", resolve);
      req.on("error", reject);
    });
    await closed;
    expect(answered?.ran(), "closed before the HTTP/2 idle deadline").toBe(true);
  });

  it("ends an HTTP/2 stream whose body drips, after the body deadline", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => {});
    const opened = witness(DEADLINES.bodyMs);
    const req = session.request({ ":path": "/x", ":method": "POST", "content-type": "application/json" });
    req.on("error", () => {});
    const timer = setInterval(() => !req.destroyed && req.write("a"), 100);
    const status = await new Promise<number | undefined>((resolve) => {
      let got: number | undefined;
      req.on("response", (h) => {
        got = Number(h[":status"]);
      });
      req.resume();
      req.on("close", () => resolve(got));
    });
    clearInterval(timer);
    session.destroy();
    expect(status).not.toBe(200);
    expect(opened.ran(), "ended before the body deadline").toBe(true);
  });

  it("closes an HTTP/1.1 connection whose answer waits on a peer that reads nothing, past the buffered-bytes cap", async () => {
    // 4 MiB queued at once is more than the kernel takes and more than MAX_BUFFERED: closed at the next check.
    const { received } = await rawConnection((s) => {
      s.pause();
      s.write("GET /big HTTP/1.1\r\nhost: x\r\n\r\n");
      // Pokes, so a paused client notices the close.
      drip(
        s,
        Array.from({ length: 1000 }, () => "\r\n"),
        200,
      );
    });
    expect(received).toBe("");
  });

  it("closes an HTTP/1.1 connection that stops reading, after the send timeout, and keeps one that reads slowly", async () => {
    // Every other deadline far off, so only the send timeout can end the wait.
    const far = 600_000;
    const patient = await listenHttp({
      host: "127.0.0.1",
      port: 0,
      deadlines: { firstByteMs: far, headersMs: far, bodyMs: far, keepAliveMs: far, http2IdleMs: far, sendMs: DEADLINES.sendMs },
      handler: (_req, res) => sendJson(res, 200, { ok: true }),
    });
    try {
      // Answers to 100,000 pipelined requests are more than the kernel's buffers take: the rest
      // waits in the process, under the buffered-bytes cap.
      const requests = "GET /x HTTP/1.1\r\nhost: x\r\n\r\n".repeat(100_000);
      const { outlived } = await rawConnection(
        (s) => {
          s.pause();
          s.write(requests);
          // Pokes, so a paused client notices the close.
          drip(
            s,
            Array.from({ length: 1000 }, () => "\r\n"),
            200,
          );
        },
        { to: patient.port, outlive: DEADLINES.sendMs },
      );
      expect(outlived, "closed before the send timeout").toBe(true);
    } finally {
      await patient.close(0);
    }
    // A reader that takes the same answers a little at a time keeps making progress.
    const reader = await new Promise<{ bytes: number; closedEarly: boolean }>((resolve) => {
      let bytes = 0;
      let closedEarly = false;
      const s = net.connect(port, "127.0.0.1", () => s.write("GET /paced HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"));
      s.on("error", () => {});
      s.on("data", (d: Buffer) => {
        bytes += d.length;
        s.pause();
        setTimeout(() => s.resume(), 20);
      });
      s.on("close", () => {
        closedEarly = bytes < 64 * 64 * 1024;
        resolve({ bytes, closedEarly });
      });
    });
    expect(reader.closedEarly, `read ${reader.bytes} bytes`).toBe(false);
  });

  it("closes a kept-alive HTTP/1.1 connection that sends only blank lines after its answer", async () => {
    const { outlived, received } = await rawConnection(
      (s) => {
        s.write("GET /x HTTP/1.1\r\nhost: x\r\n\r\n");
        drip(
          s,
          Array.from({ length: 1000 }, () => "\r\n"),
          100,
        );
      },
      { outlive: DEADLINES.keepAliveMs + DEADLINES.headersMs },
    );
    expect(received).toMatch(/^HTTP\/1\.1 200/);
    expect(outlived, "closed before the keep-alive and headers deadlines").toBe(true);
  });

  it("keeps a long-lived answer with a heartbeat open past every deadline, over HTTP/1.1 and HTTP/2", async () => {
    const holdMs = DEADLINES.bodyMs + DEADLINES.keepAliveMs + 1000;
    // HTTP/1.1
    const h1 = await new Promise<{ beats: number; closedEarly: boolean }>((resolve) => {
      let beats = 0;
      let closedEarly = false;
      const s = net.connect(port, "127.0.0.1", () => s.write("GET /stream HTTP/1.1\r\nhost: x\r\n\r\n"));
      s.on("data", (d) => {
        beats += (d.toString().match(/: beat/g) ?? []).length;
      });
      s.on("close", () => {
        closedEarly = true;
      });
      setTimeout(() => {
        s.destroy();
        resolve({ beats, closedEarly });
      }, holdMs);
    });
    expect(h1.closedEarly).toBe(false);
    expect(h1.beats).toBeGreaterThan(5);
    // HTTP/2
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => {});
    const h2 = await new Promise<{ beats: number; closedEarly: boolean }>((resolve) => {
      let beats = 0;
      let closedEarly = false;
      const req = session.request({ ":path": "/stream" });
      req.on("error", () => {});
      req.on("data", (d: Buffer) => {
        beats += (d.toString().match(/: beat/g) ?? []).length;
      });
      req.on("close", () => {
        closedEarly = true;
      });
      setTimeout(() => resolve({ beats, closedEarly }), holdMs);
    });
    session.destroy();
    expect(h2.closedEarly).toBe(false);
    expect(h2.beats).toBeGreaterThan(5);
  });
});
