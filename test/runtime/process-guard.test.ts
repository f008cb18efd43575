import { describe, expect, it } from "vitest";
import { isPostgresWriteAfterClose } from "../../services/runtime/process.js";

describe("the guard for postgres.js writing to a closed connection", () => {
  const withStack = (message: string, stack: string) => Object.assign(new TypeError(message), { stack: `TypeError: ${message}\n${stack}` });

  it("recognizes exactly the driver's write-after-close TypeError", () => {
    expect(isPostgresWriteAfterClose(withStack("Cannot read properties of null (reading 'write')", "    at Immediate.nextWrite (file:///app/node_modules/postgres/src/connection.js:255:22)"))).toBe(true);
  });

  it("lets every other uncaught error end the process", () => {
    expect(isPostgresWriteAfterClose(withStack("Cannot read properties of null (reading 'write')", "    at somewhere (file:///app/services/incidents/record.js:1:1)"))).toBe(false);
    expect(isPostgresWriteAfterClose(withStack("Cannot read properties of undefined (reading 'id')", "    at x (file:///app/node_modules/postgres/src/connection.js:1:1)"))).toBe(false);
    expect(isPostgresWriteAfterClose(new Error("Cannot read properties of null (reading 'write')"))).toBe(false);
  });
});
