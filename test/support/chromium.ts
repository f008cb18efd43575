import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { type BrowserContext, chromium, type LaunchOptions, type Page } from "playwright-core";
import { expect } from "vitest";
import { OWNER } from "./app.js";

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

/**
 * How long a browser test waits for a page to show something: a bound that detects a hang, not a
 * budget. A step takes well under a second alone; with four test files at a time and Chromium
 * sharing two cores, a step has taken over 15 s.
 */
export const BROWSER_WAIT_MS = 60_000;

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

/**
 * Evaluates a JavaScript expression in a page. Written as text: the project's type check has no
 * DOM library, and the expression runs in the browser, not here.
 */
export function inPage<T>(page: Page, expression: string): Promise<T> {
  return page.evaluate(expression) as Promise<T>;
}

/** Every visible form control has a label (a <label>, aria-label or aria-labelledby), every button and link a name. */
export async function expectLabelled(page: Page): Promise<void> {
  const unlabelled = await inPage<string[]>(
    page,
    `[...document.querySelectorAll("input, select, textarea")]
    .filter((el) => el.type !== "hidden" && el.getClientRects().length > 0)
    .filter((el) => (el.labels?.length ?? 0) === 0 && !el.getAttribute("aria-label") && !el.getAttribute("aria-labelledby"))
    .map((el) => el.outerHTML)`,
  );
  expect(unlabelled).toEqual([]);
  const nameless = await inPage<string[]>(
    page,
    `[...document.querySelectorAll("button, a[href]")]
    .filter((el) => el.getClientRects().length > 0 && !(el.textContent ?? "").trim() && !el.getAttribute("aria-label"))
    .map((el) => el.outerHTML)`,
  );
  expect(nameless).toEqual([]);
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** axe-core finds no serious or critical violation on the page as it is now. */
export async function expectAccessible(page: Page): Promise<void> {
  // Evaluated through the browser's debugging protocol, which the console's CSP (no inline
  // scripts) does not govern.
  if (!(await inPage<boolean>(page, "typeof window.axe === 'object'"))) await page.evaluate(AXE_SOURCE);
  const violations = await inPage<{ id: string; impact: string; nodes: { target: string[] }[] }[]>(
    page,
    `axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => ({ target: n.target })) })))`,
  );
  expect(violations).toEqual([]);
}

/**
 * Signs in as the test app's owner through the login form at `url` (the console redirects to it
 * from any page), and waits for the incident list the console opens on.
 */
export async function signInAsOwner(page: Page, url: string, owner = OWNER): Promise<void> {
  await page.goto(url);
  await page.getByLabel("Email").fill(owner.email);
  await page.getByLabel("Password").fill(owner.password);
  await page.getByLabel("Organization").fill(owner.org);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Incidents" }).waitFor();
}
