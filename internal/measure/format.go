package measure

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/numfmt"
)

// ServerCPU returns the server process's used_cpu_user + used_cpu_sys from
// INFO cpu. The difference of two calls is the CPU the server used between
// them, socket I/O and event loop included.
func ServerCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	s, err := TakeSnapshot(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return s.CPU, nil
}

// FormatRatio prints a ratio for a table: "-" for 0, "104x", "12.3x",
// "2.35x".
func FormatRatio(x float64) string {
	switch {
	case x == 0:
		return "-"
	case x >= 100:
		return fmt.Sprintf("%.0fx", x)
	case x >= 10:
		return fmt.Sprintf("%.1fx", x)
	default:
		return fmt.Sprintf("%.2fx", x)
	}
}

// FormatFewer prints how many times fewer (x > 1) or more (x < 1).
func FormatFewer(x float64) string {
	switch {
	case x == 0:
		return "-"
	case x >= 1:
		return FormatRatio(x) + " fewer"
	default:
		return FormatRatio(1/x) + " more"
	}
}

// FormatCount prints a count rounded to a whole number, with thousands
// separators ("91,640").
func FormatCount(x float64) string { return numfmt.Count(int64(math.Round(x))) }

// FormatDuration rounds a duration for a table, keeping three or four
// significant digits.
func FormatDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}
