package driver

import "time"

// clock is the time a lane's rules read: a monotonic reading, as a
// duration since an epoch. monoClock is the real one; the unit tests move
// a fake by hand.
type clock interface {
	now() time.Duration
}

// monoClock reads time.Since(monoEpoch): a time with a monotonic reading
// reads one clock, where time.Now reads two (a handler that does nothing
// costs less than the clock reads around it).
type monoClock struct{}

func (monoClock) now() time.Duration { return time.Since(monoEpoch) }

// monoEpoch anchors monoClock.
var monoEpoch = time.Now()
