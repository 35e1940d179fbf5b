#!/usr/bin/env bash
# Runs two commands at once: BACKGROUND with its output kept in a file, and
# FOREGROUND with its output passed through as it comes. Once FOREGROUND
# ends, waits for BACKGROUND and prints its output in one block, so a log
# reads as if they had run one after the other. Exits with FOREGROUND's
# status when it failed, else with BACKGROUND's.
#
# `make test` runs the Watermill module's tests (they mostly wait) beside
# the steps before the integration tests (a third to a half of the two
# cores idle).
#
# Usage: scripts/beside.sh 'BACKGROUND COMMAND' FOREGROUND [ARG ...]
set -uo pipefail
if [ "$#" -lt 2 ]; then
	echo "usage: $0 'BACKGROUND COMMAND' FOREGROUND [ARG ...]" >&2
	exit 2
fi
background=$1
shift

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash -c "$background" >"$log" 2>&1 &
pid=$!
echo "beside.sh: started in the background: $background (its output follows once it ends)"

"$@"
rc=$?

wait "$pid"
brc=$?
echo "=== the output of the background command: $background (exit $brc)"
cat "$log"
echo "=== end of the background command's output (exit $brc)"
if [ "$rc" -ne 0 ]; then
	echo "beside.sh: the foreground command failed (exit $rc): $*; its failures are above the background command's output"
	exit "$rc"
fi
exit "$brc"
