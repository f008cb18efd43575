import { describe, expect, it } from "vitest";
import { natsServerVersionProblem } from "./nats-connection.js";

describe("the NATS server version announced in INFO", () => {
  it("is accepted from the supported 2.10 on, later minors and majors included", () => {
    for (const version of ["2.10.0", "2.10.29", "2.11.3", "2.12.0", "3.0.0", "v2.10.7", "2.11.0+build.5"])
      expect(natsServerVersionProblem(version), version).toBeUndefined();
  });

  it("refuses a server without the JetStream consumer API the event bus needs, naming the version seen and the minimum", () => {
    for (const version of ["2.9.3", "2.9.0", "2.8.4", "2.2.0", "1.4.1", "2.9.4-beta.2"]) {
      const problem = natsServerVersionProblem(version);
      expect(problem?.refuse, version).toBe(true);
      expect(problem?.message).toContain(`version ${version}, older than 2.9.4`);
      expect(problem?.message).toMatch(/upgrade NATS to 2\.10\.0 or later/);
    }
  });

  it("warns about a 2.9 from 2.9.4 on, and about a 2.10 prerelease, without refusing", () => {
    for (const version of ["2.9.25", "2.9.4", "2.9.10", "2.10.0-beta.1", "2.10.0-RC.3"]) {
      const problem = natsServerVersionProblem(version);
      expect(problem?.refuse, version).toBe(false);
      expect(problem?.message).toContain(`version ${version}, older than the supported 2.10.0`);
    }
  });

  it("warns about a version that is not a release number, quoting it", () => {
    for (const version of [undefined, "", "2.10", "latest", "2.x.1"]) {
      const problem = natsServerVersionProblem(version);
      expect(problem?.refuse, String(version)).toBe(false);
      expect(problem?.message).toContain(`announced the version ${JSON.stringify(version ?? "")}`);
    }
  });
});
