import type { Obj } from "./kustomize.js";

// The Kubernetes API's OpenAPI schema, as the kubernetes-models package compiles it for each kind:
// types, required fields, enumerations and formats (quantities, ports, names) of every field.

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

/** What the API server's schema refuses in `doc`: empty when it is valid. An unknown kind is refused. */
export async function validateAgainstKubernetesSchema(doc: Obj): Promise<string[]> {
  if (typeof doc?.apiVersion !== "string" || typeof doc?.kind !== "string") return ["apiVersion and kind are required"];
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
