package driver

import "time"

// clock is the time a consumer's rules read: a monotonic reading, as a
// duration since the run began. The driver reads every time it uses from
// the time package, through clock for readings and directly for its
// timers, tickers and context deadlines, so there is one clock: the unit
// tests run in testing/synctest bubbles, whose clock is fake for all of
// them at once and moves only when every goroutine of the test waits.
type clock struct{ epoch time.Time }

// newClock starts a clock at zero.
func newClock() clock { return clock{epoch: time.Now()} }

// now reads time.Since(epoch): a time with a monotonic reading reads one
// clock, where time.Now reads two (a handler that does nothing costs less
// than the clock reads around it).
func (c clock) now() time.Duration { return time.Since(c.epoch) }
