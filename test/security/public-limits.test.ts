import { gzipSync } from "node:zlib";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { compressionGzip, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeliverChatRequestSchema, IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * The public port's Connect and gRPC surface keeps the limits of the REST routes: 256 KiB on the
 * chat receiver, 1 MiB elsewhere, counted after decompression, and a compression bomb is refused
 * without being inflated.
 */
describe("body limits on Connect and gRPC", () => {
  let app: TestApp;
  let chatSecret: string;

  beforeAll(async () => {
    app = await startApp();
    const token = await app.ownerToken();
    const issued = await app.call("POST", "/o/acme/triggers/chat-secret", { token, body: {} });
    chatSecret = issued.body.secret;
  });
  afterAll(async () => {
    await app?.stop();
  });

  const chatBody = (size: number) => {
    const text = "x".repeat(size);
    return Buffer.from(JSON.stringify({ channel_id: "C-big", message_id: `m-${size}-${Date.now()}`, text }));
  };

  it("answers 413 over REST and resource_exhausted over Connect for a 300 KiB chat message", async () => {
    const body = chatBody(300 * 1024);
    const rest = await app.call("POST", "/triggers/chat/acme", {
      raw: body,
      headers: { "content-type": "application/json", "x-service-chat-secret": chatSecret },
    });
    expect(rest.status).toBe(413);
    const connect = await app.call("POST", "/warroom.intake.v1.IntakeService/DeliverChat", {
      body: { orgSlug: "acme", body: body.toString("base64"), contentType: "application/json" },
      headers: { "connect-protocol-version": "1", "x-service-chat-secret": chatSecret },
    });
    expect(connect.body.code).toBe("resource_exhausted");
    expect(connect.status).not.toBe(200);
  });

  it("still takes a chat message under 256 KiB over Connect", async () => {
    const body = chatBody(100 * 1024);
    const connect = await app.call("POST", "/warroom.intake.v1.IntakeService/DeliverChat", {
      body: { orgSlug: "acme", body: body.toString("base64"), contentType: "application/json" },
      headers: { "connect-protocol-version": "1", "x-service-chat-secret": chatSecret },
    });
    expect(connect.status).toBe(200);
    expect(connect.body.outcome).toMatch(/opened|attached/);
  });

  it("refuses a gzip bomb over Connect without inflating it, before any credential is checked", async () => {
    const inflated = Buffer.alloc(96 * 1024 * 1024, 0x20);
    const bomb = gzipSync(Buffer.concat([Buffer.from('{"orgSlug":"acme","contentType":"'), inflated, Buffer.from('"}')]), { level: 9 });
    expect(bomb.byteLength).toBeLessThan(200 * 1024);
    global.gc?.();
    const before = process.memoryUsage();
    const answer = await app.call("POST", "/warroom.intake.v1.IntakeService/DeliverChat", {
      raw: bomb,
      headers: { "content-type": "application/json", "content-encoding": "gzip", "connect-protocol-version": "1" },
    });
    const after = process.memoryUsage();
    expect(answer.body.code).toBe("resource_exhausted");
    expect(answer.body.message).toMatch(/readMaxBytes 262144/);
    // The whole 96 MiB would be far above this; the limit is 256 KiB.
    expect(after.arrayBuffers + after.external - (before.arrayBuffers + before.external)).toBeLessThan(48 * 1024 * 1024);
  });

  it("applies the same limits to gRPC, for plain and compressed messages", async () => {
    const client = createClient(IntakeService, createGrpcTransport({ baseUrl: app.url }));
    const big = create(DeliverChatRequestSchema, { orgSlug: "acme", body: chatBody(300 * 1024), contentType: "application/json" });
    const err = await client.deliverChat(big, { headers: { "x-service-chat-secret": chatSecret } }).catch((e) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);

    const compressing = createClient(IntakeService, createGrpcTransport({ baseUrl: app.url, sendCompression: compressionGzip, compressMinBytes: 1 }));
    const bomb = create(DeliverChatRequestSchema, { orgSlug: "acme", body: Buffer.alloc(8 * 1024 * 1024, 0x20), contentType: "application/json" });
    const bombErr = await compressing.deliverChat(bomb).catch((e) => ConnectError.from(e));
    expect((bombErr as ConnectError).code).toBe(Code.ResourceExhausted);

    const small = create(DeliverChatRequestSchema, { orgSlug: "acme", body: chatBody(1024), contentType: "application/json" });
    const ok = await client.deliverChat(small, { headers: { "x-service-chat-secret": chatSecret } });
    expect(ok.outcome).toMatch(/opened|attached/);
  });
});
