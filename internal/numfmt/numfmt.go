// Package numfmt writes numbers for people: the one formatter of counts
// that the CLI and the benchmarks' tables share.
package numfmt

import (
	"strconv"
	"strings"
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
