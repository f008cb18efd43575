import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { compileRules, evaluateRules } from "../../cel/cel-mapping.js";
import { PRESETS, presetNamed } from "./presets.js";

const FIXTURES = join(import.meta.dirname, "../../../test/fixtures");

function fixture(preset: string, name: string): unknown {
  return JSON.parse(readFileSync(join(FIXTURES, preset, `${name}.json`), "utf8"));
}

function map(preset: string, name: string) {
  const found = presetNamed(preset);
  if (!found) throw new Error(`no preset ${preset}`);
  return evaluateRules(compileRules(found.rules), { body: fixture(preset, name), headers: {}, query: {}, receivedAt: new Date("2026-11-20T03:20:00Z") });
}

/** What each preset makes of its fixtures: the trigger's fields, the repeat's and the recovery's keys. */
const EXPECTED: Record<string, { trigger: Record<string, unknown>; repeatEventDiffers: boolean }> = {
  zabbix: {
    trigger: {
      kind: "trigger",
      title: "High CPU utilization (over 90% for 5m)",
      severity: "sev2",
      attachKey: "4120931",
      eventId: "problem:4120931",
      entity: { kind: "host", id: "app-07.prod" },
    },
    repeatEventDiffers: true,
  },
  "uptime-kuma": {
    trigger: {
      kind: "trigger",
      title: "Checkout API is down",
      severity: "sev2",
      attachKey: "monitor:12",
      entity: { kind: "monitor", id: "Checkout API" },
      link: "https://checkout.example.com/health",
    },
    repeatEventDiffers: true,
  },
  checkmk: {
    trigger: {
      kind: "trigger",
      title: "db-02: Filesystem /var/lib/postgresql",
      severity: "sev2",
      attachKey: "prod/db-02/Filesystem /var/lib/postgresql",
      eventId: "",
    },
    repeatEventDiffers: true,
  },
  nagios: {
    trigger: { kind: "trigger", title: "mail-01: SMTP is CRITICAL", severity: "sev2", attachKey: "mail-01/SMTP", entity: { kind: "host", id: "mail-01" } },
    repeatEventDiffers: true,
  },
  newrelic: {
    trigger: {
      kind: "trigger",
      title: "checkout-api query result is > 5.0 on 'Error rate'",
      severity: "sev1",
      attachKey: "5a1c7e2b-9f11-4c1e-8a7d-3f0b6c2d9e41",
      eventId: "5a1c7e2b-9f11-4c1e-8a7d-3f0b6c2d9e41:1763608567000",
      summary: "Conditions: Error rate",
    },
    repeatEventDiffers: true,
  },
  elastic: {
    trigger: {
      kind: "trigger",
      title: "Checkout 5xx above 2%",
      severity: "sev3",
      attachKey: "7f3c9a10-8d2e-11ef-9d5b-1b2c3d4e5f60/checkout-api",
      entity: { kind: "alert", id: "checkout-api" },
    },
    repeatEventDiffers: true,
  },
  uptimerobot: {
    trigger: {
      kind: "trigger",
      title: "Shop front page is down",
      severity: "sev2",
      attachKey: "monitor:797384571",
      eventId: "down:797384571:1763608663",
      summary: "Connection Timeout",
    },
    repeatEventDiffers: true,
  },
  grafana: {
    trigger: {
      kind: "trigger",
      title: "HighLatency",
      severity: "sev1",
      attachKey: '{}/{__grafana_receiver__="warroom"}:{alertname="HighLatency", grafana_folder="Checkout"}',
      eventId: "",
      entity: { kind: "service", id: "checkout-api" },
      runbookUrl: "https://runbooks.example.com/checkout/latency",
    },
    repeatEventDiffers: true,
  },
  "generic-json": {
    trigger: {
      kind: "trigger",
      title: "Nightly backup failed",
      severity: "sev2",
      attachKey: "backup/nightly",
      eventId: "run-20261120-0300",
      summary: "pg_dump exited with status 1",
    },
    repeatEventDiffers: true,
  },
  github: {
    trigger: {
      kind: "trigger",
      title: "CI failed on acme/checkout@main",
      severity: "sev2",
      attachKey: "acme/checkout/81224417@main",
      eventId: "run:5601345376:1",
      entity: { kind: "repository", id: "acme/checkout" },
      summary: "Run #412 (push, 9c1d7e2): failure",
      link: "https://github.com/acme/checkout/actions/runs/5601345376",
    },
    repeatEventDiffers: true,
  },
  gitlab: {
    trigger: {
      kind: "trigger",
      title: "Pipeline failed on payments/ledger@main",
      severity: "sev2",
      attachKey: "payments/ledger@main",
      eventId: "pipeline:1131870:failed",
      entity: { kind: "repository", id: "payments/ledger" },
      summary: "Pipeline #1131870 (push, d41e5c7a) failed: Post entries in batches of 500",
      link: "https://gitlab.example.com/payments/ledger/-/pipelines/1131870",
    },
    repeatEventDiffers: true,
  },
  jenkins: {
    trigger: {
      kind: "trigger",
      title: "billing-nightly build failed",
      severity: "sev2",
      attachKey: "billing-nightly",
      eventId: "billing-nightly#318:FAILURE",
      entity: { kind: "job", id: "billing-nightly" },
      summary: "Build #318 FAILURE on origin/main",
      link: "https://jenkins.example.com/job/billing-nightly/318/",
    },
    repeatEventDiffers: true,
  },
};

