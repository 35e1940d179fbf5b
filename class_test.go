package pelwarden

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err   error
		class ErrorClass
	}{
		{nil, ClassNone},
		// The deployment refuses the caller.
		{replyError("NOPERM this user has no permissions to run the 'xack' command"), ClassNoPermission},
		{&Error{Kind: ErrNoPermission, Code: "PWNOPERM"}, ClassNoPermission},
		{replyError("WRONGPASS invalid username-password pair"), ClassNoPermission},
		{replyError("NOAUTH Authentication required."), ClassNoPermission},
		{fmt.Errorf("dial: %w", &tls.CertificateVerificationError{Err: errors.New("unknown authority")}), ClassNoPermission},
		// Missing group.
		{replyError("NOGROUP No such key 's' or consumer group 'g'"), ClassNoGroup},
		{&Error{Kind: ErrNoGroup, Code: "PWNOGROUP", Err: replyError("PWNOGROUP no group")}, ClassNoGroup},
		// Out of memory.
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), ClassOutOfMemory},
		{&Error{Kind: ErrServer, Code: "OOM"}, ClassOutOfMemory},
		// Permanent.
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), ClassPermanent},
		{&Error{Kind: ErrWrongType}, ClassPermanent},
		{argError("f", "Stream", "required"), ClassPermanent},
		{fmt.Errorf("load: %w", ErrServerUnsupported), ClassPermanent},
		{errors.Join(errors.New("x"), ErrCrossSlot), ClassPermanent},
		{replyError("CROSSSLOT Keys in request don't hash to the same slot"), ClassPermanent},
		// No reply, or the cluster is reconfiguring.
		{refused, ClassStaleTopology},
		{fmt.Errorf("pelwarden: %s: %w", FunctionClaim, refused), ClassStaleTopology},
		{io.EOF, ClassStaleTopology},
		{context.DeadlineExceeded, ClassStaleTopology},
		{replyError("CLUSTERDOWN The cluster is down"), ClassStaleTopology},
		{&Error{Code: "CLUSTERDOWN", Kind: ErrServer, Err: replyError("CLUSTERDOWN The cluster is down")}, ClassStaleTopology},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), ClassStaleTopology},
		{replyError("MASTERDOWN Link with MASTER is down"), ClassStaleTopology},
		{replyError("LOADING Redis is loading the dataset in memory"), ClassStaleTopology},
		{replyError("READONLY You can't write against a read only replica."), ClassStaleTopology},
		// Retry later.
		{context.Canceled, ClassTransient},
		{fmt.Errorf("read: %w", context.Canceled), ClassTransient},
		{fmt.Errorf("%w: unexpected reply", ErrMalformedReply), ClassTransient},
		{replyError("BUSY Redis is busy running a script."), ClassTransient},
		{replyError("NOREPLICAS Not enough good replicas to write."), ClassTransient},
		{replyError("MISCONF Redis is configured to save RDB snapshots"), ClassTransient},
		{replyError("ERR max number of clients reached"), ClassTransient},
		// Any other reply.
		{replyError("BUSYGROUP Consumer Group name already exists"), ClassServer},
		{replyError("ERR Function not found"), ClassServer},
		{&Error{Kind: ErrServer, Code: "ERR", Err: replyError("ERR something")}, ClassServer},
	} {
		require.Equal(t, c.class, Classify(c.err), "%v", c.err)
		require.Equal(t, c.class == ClassStaleTopology || c.class == ClassTransient || c.class == ClassOutOfMemory, c.class.Transient())
		require.Equal(t, c.class == ClassNoPermission || c.class == ClassNoGroup || c.class == ClassPermanent, c.class.Permanent())
	}
	require.Equal(t, "stale_topology", ClassStaleTopology.String())
	require.Equal(t, "unknown", ErrorClass(99).String())
}

// Load's reading: no reply at all, or a reply asking to retry later, says
// nothing about what the server can do.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err       error
		transient bool
	}{
		{context.DeadlineExceeded, true},
		{&tls.CertificateVerificationError{Err: errors.New("unknown authority")}, true},
		{replyError("LOADING Redis is loading"), true},
		{replyError("OOM command not allowed"), true},
		{replyError("BUSY running a script"), true},
		{replyError("NOPERM no permissions"), false},
		{replyError("ERR unknown command 'FUNCTION'"), false},
		{replyError("WRONGTYPE wrong kind"), false},
	} {
		require.Equal(t, c.transient, transient(c.err), "%v", c.err)
	}
}

// A failed plain command names itself and its key, and matches the
// sentinel of its class.
func TestCommandError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		text string
		is   error
	}{
		{&CommandError{Command: "XRANGE", Key: "k", Err: io.EOF}, "XRANGE k: EOF", io.EOF},
		{&CommandError{Command: "TIME", Err: io.EOF}, "TIME: EOF", io.EOF},
		{&CommandError{Command: "XACK", Key: "k", Err: replyError("NOGROUP No such key")}, "XACK k: NOGROUP No such key", ErrNoGroup},
		{&CommandError{Command: "XACK", Key: "k", Err: replyError("NOPERM no permissions")}, "XACK k: NOPERM no permissions", ErrNoPermission},
		{&CommandError{Command: "XLEN", Key: "k", Err: replyError("WRONGTYPE wrong kind")}, "XLEN k: WRONGTYPE wrong kind", ErrWrongType},
	} {
		require.Equal(t, c.text, c.err.Error())
		require.ErrorIs(t, c.err, c.is)
	}
	require.NotErrorIs(t, &CommandError{Command: "XLEN", Err: io.EOF}, ErrNoGroup)
}

// Matches reads a plain command's error reply as the sentinel it means,
// sees through wrapping, and otherwise is errors.Is.
func TestMatches(t *testing.T) {
	t.Parallel()
	busy := replyError("BUSYGROUP Consumer Group name already exists")
	for _, c := range []struct {
		err, sentinel error
		want          bool
	}{
		{busy, ErrGroupExists, true},
		{fmt.Errorf("create group: %w", busy), ErrGroupExists, true},
		{&CommandError{Command: "XGROUP CREATE", Key: "k", Err: busy}, ErrGroupExists, true},
		{busy, ErrNoGroup, false},
		{replyError("NOGROUP No such key 's' or consumer group 'g'"), ErrNoGroup, true},
		{replyError("NOPERM no permissions"), ErrNoPermission, true},
		{replyError("WRONGPASS invalid username-password pair"), ErrNoPermission, false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), ErrWrongType, true},
		{replyError("ERR Consumer Group name already exists"), ErrGroupExists, false},
		{&Error{Kind: ErrWrongType}, ErrWrongType, true},
		{io.EOF, io.EOF, true},
		{io.EOF, ErrGroupExists, false},
		{nil, ErrGroupExists, false},
		{io.EOF, nil, false},
		{replyError("ERR something"), nil, false},
	} {
		require.Equal(t, c.want, Matches(c.err, c.sentinel), "%v as %v", c.err, c.sentinel)
	}
	// The classes stay as they were: BUSYGROUP is a plain server error.
	require.Equal(t, ClassServer, Classify(busy))
}
