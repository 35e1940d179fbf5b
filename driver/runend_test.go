package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pastDeadline is a context whose deadline has passed but whose timer has
// not marked it done yet: what a call sees when the socket deadline a
// client derived from it fires first.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (pastDeadline) Err() error                  { return nil }

func TestEndedByRun(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	running := context.Background()
	future, stop := context.WithTimeout(context.Background(), time.Hour)
	defer stop()
	for _, c := range []struct {
		name string
		run  context.Context
		err  error
		want bool
	}{
		{"cancelled run, cancelled call", cancelled, fmt.Errorf("XREADGROUP: %w", context.Canceled), true},
		{"deadline passed, socket timeout first", pastDeadline{running}, timeout, true},
		{"deadline passed, deadline error", pastDeadline{running}, fmt.Errorf("TIME: %w", context.DeadlineExceeded), true},
		{"run going on, socket timeout", running, timeout, false},
		{"deadline ahead, socket timeout", future, timeout, false},
		{"cancelled run, refused connection", cancelled, errors.New("dial tcp: connection refused"), false},
		{"no run yet", nil, context.Canceled, false},
		{"no error", cancelled, nil, false},
	} {
		require.Equal(t, c.want, endedByRun(c.run, c.err), c.name)
	}
}
