import { createHash } from "node:crypto";
import { existsSync, type Stats } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { dirname, extname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".webp": "image/webp",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
  ".webmanifest": "application/manifest+json",
};

/** Worth compressing: text. Images and fonts are compressed already. */
const COMPRESSIBLE = new Set([".html", ".js", ".mjs", ".css", ".json", ".map", ".svg", ".txt", ".webmanifest"]);

/**
 * The page's policy: every script, style, image and call from this origin only, no framing. The
 * console has no inline script or style, so nothing needs 'unsafe-inline'.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/**
 * Where `npm run build:console` writes the console: `dist/console` at the repository root. From
 * source (`services/console/`) that is two folders up then `dist/console`; from the compiled
 * output (`dist/services/console/`) it is two folders up then `console`.
 */
export function defaultConsoleDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [resolve(here, "../../dist/console"), resolve(here, "../../console")];
  return candidates.find((dir) => existsSync(join(dir, "index.html"))) ?? candidates[0]!;
}

interface CachedFile {
  mtimeMs: number;
  size: number;
  body: Buffer;
  gzip?: Buffer;
  etag: string;
}

export interface StaticFiles {
  /** Serves `relativePath` under the console folder; false when there is no such file. */
  serveFile(req: Request, res: Response, relativePath: string): Promise<boolean>;
  /** Serves index.html (client routes); false when the console is not built. */
  serveIndex(req: Request, res: Response): Promise<boolean>;
}

/**
 * The built console from disk. Vite names every file under `assets/` by its content hash, so those
 * are cached for a year and never revalidated; index.html names the current assets and is always
 * revalidated (ETag). Text is gzipped once per file version and kept in memory: the whole console
 * is a few tens of kilobytes.
 */
export function createStaticFiles(root: string): StaticFiles {
  const base = resolve(root);
  const cache = new Map<string, CachedFile>();

  async function load(relativePath: string): Promise<{ path: string; file: CachedFile } | undefined> {
    const path = resolve(base, relativePath);
    if (path !== base && !path.startsWith(base + sep)) return undefined;
    let info: Stats;
    try {
      info = await stat(path);
    } catch {
      return undefined;
    }
    if (!info.isFile()) return undefined;
    const cached = cache.get(path);
    if (cached && cached.mtimeMs === info.mtimeMs && cached.size === info.size) return { path, file: cached };
    const body = await readFile(path);
    const file: CachedFile = {
      mtimeMs: info.mtimeMs,
      size: info.size,
      body,
      etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`,
    };
    if (COMPRESSIBLE.has(extname(path)) && body.length > 1024) file.gzip = gzipSync(body, { level: 9 });
    cache.set(path, file);
    return { path, file };
  }

  function send(req: Request, res: Response, path: string, file: CachedFile, cacheControl: string, extra: Record<string, string> = {}): void {
    const headers: Record<string, string | number> = {
      "content-type": CONTENT_TYPES[extname(path)] ?? "application/octet-stream",
      "cache-control": cacheControl,
      etag: file.etag,
      "x-content-type-options": "nosniff",
      vary: "accept-encoding",
      ...extra,
    };
    const inm = req.headers["if-none-match"];
    if (typeof inm === "string" && inm.split(",").some((tag) => tag.trim() === file.etag)) {
      (res as ServerResponse).writeHead(304, headers);
      res.end();
      return;
    }
    const acceptEncoding = String(req.headers["accept-encoding"] ?? "");
    let body = file.body;
    if (file.gzip && /\bgzip\b/.test(acceptEncoding)) {
      body = file.gzip;
      headers["content-encoding"] = "gzip";
    }
    headers["content-length"] = body.length;
    (res as ServerResponse).writeHead(200, headers);
    if (req.method === "HEAD") res.end();
    else res.end(body);
  }

  return {
    async serveFile(req, res, relativePath) {
      if (relativePath === "index.html" || relativePath === "") return this.serveIndex(req, res);
      const found = await load(relativePath);
      if (!found) return false;
      const hashed = relativePath.startsWith("assets/");
      send(req, res, found.path, found.file, hashed ? "public, max-age=31536000, immutable" : "public, max-age=3600");
      return true;
    },
    async serveIndex(req, res) {
      const found = await load("index.html");
      if (!found) return false;
      send(req, res, found.path, found.file, "no-cache", {
        "content-security-policy": CONTENT_SECURITY_POLICY,
        "referrer-policy": "no-referrer",
        "x-frame-options": "DENY",
      });
      return true;
    },
  };
}
