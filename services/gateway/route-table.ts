import { getOption, hasOption, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";

/**
 * The public REST routes, read from the `google.api.http` annotations of the services' methods at
 * start-up: no route is written twice.
 */
export interface Route {
  httpMethod: string;
  template: string;
  pattern: RegExp;
  paramNames: string[];
  /** "*" for a JSON body, a field name for a raw (bytes) body, "" for none. */
  body: string;
  method: DescMethodUnary;
  service: DescService;
}

/**
 * The REST routes of the services' unary methods, most specific first, each with its compiled path
 * pattern and body rule.
 */
export function buildRouteTable(services: readonly DescService[]): Route[] {
  const routes: Route[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (method.methodKind !== "unary" || !hasOption(method, http)) continue;
      const rule = getOption(method, http);
      // A method may answer on more than one verb (Healthchecks' ping URLs take GET and POST):
      // its additional bindings are routes of their own.
      for (const binding of [rule, ...rule.additionalBindings]) {
        const pattern = binding.pattern;
        if (pattern.case === undefined || pattern.case === "custom") continue;
        const { regex, names } = compileTemplate(pattern.value);
        routes.push({
          httpMethod: pattern.case.toUpperCase(),
          template: pattern.value,
          pattern: regex,
          paramNames: names,
          // A binding without a body of its own reads the method's (a GET ping still keeps what it says).
          body: binding.body || rule.body,
          method: method as DescMethodUnary,
          service,
        });
      }
    }
  }
  // Literal segments beat parameters: "/o/{org}/heartbeats/{name}/ping" before "/o/{org}/heartbeats/{name}".
  routes.sort((a, b) => specificity(b.template) - specificity(a.template));
  return routes;
}

function specificity(template: string): number {
  const segments = template.split("/").filter(Boolean);
  return segments.length * 10 + segments.filter((s) => !s.startsWith("{")).length;
}

function compileTemplate(template: string): { regex: RegExp; names: string[] } {
  const names: string[] = [];
  const source = template
    .split("/")
    .map((segment) => {
      const param = /^\{([a-z_][a-z0-9_]*)\}$/.exec(segment);
      if (param) {
        names.push(param[1]!);
        return "([^/]+)";
      }
      return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    })
    .join("/");
  return { regex: new RegExp(`^${source}/?$`), names };
}

/**
 * The routes HEAD reaches: Healthchecks' ping URLs, where a HEAD request is a ping. Elsewhere HEAD
 * stays refused (405), as before.
 */
const HEAD_ROUTES = /^\/ping\//;

export interface RouteMatch {
  route: Route;
  params: Record<string, string>;
}

/**
 * The route a request matches, with its path parameters decoded; "method-not-allowed" when only the
 * path matches, "malformed-path" when a parameter's percent-escapes are not UTF-8, undefined when
 * nothing matches.
 */
export function matchRoute(routes: readonly Route[], httpMethod: string, path: string): RouteMatch | "method-not-allowed" | "malformed-path" | undefined {
  let pathMatched = false;
  // HEAD is GET without the answer's body (RFC 9110), on the routes that take HEAD at all.
  const verb = httpMethod === "HEAD" ? "GET" : httpMethod;
  for (const route of routesFor(routes, path)) {
    const m = route.pattern.exec(path);
    if (!m) continue;
    pathMatched = true;
    if (route.httpMethod !== verb || (httpMethod === "HEAD" && !HEAD_ROUTES.test(route.template))) continue;
    const params: Record<string, string> = {};
    try {
      route.paramNames.forEach((name, i) => {
        params[name] = decodeURIComponent(m[i + 1]!);
      });
    } catch {
      return "malformed-path";
    }
    return { route, params };
  }
  return pathMatched ? "method-not-allowed" : undefined;
}

/** Each table's routes by the first segment of their path, for routesFor. */
const byFirstSegment = new WeakMap<readonly Route[], { literal: Map<string, Route[]>; open: Route[] }>();

/**
 * The routes of `routes` that could match `path`, in the table's order: those whose first segment
 * is the path's, and those whose first segment is a parameter. A delivery's path is tried against
 * a handful of patterns instead of every route of every service.
 */
function routesFor(routes: readonly Route[], path: string): readonly Route[] {
  let index = byFirstSegment.get(routes);
  if (!index) {
    const firstOf = (route: Route) => route.template.split("/")[1] ?? "";
    const isOpen = (route: Route) => firstOf(route).includes("{");
    const literal = new Map<string, Route[]>();
    for (const route of routes) {
      const first = firstOf(route);
      if (isOpen(route) || literal.has(first)) continue;
      literal.set(
        first,
        routes.filter((r) => isOpen(r) || firstOf(r) === first),
      );
    }
    index = { literal, open: routes.filter(isOpen) };
    byFirstSegment.set(routes, index);
  }
  const end = path.indexOf("/", 1);
  return index.literal.get(path.slice(1, end < 0 ? undefined : end)) ?? index.open;
}
