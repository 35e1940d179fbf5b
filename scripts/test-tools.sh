#!/usr/bin/env bash
# Installs what `make test` needs beyond Go and a running Docker engine, when
# it is missing: Debian's chromium (the dashboard's browser tests drive it
# headless with chromedp) and prometheus (promtool tests the alert rules; the
# exporter's integration test runs a real Prometheus). As root it installs with apt-get and says so;
# otherwise it names the package to install and fails. debootstrap, which
# the server images are built with, is installed by scripts/images.sh the
# same way.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test-tools: missing ${missing[*]}: install it (Debian: apt-get install --no-install-recommends ${missing[*]}) and run make test again" >&2
  exit 1
fi
echo "test-tools: installing ${missing[*]} with apt-get (the dashboard's browser tests, the alert rules' tests and the exporter's test need them)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for m in "${missing[@]}"; do
  echo "test-tools: installed $m: $("$m" --version 2>&1 | head -n1)" >&2
done
