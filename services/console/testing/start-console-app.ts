import { startApp, type TestApp } from "../../../test/support/app.js";
import { createConsoleHttp, type ConsoleHttpOptions } from "../console-http.js";

/**
 * Test-only: the whole service in this process (see startApp), with the web console mounted the
 * way services/all/main.ts mounts it.
 */
export function startConsoleApp(options: { env?: Record<string, string>; console?: ConsoleHttpOptions; nats?: boolean } = {}): Promise<TestApp> {
  return startApp({ env: options.env, nats: options.nats, extraHttp: (config, runtime) => createConsoleHttp(config, runtime, options.console) });
}
