package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormatting(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 90 * time.Minute: "1h30m", 3 * time.Second: "3s", 1500 * time.Millisecond: "1.5s", 5 * time.Minute: "5m", 0: "0s",
	} {
		require.Equal(t, want, inputDuration(d))
		back, err := time.ParseDuration(inputDuration(d))
		require.NoError(t, err)
		require.Equal(t, d, back)
	}
	require.Equal(t, "850ms", fmtDuration(850*time.Millisecond))
	require.Equal(t, "3d4h", fmtDuration(76*time.Hour))
	require.Equal(t, "-", fmtDuration(-time.Second))
	require.Equal(t, "-", fmtRate(-1))
	require.Equal(t, "2.5/s", fmtRate(2.5))
	require.Equal(t, "1,235/s", fmtRate(1234.6))
	require.Equal(t, "abc", clip(10, "abc"))
	c := clip(4, "héllo wörld")
	require.True(t, strings.HasPrefix(c, "hél…"), c)
	require.Contains(t, c, "[truncated: 13 bytes]")
	require.Equal(t, "a\uFFFDb", clip(10, "a\xffb"))
	require.Equal(t, `<svg class="spark" viewBox="0 0 120 24" width="120" height="24" aria-hidden="true"></svg>`, sparkline([]float64{1}))
	require.Contains(t, sparkline([]float64{0, 2, 1}), `points="0.0,23.0 60.0,1.0 120.0,12.0"`)
}

func TestHistoryRates(t *testing.T) {
	t.Parallel()
	h := newHistories(time.Minute)
	t0 := time.Unix(1000, 0)
	hist := h.add("g", sample{at: t0, entriesRead: 100, deadLettered: 10, pending: 5})
	d, x := hist.rates()
	require.Equal(t, -1.0, d)
	require.Equal(t, -1.0, x)
	hist = h.add("g", sample{at: t0.Add(2 * time.Second), entriesRead: 120, deadLettered: 14, pending: 7})
	d, x = hist.rates()
	require.Equal(t, 10.0, d)
	require.Equal(t, 2.0, x)
	// A counter that went down (a recreated group) counts as no progress.
	hist = h.add("g", sample{at: t0.Add(4 * time.Second), entriesRead: 0, deadLettered: 14, pending: 0})
	dl, _, pend := hist.series()
	require.Equal(t, []float64{10, 0}, dl)
	require.Equal(t, []float64{5, 7, 0}, pend)
	// Samples older than the span are dropped, and so are groups gone that long.
	hist = h.add("g", sample{at: t0.Add(2 * time.Minute), entriesRead: 10})
	require.Len(t, hist, 1)
	h.add("other", sample{at: t0.Add(5 * time.Minute)})
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotContains(t, h.groups, "g")
}
