package driver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The driver's readings of pelwarden.Classify (which has the full table).
func TestErrorReadings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err                                  error
		stale, permanent, fatal, outOfMemory bool
	}{
		{err: nil},
		{err: context.DeadlineExceeded, stale: true},
		{err: context.Canceled},
		{err: replyErr("CLUSTERDOWN The cluster is down"), stale: true},
		{err: errNoGroup, permanent: true},
		{err: Config{}.fieldError("Stream", "required"), permanent: true},
		{err: replyErr("NOPERM no permissions"), permanent: true, fatal: true},
		{err: &pelwarden.Error{Code: "OOM", Kind: pelwarden.ErrServer}, outOfMemory: true},
		{err: &pelwarden.Error{Kind: pelwarden.ErrLibraryMissing, Err: replyErr("ERR Function not found")}},
	} {
		require.Equal(t, c.stale, staleTopology(c.err), "stale %v", c.err)
		require.Equal(t, c.permanent, permanent(c.err), "permanent %v", c.err)
		require.Equal(t, c.fatal, fatal(c.err), "fatal %v", c.err)
		require.Equal(t, c.outOfMemory, outOfMemory(c.err), "out of memory %v", c.err)
	}
}
