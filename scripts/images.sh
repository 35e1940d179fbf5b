#!/usr/bin/env bash
# Builds the server images the integration tests and the demo use, from
# Debian's packages, because no container registry is reachable on the
# machines pelwarden is developed and tested on. An image that already exists
# is skipped, so the script is cheap to run again.
#
# Usage: scripts/images.sh [NAME ...]   (default: every image below)
#
# Images (name -> Debian suite, package, server binary):
#   pelwarden/redis:6.0   bullseye            redis-server   (Redis 6.0: only to
#                                                            test the "server too
#                                                            old" error)
#   pelwarden/redis:7.0   bookworm            redis-server   (Redis 7.0)
#   pelwarden/redis:8.0   trixie              redis-server   (Redis 8.0)
#   pelwarden/valkey:8.1  trixie              valkey-server  (Valkey 8.1)
#   pelwarden/valkey:9.1  sid                 valkey-server  (Valkey 9.1)
#   pelwarden/redis:8.6   sid + experimental  redis-server   (Redis 8.6: the
#                                                            newest server; the
#                                                            archive's metadata
#                                                            is past its
#                                                            validity date on
#                                                            these machines, so
#                                                            apt is told not to
#                                                            check it)
#
# Each image's entrypoint is the server binary, so a container's command is
# only the server's flags (the official redis and valkey images accept the
# same flags through their entrypoint scripts).
set -euo pipefail

declare -A SUITE=(
  [pelwarden/redis:6.0]=bullseye
  [pelwarden/redis:7.0]=bookworm
  [pelwarden/redis:8.0]=trixie
  [pelwarden/valkey:8.1]=trixie
  [pelwarden/valkey:9.1]=sid
  [pelwarden/redis:8.6]=sid
)
declare -A PACKAGE=(
  [pelwarden/redis:6.0]=redis-server
  [pelwarden/redis:7.0]=redis-server
  [pelwarden/redis:8.0]=redis-server
  [pelwarden/valkey:8.1]=valkey-server
  [pelwarden/valkey:9.1]=valkey-server
  [pelwarden/redis:8.6]=redis-server
)
# Images whose package comes from Debian's experimental suite, added on top
# of the base suite after debootstrap.
declare -A EXPERIMENTAL=(
  [pelwarden/redis:8.6]=1
)

if [ "$#" -eq 0 ]; then
  set -- pelwarden/redis:6.0 pelwarden/redis:7.0 pelwarden/redis:8.0 pelwarden/redis:8.6 pelwarden/valkey:8.1 pelwarden/valkey:9.1
fi

need_debootstrap() {
  if command -v debootstrap >/dev/null 2>&1; then return; fi
  echo "images: installing debootstrap" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq debootstrap >&2
}

# install_experimental DIR SUITE PACKAGE: adds Debian's experimental suite to
# the root file system in DIR (same mirror debootstrap used: its sources line
# with the suite renamed) and installs PACKAGE from it. The mirror's Release
# files are past their validity date on these machines, hence
# Check-Valid-Until=false. No service is started inside the chroot.
install_experimental() {
  local dir=$1 suite=$2 pkg=$3 src
  src=$(grep -h "^deb " "$dir/etc/apt/sources.list" 2>/dev/null | head -n 1)
  if [ -z "$src" ]; then
    echo "images: no deb line in $dir/etc/apt/sources.list" >&2
    return 1
  fi
  echo "${src/ $suite / experimental }" >"$dir/etc/apt/sources.list.d/experimental.list"
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
  chmod +x "$dir/usr/sbin/policy-rc.d"
  local apt=(chroot "$dir" env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false)
  "${apt[@]}" update
  "${apt[@]}" install -y --no-install-recommends -t experimental "$pkg"
  rm -f "$dir/usr/sbin/policy-rc.d"
  rm -rf "$dir/var/lib/apt/lists/"*
}

build() {
  local name=$1 suite=${SUITE[$1]:-} pkg=${PACKAGE[$1]:-}
  if [ -z "$suite" ]; then
    echo "images: unknown image $name (known: ${!SUITE[*]})" >&2
    return 2
  fi
  if docker image inspect "$name" >/dev/null 2>&1; then
    echo "images: $name exists, skipped" >&2
    return 0
  fi
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/pelwarden-image.XXXXXX")
  echo "images: building $name from Debian $suite ($pkg)" >&2
  local include=--include="$pkg"
  if [ -n "${EXPERIMENTAL[$name]:-}" ]; then include=; fi
  # shellcheck disable=SC2086 # $include is one word or none
  debootstrap --variant=minbase $include "$suite" "$dir" >"$dir.log" 2>&1 || {
    echo "images: debootstrap $suite failed, log follows" >&2
    tail -n 30 "$dir.log" >&2
    rm -rf "$dir" "$dir.log"
    return 1
  }
  if [ -n "${EXPERIMENTAL[$name]:-}" ]; then
    install_experimental "$dir" "$suite" "$pkg" >>"$dir.log" 2>&1 || {
      echo "images: installing $pkg from experimental failed, log follows" >&2
      tail -n 30 "$dir.log" >&2
      rm -rf "$dir" "$dir.log"
      return 1
    }
  fi
  # Keep the image small: package caches and docs are not needed to run.
  rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/usr/share/doc" "$dir/usr/share/man"
  local bin=/usr/bin/${pkg}
  tar -C "$dir" -c . | docker import \
    -c "ENTRYPOINT [\"$bin\"]" \
    - "$name" >/dev/null
  rm -rf "$dir" "$dir.log"
  echo "images: built $name: $(docker run --rm "$name" --version)" >&2
}

missing=0
for name in "$@"; do
  docker image inspect "$name" >/dev/null 2>&1 || missing=1
done
# Installed once, before the parallel builds (apt takes a lock).
if [ "$missing" = 1 ]; then need_debootstrap; fi

pids=()
for name in "$@"; do
  build "$name" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=1
done
exit $rc
