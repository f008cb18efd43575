#!/usr/bin/env bash
# Builds the image as warroom:dev (or the tag given as $1) on a machine that reaches no container
# registry, from the project's own Dockerfile:
#
#   1. a minimal Debian bookworm made with debootstrap from the machine's Debian mirror (the one
#      apt uses; DEBIAN_MIRROR overrides it), kept as a tarball in the cache folder
#      (${XDG_CACHE_HOME:-~/.cache}/warroom/image-base; WARROOM_IMAGE_CACHE overrides it), since
#      debootstrap takes a minute or more;
#   2. this machine's own Node (the `node` on PATH, with its npm) added under /usr/local as in the
#      official Node images, imported as warroom-node-base:<node version>-bookworm;
#   3. `docker build --build-arg NODE_IMAGE=<that base>` of the Dockerfile users build, with host
#      networking (npm ci reaches the npm registry as the host does).
#
# Users with a registry build with `docker build .`, on node:20-bookworm-slim. What differs between
# the two bases is listed in deploy/README.md. Needs root for debootstrap (the first time), and a
# Docker daemon: scripts/docker-daemon.sh starts one when none answers. Prints the image's size.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-warroom:dev}
suite=bookworm
cache=${WARROOM_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warroom/image-base}
rootfs_tar=$cache/$suite-minbase.tar
log() { printf '== %s\n' "$*" >&2; }

DOCKER_HOST=$(scripts/docker-daemon.sh start | head -n 1)
export DOCKER_HOST
# The daemon's own builder: Debian's dockerd has no buildx plugin to go with it.
export DOCKER_BUILDKIT=0

mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  # The mirror apt uses for Debian's main archive (deb822 sources, or the one-line format).
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -n 1 || true)
  [ -n "$uri" ] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v -- '-security' | head -n 1 || true)
  [ -n "$uri" ] || { echo "no Debian mirror found in apt's sources: set DEBIAN_MIRROR" >&2; exit 1; }
  echo "$uri"
}

if [ ! -s "$rootfs_tar" ]; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "debootstrap needs root (once; the result is cached in $cache)" >&2; exit 1; }
  log "debootstrap $suite (minbase) into $cache"
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/.rootfs-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase "$suite" "$work/rootfs" "$(mirror)" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    exit 1
  }
  # As the official slim images: no package downloads, lists, documentation or manual pages.
  rm -rf "$work/rootfs"/var/cache/apt/archives/*.deb "$work/rootfs"/var/lib/apt/lists/* "$work/rootfs"/usr/share/doc/* \
    "$work/rootfs"/usr/share/man/* "$work/rootfs"/usr/share/info/* "$work/rootfs"/var/log/*.log "$work/rootfs"/var/log/apt/*
  tar --numeric-owner --xattrs -C "$work/rootfs" -cf "$rootfs_tar.part" .
  mv "$rootfs_tar.part" "$rootfs_tar"
  rm -rf "$work"
  trap - EXIT
fi

debian=warroom-debian:$suite-minbase
if ! docker image inspect "$debian" >/dev/null 2>&1; then
  log "importing $debian from $rootfs_tar"
  docker import "$rootfs_tar" "$debian" >/dev/null
fi

node_bin=$(readlink -f "$(command -v node)")
node_version=$("$node_bin" -p 'process.versions.node')
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
base=warroom-node-base:$node_version-$suite
ca_bundle=${WARROOM_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# Built every time: the daemon's layer cache makes it a no-op unless Node or the certificates changed.
{
  log "building $base (Debian $suite, Node $node_version from $node_bin)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp "$node_bin" "$work/node"
  cp -r "$npm_dir" "$work/npm"
  # The machine's trusted certificates, for npm in the build stages (a registry reached through a
  # TLS-inspecting proxy): Node's own store knows only the public authorities.
  cp "$ca_bundle" "$work/ca-certificates.crt"
  printf 'cafile=/etc/ssl/certs/ca-certificates.crt\n' >"$work/npmrc"
  # Laid out as in the official Node images: /usr/local/bin/node, npm under /usr/local/lib.
  docker build -q --network host -t "$base" -f - "$work" >/dev/null <<DOCKERFILE
FROM $debian
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY npmrc /usr/local/etc/npmrc
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && node --version && npm --version
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin NODE_VERSION=$node_version
CMD ["node"]
DOCKERFILE
  rm -rf "$work"
  trap - EXIT
}

log "docker build -t $tag (NODE_IMAGE=$base)"
docker build --network host --build-arg "NODE_IMAGE=$base" -t "$tag" . >&2
size=$(docker image inspect "$tag" --format '{{.Size}}')
echo "image $tag: $((size / 1000000)) MB ($size bytes), on $base"
