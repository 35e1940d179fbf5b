package testserver

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	ports, err := freePorts(16)
	require.NoError(t, err)
	require.Len(t, ports, 16)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d picked twice", p)
		seen[p] = true
		require.GreaterOrEqual(t, p, lowestPort)
		require.Less(t, p, ephemeralLow())
	}
}

func TestPortTaken(t *testing.T) {
	t.Parallel()
	// What Redis 8.0 and Valkey 8.1 print when the port is in use.
	require.True(t, portTaken("# Warning: Could not create server TCP listening socket 127.0.0.1:36409: bind: Address already in use\n# Failed listening on port 36409 (tcp), aborting."))
	require.False(t, portTaken("* Ready to accept connections tcp"))
	require.False(t, portTaken(""))
}

// A server whose port was taken between the pick and its bind (here: the
// first pick is a port this test listens on) is started again on new ports,
// and its error, had it not been, names the log line.
func TestStartLoopbackAfterItsPortWasTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := testImage(ctx, t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	picks := 0
	n, ports, err := startLoopback(ctx, loopbackSpec{
		image: image,
		ports: 1,
		build: func(ports []int) ([]string, []testcontainers.ContainerFile, error) {
			return []string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--protected-mode", "no", "--save", ""}, nil, nil
		},
		ready: serverReady,
		pick: func(n int) ([]int, error) {
			picks++
			if picks == 1 {
				return []int{takenPort}, nil
			}
			return freePorts(n)
		},
	})
	if n != nil {
		defer func() { require.NoError(t, n.close()) }()
	}
	require.NoError(t, err)
	require.Equal(t, 2, picks, "one attempt on the taken port, one on a free one")
	require.NotEqual(t, takenPort, ports[0])
	require.NoError(t, n.admin.Ping(ctx).Err())
}
