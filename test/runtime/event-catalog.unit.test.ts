import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { file_warroom_events_v1_events } from "../../gen/warroom/events/v1/events_pb.js";
import { createInMemoryEventBus, type DomainEvent } from "../../services/runtime/transport/event-bus.js";
import { EVENTS, eventTypeOf, onEvent } from "../../services/runtime/transport/events.js";
import { createLogger } from "../../services/runtime/observability/logger.js";

const ROOT = join(import.meta.dirname, "../..");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "node_modules" || name === "web" ? [] : sources(path);
    return path.endsWith(".ts") && !path.endsWith(".test.ts") ? [path] : [];
  });
}

describe("the event catalog", () => {
  it("pairs every event message of the schema with exactly one subject", () => {
    const types = Object.values(EVENTS);
    expect(types.map((t) => t.schema.typeName).sort()).toEqual(file_warroom_events_v1_events.messages.map((m) => m.typeName).sort());
    expect(new Set(types.map((t) => t.subject)).size).toBe(types.length);
    for (const type of types) {
      expect(type.subject).toBe(`events.${type.name}`);
      expect(eventTypeOf(type.subject)).toBe(type);
    }
    expect(eventTypeOf("events.unknown")).toBeUndefined();
  });

  it("is the only place in the services that names an event subject or encodes an audit record", () => {
    const offenders: string[] = [];
    for (const path of sources(join(ROOT, "services"))) {
      const file = relative(ROOT, path);
      if (file === "services/runtime/transport/events.ts") continue;
      const text = readFileSync(path, "utf8");
      // The stream's own wildcard (`events.>`) is the bus's business, not an event kind.
      if (/["']events\.(?!>)/.test(text)) offenders.push(`${file}: event subject literal`);
      if (/AuditRecordedSchema/.test(text)) offenders.push(`${file}: audit record built outside recordAudit`);
    }
    expect(offenders).toEqual([]);
  });

  it("hands a subscriber the decoded message of its kind only", async () => {
    const bus = createInMemoryEventBus(createLogger("silent", "event-catalog-test"));
    const seen: string[] = [];
    await onEvent(bus, EVENTS.incidentOpened, async (opened, event) => void seen.push(`${opened.title} ${event.id}`));
    const opened = create(EVENTS.incidentOpened.schema, { orgId: "o", incidentId: "i", title: "Disk full" });
    const resolved = create(EVENTS.incidentResolved.schema, { orgId: "o", incidentId: "i", state: "resolved" });
    const events: DomainEvent[] = [
      { id: "1", subject: EVENTS.incidentOpened.subject, payload: toBinary(EVENTS.incidentOpened.schema, opened) },
      { id: "2", subject: EVENTS.incidentResolved.subject, payload: toBinary(EVENTS.incidentResolved.schema, resolved) },
    ];
    for (const event of events) await bus.publish(event);
    expect(seen).toEqual(["Disk full 1"]);
    expect(fromBinary(EVENTS.incidentResolved.schema, events[1]!.payload).state).toBe("resolved");
    await bus.close();
  });
});
