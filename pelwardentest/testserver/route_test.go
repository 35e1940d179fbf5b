package testserver

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A server is reached at its container's own address where this process
// reaches it (a local engine on Linux: the machine CI runs on), and at the
// port Docker publishes with EnvPublishedPorts; either way it answers, and
// again after a restart. Not parallel: it sets EnvPublishedPorts.
func TestAddrRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := testImage(ctx, t)
	// A local engine on Linux: the daemon's socket, no DOCKER_HOST elsewhere.
	local := runtime.GOOS == "linux" && (os.Getenv("DOCKER_HOST") == "" || os.Getenv("DOCKER_HOST") == "unix:///var/run/docker.sock")

	for _, published := range []bool{false, true} {
		if published {
			t.Setenv(EnvPublishedPorts, "1")
		} else {
			t.Setenv(EnvPublishedPorts, "")
		}
		srv, err := Start(ctx, image, Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close() })
		ip, err := srv.container.ContainerIP(ctx)
		require.NoError(t, err)

		answers := func() string {
			t.Helper()
			addr, err := srv.Addr(ctx)
			require.NoError(t, err)
			rdb := srv.Client()
			defer func() { _ = rdb.Close() }()
			require.NoError(t, rdb.Ping(ctx).Err(), "PING at %s", addr)
			host, _, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			return host
		}
		host := answers()
		switch {
		case published:
			require.NotEqual(t, ip, host, "%s set: the published port", EnvPublishedPorts)
		case local && !unreachable.Load():
			require.Equal(t, ip, host, "a local engine on Linux: the container's own address")
		case local:
			t.Errorf("a local engine on Linux, but the container's address %s did not answer", ip)
		}
		require.NoError(t, srv.Restart(ctx))
		after := answers()
		if !published && local {
			ip, err = srv.container.ContainerIP(ctx)
			require.NoError(t, err)
			require.Equal(t, ip, after, "after the restart: the container's address now")
		}
	}
}

// testImage returns the image a test of this package starts
// (PELWARDEN_TEST_IMAGE, else Redis 8.0), or skips the test when no Docker
// engine answers, unless EnvRequireDocker asks to fail.
func testImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	if err := dockerHealth(ctx); err != nil && os.Getenv(EnvRequireDocker) == "" {
		t.Skipf("no Docker engine answers: %v", err)
	}
	if image := os.Getenv("PELWARDEN_TEST_IMAGE"); image != "" {
		return image
	}
	return "pelwarden/redis:8.0"
}
