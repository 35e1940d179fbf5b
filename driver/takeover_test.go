package driver

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// A pass's record names the previous owners, most entries first, at most
// maxNamed of them; the reads' record counts what they took since the
// last; the records are rate-limited like the per-entry ones.
func TestTakeovers(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	tk := newTakeovers()

	var p passTakeover
	tk.report(log, &p)
	require.Empty(t, out.String(), "a pass that took nothing writes nothing")

	p.add([]pelwarden.ConsumerCount{{Consumer: "a", Entries: 1}, {Consumer: "b", Entries: 3}})
	p.add([]pelwarden.ConsumerCount{{Consumer: "a", Entries: 1}, {Consumer: "c", Entries: 2}})
	tk.report(log, &p)
	require.Equal(t, "level=INFO msg=\"reclaim pass took over entries of other consumers\" count=7 from.b=3 from.a=2 from.c=2\n", out.String())

	out.Reset()
	var many passTakeover
	for i := range maxNamed + 3 {
		many.add([]pelwarden.ConsumerCount{{Consumer: fmt.Sprintf("w%02d", i), Entries: i + 1}})
	}
	tk.report(log, &many)
	require.Contains(t, out.String(), "from.w12=13 ")
	require.NotContains(t, out.String(), "from.w02=")
	require.Contains(t, out.String(), " other_consumers=3\n")

	out.Reset()
	tk.reportReads(log)
	require.Empty(t, out.String(), "nothing taken by reads: no record")
	tk.read(4)
	tk.read(0)
	tk.read(2)
	tk.reportReads(log)
	require.Equal(t, "level=INFO msg=\"reads took over idle pending entries\" count=6 from=\"not reported by XREADGROUP CLAIM\"\n", out.String())
	tk.reportReads(log)
	require.Equal(t, 1, strings.Count(out.String(), "\n"), "counted once")

	// The burst is spent after entryLogBurst records (3 used above); then
	// one a second, the first naming how many were suppressed.
	synctest.Test(t, func(t *testing.T) {
		limited := newTakeovers()
		limited.limit.tokens = entryLogBurst - 3
		out.Reset()
		for range 3 * entryLogBurst {
			limited.read(1)
			limited.reportReads(log)
		}
		require.Equal(t, entryLogBurst-3, strings.Count(out.String(), "\n"), "the burst, then nothing")
		time.Sleep(time.Second)
		out.Reset()
		limited.read(1)
		limited.reportReads(log)
		require.Equal(t, fmt.Sprintf("level=INFO msg=\"reads took over idle pending entries\" count=1 from=\"not reported by XREADGROUP CLAIM\" records_suppressed=%d\n", 2*entryLogBurst+3), out.String())
	})
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
