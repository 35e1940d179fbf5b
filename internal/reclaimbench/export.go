package reclaimbench

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file exports the measuring and formatting helpers other benchmark
// packages of the module (internal/consumebench) share with this one, so
// that both report server CPU, round trip and numbers the same way.

// ServerCPU returns the server process's used_cpu_user + used_cpu_sys from
// INFO cpu. The difference of two calls is the CPU the server used between
// them, socket I/O and event loop included.
func ServerCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	s, err := snapshotServer(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return s.cpu, nil
}

// ServerVersion describes the server, e.g. "redis 8.0.2".
func ServerVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	return serverVersion(ctx, rdb)
}

// IdleCPU measures the server's CPU use per second of wall time while
// nothing is sent, over the given duration.
func IdleCPU(ctx context.Context, rdb *redis.Client, over time.Duration) (time.Duration, error) {
	return idleCPU(ctx, rdb, over)
}

// MeasureRTT returns the median time of n PINGs.
func MeasureRTT(ctx context.Context, rdb *redis.Client, n int) (time.Duration, error) {
	return measureRTT(ctx, rdb, n)
}

// FormatRatio prints a ratio as this package's tables do ("2.35x", "104x").
func FormatRatio(x float64) string { return fmtRatio(x) }

// FormatCount prints a count with thousands separators ("91,640").
func FormatCount(x float64) string { return fmtCount(x) }

// FormatDuration rounds a duration for a table.
func FormatDuration(d time.Duration) string { return fmtDuration(d) }
