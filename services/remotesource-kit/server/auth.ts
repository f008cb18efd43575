import { createHash, timingSafeEqual } from "node:crypto";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import type { SourceAuth } from "./definition.js";

/** A caller without a valid credential; each transport answers it in its own way (401, UNAUTHENTICATED). */
export class Unauthenticated extends Error {}

export interface Authenticator {
  /** Callers present bearer tokens, checked on every call; without them, the TLS layer checks client certificates. */
  readonly bearer: boolean;
  /** Throws Unauthenticated unless the caller proved who it is. */
  authenticate(authorization: string | null | undefined, socket: Socket | undefined): void;
}

/** Checks callers against the source's `auth`: bearer tokens compared in constant time, or the TLS layer's verdict on a client certificate. */
export function createAuthenticator(auth: SourceAuth): Authenticator {
  const tokenDigests = "bearerTokens" in auth ? auth.bearerTokens.map(digest) : undefined;
  return {
    bearer: tokenDigests !== undefined,
    authenticate(authorization, socket) {
      if (tokenDigests) {
        const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "");
        const presented = match?.[1] ? digest(match[1]) : undefined;
        // Every token is compared, in constant time, whatever the outcome.
        let ok = false;
        for (const token of tokenDigests) if (presented && timingSafeEqual(presented, token)) ok = true;
        if (!ok) throw new Unauthenticated(authorization ? "invalid credential" : "missing credential: send Authorization: Bearer <token>");
      } else if (!(socket as TLSSocket | undefined)?.authorized) {
        // The TLS layer already refuses a missing or untrusted client certificate; this is a second lock.
        throw new Unauthenticated("a trusted client certificate is required");
      }
    },
  };
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}
