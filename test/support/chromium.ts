import { type BrowserContext, chromium, type LaunchOptions } from "playwright-core";

/** Debian's Chromium, which the test command installs. */
const CHROMIUM = "/usr/bin/chromium";

/**
 * Headless, and without the background connections Chromium makes at every start (updates, sync,
 * lookups): on a machine without internet access they are refused by the dozen.
 */
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

type ContextOptions = NonNullable<Parameters<typeof chromium.launchPersistentContext>[1]>;

/** The browser tests' Chromium, with its own profile folder; options add to the defaults. */
export function launchChromium(profile: string, options: Omit<ContextOptions, keyof LaunchOptions> & { timeout?: number } = {}): Promise<BrowserContext> {
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 800 },
    timeout: 30_000,
    ...options,
  });
}
