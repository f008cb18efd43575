import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * A caller's x-request-id is taken only when it is a plausible id, and internal methods on the
 * public port are refused before anything reads their input.
 */
describe("request ids and internal methods on the public port", () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.stop();
  });

  it("echoes a plausible x-request-id and replaces anything else with a generated one", async () => {
    const ok = await app.call("GET", "/o/acme/incidents", { headers: { "x-request-id": "lb-1234:abc.def_9-x" } });
    expect(ok.headers.get("x-request-id")).toBe("lb-1234:abc.def_9-x");
    for (const bad of ["a".repeat(8000), "a".repeat(129), "two words", "<script>", "line\u00e9"]) {
      const res = await app.call("GET", "/o/acme/incidents", { headers: { "x-request-id": bad } });
      const echoed = res.headers.get("x-request-id") ?? "";
      expect(echoed).not.toBe(bad);
      expect(echoed).toMatch(/^[A-Za-z0-9._:-]{1,128}$/);
    }
  });

  it.each(["warroom.incidents.v1.IncidentsService/Record", "warroom.incidents.v1.IncidentsService/AppendTimeline"])(
    "refuses %s as unimplemented before validating its input, over Connect and gRPC",
    async (path) => {
      const connect = await app.call("POST", `/${path}`, { body: { orgId: "not-a-uuid" }, headers: { "connect-protocol-version": "1" } });
      expect(connect.body.code).toBe("unimplemented");
      expect(JSON.stringify(connect.body)).not.toMatch(/orgId|org_id|alert|entry|uuid|validation/i);

      // gRPC: an empty message frame, which validation would refuse field by field.
      const session = http2.connect(app.url);
      try {
        const answer = await new Promise<{ status: string; message: string }>((resolve, reject) => {
          const req = session.request({ ":method": "POST", ":path": `/${path}`, "content-type": "application/grpc", te: "trailers" });
          req.on("error", reject);
          let headers: http2.IncomingHttpHeaders = {};
          req.on("response", (h) => {
            headers = h;
          });
          req.on("trailers", (t) =>
            resolve({ status: String(t["grpc-status"] ?? headers["grpc-status"]), message: String(t["grpc-message"] ?? headers["grpc-message"] ?? "") }),
          );
          req.on("end", () => resolve({ status: String(headers["grpc-status"]), message: String(headers["grpc-message"] ?? "") }));
          req.resume();
          req.end(Buffer.from([0, 0, 0, 0, 0]));
        });
        expect(answer.status).toBe("12");
        expect(decodeURIComponent(answer.message)).not.toMatch(/orgId|org_id|alert|entry|validation/i);
      } finally {
        session.close();
      }
    },
  );
});
