#!/usr/bin/env bash
# The flake check: runs the whole `npm test` RUNS times in a row (3 unless given) while
# `npm run bench` loads every core, and prints each run's closing line and time. Every run must
# be green; a failure is a test that depends on the machine's speed. Arguments after the count go
# to npm test. `bash scripts/loaded-test-runs.sh 3`.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/wr-loaded-runs-XXXXXX")

# The load: the benchmarks, over and over, each on servers of its own, in a process group of
# their own so the whole group stops at the end.
setsid bash -c 'while :; do npm run -s bench >/dev/null 2>&1; done' &
load=$!
trap 'kill -- -"$load" 2>/dev/null; wait "$load" 2>/dev/null' EXIT

failed=0
for i in $(seq 1 "$runs"); do
  started=$(date +%s)
  npm test -s -- "$@" >"$log_dir/run-$i.log" 2>&1
  status=$?
  [ "$status" -eq 0 ] || failed=1
  printf 'run %s: exit %s in %ss: %s\n' "$i" "$status" "$(($(date +%s) - started))" "$(grep -v '^\s*$' "$log_dir/run-$i.log" | tail -n 1)"
done
echo "logs: $log_dir (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
exit $failed