describe("presets with their fixtures", () => {
  it("covers every preset", () => {
    expect(PRESETS.map((p) => p.name).sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  for (const [preset, expected] of Object.entries(EXPECTED)) {
    it(`${preset}: trigger, repeat, recovery on one key; malformed fails to the default incident`, () => {
      const trigger = map(preset, "trigger");
      expect(trigger.error).toBeUndefined();
      expect(trigger.fields).toMatchObject(expected.trigger);
      expect(trigger.warnings).toEqual([]);

      const repeat = map(preset, "repeat");
      expect(repeat.fields?.kind).toBe("trigger");
      expect(repeat.fields?.attachKey).toBe(trigger.fields?.attachKey);
      // A repeat is a new notification: its event id (when it has one) is not the trigger's.
      if (repeat.fields?.eventId && expected.repeatEventDiffers) expect(repeat.fields.eventId).not.toBe(trigger.fields?.eventId);

      const recovery = map(preset, "recovery");
      expect(recovery.error).toBeUndefined();
      expect(recovery.fields?.kind).toBe("recovery");
      expect(recovery.fields?.attachKey).toBe(trigger.fields?.attachKey);

      const malformed = map(preset, "malformed");
      expect(malformed.error, JSON.stringify(malformed)).toBeTruthy();
    });
  }

  it("uptime-kuma: a TLS certificate-expiry warning opens an incident per monitor, each threshold recorded once", () => {
    for (const name of ["certificate-expiry", "certificate-expiry-1.23"]) {
      const mapped = map("uptime-kuma", name);
      expect(mapped.error).toBeUndefined();
      expect(mapped.fields).toMatchObject({
        kind: "trigger",
        severity: "sev3",
        attachKey: "certificate:Checkout API",
        entity: { kind: "monitor", id: "Checkout API" },
        title: expect.stringMatching(/^Checkout API: TLS certificate expires in \d+ days$/),
      });
    }
    // The 21-, 14- and 7-day warnings are three notifications of one incident.
    expect(map("uptime-kuma", "certificate-expiry").fields?.eventId).not.toBe(map("uptime-kuma", "certificate-expiry-1.23").fields?.eventId);
  });

  it("grafana: the contact point's Test button is a test, not an incident", () => {
    expect(map("grafana", "test-notification").fields).toMatchObject({ kind: "ignore", ignoreReason: "Grafana contact-point test notification" });
  });

  it("github, gitlab, jenkins: pings, runs in progress and started builds are dropped", () => {
    expect(map("github", "ping").fields).toMatchObject({ kind: "ignore", ignoreReason: "GitHub webhook ping" });
    expect(map("github", "in-progress").fields).toMatchObject({ kind: "ignore", ignoreReason: "workflow run in_progress" });
    expect(map("gitlab", "running").fields).toMatchObject({ kind: "ignore", ignoreReason: "pipeline running" });
    expect(map("jenkins", "started").fields).toMatchObject({ kind: "ignore", ignoreReason: "build started" });
  });

  it("carries each tool's way of presenting its credential", () => {
    expect(presetNamed("github")?.auth?.signature).toMatchObject({ header: "x-hub-signature-256", algorithm: "sha256", prefix: "sha256=", encoding: "hex" });
    expect(presetNamed("gitlab")?.auth).toMatchObject({ secretHeader: "x-gitlab-token" });
    expect(presetNamed("jenkins")?.auth).toMatchObject({ secretInPath: true });
    expect(presetNamed("zabbix")?.auth).toBeUndefined();
  });

  it("uptime-kuma: the test notification is dropped on purpose", () => {
    expect(map("uptime-kuma", "test-notification").fields).toMatchObject({ kind: "ignore", ignoreReason: "Uptime Kuma test notification" });
  });
});
