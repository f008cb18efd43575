// Writes the configuration reference's table (docs/reference/configuration.md), between
// `<!-- config:begin -->` and `<!-- config:end -->`, from the configuration schema
// (services/runtime/config/config.ts): each variable, its default as the schema gives it, and its
// description from `configDescriptions`, whose links are written from the repository's root and
// rewritten here relative to the page. `--check` writes nothing and exits 1 when the page differs
// from what it would write, or when a variable has no description.
//
//   npm run config-table [-- --check]
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { configDescriptions, configSchema, type ConfigVariable } from "../services/runtime/config/config.js";

const ROOT = join(import.meta.dirname, "..");
/** The page that holds the table, from the repository's root. */
export const CONFIG_PAGE = "docs/reference/configuration.md";
const BEGIN = "<!-- config:begin -->";
const END = "<!-- config:end -->";

/** The default as a reader sets it: the schema's value for an unset variable, or "unset". */
function defaultOf(name: ConfigVariable): string {
  const parsed = configSchema.shape[name].safeParse(undefined);
  const value: unknown = parsed.success ? parsed.data : undefined;
  if (value === undefined) return "unset";
  if (Array.isArray(value)) return value.length === 0 ? "empty" : `\`${value.join(",")}\``;
  if (value === "") return "empty";
  return `\`${String(value)}\``;
}

/**
 * A description's relative links (`[x](docs/OPERATIONS.md#y)`), written from the repository's root,
 * as the page that shows them must write them.
 */
export function linksFromPage(description: string, page: string = CONFIG_PAGE): string {
  return description.replace(/\]\(([^)\s]+)\)/g, (link, target: string) => {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("#")) return link;
    const [path, anchor] = target.split("#", 2) as [string, string | undefined];
    return `](${relative(dirname(page), path)}${anchor === undefined ? "" : `#${anchor}`})`;
  });
}

/** The table, and the variables without a description (the check fails on any). */
export function configTable(descriptions: { readonly [K in ConfigVariable]?: string } = configDescriptions): { table: string; undescribed: string[] } {
  const names = Object.keys(configSchema.shape) as ConfigVariable[];
  const undescribed = names.filter((name) => !descriptions[name]?.trim());
  const rows = names.map((name) => `| \`${name}\` | ${defaultOf(name)} | ${linksFromPage(descriptions[name] ?? "").replaceAll("|", "\\|")} |`);
  const table = [
    `<!-- Written by \`npm run config-table\` from services/runtime/config/config.ts: edit the schema and its descriptions, then run it. -->`,
    "",
    "| variable | default | meaning |",
    "|---|---|---|",
    ...rows,
  ].join("\n");
  return { table, undescribed };
}

/** What the check says about variables without a description: which, and where to add them. */
export function undescribedMessage(undescribed: readonly string[]): string {
  return (
    `configuration variables without a description: ${undescribed.join(", ")}\n` +
    "add each to configDescriptions in services/runtime/config/config.ts, then run npm run config-table"
  );
}

function main(): void {
  const check = process.argv.includes("--check");
  const { table, undescribed } = configTable();
  if (undescribed.length > 0) {
    console.error(undescribedMessage(undescribed));
    process.exit(1);
  }
  const text = readFileSync(join(ROOT, CONFIG_PAGE), "utf8");
  const start = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  if (start < 0 || end < start) {
    console.error(`${CONFIG_PAGE} has no ${BEGIN} … ${END} section for the configuration table`);
    process.exit(1);
  }
  const next = `${text.slice(0, start + BEGIN.length)}\n${table}\n${text.slice(end)}`;
  if (check) {
    if (next !== text) {
      console.error(`${CONFIG_PAGE}'s configuration table differs from services/runtime/config/config.ts: run npm run config-table and commit`);
      process.exit(1);
    }
  } else {
    if (next !== text) writeFileSync(join(ROOT, CONFIG_PAGE), next);
    console.log(next !== text ? `wrote ${CONFIG_PAGE}'s configuration table` : "configuration table up to date");
  }
}

if (import.meta.filename === process.argv[1]) main();
