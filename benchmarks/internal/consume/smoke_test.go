package consume_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/benchmarks/internal/consume"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// TestMain removes the shared test server at the end (pelwardentest.Main).
func TestMain(m *testing.M) { pelwardentest.Main(m) }

// server is the shared test server (PELWARDEN_TEST_IMAGE, set by the
// Makefile): its client's options, the client and the image. Without Docker
// the test is skipped, unless PELWARDEN_REQUIRE_DOCKER is set (make test
// sets it).
func server(t *testing.T) (*redis.Options, *redis.Client, string) {
	t.Helper()
	var opts []pelwardentest.Option
	if os.Getenv(testserver.EnvRequireDocker) == "" {
		opts = append(opts, pelwardentest.SkipIfUnavailable())
	}
	s := pelwardentest.Start(t, opts...)
	rdb, ok := s.Client().(*redis.Client)
	if !ok {
		t.Fatalf("want a standalone server, got %T", s.Client())
	}
	return rdb.Options(), rdb, s.Image()
}

// The consume benchmark runs every method of every part with tiny sizes and
// verifies each end state (every entry acked or dead-lettered, the PEL
// empty, or in the PEL part left exactly as built) and that the report is
// complete. Timings are not asserted.
func TestConsumebenchSmoke(t *testing.T) {
	t.Parallel()
	options, rdb, image := server(t)
	// Every part runs (watermill alone takes seconds per thousand entries
	// under the full suite's load): minutes, so a bound of its own.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	slowlogBefore, err := rdb.ConfigGet(ctx, "slowlog-*").Result()
	require.NoError(t, err)
	rep, err := consume.Run(ctx, consume.Config{
		Options:         options,
		Entries:         500,
		Rounds:          2,
		Drivers:         consume.DefaultDrivers,
		ReclaimEntries:  2000,
		AckEntries:      2000,
		ClaimCount:      100, // several pages per pass
		PELSizes:        []int{0, 3000},
		PELNewEntries:   1000,
		PELMinRun:       300 * time.Millisecond,
		SlowEntries:     64,
		SlowHandlerTime: 5 * time.Millisecond,
		LargeEntries:    10,
		LargeEntryBytes: 64 << 10,
		KeyPrefix:       "pwconsume-smoke",
		ServerLabel:     image,
		Logf:            t.Logf,
	})
	require.NoError(t, err)
	require.Len(t, rep.Main, len(consume.DefaultDrivers)+2) // the drivers, watermill, raw
	require.Len(t, rep.Reclaim, 5)                          // Claim+Ack loop, driver defaults, driver short MinIdle, control, textbook
	require.Len(t, rep.PEL, 2)
	require.Len(t, rep.Ack, 3)   // XACK, fenced in order, fenced shuffled
	require.Len(t, rep.Slow, 2)  // one per round
	require.Len(t, rep.Large, 1) // one run
	for _, part := range [][]consume.Result{rep.Main, rep.Reclaim, rep.PEL, rep.Ack, rep.Slow, rep.Large} {
		for _, r := range part {
			require.True(t, r.Verified, "%s: %s", r.Method, r.Problem)
			require.Empty(t, r.Problem, r.Method)
			require.Equal(t, int64(r.Entries), r.Acked+r.DeadLettered, "%s: every entry acked or dead-lettered", r.Method)
			require.Positive(t, r.RoundTrips, r.Method)
			require.Positive(t, r.Wall, r.Method)
		}
	}
	for _, r := range rep.Main {
		require.Equal(t, 500, r.Entries, r.Method)
		require.Equal(t, int64(500), r.Read, r.Method)
		rounds := 2
		if r.Method == "watermill" {
			rounds = 1 // once, whatever Rounds says
		}
		require.Len(t, r.Rates, rounds, "%s: one rate per round", r.Method)
		require.Positive(t, r.ClientCPU, "%s: client CPU measured", r.Method)
	}
	require.Equal(t, "driver defaults", rep.Main[0].Method, "the headline row is the driver with its defaults")
	for _, r := range rep.Reclaim {
		require.Equal(t, 100, r.Poison, "%s: 1 in 20 poison", r.Method)
		require.Equal(t, int64(100), r.DeadLettered, "%s: every poison entry dead-lettered", r.Method)
		require.Equal(t, int64(1900), r.Acked, "%s: every other entry acked", r.Method)
		require.GreaterOrEqual(t, r.Claimed, int64(1900), "%s: every other entry reclaimed", r.Method)
		require.Len(t, r.Rates, 2, "%s: one rate per round", r.Method)
		require.NotEmpty(t, r.Heap, "%s: heap sampled", r.Method)
		require.Positive(t, r.LastHeapInuse, r.Method)
		require.Equal(t, int64(2000), r.Heap[len(r.Heap)-1].Done, "%s: the last sample saw every entry settled", r.Method)
	}
	driverReclaim := rep.Reclaim[1]
	require.Contains(t, driverReclaim.Method, "driver defaults")
	require.Positive(t, driverReclaim.LogRecords, "the driver's log records are counted (at least the dead-lettering)")
	for _, r := range rep.PEL {
		require.Zero(t, r.Claimed, "%s: nothing was idle", r.Method)
		require.Positive(t, r.IdleChecks, "%s: reclaim passes checked for idle entries", r.Method)
		// Nothing idle: only the start makes one claim call (one page, the
		// ACL check); the passes after it walk nothing.
		require.EqualValues(t, 1, r.Claims, "%s: later passes, finding nothing idle, walked nothing", r.Method)
	}
	for _, r := range rep.Slow {
		require.Len(t, r.Consumers, 2, r.Method)
		require.Positive(t, r.Ideal, r.Method)
		var handled int64
		for _, c := range r.Consumers {
			handled += c.Handled
			require.Positive(t, c.Samples, "%s: %s sampled", r.Method, c.Name)
		}
		require.Equal(t, int64(64), handled, "%s: the consumers' shares add up", r.Method)
	}
	large := rep.Large[0]
	require.Equal(t, int64(5), large.Read, "the new half read")
	require.GreaterOrEqual(t, large.Claimed, int64(5), "the dead consumer's half reclaimed")
	require.NotNil(t, large.SlowLog)
	require.Positive(t, large.SlowLog.Commands, "the driver's commands were in the slow log")
	require.NotEmpty(t, large.SlowLog.Slowest)
	slowlogAfter, err := rdb.ConfigGet(ctx, "slowlog-*").Result()
	require.NoError(t, err)
	require.Equal(t, slowlogBefore, slowlogAfter, "the slow log settings are restored")

	var out bytes.Buffer
	require.NoError(t, consume.WriteTable(&out, rep))
	for _, want := range []string{
		"== main path", "vs watermill", "== reclaim path", "vs textbook", "heap over time, driver defaults",
		"== memory as the PEL grows", "fenced ack, ids shuffled", "== slow handlers", "== large entries", "slowest commands",
		"targets (the driver with its defaults):", "targets (client memory stays flat):",
		"of the raw loop", "of the Claim+Ack loop", "log records at the default level", "each consumer handles",
		"holds more than", "drains within", "no command takes",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "FAILED")
	t.Log("\n" + out.String())
}
