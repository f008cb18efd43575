import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { AlertSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { checkRequest } from "./validation.js";

/** The schema's `pattern` rules through the remembered RE2 answers (Alert.source: ^[a-z0-9][a-z0-9-]*$). */
describe("checkRequest with pattern rules", () => {
  const alert = (source: string) => create(AlertSchema, { source, kind: "alert", severity: "sev2", title: "Disk full" });

  it("gives the same answer for a value the second time, refused or accepted", () => {
    for (let i = 0; i < 2; i++) {
      expect(() => checkRequest(AlertSchema, alert("metrics-monitor"))).not.toThrow();
      expect(() => checkRequest(AlertSchema, alert("Not A Badge"))).toThrow(/source/);
      expect(() => checkRequest(AlertSchema, alert("-leading-dash"))).toThrow(/source/);
    }
  });

  it("keeps answering past the bound on remembered answers", () => {
    for (let i = 0; i < 2_100; i++) expect(() => checkRequest(AlertSchema, alert(`source-${i}`))).not.toThrow();
    expect(() => checkRequest(AlertSchema, alert("UPPER"))).toThrow(/source/);
    expect(() => checkRequest(AlertSchema, alert("source-7"))).not.toThrow();
  });
});
