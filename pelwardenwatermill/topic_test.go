package pelwardenwatermill_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// A topic's dead-letter stream is in its stream's cluster slot.
func TestDeadLetterStream(t *testing.T) {
	t.Parallel()
	for stream, want := range map[string]string{
		"orders":          "{orders}:dead",
		"{orders}":        "{orders}:dead",
		"{orders}.eu":     "{orders}.eu:dead",
		"a{b":             "{a{b}:dead",
		"events/2026/12":  "{events/2026/12}:dead",
		"watermill:topic": "{watermill:topic}:dead",
	} {
		got, err := pelwardenwatermill.DeadLetterStream(stream)
		require.NoError(t, err, stream)
		require.Equal(t, want, got, stream)
		require.Equal(t, pelwarden.Slot(stream), pelwarden.Slot(got), stream)
	}
	// No hash tag and a '}': the name gets a tag of its own chosen to land
	// in the stream's slot (pelwarden.DeadLetterStreamFor), where the
	// adapter's former rule failed.
	for _, stream := range []string{"{}", "topic-{}-x", "x}"} {
		got, err := pelwardenwatermill.DeadLetterStream(stream)
		require.NoError(t, err, stream)
		require.Equal(t, pelwarden.DeadLetterStreamFor(stream), got, stream)
		require.Equal(t, pelwarden.Slot(stream), pelwarden.Slot(got), stream)
	}
}
