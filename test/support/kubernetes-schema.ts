import { z } from "zod";
import type { Obj } from "./kustomize.js";

// The Kubernetes API's OpenAPI schema, as the kubernetes-models package compiles it for each kind:
// types, required fields, enumerations and formats (quantities, ports, names) of every field; and,
// for the one custom resource deploy/ uses, a checked-in schema of its fields.

/** The model class of an apiVersion and kind: `kubernetes-models/<group>/<version>/<Kind>`, the core group as `v1`. */
async function modelOf(apiVersion: string, kind: string): Promise<(new (data: Obj) => { validate(): void }) | undefined> {
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]+$/.test(kind)) return undefined;
  try {
    const module = (await import(`kubernetes-models/${apiVersion}/${kind}`)) as Record<string, unknown>;
    return (module[kind] ?? module.default) as new (
      data: Obj,
    ) => { validate(): void };
  } catch {
    return undefined;
  }
}

// Custom resources are no part of kubernetes-models: the fields of the Prometheus Operator's
// ServiceMonitor (monitoring.coreos.com/v1, as its CRD types them) that deploy/ may use, strict, so
// a misspelled or unknown field is refused rather than ignored as the API server would prune it.
const dnsName = z.string().regex(/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/);
const duration = z.string().regex(/^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$/);
const labelSelector = z
  .object({
    matchLabels: z.record(z.string(), z.string()).optional(),
    matchExpressions: z
      .array(z.object({ key: z.string(), operator: z.enum(["In", "NotIn", "Exists", "DoesNotExist"]), values: z.array(z.string()).optional() }).strict())
      .optional(),
  })
  .strict();
const customResources: Record<string, z.ZodType> = {
  "monitoring.coreos.com/v1 ServiceMonitor": z
    .object({
      apiVersion: z.literal("monitoring.coreos.com/v1"),
      kind: z.literal("ServiceMonitor"),
      metadata: z
        .object({
          name: dnsName,
          namespace: dnsName.optional(),
          labels: z.record(z.string(), z.string()).optional(),
          annotations: z.record(z.string(), z.string()).optional(),
        })
        .strict(),
      spec: z
        .object({
          jobLabel: z.string().optional(),
          targetLabels: z.array(z.string()).optional(),
          podTargetLabels: z.array(z.string()).optional(),
          selector: labelSelector,
          namespaceSelector: z
            .object({ any: z.boolean().optional(), matchNames: z.array(z.string()).optional() })
            .strict()
            .optional(),
          endpoints: z
            .array(
              z
                .object({
                  port: z.string().optional(),
                  targetPort: z.union([z.string(), z.number().int()]).optional(),
                  path: z.string().startsWith("/").optional(),
                  scheme: z.enum(["http", "https"]).optional(),
                  interval: duration.optional(),
                  scrapeTimeout: duration.optional(),
                  honorLabels: z.boolean().optional(),
                })
                .strict(),
            )
            .min(1),
        })
        .strict(),
    })
    .strict(),
};

/** What the API server's schema refuses in `doc`: empty when it is valid. An unknown kind is refused. */
export async function validateAgainstKubernetesSchema(doc: Obj): Promise<string[]> {
  if (typeof doc?.apiVersion !== "string" || typeof doc?.kind !== "string") return ["apiVersion and kind are required"];
  const custom = customResources[`${doc.apiVersion} ${doc.kind}`];
  if (custom) {
    const result = custom.safeParse(doc);
    return result.success ? [] : result.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
  }
  const Model = await modelOf(doc.apiVersion, doc.kind);
  if (!Model) return [`${doc.apiVersion} ${doc.kind} is no kind of the Kubernetes API`];
  // Base64 fields ("format: byte": a Secret's data, a ConfigMap's binaryData) as the API server
  // decodes them: Go's base64 decoder skips line breaks, and kustomize folds long values.
  const copy = structuredClone(doc);
  for (const field of ["data", "binaryData"]) {
    if ((doc.kind === "Secret" || field === "binaryData") && copy[field] && typeof copy[field] === "object") {
      for (const [key, value] of Object.entries(copy[field] as Record<string, unknown>))
        if (typeof value === "string") copy[field][key] = value.replace(/[\r\n]/g, "");
    }
  }
  try {
    new Model(copy).validate();
    return [];
  } catch (err) {
    return [(err as Error).message];
  }
}
