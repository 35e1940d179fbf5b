// Package ctxwait waits for a duration or a context, whichever ends first.
// The driver's retry backoff, the demo's handlers, the benchmarks and the
// chaos tests all wait this way.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
