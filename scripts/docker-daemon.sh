#!/usr/bin/env bash
# A Docker daemon for building and testing the image on a machine that has none running.
#
#   scripts/docker-daemon.sh start   prints the DOCKER_HOST to use (an existing daemon's, or one it
#                                    starts, then followed by a line "started")
#   scripts/docker-daemon.sh stop    stops the daemon `start` started, and removes what it left
#
# A daemon that already answers (DOCKER_HOST, or the default socket) is used as it is and never
# stopped here. Otherwise this starts Debian's dockerd (package docker.io) as root with its own
# socket, run and data folders, so it meets no other daemon on the machine, and with host
# networking only: `--iptables=false --bridge=none` adds no docker0 bridge and leaves the host's
# iptables (the FORWARD policy, NAT rules) as they were. Builds and containers use --network host.
#
# Starting it twice in a row is reliable because the start removes what a daemon that was killed
# leaves behind: its pid files (dockerd's, and that of the containerd it manages, which it would
# otherwise take for a running containerd and try to reach), and their sockets. The stop waits for
# both to end and unmounts what dockerd mounted: its data folder (bind-mounted onto itself) and the
# handle of the host's network namespace under its run folder.
set -euo pipefail

name=warroom-docker
sock=/run/$name.sock
pidfile=/run/$name.pid
exec_root=/run/$name
data_root=${WARROOM_DOCKER_DATA_ROOT:-/var/lib/$name}
log=/run/$name.log

answers() { docker -H "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  if [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; then echo "$DOCKER_HOST"; return; fi
  if answers unix:///var/run/docker.sock; then echo unix:///var/run/docker.sock; return; fi
  if answers "unix://$sock"; then echo "unix://$sock"; return; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "no Docker daemon answers, and starting one needs root: run this as root, or start Docker and set DOCKER_HOST" >&2
    exit 1
  fi
  command -v dockerd >/dev/null || { echo "dockerd is missing: apt-get install docker.io" >&2; exit 1; }
  # What a killed daemon left: a pid file whose process is gone (or is another program by now).
  if alive "$pidfile" && grep -q dockerd "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null; then
    echo "dockerd $(cat "$pidfile") is running but does not answer on $sock; stop it first: $0 stop" >&2
    exit 1
  fi
  rm -f "$pidfile" "$sock" "$exec_root/containerd/containerd.pid" "$exec_root/containerd/containerd.sock" "$exec_root/containerd/containerd.sock.ttrpc" \
    "$exec_root/containerd/containerd-debug.sock"
  mkdir -p "$exec_root" "$data_root"
  setsid dockerd --host "unix://$sock" --pidfile "$pidfile" --exec-root "$exec_root" --data-root "$data_root" \
    --iptables=false --ip6tables=false --bridge=none --ip-masq=false </dev/null >"$log" 2>&1 &
  for _ in $(seq 1 120); do
    if answers "unix://$sock"; then printf 'unix://%s\nstarted\n' "$sock"; return; fi
    if ! kill -0 $! 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "dockerd did not answer on $sock; its log ($log):" >&2
  tail -n 30 "$log" >&2
  exit 1
}

stop() {
  if ! alive "$pidfile"; then
    rm -f "$pidfile" "$sock"
  else
    local pid
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    # dockerd stops its containers (10 s each at most) and its containerd before it exits.
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd $pid did not stop in 60 s; killing it" >&2
      kill -KILL "$pid"
    fi
  fi
  local containerd_pid="$exec_root/containerd/containerd.pid"
  if alive "$containerd_pid"; then kill -TERM "$(cat "$containerd_pid")"; sleep 1; fi
  rm -f "$pidfile" "$sock" "$containerd_pid"
  # The network namespace handle dockerd mounts under its run folder, and its data folder.
  findmnt -rn -o TARGET | { grep "^$exec_root/" || true; } | sort -r | while read -r target; do umount "$target" || true; done
  # Once per start since the last clean stop: a daemon killed before it could unmount leaves its mounts stacked.
  while mountpoint -q "$data_root"; do umount "$data_root" || break; done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
