package dashboard

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/ops"
)

// Discovery finds streams only (SCAN TYPE stream), bounded, and looks a
// name without glob characters up directly.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := client(t)
	seed(t, rdb, "disc-a", 1, 1)
	seed(t, rdb, "disc-b", 0, 0)
	require.NoError(t, rdb.HSet(ctx, "{disc-c}", "not", "a stream").Err())

	d, err := ops.DiscoverStreams(ctx, rdb, ops.DiscoverOptions{Match: "{disc-*"})
	require.NoError(t, err)
	require.True(t, d.Complete)
	require.Equal(t, []string{"{disc-a}", "{disc-a}:dead", "{disc-b}"}, d.Streams)

	d, err = ops.DiscoverStreams(ctx, rdb, ops.DiscoverOptions{Match: "{disc-b}"})
	require.NoError(t, err)
	require.Equal(t, []string{"{disc-b}"}, d.Streams)
	d, err = ops.DiscoverStreams(ctx, rdb, ops.DiscoverOptions{Match: "{disc-c}"})
	require.NoError(t, err)
	require.Empty(t, d.Streams)

	// A bound smaller than the keyspace: the discovery says it stopped.
	d, err = ops.DiscoverStreams(ctx, rdb, ops.DiscoverOptions{Match: "*", MaxKeys: 1, Count: 1})
	require.NoError(t, err)
	require.False(t, d.Complete)
}
