package pelwarden

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeadLetterStreamForIsInTheStreamsSlot(t *testing.T) {
	t.Parallel()
	named := map[string]string{
		"{orders}":    "{orders}:dead",
		"{orders}:p3": "{orders}:p3:dead",
		"orders":      "{orders}:dead",
		"wm-orders":   "{wm-orders}:dead",
		"x{y":         "{x{y}:dead",
	}
	for stream, want := range named {
		require.Equal(t, want, DeadLetterStreamFor(stream), stream)
	}
	for _, stream := range []string{"orders", "{orders}", "a}b", "{}a}", "}", "{}}x{", "a{}b}c", "日本}語", "{orders}:p3", "x{y", "{}orders"} {
		d := DeadLetterStreamFor(stream)
		require.Equal(t, Slot(stream), Slot(d), "%q -> %q", stream, d)
		require.NotEqual(t, stream, d)
		require.Equal(t, d, DeadLetterStreamFor(stream), "deterministic")
		require.NoError(t, CheckName(d))
	}
}

func TestLegacyDeadLetterStreamFor(t *testing.T) {
	t.Parallel()
	name, differs := LegacyDeadLetterStreamFor("orders")
	require.Equal(t, "orders:dead", name)
	require.True(t, differs)
	name, differs = LegacyDeadLetterStreamFor("{orders}")
	require.Equal(t, "{orders}:dead", name)
	require.False(t, differs)
}
