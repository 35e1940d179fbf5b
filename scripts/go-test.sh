#!/usr/bin/env bash
# Runs a `go test` command line as given, its output passed through as it
# comes, and when it fails repeats the failures at the end: every
# "--- FAIL" block with the test's own lines under it, and any panic. The
# container logs of the integration tests fill the tail of a long run, so
# without this a failing test's name can be hundreds of lines above the
# last screen a CI log keeps.
set -uo pipefail

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo
	echo "=== the failures of: $*"
	# A block starts at "--- FAIL" and runs on over indented lines (the
	# test's log and testify's report); a container's log line (it starts
	# with a date) or another unindented line ends it. A panic runs on to
	# its package's FAIL line (the stacks are unindented).
	awk '
		/^panic:/ { panicking = 1 }
		panicking { print; if (/^FAIL[[:space:]]/) panicking = 0; next }
		/^[[:space:]]*--- FAIL/ { keep = 1; print; next }
		keep && /^[[:space:]]/ { print; next }
		{ keep = 0 }
		/^(FAIL|ok)[[:space:]]/ { print }
	' "$log" | head -n 600
	# Last, the short form a log's final screen keeps: the failing tests
	# and testify's verdicts, without the tests' own log lines.
	echo "=== in short:"
	grep -E '^[[:space:]]*--- FAIL|^panic:|Error Trace:|^[[:space:]]+Error:|^[[:space:]]+Messages:|^[[:space:]]+[a-z_]+_test\.go:[0-9]+: ' "$log" |
		grep -v 'level=' | head -n 60
	echo "=== end of the failures (exit $rc)"
fi
exit "$rc"
