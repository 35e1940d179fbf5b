package testserver

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The Docker client's idle HTTP connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// An engine that does not answer skips, unless EnvRequireDocker asks to
// fail; an engine that answers runs the tests. Not parallel: it swaps
// dockerHealth.
func TestSkipWithoutDocker(t *testing.T) {
	orig := dockerHealth
	t.Cleanup(func() { dockerHealth = orig })
	ctx := context.Background()
	dockerHealth = func(context.Context) error { return errors.New("Cannot connect to the Docker daemon") }
	t.Setenv(EnvRequireDocker, "")
	require.True(t, SkipWithoutDocker(ctx, t.Name()))
	t.Setenv(EnvRequireDocker, "1")
	require.False(t, SkipWithoutDocker(ctx, t.Name()))
	dockerHealth = func(context.Context) error { return nil }
	t.Setenv(EnvRequireDocker, "")
	require.False(t, SkipWithoutDocker(ctx, t.Name()))
}
