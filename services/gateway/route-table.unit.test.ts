import { describe, expect, it } from "vitest";
import { internalServices } from "../runtime/transport/clients.js";
import { buildRouteTable, matchRoute, type Route } from "./route-table.js";

/** What matchRoute answered before it looked routes up by their first segment: every route tried in order. */
function matchEveryRoute(routes: readonly Route[], httpMethod: string, path: string) {
  let pathMatched = false;
  const verb = httpMethod === "HEAD" ? "GET" : httpMethod;
  for (const route of routes) {
    const m = route.pattern.exec(path);
    if (!m) continue;
    pathMatched = true;
    if (route.httpMethod !== verb || (httpMethod === "HEAD" && !/^\/ping\//.test(route.template))) continue;
    try {
      return { route, params: Object.fromEntries(route.paramNames.map((name, i) => [name, decodeURIComponent(m[i + 1]!)])) };
    } catch {
      return "malformed-path";
    }
  }
  return pathMatched ? "method-not-allowed" : undefined;
}

describe("matchRoute", () => {
  const routes = buildRouteTable(internalServices);
  // Every route's path with its parameters filled in, trailing slashes, escapes and near misses.
  const paths = [
    ...routes.flatMap((route) => {
      const filled = route.template.replace(/\{[a-z_][a-z0-9_]*\}/g, "x-1");
      return [
        filled,
        `${filled}/`,
        `${filled}/extra`,
        route.template.replace(/\{[a-z_][a-z0-9_]*\}/g, "%E2%82%AC"),
        route.template.replace(/\{[a-z_][a-z0-9_]*\}/g, "%ff"),
      ];
    }),
    "/",
    "",
    "/nothing-here",
    "/triggers",
    "/o",
    "/o/",
    "/o/acme",
  ];

  it("answers what trying every route in order answers, for every route's path and its near misses", () => {
    expect(routes.length).toBeGreaterThan(50);
    for (const path of paths) {
      for (const verb of ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]) {
        expect(matchRoute(routes, verb, path), `${verb} ${path}`).toEqual(matchEveryRoute(routes, verb, path));
      }
    }
  });
});
