package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// reply is a server error reply (it implements redis.Error).
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestStaleTopology(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		err   error
		stale bool
	}{
		{nil, false},
		// The node did not answer.
		{refused, true},
		{fmt.Errorf("pelwarden: %s: %w", pelwarden.FunctionClaim, refused), true},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		// The cluster is reconfiguring.
		{reply("CLUSTERDOWN The cluster is down"), true},
		{&pelwarden.Error{Function: pelwarden.FunctionAck, Code: "CLUSTERDOWN", Kind: pelwarden.ErrServer, Err: reply("CLUSTERDOWN The cluster is down")}, true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("MASTERDOWN Link with MASTER is down"), true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		// Shutdown, permanent errors, other replies.
		{context.Canceled, false},
		{fmt.Errorf("read: %w", context.Canceled), false},
		{&pelwarden.Error{Function: pelwarden.FunctionClaim, Code: "PWNOGROUP", Kind: pelwarden.ErrNoGroup, Err: reply("PWNOGROUP no group")}, false},
		{reply("NOGROUP No such key or consumer group"), false},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{reply("NOPERM this user has no permissions"), false},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{fmt.Errorf("%w: unexpected reply", pelwarden.ErrMalformedReply), false},
		{&ConfigError{Field: "Stream", Reason: "required"}, false},
		{errors.Join(errors.New("x"), pelwarden.ErrCrossSlot), false},
	}
	for _, c := range cases {
		require.Equal(t, c.stale, staleTopology(c.err), "%v", c.err)
	}
}
