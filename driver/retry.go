package driver

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// giveUp decides, after a failed attempt (numbered from 0), whether to stop
// retrying.
type giveUp func(err error, attempt int) bool

// Give-up rules of retry.
var (
	// never retries until the context ends.
	never giveUp = func(error, int) bool { return false }
	// onPermanent stops at errors retrying cannot fix.
	onPermanent giveUp = func(err error, _ int) bool { return permanent(err) }
)

// afterAttempts stops at permanent errors and after n attempts.
func afterAttempts(n int) giveUp {
	return func(err error, attempt int) bool { return permanent(err) || attempt+1 >= n }
}

// retry calls op until it succeeds, stop says to give up, or ctx ends,
// sleeping a capped, jittered backoff between attempts. Each failure is
// passed to failed (to log and count it) before the rule is asked. It
// returns nil on success, else the last error (ctx's error when ctx ended
// first).
func retry(ctx context.Context, stop giveUp, failed func(err error, attempt int), op func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		if failed != nil {
			failed(err, attempt)
		}
		if stop(err, attempt) {
			return err
		}
		if !ctxwait.Sleep(ctx, backoff(attempt)) {
			return err
		}
	}
}

// backoff is capped exponential backoff with full jitter: 50ms doubling up
// to 5s.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 7)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// repeat calls fn at once and then every d after it returned, until ctx
// ends; first is true on the first call.
func repeat(ctx context.Context, d time.Duration, fn func(first bool)) {
	repeatOrNow(ctx, d, nil, fn)
}

// repeatOrNow is repeat that also calls fn as soon as now receives
// (nil: never), without waiting for the rest of d; the next call is then
// d after that one.
func repeatOrNow(ctx context.Context, d time.Duration, now <-chan struct{}, fn func(first bool)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-now:
			t.Stop()
		}
		fn(first)
		t.Reset(d)
	}
}

// tickEvery calls fn every d (the first time d after the call) until ctx
// ends.
func tickEvery(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
