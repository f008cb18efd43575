import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { buildRouteTable, matchRoute, type Route } from "../gateway/route-table.js";
import { sendJson } from "../runtime/http/http-server.js";
import { internalServices } from "../runtime/transport/clients.js";
import type { Config } from "../runtime/config/config.js";
import type { ExtraHttp, ExtraHttpRuntime } from "../process/run-process.js";
import { createLiveEvents } from "./live-events.js";
import { createStaticFiles, defaultConsoleDir } from "./static-files.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/** The live stream's path. No REST route has this shape, so it shadows none. */
const EVENTS_PATH = /^\/o\/([^/]+)\/events\/?$/;

/**
 * The one REST route a browser is sent to: an incident's `workspaceUrl` ("opens the room"). A
 * person following that link from a chat card gets the console's room page; a call with a
 * credential, or one that does not ask for HTML, still gets the route's JSON.
 */
const ROOM_TEMPLATE = "/o/{org}/incidents/{id}";

const NOT_BUILT_PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>warroom</title></head>
<body><main><h1>The web console is not built</h1><p>Run <code>npm run build:console</code> and reload this page.
The API answers as usual.</p></main></body></html>`;

export interface ConsoleHttpOptions {
  /** The built console; `dist/console` by default. */
  staticDir?: string;
  keepaliveMs?: number;
  recheckMs?: number;
}

/** A browser page load: wants HTML and carries no API credential. */
function isNavigation(req: Request): boolean {
  if (req.headers.authorization) return false;
  const accept = String(req.headers.accept ?? "");
  return accept.includes("text/html");
}

/**
 * The web console on the gateway's port: its static files at `/`, `index.html` for its client
 * routes, and the live event stream `GET /o/{org}/events`. It runs before the REST routes and
 * leaves every one of them alone, with one exception (a page load of the room link, above):
 * only GET and HEAD requests for a console file, or page loads of a path that is no REST route,
 * reach it.
 */
export function createConsoleHttp(_config: Config, runtime: ExtraHttpRuntime, options: ConsoleHttpOptions = {}): ExtraHttp {
  const files = createStaticFiles(options.staticDir ?? defaultConsoleDir());
  const routes: Route[] = buildRouteTable(internalServices);
  const live = createLiveEvents({ ...runtime, keepaliveMs: options.keepaliveMs, recheckMs: options.recheckMs });

  async function serveIndex(req: Request, res: Response): Promise<true> {
    if (!(await files.serveIndex(req, res))) {
      (res as ServerResponse).writeHead(503, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
      if (req.method === "HEAD") res.end();
      else res.end(NOT_BUILT_PAGE);
    }
    return true;
  }

  return {
    async handle(req, res, url) {
      const method = req.method ?? "GET";
      const events = EVENTS_PATH.exec(url.pathname);
      if (events) {
        if (method !== "GET") {
          sendJson(res, 405, { error: `method ${method} is not allowed on ${url.pathname}` }, { allow: "GET" });
          return true;
        }
        let org: string;
        try {
          org = decodeURIComponent(events[1]!);
        } catch {
          sendJson(res, 400, { error: "request path is not valid UTF-8" });
          return true;
        }
        await live.handle(req, res, org);
        return true;
      }
      if (method !== "GET" && method !== "HEAD") return false;
      const api = matchRoute(routes, "GET", url.pathname);
      if (api !== undefined) {
        if (typeof api === "object" && api.route.template === ROOM_TEMPLATE && isNavigation(req)) return serveIndex(req, res);
        return false;
      }
      const relative = safeRelativePath(url.pathname);
      if (relative === undefined) return false;
      if (relative === "" || relative === "index.html") return serveIndex(req, res);
      if (await files.serveFile(req, res, relative)) return true;
      if (relative.startsWith("assets/")) {
        (res as ServerResponse).writeHead(404, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
        res.end("not found");
        return true;
      }
      if (isNavigation(req)) return serveIndex(req, res);
      return false;
    },
    close() {
      live.close();
    },
  };
}

/** The path under the console folder, or undefined for one that could leave it. */
function safeRelativePath(pathname: string): string | undefined {
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathname);
  } catch {
    return undefined;
  }
  if (decoded.includes("\0") || decoded.includes("\\")) return undefined;
  const segments = decoded.split("/").filter(Boolean);
  if (segments.some((s) => s === ".." || s === "." || s.startsWith("."))) return undefined;
  return segments.join("/");
}
