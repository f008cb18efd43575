import { describe, expect, it } from "vitest";
import { sourceAuthFrom, verifySignature } from "./source-auth.js";

/** The vendors' own published examples, checked as each documents them. */
const bytes = (text: string) => new TextEncoder().encode(text);
const headersOf = (values: Record<string, string>) => (name: string) => values[name];

describe("signature checks against the vendors' published examples", () => {
  it("GitHub: X-Hub-Signature-256 of 'Hello, World!' with the documented secret", () => {
    const { signature } = sourceAuthFrom({ secretInPath: false, basicAuth: false, secretHeader: "", signature: githubSignature() });
    const header = headersOf({ "x-hub-signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17" });
    expect(verifySignature(signature!, "It's a Secret to Everybody", bytes("Hello, World!"), header, new Date())).toBe("valid");
    expect(verifySignature(signature!, "It's a Secret to Everybody", bytes("Hello, World?"), header, new Date())).toBe("mismatch");
    expect(verifySignature(signature!, "It's a Secret to Everybody", bytes("Hello, World!"), headersOf({}), new Date())).toBe("missing");
  });

  it("Standard Webhooks: the specification's example message, among several signatures, inside and outside the tolerance", () => {
    const { signature } = sourceAuthFrom({
      secretInPath: false,
      basicAuth: false,
      secretHeader: "",
      signature: {
        $typeName: "warroom.intake.v1.CustomSourceSignature",
        header: "webhook-signature",
        algorithm: "",
        prefix: "v1,",
        encoding: "base64",
        timestampHeader: "webhook-timestamp",
        toleranceSeconds: 0,
        signedContent: "id.timestamp.body",
        idHeader: "webhook-id",
      },
    });
    const header = headersOf({
      "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
      "webhook-timestamp": "1614265330",
      "webhook-signature": "v1,bm9ldHUjKzFob2VudXRob2VodWUzMjRvdWVvdW9ldQo= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    });
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const body = bytes('{"test": 2432232314}');
    expect(verifySignature(signature!, secret, body, header, new Date(1614265330_000 + 299_000))).toBe("valid");
    expect(verifySignature(signature!, secret, body, header, new Date(1614265330_000 + 301_000))).toBe("stale");
    expect(verifySignature(signature!, secret, body, header, new Date(1614265330_000 - 301_000))).toBe("stale");
    expect(verifySignature(signature!, "whsec_bm9ldHUjKzFob2VudXRob2VodWUzMjRv", body, header, new Date(1614265330_000))).toBe("mismatch");
  });
});

function githubSignature() {
  return {
    $typeName: "warroom.intake.v1.CustomSourceSignature" as const,
    header: "X-Hub-Signature-256",
    algorithm: "sha256",
    prefix: "sha256=",
    encoding: "hex",
    timestampHeader: "",
    toleranceSeconds: 0,
    signedContent: "",
    idHeader: "",
  };
}
