package reclaim_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/cmd/internal/bench/benchtest"
	"github.com/pelwarden/pelwarden/cmd/internal/bench/reclaim"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// TestMain removes the shared test server at the end (pelwardentest.Main).
func TestMain(m *testing.M) { pelwardentest.Main(m) }

// The reclaim benchmark runs every method on both links and verifies each
// end state (PEL empty, every entry handled or dead-lettered exactly once,
// the dead-letter stream holding exactly the poison entries). Timings are not
// asserted.
func TestReclaimbenchSmoke(t *testing.T) {
	t.Parallel()
	options, _, image := benchtest.Server(t)
	ctx := t.Context()
	rep, err := reclaim.Run(ctx, reclaim.Config{
		Options:        options,
		Entries:        500,
		ProxiedEntries: 500,
		PageSize:       100, // several pages per pass
		MinIdle:        20 * time.Millisecond,
		KeyPrefix:      "pwbench-smoke",
		ServerLabel:    image,
		Logf:           t.Logf,
	})
	require.NoError(t, err)
	require.Len(t, rep.Links, 2)
	for _, l := range rep.Links {
		require.Equal(t, 500, l.Entries)
		require.Len(t, l.Results, len(reclaim.AllMethods), "link %s", l.Link)
		for _, r := range l.Results {
			name := string(r.Method) + " on " + string(l.Link)
			require.True(t, r.Verified, "%s: %s", name, r.Problem)
			require.Empty(t, r.Problem, name)
			require.Equal(t, 25, r.Poison, name) // 1 in 20
			require.Equal(t, 5, r.Deleted, name) // 1 in 100
			if r.Method == reclaim.MethodPelwarden || r.Method == reclaim.MethodTextbook {
				require.Equal(t, 25, r.DeadLettered, name)
				require.Equal(t, 470, r.Handled, name)
			} else {
				require.Zero(t, r.DeadLettered, name)
				require.Equal(t, 495, r.Handled, name)
			}
			require.Equal(t, 1, r.Passes, name)
			require.Positive(t, r.RoundTrips, name)
		}
		if l.Link == reclaim.LinkProxied {
			// The proxy holds every chunk its delay each way (a sleep never
			// ends early); the total against AddedLatency depends on the
			// direct round trip's noise, so it is reported, not asserted.
			// On a loaded machine the proxy's own hop can cost the whole
			// AddedLatency, and calibration then sets the delay to 0.
			// Comparing it with the direct round trip would be a timed
			// assertion (both are measured; either can spike): only the
			// proxy's own sleeps, which never end early, are checked.
			require.GreaterOrEqual(t, l.RTT, 2*l.ProxyDelay, "the proxy adds its delay in both directions")
		}
	}

	var out bytes.Buffer
	require.NoError(t, reclaim.WriteTable(&out, rep))
	require.Contains(t, out.String(), "pelwarden vs textbook")
	require.NotContains(t, out.String(), "FAILED")
	t.Log("\n" + out.String())
}
