import { describe, expect, it } from "vitest";
import { namesCredential, REDACTED, redactCredentials } from "./credential-redaction.js";

describe("credential names in kept payloads", () => {
  it.each([
    "authorization",
    "Authentication",
    "x-access-key",
    "X-API-Key",
    "apiKey",
    "api_key",
    "token",
    "access_token",
    "x-auth-token",
    "x-credentials",
    "x-passwd",
    "password",
    "x-hub-signature-256",
    "sessionId",
    "x-session",
    "cookie",
    "set-cookie",
    "x-secret",
    "client_secret",
    "sig",
  ])("%s is redacted", (name) => {
    expect(namesCredential(name)).toBe(true);
  });

  it.each(["monkey", "x-monkey", "x-keyboard", "region", "content-type", "user-agent", "author", "passenger", "x-request-id", "turkey"])(
    "%s is kept",
    (name) => {
      expect(namesCredential(name)).toBe(false);
    },
  );

  it("keeps names and harmless values, redacts the rest", () => {
    expect(redactCredentials({ Token: "t", Region: "eu" }, { lowercaseNames: true })).toEqual({ token: REDACTED, region: "eu" });
    expect(redactCredentials({ apiKey: "k", monkey: "banana" })).toEqual({ apiKey: REDACTED, monkey: "banana" });
  });
});
