#!/usr/bin/env bash
# Builds the two images of the project's Dockerfile on a machine that reaches no container registry:
#
#   scripts/build-image.sh [TAG [ALL_IN_ONE_TAG]]
#
#   TAG (warroom:dev)                       target `service`: what Kubernetes and compose run
#   ALL_IN_ONE_TAG (warroom-all-in-one:dev) target `all-in-one`: the same plus the embedded Postgres,
#                                           for `docker run` trials; by default TAG's name with
#                                           -all-in-one and TAG's tag
#
# How, without a registry:
#   1. a minimal Debian bookworm made with debootstrap from the machine's Debian mirror (the one
#      apt uses; DEBIAN_MIRROR overrides it), kept as a tarball in the cache folder
#      (${XDG_CACHE_HOME:-~/.cache}/warroom/image-base; WARROOM_IMAGE_CACHE overrides it), since
#      debootstrap takes a minute or more;
#   2. this machine's own Node (the `node` on PATH, with its npm) added under /usr/local as in the
#      official Node images, imported as warroom-node-base:<node version>-bookworm;
#   3. `docker build --build-arg NODE_IMAGE=<that base> --target service|all-in-one` of the
#      Dockerfile users build, with host networking (npm ci and apt-get reach their registries as
#      the host does), and the OCI labels from git and package.json as build arguments: source
#      (WARROOM_IMAGE_SOURCE, else package.json's repository, else git's origin remote), revision
#      (the commit checked out), version (package.json's).
#
# Users with a registry build with `docker build .`, on node:20-bookworm-slim. What differs between
# the two bases is listed in deploy/README.md. Needs root for debootstrap (the first time), and a
# Docker daemon: scripts/docker-daemon.sh starts one when none answers. Prints a table of the
# images' sizes.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-warroom:dev}
# The same name with -all-in-one, the same tag: warroom:dev gives warroom-all-in-one:dev.
if [[ ${tag##*/} == *:* ]]; then name=${tag%:*} version_tag=${tag##*:}; else name=$tag version_tag=latest; fi
all_in_one_tag=${2:-$name-all-in-one:$version_tag}
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

# The OCI labels: where the image comes from, which commit, which release.
version=$(node -p 'require("./package.json").version')
# As root in another user's checkout (scripts/test.sh), git asks to be told the folder is safe.
revision=$(git -c safe.directory="$PWD" rev-parse HEAD 2>/dev/null || true)
[ -n "$revision" ] || log "not a git checkout: the image's revision label stays empty"
source_url=${WARROOM_IMAGE_SOURCE:-$(node -p 'const r = require("./package.json").repository; (typeof r === "string" ? r : r?.url) ?? ""')}
if [ -z "$source_url" ]; then
  source_url=$(git -c safe.directory="$PWD" remote get-url origin 2>/dev/null || true)
  # A clone over ssh names its host as user@host:path; the label is a web address, without credentials.
  source_url=$(printf '%s' "$source_url" | sed -E 's#^git@([^:]+):#https://\1/#; s#^(https?://)[^@/]+@#\1#; s#\.git$##')
  # A clone of a local folder has no web address to give.
  case $source_url in http://* | https://*) ;; *) source_url= ;; esac
fi
[ -n "$source_url" ] || log "no source address (no repository in package.json, no origin remote; WARROOM_IMAGE_SOURCE sets one): the image's source label stays empty"

build() {
  local target=$1 image=$2
  log "docker build --target $target -t $image (NODE_IMAGE=$base)"
  docker build --network host --build-arg "NODE_IMAGE=$base" --build-arg "SOURCE=$source_url" --build-arg "REVISION=$revision" \
    --build-arg "VERSION=$version" --target "$target" -t "$image" . >&2
}
# The second build takes every layer but its last few from the first's cache.
build all-in-one "$all_in_one_tag"
build service "$tag"

printf '%-32s %-10s %8s %12s  %s\n' image target MB bytes base
for row in "$tag service" "$all_in_one_tag all-in-one"; do
  read -r image target <<<"$row"
  size=$(docker image inspect "$image" --format '{{.Size}}')
  printf '%-32s %-10s %8s %12s  %s\n' "$image" "$target" "$(((size + 500000) / 1000000))" "$size" "$base"
done
