package driver

import (
	"sync"
	"time"
)

// logLimiter rate-limits per-entry log records (handler failures, retries,
// panics, dead-letter requests) so a burst of poison entries does not
// flood the log: a token bucket of burst records refilled at rate a
// second. The first record let through after some were suppressed says
// how many (Metrics counts every one regardless).
type logLimiter struct {
	burst float64
	rate  float64 // tokens a second

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// Per-entry log records: a burst of entryLogBurst, then entryLogRate a
// second.
const (
	entryLogBurst = 10
	entryLogRate  = 1
)

func newLogLimiter(burst, rate float64) *logLimiter {
	return &logLimiter{burst: burst, rate: rate, tokens: burst}
}

// allow reports whether to write a record now and, if so, how many were
// suppressed since the last one written.
func (l *logLimiter) allow() (ok bool, suppressed int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}
