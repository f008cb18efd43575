import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const root = fileURLToPath(new URL(".", import.meta.url));

// The console is plain static files the gateway serves from dist/console: Preact (a few
// kilobytes) with its JSX runtime, no router or state library, one CSS file.
export default defineConfig({
  root,
  base: "/",
  publicDir: "public",
  logLevel: "warn",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: fileURLToPath(new URL("../../../dist/console", import.meta.url)),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // Everything under assets/ is named by content hash; the gateway caches those for a year.
    assetsDir: "assets",
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});
