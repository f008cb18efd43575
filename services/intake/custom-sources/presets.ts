import { create } from "@bufbuild/protobuf";
import {
  CustomSourceAuthOptionsSchema,
  type CustomSourcePreset,
  CustomSourcePresetSchema,
  CustomSourceRuleSchema,
} from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { type AuthInit, type RuleInit, VENDOR_PRESETS } from "./vendor-presets.js";

function preset(name: string, description: string, rules: RuleInit[], auth?: AuthInit): CustomSourcePreset {
  return create(CustomSourcePresetSchema, {
    name,
    description,
    rules: rules.map((rule) => create(CustomSourceRuleSchema, rule)),
    ...(auth ? { auth: create(CustomSourceAuthOptionsSchema, auth) } : {}),
  });
}

/**
 * Starting points for common tools, each built from the vendor's documented payload and tested
 * with its fixtures (test/fixtures/<preset>/). An admin creates a source from one and edits it.
 */
export const PRESETS: CustomSourcePreset[] = [
  ...VENDOR_PRESETS.map((p) => preset(p.name, p.description, p.rules, p.auth)),
  preset(
    "generic-json",
    'Any JSON with "title", "severity" (critical, high, warning, info, or sev1..sev4) and "status" (firing or resolved); "key", "id", "description", "url" when present.',
    [
      {
        name: "resolved",
        when: "has(body.status) && body.status in ['resolved', 'ok', 'OK', 'RESOLVED', 'recovered']",
        kind: "'recovery'",
        attachKey: "has(body.key) ? string(body.key) : (has(body.title) ? string(body.title) : null)",
        eventId: "has(body.id) ? string(body.id) + ':resolved' : null",
      },
      {
        name: "firing",
        when: "has(body.title)",
        title: "string(body.title)",
        severity:
          "!has(body.severity) ? 'sev3' : string(body.severity) in ['sev1', 'sev2', 'sev3', 'sev4'] ? string(body.severity) : string(body.severity).lowerAscii() in ['critical', 'fatal', 'emergency'] ? 'sev1' : string(body.severity).lowerAscii() in ['high', 'error', 'major'] ? 'sev2' : string(body.severity).lowerAscii() in ['low', 'info', 'informational'] ? 'sev4' : 'sev3'",
        attachKey: "has(body.key) ? string(body.key) : string(body.title)",
        eventId: "has(body.id) ? string(body.id) : null",
        summary: "has(body.description) ? string(body.description) : null",
        link: "has(body.url) ? string(body.url) : null",
      },
    ],
  ),
];

export function presetNamed(name: string): CustomSourcePreset | undefined {
  return PRESETS.find((p) => p.name === name);
}
