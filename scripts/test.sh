#!/usr/bin/env bash
# The one test command (`npm test`): installs what the suite needs when it is missing, then runs it
# on servers of its own. Needs: Node (see engines), the npm packages, nats-server (the run's NATS
# and the private servers of the fault tests), Debian's Chromium for the console's browser tests,
# and Prometheus (with promtool) and Alertmanager for the tests of the alert rules and of a real
# Alertmanager, and Docker (Debian's docker.io) with debootstrap for the image's tests
# (test/deploy/container.test.ts, and test/deploy/compose.test.ts with Docker Compose or Debian's
# docker-compose): scripts/build-image.sh builds warroom:dev and warroom-all-in-one:dev without a
# registry, on a Debian base it makes once and caches, and scripts/docker-daemon.sh starts a daemon
# when none runs (host networking only) and stops it at the end. The Debian packages and that
# daemon need root (apt-get, as root or through sudo).
#
# The run starts its own Postgres server from the embedded binaries in node_modules (a throw-away
# data folder, a free port, a generated password checked with scram-sha-256) and its own nats-server
# with JetStream on another free port (vitest's global setup: test/support/global-setup.ts), and
# stops both when it ends, on failure and on Ctrl-C. Nothing on 5432 or 4222 is used, so two runs
# on one machine do not meet. DATABASE_URL / NATS_URL point the run at external servers instead.
# Arguments go to vitest: `npm test -- test/e2e/identity.test.ts`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "need root (or sudo) to run: $*" >&2; return 1
  fi
}

need_packages=()
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need_packages+=(nats-server)
[ -x /usr/bin/chromium ] || need_packages+=(chromium)
# promtool and prometheus check the service's own alert rules (test/deploy/observability.test.ts,
# test/e2e/prometheus-scrape.test.ts); a real Alertmanager posts to it (test/e2e/alertmanager-client.test.ts).
command -v promtool >/dev/null 2>&1 || need_packages+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_packages+=(prometheus-alertmanager)
# The README's shell examples (test/docs/) call curl and jq.
command -v curl >/dev/null 2>&1 && command -v jq >/dev/null 2>&1 || need_packages+=(curl jq)
# The image's tests: a Docker daemon and client, and debootstrap for the local base image.
command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 || need_packages+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_packages+=(debootstrap)
# The server-mode backup test runs pg_dump and pg_restore against a server of the same major
# version (test/runtime/backup-pg-dump.test.ts): Debian's own Postgres.
compgen -G "/usr/lib/postgresql/*/bin/pg_dump" >/dev/null || need_packages+=(postgresql)
# The compose test (test/deploy/compose.test.ts): the docker CLI's compose plugin, or else Debian's
# docker-compose (1.29); openssl makes the .env as deploy/README.md does.
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || need_packages+=(docker-compose)
command -v openssl >/dev/null 2>&1 || need_packages+=(openssl)
if [ ${#need_packages[@]} -gt 0 ]; then
  log "installing ${need_packages[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_packages[@]}"
fi
# Debian installs nats-server in /usr/sbin, which a non-root PATH may lack.
command -v nats-server >/dev/null 2>&1 || export NATS_SERVER_BIN=/usr/sbin/nats-server

# Install when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci"
  npm ci --no-audit --no-fund
fi

# This run's own folder: the summary vitest's reporter writes, and (TMPDIR) the data folders of
# the servers the run starts, removed on any exit, so even a kill of vitest leaves no data behind.
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/wr-test-run-XXXXXX")
chmod 755 "$run_dir"
stop_docker=false
image_build_pid=
cleanup() {
  # A run stopped early stops the image build too (its docker build ends with the daemon below).
  if [ -n "$image_build_pid" ] && kill -0 "$image_build_pid" 2>/dev/null; then
    pkill -TERM -P "$image_build_pid" 2>/dev/null || true
    kill "$image_build_pid" 2>/dev/null || true
  fi
  rm -rf "$run_dir"
  if $stop_docker; then as_root scripts/docker-daemon.sh stop || true; fi
}
trap cleanup EXIT
export RUN_SUMMARY_FILE="$run_dir/summary.json"
if [ -n "${DATABASE_URL:-}" ] || [ -n "${NATS_URL:-}" ]; then
  # The URLs as given, with any password replaced: this line ends up in CI logs.
  shown_db=$(printf %s "${DATABASE_URL:-}" | sed -E 's#(://[^:/@]+:).*@#\1***@#')
  shown_nats=$(printf %s "${NATS_URL:-}" | sed -E 's#(://[^:/@]+:).*@#\1***@#')
  log "tests (external servers: ${shown_db:+Postgres at $shown_db }${shown_nats:+NATS at $shown_nats}; the others private)"
else
  log "tests (a private Postgres server and NATS on free ports, stopped at the end)"
fi
# The images the container tests run (the service image warroom:dev, and warroom-all-in-one:dev
# with the embedded Postgres), built in the background while the tests run: the container tests
# wait for the build (test/support/image-build.ts), which took about 110 s of a fresh clone's run
# when it went first. The images' sizes (or, when it failed, its whole output) are printed when the
# suite ends; the tests print the sizes and start times too. A run of other named test files needs
# neither.
if [ $# -eq 0 ] || [[ " $* " == *container* ]]; then
  log "images: warroom:dev and warroom-all-in-one:dev (scripts/build-image.sh, in the background; printed when the suite ends)"
  # A daemon that already answers needs no root; starting one does.
  daemon=$(scripts/docker-daemon.sh start 2>/dev/null || as_root scripts/docker-daemon.sh start)
  export DOCKER_HOST=${daemon%%$'\n'*}
  if [[ $daemon == *started ]]; then stop_docker=true; fi
  export WARROOM_IMAGE=warroom:dev WARROOM_ALL_IN_ONE_IMAGE=warroom-all-in-one:dev
  export WARROOM_IMAGE_BUILD_LOG="$run_dir/image-build.log" WARROOM_IMAGE_BUILD_STATUS="$run_dir/image-build.status"
  (
    set +e
    as_root env DOCKER_HOST="$DOCKER_HOST" scripts/build-image.sh "$WARROOM_IMAGE" "$WARROOM_ALL_IN_ONE_IMAGE" >"$WARROOM_IMAGE_BUILD_LOG" 2>&1
    # Written whole, then renamed: a reader never sees a half-written status.
    echo $? >"$WARROOM_IMAGE_BUILD_STATUS.tmp" && mv "$WARROOM_IMAGE_BUILD_STATUS.tmp" "$WARROOM_IMAGE_BUILD_STATUS"
  ) &
  image_build_pid=$!
fi

set +e
TMPDIR="$run_dir" npx vitest run "$@"
status=$?
if [ -n "$image_build_pid" ]; then
  # When vitest ends before a container test waited for the build (it stopped early, or its
  # arguments left the container tests out), the build may still be going: it ends before the
  # daemon is stopped.
  wait "$image_build_pid"
  # A build that worked prints its images' sizes; one that failed, its whole output.
  if [ "$(cat "$WARROOM_IMAGE_BUILD_STATUS" 2>/dev/null)" = 0 ]; then
    log "images: built (scripts/build-image.sh)"
    sed -n '/^image  /,$p' "$WARROOM_IMAGE_BUILD_LOG"
  else
    log "images: the build's output (scripts/build-image.sh)"
    cat "$WARROOM_IMAGE_BUILD_LOG"
  fi
fi
set -e
npx tsx scripts/test-closing.ts "$RUN_SUMMARY_FILE" "$status"
