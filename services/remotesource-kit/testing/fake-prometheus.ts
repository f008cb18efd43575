import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A Prometheus HTTP API stand-in on loopback for tests: label values, instant and range queries,
 * answered the way Prometheus answers them (strings for sample values, seconds for times).
 */
export async function startFakePrometheus(): Promise<{
  url: string;
  requests: Array<{ path: string; params: URLSearchParams; headers: http.IncomingHttpHeaders }>;
  close(): Promise<void>;
}> {
  const requests: Array<{ path: string; params: URLSearchParams; headers: http.IncomingHttpHeaders }> = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://prometheus.invalid");
    requests.push({ path: url.pathname, params: url.searchParams, headers: req.headers });
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === "/api/v1/label/__name__/values") {
      return send(200, { status: "success", data: ["http_requests_total", "node_load1", "up"] });
    }
    if (url.pathname === "/api/v1/query") {
      const time = Number(url.searchParams.get("time") ?? Date.now() / 1000);
      return send(200, { status: "success", data: { resultType: "vector", result: [{ metric: { __name__: "up", job: "api" }, value: [time, "1"] }] } });
    }
    if (url.pathname === "/api/v1/query_range") {
      const query = url.searchParams.get("query") ?? "";
      if (query.includes("(((")) return send(400, { status: "error", errorType: "bad_data", error: "parse error: unclosed parenthesis" });
      const start = Number(url.searchParams.get("start"));
      const end = Number(url.searchParams.get("end"));
      const step = Number(url.searchParams.get("step"));
      const values: Array<[number, string]> = [];
      for (let t = Math.ceil(start); t <= end && values.length < 300; t += step) values.push([t, String(values.length % 3 === 2 ? 0 : 1)]);
      return send(200, {
        status: "success",
        data: {
          resultType: "matrix",
          result: [
            { metric: { __name__: "up", job: "api", instance: "api-1:9100" }, values },
            {
              metric: { __name__: "up", job: "api", instance: "api-2:9100" },
              values: values
                .map(([t]) => [t, "NaN"])
                .slice(0, 2)
                .concat(values.slice(2)),
            },
          ],
        },
      });
    }
    send(404, { status: "error", error: "not found" });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
