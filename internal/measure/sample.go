package measure

import (
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden"
)

// Sample is what every benchmark result measures of a method's run: the
// entries it settled, in how long, with how many round trips and how much
// server CPU. The suites' Result types embed it, so their per-entry figures
// are computed one way.
type Sample struct {
	// Entries the run had to settle.
	Entries int
	// Wall is the measured time (each suite says from when to when).
	Wall time.Duration
	// RoundTrips the client made: one per command sent alone, one per
	// pipeline; Commands counts every command.
	RoundTrips, Commands int64
	// ServerCPU is the server's used_cpu_user+used_cpu_sys delta.
	ServerCPU time.Duration
}

// EntriesPerSecond is Entries divided by Wall.
func (s *Sample) EntriesPerSecond() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(s.Entries) / s.Wall.Seconds()
}

// RoundTripsPerEntry is RoundTrips divided by Entries.
func (s *Sample) RoundTripsPerEntry() float64 {
	return PerEntry(float64(s.RoundTrips), s.Entries)
}

// CPUPerEntry is the server CPU time per entry, in microseconds.
func (s *Sample) CPUPerEntry() float64 {
	return PerEntry(float64(s.ServerCPU)/float64(time.Microsecond), s.Entries)
}

// RunInfo is what every suite's report says of its run: when it began,
// which server it measured, and that server's CPU while nothing was sent.
// The suites' Report types embed it.
type RunInfo struct {
	// Started is when the run began.
	Started time.Time
	// Server describes the server, e.g. "redis 8.0.2".
	Server string
	// IdleCPU is the server's CPU time per second of wall time while the
	// benchmark sent nothing (cron, other clients): the noise floor of the
	// CPU figures, which are not corrected for it.
	IdleCPU time.Duration
}

// Default sets *p to v when *p is the zero value: the suites' WithDefaults
// helper.
func Default[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// BadConfig is a bad field of suite's Config: a *pelwarden.ArgumentError
// naming it ("Config.Entries").
func BadConfig(suite, field, format string, a ...any) error {
	return &pelwarden.ArgumentError{Scope: suite, Field: "Config." + field, Reason: fmt.Sprintf(format, a...)}
}
