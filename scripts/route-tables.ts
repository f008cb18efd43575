// Writes each service's route table into its README, between `<!-- routes:begin -->` and
// `<!-- routes:end -->`: the RPC, its HTTP route from the `google.api.http` annotation (read from
// the generated descriptors, as the gateway reads it) and the first sentence of the RPC's comment
// in the proto. `--check` writes nothing and exits 1 when a README differs from what it would write.
//
//   npm run route-tables [-- --check]
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type DescService, fromBinary, getOption, hasOption } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { http } from "../gen/google/api/annotations_pb.js";
import { CommsService } from "../gen/warroom/comms/v1/comms_pb.js";
import { HeartbeatsService } from "../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IdentityService } from "../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../gen/warroom/incidents/v1/incidents_pb.js";
import { IntakeService } from "../gen/warroom/intake/v1/intake_pb.js";
import { RemoteSourcesService } from "../gen/warroom/remotesource/v1/remotesource_pb.js";
import { SubscriptionsService } from "../gen/warroom/subscriptions/v1/subscriptions_pb.js";

const ROOT = join(import.meta.dirname, "..");
const BEGIN = "<!-- routes:begin -->";
const END = "<!-- routes:end -->";

/** Each service by its folder, whose README lists its routes. */
const SERVICES_BY_FOLDER: Record<string, DescService> = {
  comms: CommsService,
  heartbeats: HeartbeatsService,
  identity: IdentityService,
  incidents: IncidentsService,
  intake: IntakeService,
  remotesource: RemoteSourcesService,
  subscriptions: SubscriptionsService,
};
const README_SERVICES: readonly { readme: string; service: DescService }[] = Object.entries(SERVICES_BY_FOLDER).map(([folder, service]) => ({
  readme: `services/${folder}/README.md`,
  service,
}));

/**
 * The leading comment of every RPC, by its full name (`warroom.comms.v1.CommsService.SetEgress`).
 * The generated descriptors carry no comments, so they are read from the schema as `buf` builds it.
 */
function rpcComments(): Map<string, string> {
  const image = execFileSync("npx", ["--no-install", "buf", "build", "-o", "-#format=binpb"], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const comments = new Map<string, string>();
  for (const file of fromBinary(FileDescriptorSetSchema, image).file) {
    for (const location of file.sourceCodeInfo?.location ?? []) {
      // [6, service index, 2, method index] is an RPC (FileDescriptorProto.service, ServiceDescriptorProto.method).
      const [kind, serviceIndex, member, methodIndex, ...rest] = location.path;
      if (kind !== 6 || member !== 2 || methodIndex === undefined || rest.length > 0) continue;
      const service = file.service[serviceIndex!];
      const method = service?.method[methodIndex];
      if (!service || !method) continue;
      comments.set(`${file.package}.${service.name}.${method.name}`, location.leadingComments);
    }
  }
  return comments;
}

/** The comment's first sentence, its lines joined: what the table shows of it. */
function firstSentence(comment: string): string {
  const paragraph = comment.trim().split(/\n\s*\n/)[0] ?? "";
  const text = paragraph
    .split("\n")
    .map((line) => line.trim())
    .join(" ");
  const end = /[.!?](?=\s+[A-Z`]|$)/.exec(text);
  return end ? text.slice(0, end.index + 1) : text;
}

function cell(text: string): string {
  return text.replaceAll("|", "\\|");
}

/** The table between the markers, markers included. */
function routeTable(service: DescService, comments: ReadonlyMap<string, string>, protoFile: string): string {
  const rows = service.methods.map((method) => {
    let route = "internal only";
    if (hasOption(method, http)) {
      const pattern = getOption(method, http).pattern;
      if (pattern.case !== undefined && pattern.case !== "custom") route = `\`${pattern.case.toUpperCase()} ${pattern.value}\``;
    }
    const comment = firstSentence(comments.get(`${service.typeName}.${method.name}`) ?? "");
    return `| \`${method.name}\` | ${route} | ${cell(comment)} |`;
  });
  return [
    BEGIN,
    `<!-- Written by \`npm run route-tables\` from ${protoFile} (\`${service.typeName}\`): edit the proto, then run it. -->`,
    "",
    "| RPC | Route | What it does |",
    "|---|---|---|",
    ...rows,
    "",
    END,
  ].join("\n");
}

/** The README with its table replaced; throws when the markers are missing. */
function withRouteTable(readme: string, table: string, name: string): string {
  const begin = readme.indexOf(BEGIN);
  const end = readme.indexOf(END);
  if (begin < 0 || end < begin) throw new Error(`${name} has no ${BEGIN} ... ${END} markers`);
  return readme.slice(0, begin) + table + readme.slice(end + END.length);
}

function main(): void {
  const check = process.argv.includes("--check");
  const comments = rpcComments();
  const stale: string[] = [];
  for (const { readme, service } of README_SERVICES) {
    const path = join(ROOT, readme);
    const current = readFileSync(path, "utf8");
    const next = withRouteTable(current, routeTable(service, comments, `proto/${service.file.name}.proto`), readme);
    if (next === current) continue;
    stale.push(readme);
    if (!check) writeFileSync(path, next);
  }
  if (check && stale.length > 0) {
    console.error(`route tables differ from the proto in ${stale.join(", ")}: run npm run route-tables and commit`);
    process.exit(1);
  }
  if (!check) console.log(stale.length > 0 ? `wrote ${stale.join(", ")}` : "route tables up to date");
}

main();
