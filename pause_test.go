package pelwarden

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPauseKeyFor(t *testing.T) {
	t.Parallel()
	require.Equal(t, "{orders}:paused", PauseKeyFor("{orders}"))
	require.Equal(t, "{orders}:paused", PauseKeyFor("orders"))
	require.Equal(t, Slot("a}b"), Slot(PauseKeyFor("a}b")))
}

func TestDecodePause(t *testing.T) {
	t.Parallel()
	p, err := DecodePause("k", "g", `{"by":"ops","reason":"gateway down","at_ms":1733400000123}`)
	require.NoError(t, err)
	require.Equal(t, &Pause{By: "ops", Reason: "gateway down", At: time.UnixMilli(1733400000123)}, p)
	for _, v := range []string{"", "yes", `{"by":"ops"}`, `{"at_ms":-1}`, `[1]`} {
		_, err := DecodePause("k", "g", v)
		require.ErrorContains(t, err, `pause hash k: field "g"`, v)
	}
}
