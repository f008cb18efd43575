import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";

/** The top-level keys of one JSON line in the order written, duplicates included (JSON.parse keeps one). */
function topLevelKeys(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '"') {
      let end = i + 1;
      while (line[end] !== '"') end += line[end] === "\\" ? 2 : 1;
      if (depth === 1 && line[end + 1] === ":") keys.push(JSON.parse(line.slice(i, end + 1)) as string);
      i = end;
    } else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
  }
  return keys;
}

function capture(): { stream: Writable; lines: () => string[] } {
  let text = "";
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += chunk.toString();
      done();
    },
  });
  return { stream, lines: () => text.split("\n").filter(Boolean) };
}

describe("log lines", () => {
  it("carry every key once: a field named like pino's own keys or a binding is kept beside them, not over them", () => {
    const out = capture();
    const logger = createLogger("info", "gateway", out.stream).child({ service: "intake" });
    logger.warn({ msg: "upstream said no", service: "other", level: "x", time: 1, code: "Unavailable" }, "call failed");
    logger.info({ field_msg: "taken already", msg: "cause" }, "second");
    const [first, second] = out.lines();
    for (const line of [first!, second!]) {
      const keys = topLevelKeys(line);
      expect(new Set(keys).size, line).toBe(keys.length);
    }
    const parsed = JSON.parse(first!);
    expect(parsed).toMatchObject({ msg: "call failed", service: "intake", level: 40, name: "gateway", code: "Unavailable" });
    expect(parsed).toMatchObject({ field_msg: "upstream said no", field_service: "other", field_level: "x", field_time: 1 });
    expect(JSON.parse(second!)).toMatchObject({ msg: "second", field_msg: "taken already", field_field_msg: "cause" });
  });

  it("carry every key once through nested children: a binding given again replaces the parent's, one named like pino's own keys is kept beside them", () => {
    const out = capture();
    // As the process hands each service its logger: a child of a child, both binding `service`.
    const process = createLogger("info", "warroom", out.stream).child({ service: "pending", region: "eu" });
    const service = process.child({ service: "remotesource", msg: "bound", name: "other", pid: 1 });
    service.info("one");
    service.child({ service: "again" }).warn({ region: "us" }, "two");
    process.info("three");
    const lines = out.lines();
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      const keys = topLevelKeys(line);
      expect(new Set(keys).size, line).toBe(keys.length);
    }
    const [one, two, three] = lines.map((line) => JSON.parse(line));
    expect(one).toMatchObject({ msg: "one", name: "warroom", service: "remotesource", region: "eu", field_msg: "bound", field_name: "other", field_pid: 1 });
    expect(one.pid).toBe(globalThis.process.pid);
    expect(two).toMatchObject({ msg: "two", service: "again", field_region: "us", field_msg: "bound" });
    expect(three).toMatchObject({ msg: "three", service: "pending", region: "eu" });
    expect(three).not.toHaveProperty("field_msg");
    expect(process.bindings()).toEqual({ name: "warroom", service: "pending", region: "eu" });
  });

  it("never print the input of an invalid URL (a connection string with its password)", () => {
    const out = capture();
    const err = Object.assign(new TypeError("Invalid URL"), { code: "ERR_INVALID_URL", input: "postgres://u:hunter2@db/w" });
    createLogger("info", "warroom", out.stream).fatal({ err }, "failed to start");
    expect(out.lines()[0]).not.toContain("hunter2");
    expect(JSON.parse(out.lines()[0]!).err.message).toBe("Invalid URL");
  });
});
