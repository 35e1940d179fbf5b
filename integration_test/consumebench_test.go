package integration_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/consumebench"
)

// The consume benchmark runs every method of every part with small sizes and
// verifies each end state (every entry acked, the PEL empty, or in the PEL
// part left exactly as built). Timings are not asserted. It runs on the
// first server of the matrix only.
func TestConsumebenchSmoke(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := ctxFor(t)
	rep, err := consumebench.Run(ctx, consumebench.Config{
		Options: s.srv.Options(),
		Entries: 2000,
		Rounds:  2,
		Drivers: []consumebench.DriverVariant{{Concurrency: 16}, {Concurrency: 16, Prefetch: 484},
			{Concurrency: 512, AckMode: driver.AckPlain}},
		ReclaimEntries: 2000,
		AckEntries:     2000,
		ClaimCount:     100, // several pages per pass
		PELSizes:       []int{0, 3000},
		PELNewEntries:  1000,
		PELMinRun:      300 * time.Millisecond,
		KeyPrefix:      "pwconsume-smoke",
		ServerLabel:    s.srv.Image,
		Logf:           t.Logf,
	})
	require.NoError(t, err)
	require.Len(t, rep.Main, 5) // three driver variants, watermill, raw
	require.Len(t, rep.Reclaim, 2)
	require.Len(t, rep.PEL, 2)
	require.Len(t, rep.Ack, 3) // XACK, fenced in order, fenced shuffled
	for _, part := range [][]consumebench.Result{rep.Main, rep.Reclaim, rep.PEL, rep.Ack} {
		for _, r := range part {
			require.True(t, r.Verified, "%s: %s", r.Method, r.Problem)
			require.Empty(t, r.Problem, r.Method)
			require.Equal(t, int64(r.Entries), r.Acked, "%s: every entry acked", r.Method)
			require.Positive(t, r.RoundTrips, r.Method)
		}
	}
	for _, r := range rep.Main {
		require.Equal(t, 2000, r.Entries, r.Method)
		require.Equal(t, int64(2000), r.Read, r.Method)
		rounds := 2
		if r.Method == "watermill" {
			rounds = 1 // once, whatever Rounds says
		}
		require.Len(t, r.Rates, rounds, "%s: one rate per round", r.Method)
		require.Positive(t, r.ClientCPU, "%s: client CPU measured", r.Method)
	}
	for _, r := range rep.Reclaim {
		require.Equal(t, int64(2000), r.Claimed, "%s: every entry reclaimed", r.Method)
		require.NotEmpty(t, r.Heap, "%s: heap sampled", r.Method)
		require.Positive(t, r.LastHeapInuse, r.Method)
		require.Equal(t, int64(2000), r.Heap[len(r.Heap)-1].Done, "%s: the last sample saw every ack", r.Method)
	}
	for _, r := range rep.PEL {
		require.Zero(t, r.Claimed, "%s: nothing was idle", r.Method)
		require.Positive(t, r.IdleChecks, "%s: reclaim passes checked for idle entries", r.Method)
		// Nothing idle: only the start makes one claim call (one page, the
		// ACL check); the passes after it walk nothing.
		require.EqualValues(t, 1, r.Claims, "%s: later passes, finding nothing idle, walked nothing", r.Method)
	}

	var out bytes.Buffer
	require.NoError(t, consumebench.WriteTable(&out, rep))
	require.Contains(t, out.String(), "vs watermill")
	require.Contains(t, out.String(), "heap over time, driver reclaim")
	require.Contains(t, out.String(), "fenced ack, ids shuffled")
	require.NotContains(t, out.String(), "FAILED")
	t.Log("\n" + out.String())
}
