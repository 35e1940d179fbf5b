package driver

import (
	"context"
	"errors"
	"net"
	"time"
)

// endedByRun reports whether err is a failure caused by the end of Run
// (run is Run's context): run is done, or its deadline has passed, and err
// is a cancellation or a timeout. A client with ContextTimeoutEnabled
// turns the deadline into its socket's, which can fire before the
// context's own timer marks it done, so the deadline is read from the
// clock too. Such a failure is the normal end of a call in flight at the
// shutdown, not an error; any other failure during the shutdown (a refused
// connection at the final flush) still is.
func endedByRun(run context.Context, err error) bool {
	if run == nil || err == nil {
		return false
	}
	ended := run.Err() != nil
	if d, ok := run.Deadline(); ok && !time.Now().Before(d) {
		ended = true
	}
	if !ended {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
