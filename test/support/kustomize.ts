import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, parseAllDocuments } from "yaml";

// A kustomize subset, enough for deploy/: resources, components, generators (create and merge),
// JSON 6902 patches (targets by kind and name or label selector), images, replicas and namespace.
// Anything else in a kustomization is refused, so this reading never silently differs from what
// kustomize builds.

/** A manifest: YAML is untyped. */
export type Obj = Record<string, any>;

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** Every document of a YAML file, as plain objects. */
export function yamlDocuments(path: string): Obj[] {
  return parseAllDocuments(readFileSync(path, "utf8"))
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${relative(root, path)}: ${doc.errors[0]!.message}`);
      return doc.toJS() as Obj;
    })
    .filter((doc) => doc !== null && doc !== undefined);
}

const supportedFields = new Set([
  "apiVersion",
  "kind",
  "namespace",
  "resources",
  "components",
  "configMapGenerator",
  "secretGenerator",
  "patches",
  "images",
  "replicas",
]);

/** A folder's kustomization.yaml, refused when it uses a field this subset does not read. */
export function readKustomization(dir: string): Obj {
  const path = join(dir, "kustomization.yaml");
  if (!existsSync(path)) throw new Error(`${relative(root, dir)} has no kustomization.yaml`);
  const k = parse(readFileSync(path, "utf8")) as Obj;
  for (const field of Object.keys(k)) if (!supportedFields.has(field)) throw new Error(`${relative(root, path)}: unsupported field ${field}`);
  return k;
}

function generatorData(dir: string, generator: Obj): Record<string, string> {
  const data: Record<string, string> = {};
  for (const literal of (generator.literals ?? []) as string[]) {
    const eq = literal.indexOf("=");
    data[literal.slice(0, eq)] = literal.slice(eq + 1);
  }
  for (const file of (generator.files ?? []) as string[]) data[file.split("/").pop()!] = readFileSync(join(dir, file), "utf8");
  for (const file of (generator.envs ?? []) as string[]) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
      if (line.trim() === "" || line.trimStart().startsWith("#")) continue;
      const eq = line.indexOf("=");
      data[line.slice(0, eq).trim()] = line.slice(eq + 1);
    }
  }
  return data;
}

function applyJsonPatch(target: Obj, ops: Obj[]): void {
  for (const op of ops) {
    const path = (op.path as string)
      .split("/")
      .slice(1)
      .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    const last = path.pop()!;
    let parent: any = target;
    for (const key of path) parent = Array.isArray(parent) ? parent[Number(key)] : parent[key];
    if (parent === undefined) throw new Error(`patch path ${op.path} does not exist`);
    if (op.op === "test") {
      const actual = Array.isArray(parent) ? parent[Number(last)] : parent[last];
      if (JSON.stringify(actual) !== JSON.stringify(op.value))
        throw new Error(`patch test failed at ${op.path}: ${JSON.stringify(actual)}, not ${JSON.stringify(op.value)}`);
    } else if (op.op === "add" && Array.isArray(parent)) parent.splice(last === "-" ? parent.length : Number(last), 0, op.value);
    else if (op.op === "add" || op.op === "replace") parent[Array.isArray(parent) ? Number(last) : last] = op.value;
    else if (op.op === "remove") Array.isArray(parent) ? parent.splice(Number(last), 1) : delete parent[last];
    else throw new Error(`unsupported patch op ${op.op}`);
  }
}

/** `key=value,key=value`, the only label selector form read here. */
function labelSelectorOf(selector: string | undefined): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const term of (selector ?? "").split(",").filter((s) => s.trim() !== "")) {
    const match = /^\s*([^=!\s]+)\s*==?\s*([^=!\s]*)\s*$/.exec(term);
    if (!match) throw new Error(`label selector ${selector}: only key=value terms are read here`);
    labels[match[1]!] = match[2]!;
  }
  return labels;
}

function applyKustomization(dir: string, docs: Obj[], expectedKind: "Kustomization" | "Component"): void {
  const k = readKustomization(dir);
  if ((k.kind ?? "Kustomization") !== expectedKind) throw new Error(`${relative(root, dir)} is a ${k.kind}, expected ${expectedKind}`);
  for (const entry of (k.resources ?? []) as string[]) {
    const path = resolve(dir, entry);
    if (!existsSync(path)) throw new Error(`${relative(root, dir)} lists ${entry}, which does not exist`);
    if (statSync(path).isDirectory()) docs.push(...renderKustomization(path));
    else docs.push(...yamlDocuments(path));
  }
  for (const entry of (k.components ?? []) as string[]) applyKustomization(resolve(dir, entry), docs, "Component");
  for (const [kind, generators] of [
    ["ConfigMap", k.configMapGenerator],
    ["Secret", k.secretGenerator],
  ] as const) {
    for (const generator of (generators ?? []) as Obj[]) {
      const data = generatorData(dir, generator);
      const encoded = kind === "Secret" ? Object.fromEntries(Object.entries(data).map(([key, v]) => [key, Buffer.from(v).toString("base64")])) : data;
      const existing = docs.find((d) => d.kind === kind && d.metadata?.name === generator.name);
      if (generator.behavior === "merge" || generator.behavior === "replace") {
        if (!existing) throw new Error(`${relative(root, dir)}: ${generator.behavior} of missing ${kind} ${generator.name}`);
        existing.data = generator.behavior === "merge" ? { ...existing.data, ...encoded } : encoded;
      } else {
        if (existing) throw new Error(`${relative(root, dir)}: ${kind} ${generator.name} generated twice`);
        docs.push({ apiVersion: "v1", kind, metadata: { name: generator.name }, data: encoded, ...(kind === "Secret" ? { type: "Opaque" } : {}) });
      }
    }
  }
  for (const patch of (k.patches ?? []) as Obj[]) {
    const ops = parse(readFileSync(join(dir, patch.path), "utf8")) as unknown;
    if (!Array.isArray(ops)) throw new Error(`${relative(root, dir)}: only JSON 6902 patches are read here`);
    const target = (patch.target ?? {}) as Obj;
    for (const field of Object.keys(target))
      if (!["kind", "name", "labelSelector"].includes(field)) throw new Error(`${relative(root, dir)}: patch target field ${field} is not read here`);
    const selected = labelSelectorOf(target.labelSelector);
    const targets = docs.filter(
      (d) =>
        d.kind === target.kind &&
        (target.name === undefined || d.metadata?.name === target.name) &&
        Object.entries(selected).every(([key, value]) => d.metadata?.labels?.[key] === value),
    );
    // A named target must exist; a label selector may select nothing (a component's patch for a
    // kind another component adds), as in kustomize.
    if (target.name !== undefined && targets.length !== 1) throw new Error(`${relative(root, dir)}: patch ${patch.path} matches ${targets.length} objects`);
    for (const doc of targets) applyJsonPatch(doc, structuredClone(ops) as Obj[]);
  }
  for (const image of (k.images ?? []) as Obj[]) {
    for (const doc of docs) {
      for (const container of (doc.spec?.template?.spec?.containers ?? []) as Obj[]) {
        const [name, tag] = String(container.image).split(":");
        if (name !== image.name) continue;
        container.image = `${image.newName ?? name}${(image.newTag ?? tag) ? `:${image.newTag ?? tag}` : ""}`;
      }
    }
  }
  for (const entry of (k.replicas ?? []) as Obj[]) {
    const targets = docs.filter((d) => ["Deployment", "StatefulSet"].includes(d.kind) && d.metadata?.name === entry.name);
    if (targets.length === 0) throw new Error(`${relative(root, dir)}: replicas for missing ${entry.name}`);
    for (const target of targets) target.spec.replicas = entry.count;
  }
  if (k.namespace) for (const doc of docs) if (doc.kind !== "Namespace") doc.metadata.namespace = k.namespace;
}

/** The manifests `kustomize build <dir>` would print, as plain objects. */
export function renderKustomization(dir: string): Obj[] {
  const docs: Obj[] = [];
  applyKustomization(dir, docs, "Kustomization");
  return docs;
}
