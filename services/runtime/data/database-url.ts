import { editDistance } from "../config/edit-distance.js";
/**
 * Why a DATABASE_URL cannot be used, or undefined when it can. The answer names the malformed part
 * and how to fix it, and never quotes the URL: it may hold the password.
 */
export function databaseUrlProblem(url: string, variable = "DATABASE_URL"): string | undefined {
  const shape = "postgres://user:password@host:5432/database";
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url);
  if (!scheme) return `${variable} is not a URL: write it as ${shape}`;
  if (!["postgres", "postgresql"].includes(scheme[1]!.toLowerCase())) return `${variable} must start with postgres:// or postgresql://, as in ${shape}`;
  const rest = url.slice(scheme[0].length);
  // The user name and password end at the last "@"; a "/", "?" or "#" before it would end the
  // host part early, so the password would be read as a path, query or fragment.
  const at = rest.lastIndexOf("@");
  const userinfo = at >= 0 ? rest.slice(0, at) : "";
  const colon = userinfo.indexOf(":");
  const parts: Array<[string, string]> = [
    ["user name", colon >= 0 ? userinfo.slice(0, colon) : userinfo],
    ["password", colon >= 0 ? userinfo.slice(colon + 1) : ""],
  ];
  const fix = "percent-encode it (encodeURIComponent, or e.g. / as %2F, # as %23, ? as %3F, @ as %40, % as %25)";
  for (const [part, value] of parts) {
    const bad = ["/", "#", "?", "@", "[", "]", " "].find((c) => value.includes(c));
    if (bad) return `the ${part} in ${variable} contains an unencoded "${bad}": ${fix}`;
    try {
      decodeURIComponent(value);
    } catch {
      return `the ${part} in ${variable} contains a "%" that is not followed by two hexadecimal digits: ${fix}`;
    }
  }
  // As postgres.js reads it: the host list ends at the first "/" or "?"; only its first host is
  // parsed as a URL host.
  const hosts = rest.slice(at + 1).split(/[?/#]/)[0]!;
  if (hosts === "" || hosts.split(",").some((h) => h === "")) return `${variable} names no host: write it as ${shape}`;
  try {
    new URL(`${scheme[0]}${rest.slice(0, at + 1)}${hosts.split(",")[0]}${rest.slice(at + 1 + hosts.length)}`);
  } catch {
    return `the host, port or database name in ${variable} is malformed (a port is a number; other characters are percent-encoded): write it as ${shape}`;
  }
  return undefined;
}

/**
 * Why the embedded Postgres, chosen because DATABASE_URL is unset, was not what the operator asked
 * for: NATS_URL is set (separate processes, each of which would keep its own data), or a variable
 * a typo away from DATABASE_URL is (DATABSE_URL: the server meant, misspelled). libpq's PG*
 * variables do not count: a developer's shell often has them for psql. DATABASE_EMBEDDED=true asks
 * for the embedded one anyway.
 */
export function unaskedEmbeddedDatabaseProblem(
  config: { DATABASE_URL?: string | undefined; NATS_URL?: string | undefined; DATABASE_EMBEDDED: boolean },
  env: NodeJS.ProcessEnv,
): string | undefined {
  if (config.DATABASE_URL || config.DATABASE_EMBEDDED) return undefined;
  const fix = "set DATABASE_URL to the Postgres server (postgres://user:password@host:5432/database), or DATABASE_EMBEDDED=true to run the embedded one anyway";
  if (config.NATS_URL)
    return `NATS_URL is set but DATABASE_URL is not: this process would run an embedded Postgres in DATA_DIR, apart from every other process; ${fix}`;
  const misspelled = Object.keys(env).filter(
    (name) =>
      name !== "DATABASE_URL" &&
      env[name]?.trim() &&
      Math.abs(name.length - "DATABASE_URL".length) <= 2 &&
      editDistance(name.toUpperCase(), "DATABASE_URL") <= 2,
  );
  if (misspelled.length > 0)
    return `${misspelled.join(", ")} ${misspelled.length === 1 ? "is" : "are"} set but DATABASE_URL is not (a misspelling?): the service reads only DATABASE_URL; ${fix}`;
  return undefined;
}
