package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The consume suite left the binary (it needs watermill-redisstream): asking
// for it, or giving one of its old flags, is a usage error that says where
// it went, before any server is started or contacted.
func TestBenchConsumeSuiteMoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--suite", "consume"}, "--suite consume: the consume suite"},
		{[]string{"--suite", "all", "--entries", "300"}, "--suite all: the consume suite"},
		{[]string{"--suite", "magic"}, `--suite must be reclaim, got "magic"`},
		{[]string{"--consume-parts", "main,reclaim"}, "--consume-parts: the consume suite"},
		{[]string{"--consume-parts", "reclaim", "--consume-rounds", "1"}, "whose flag is --"},
		{[]string{"--consume-watermill=false"}, "--consume-watermill: the consume suite"},
		{[]string{"--consume-watermill"}, "whose flag is --watermill"},
		{[]string{"--consume-reclaim-entries", "1000000"}, "whose flag is --reclaim-entries"},
	} {
		out, errOut, code := run1(append([]string{"--redis", "redis://127.0.0.1:1", "bench"}, tc.args...)...)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, tc.args)
		require.Contains(t, errOut, tc.says, tc.args)
		require.Contains(t, errOut, "go run ./benchmarks/cmd/consume", tc.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}

	// The help names the reclaim suite only; the old flags stay hidden.
	out, _, code := run1("bench", "--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "go run ./benchmarks/cmd/consume")
	require.NotContains(t, out, "--consume-")
}
