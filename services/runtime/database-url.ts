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
