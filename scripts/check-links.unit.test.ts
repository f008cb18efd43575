import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { anchorsOf, checkLinks, externalLinkProblem, linksOf, slug } from "./check-links.js";

describe("slug: GitHub's anchor for a heading", () => {
  it("lowercases, drops punctuation and makes spaces hyphens", () => {
    expect(slug("Getting started")).toBe("getting-started");
    expect(slug("The NATS server's version")).toBe("the-nats-servers-version");
    expect(slug("Alertmanager: POST /triggers/alertrouter")).toBe("alertmanager-post-triggersalertrouter");
    expect(slug("Two connection pools per process, and two more for the hot paths")).toBe("two-connection-pools-per-process-and-two-more-for-the-hot-paths");
  });

  it("keeps letters of any script, digits, underscores and hyphens", () => {
    expect(slug("Diátaxis and 3 a.m.")).toBe("diátaxis-and-3-am");
    expect(slug("snake_case and kebab-case")).toBe("snake_case-and-kebab-case");
    expect(slug("a  b")).toBe("a--b");
  });
});

describe("anchorsOf", () => {
  it("slugs the rendered text of headings, numbers repeats, and takes HTML ids", () => {
    const page = [
      "# Title",
      "## The `POST /triggers` route",
      "## [Linked](x.md) **bold** heading",
      "## Repeat",
      "## Repeat",
      '<a id="custom-anchor"></a>',
      "```sh",
      "# a comment in code, not a heading",
      "```",
    ].join("\n");
    expect([...anchorsOf(page)]).toEqual(["title", "the-post-triggers-route", "linked-bold-heading", "repeat", "repeat-1", "custom-anchor"]);
  });
});

describe("linksOf", () => {
  it("finds inline links, images, definitions and autolinks, but none inside code", () => {
    const page = [
      'See [a](docs/a.md#part) and ![b](img.png "title").',
      "Not `[code](nowhere.md)`, and <https://example.com/x>.",
      "[ref]: other.md",
      "```md",
      "[fenced](nowhere.md)",
      "```",
    ].join("\n");
    expect(linksOf(page)).toEqual([
      { line: 1, target: "docs/a.md#part" },
      { line: 1, target: "img.png" },
      { line: 2, target: "https://example.com/x" },
      { line: 3, target: "other.md" },
    ]);
  });
});

describe("externalLinkProblem", () => {
  it("accepts well-formed http(s) and mailto links, without fetching them", () => {
    expect(externalLinkProblem("https://www.standardwebhooks.com/")).toBeNull();
    expect(externalLinkProblem("http://localhost:8080/readyz")).toBeNull();
    expect(externalLinkProblem("mailto:security@example.com")).toBeNull();
  });

  it("names what is wrong with a malformed one", () => {
    expect(externalLinkProblem("https://")).toBe("not a valid URL");
    expect(externalLinkProblem("https://intranet/page")).toBe('host "intranet" is not a domain name');
    expect(externalLinkProblem("ftp://example.com/file")).toBe("a scheme other than http, https or mailto");
    expect(externalLinkProblem("mailto:nobody")).toBe("a malformed mailto: address");
  });
});

describe("checkLinks over a folder of pages", () => {
  let root: string | undefined;
  afterEach(() => {
    if (root) rmSync(root, { recursive: true, force: true });
    root = undefined;
  });

  function tree(files: Record<string, string>): string {
    root = mkdtempSync(join(tmpdir(), "check-links-"));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(join(root, dirname(path)), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    return root;
  }

  it("passes links to files, folders and headings that exist", () => {
    const dir = tree({
      "README.md": "[guide](docs/guide.md#step-2-run-it) [self](#top) [folder](docs/) [code](src/main.ts#L3)\n# Top\n",
      "docs/guide.md": "# Guide\n## Step 2: run it\n[back](../README.md#top) [web](https://example.com)\n",
      "src/main.ts": "export {};\n",
    });
    expect(checkLinks(dir, ["README.md", "docs/guide.md"])).toEqual([]);
  });

  it("reports each broken link with its file, line and what is missing", () => {
    const dir = tree({
      "README.md": "# Top\n[gone](docs/missing.md)\n[bad anchor](docs/guide.md#no-such-part)\n[self](#nowhere)\n",
      "docs/guide.md": "# Guide\n[out](../../elsewhere.md) [anchor on code](../src/main.ts#section)\n",
      "src/main.ts": "export {};\n",
    });
    expect(checkLinks(dir, ["README.md", "docs/guide.md"])).toEqual([
      { file: "README.md", line: 2, message: "docs/missing.md: no such file or folder (docs/missing.md)" },
      { file: "README.md", line: 3, message: "docs/guide.md#no-such-part: no heading in docs/guide.md has the anchor #no-such-part" },
      { file: "README.md", line: 4, message: "#nowhere: no heading in README.md has the anchor #nowhere" },
      { file: "docs/guide.md", line: 2, message: "../../elsewhere.md: points outside the repository" },
      { file: "docs/guide.md", line: 2, message: "../src/main.ts#section: an anchor on src/main.ts, which has no headings" },
    ]);
  });
});
