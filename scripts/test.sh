#!/usr/bin/env bash
# The one test command (`npm test`): installs and starts what the suite needs when it is missing,
# then runs it. Needs: Node (see engines), the npm packages, a Postgres server and a NATS server with
# JetStream on localhost (the "server" project; the "embedded" project and the soak run on the
# embedded Postgres from node_modules), nats-server for the private servers of the fault tests,
# Debian's Chromium for the console's browser tests, and Prometheus (with promtool) and
# Alertmanager for the tests of the alert rules and of a real Alertmanager. Debian packages
# install with apt-get (as root, or through sudo). Arguments go to vitest:
# `npm test -- test/e2e/identity.test.ts`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 0.5; done
  echo "nothing answers on 127.0.0.1:$1" >&2
  return 1
}
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "need root (or sudo) to run: $*" >&2; return 1
  fi
}

need_packages=()
command -v pg_ctlcluster >/dev/null 2>&1 || need_packages+=(postgresql)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need_packages+=(nats-server)
[ -x /usr/bin/chromium ] || need_packages+=(chromium)
# promtool and prometheus check the service's own alert rules (test/deploy/observability.test.ts,
# test/e2e/prometheus-scrape.test.ts); a real Alertmanager posts to it (test/e2e/alertmanager-client.test.ts).
command -v promtool >/dev/null 2>&1 || need_packages+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_packages+=(prometheus-alertmanager)
# The README's shell examples (test/docs/) call curl and jq.
command -v curl >/dev/null 2>&1 && command -v jq >/dev/null 2>&1 || need_packages+=(curl jq)
if [ ${#need_packages[@]} -gt 0 ]; then
  log "installing ${need_packages[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_packages[@]}"
fi

if [ -z "${DATABASE_URL:-}" ] && ! port_open 5432; then
  log "starting Postgres"
  as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start
  wait_port 5432
fi
if [ -z "${NATS_URL:-}" ] && ! port_open 4222; then
  log "starting NATS with JetStream"
  nats_bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  as_root mkdir -p /var/lib/nats-server
  as_root start-stop-daemon --start --oknodo --background --exec "$nats_bin" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222
fi

# Install when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci"
  npm ci --no-audit --no-fund
fi

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export NATS_URL="${NATS_URL:-nats://127.0.0.1:4222}"
log "tests (Postgres server at $DATABASE_URL and the embedded Postgres, NATS at $NATS_URL)"
results=$(mktemp)
set +e
npx vitest run --reporter=default --reporter=json --outputFile.json="$results" "$@"
status=$?
set -e
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
' "$results" || true
rm -f "$results"
exit $status
