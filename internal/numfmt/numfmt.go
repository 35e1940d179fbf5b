// Package numfmt writes numbers for people: the one formatter of counts
// and durations that the CLI, the demo and the benchmarks' tables share.
package numfmt

import (
	"strconv"
	"strings"
	"time"
)

// Count writes n with thousands separators: 12,345 and -1,000.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	if len(digits) < len(s) {
		b.WriteByte('-')
	}
	for i := 0; i < len(digits); i++ {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(digits[i])
	}
	return b.String()
}

// Duration rounds a duration for humans: 850ms, 4.2s, 3m12s, 5h3m.
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + Duration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	s := d.Round(time.Minute).String()
	return strings.TrimSuffix(s, "0s")
}
