//go:build !linux

package measure

import "time"

// lockForPreciseSleep does nothing outside Linux.
func lockForPreciseSleep() (unlock func()) { return func() {} }

// preciseSleep is time.Sleep outside Linux (about 1 ms resolution on some
// systems: the measured round trip in the report shows the real latency).
func preciseSleep(d time.Duration) { time.Sleep(d) }
