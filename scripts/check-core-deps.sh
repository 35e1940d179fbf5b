#!/usr/bin/env bash
# Checks the core module's promise to users: a module that imports only pelwarden
# and its driver has no container, CLI, metrics, benchmark or tracing
# module in its build list (`go list -m all`). It builds such a module in a
# temporary directory, pointed at this checkout, and fails naming any
# forbidden module it finds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/go.mod" <<MOD
module example.com/user

go 1.26.0

require github.com/pelwarden/pelwarden v0.0.0-00010101000000-000000000000

replace github.com/pelwarden/pelwarden => $root
MOD
cat > "$dir/main.go" <<'SRC'
package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

func main() {
	rdb := redis.NewClient(&redis.Options{})
	_ = pelwarden.NewLibrary(rdb)
	_, _ = driver.New(rdb, driver.Config{})
}
SRC
cd "$dir"
GOWORK=off GOFLAGS=-mod=mod go mod tidy >/dev/null
GOWORK=off go build ./...
# Module paths only: a replace target is a directory, which may contain any word.
mods=$(GOWORK=off go list -m -f "{{.Path}}" all)
bad=$(echo "$mods" | grep -Ei 'docker|moby|testcontainers|cobra|prometheus|watermill|toxiproxy|zerolog|opentelemetry' || true)
if [ -n "$bad" ]; then
  echo "check-core-deps: a user of pelwarden and driver gets these modules:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "check-core-deps: a user of pelwarden and driver builds with $(echo "$mods" | wc -l) modules, none of them heavy"
