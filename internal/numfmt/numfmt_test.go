package numfmt_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/numfmt"
)

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567",
		-1: "-1", -123: "-123", -1000: "-1,000", math.MinInt64: "-9,223,372,036,854,775,808",
	} {
		require.Equal(t, want, numfmt.Count(n), "%d", n)
	}
}
