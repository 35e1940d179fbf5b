#!/usr/bin/env bash
# Runs a command with a throwaway Redis server: starts a container from
# $PELWARDEN_SERVER_IMAGE (default pelwarden/redis:8.0, built by
# scripts/images.sh) on a free loopback port, exports its URL as
# PELWARDEN_TEST_REDIS_URL, runs the command, and removes the container
# however the command ends. `make unit` runs the core module's tests (the
# driver's runnable examples) this way; without the URL they are skipped.
#
# Usage: scripts/with-server.sh COMMAND [ARG ...]
set -euo pipefail
image=${PELWARDEN_SERVER_IMAGE:-pelwarden/redis:8.0}
id=$(docker run -d --rm -p 127.0.0.1::6379 "$image" --protected-mode no --save '')
trap 'docker rm -f "$id" >/dev/null 2>&1 || true' EXIT
port=$(docker port "$id" 6379/tcp | head -n1 | sed 's/.*://')
for _ in $(seq 1 100); do
  if docker exec "$id" redis-cli ping >/dev/null 2>&1 || docker exec "$id" valkey-cli ping >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
export PELWARDEN_TEST_REDIS_URL="redis://127.0.0.1:${port}/0"
"$@"
