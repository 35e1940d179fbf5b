#!/usr/bin/env bash
# The integration matrix and the Watermill adapter's tests (`make
# integration`), in three steps so that the two cores are used without
# starving a measure:
#
#  1. the integration tests that measure throughput over time (TestAlone…,
#     see eachAlone in integration_test/main_test.go), on their own;
#  2. the rest of the integration tests, and beside them the Watermill
#     module's tests (they mostly wait on their servers: about 30% of the
#     two cores against the integration tests' 70%). The Watermill run's
#     output goes to a file, printed once the integration tests are done,
#     so that neither log is interleaved with the other;
#  3. the exit status: non-zero when either failed.
#
# The Watermill module runs its own tests on the matrix, watermill's
# stress test (the universal suite ten times at once) on Redis 8.0, and the
# universal suite once on the two other servers where it tests a path of
# its own (pelwardenwatermill/suite_test.go's suiteLabels).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gotest=("$root/scripts/go-test.sh" "${GO:-go}" test -race -count=1 -parallel 8)

echo "=== integration: the tests that run alone"
(cd "$root/integration_test" && "${gotest[@]}" -timeout 10m -run '^TestAlone' ./...) || exit 1

wmlog=$(mktemp)
trap 'rm -f "$wmlog"' EXIT
echo "=== integration: the rest, beside the Watermill module's tests (their output follows)"
(cd "$root/pelwardenwatermill" && PELWARDEN_WATERMILL_STRESS=redis-8.0 \
	"${gotest[@]}" -timeout 30m ./...) >"$wmlog" 2>&1 &
wm=$!
(cd "$root/integration_test" && "${gotest[@]}" -timeout 20m -skip '^TestAlone' ./...)
it=$?
wait "$wm"
wmrc=$?
echo "=== the Watermill module's tests (run beside the integration tests; exit $wmrc)"
cat "$wmlog"
echo "=== integration tests: exit $it; the Watermill module's tests: exit $wmrc"
[ "$it" -eq 0 ] && [ "$wmrc" -eq 0 ]
