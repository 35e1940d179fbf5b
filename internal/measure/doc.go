// Package measure is what pelwarden's benchmark suites (cmd/internal/bench/reclaim
// and benchmarks/internal/consume) measure and print with, so that both count
// round trips, server CPU and numbers the same way: a go-redis hook counting
// round trips and commands, snapshots of INFO cpu and commandstats, the
// server's idle CPU and round-trip time, a TCP proxy adding latency, and
// the table formatting and verdicts.
package measure
