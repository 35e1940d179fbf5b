package consumebench

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
)

func samples(inuse ...uint64) []HeapSample {
	out := make([]HeapSample, len(inuse))
	for i, v := range inuse {
		out[i] = HeapSample{At: time.Duration(i+1) * sampleEvery, Inuse: v, Live: v / 2, Done: int64(i * 10)}
	}
	return out
}

func TestHeapSpans(t *testing.T) {
	t.Parallel()
	r := &Result{Heap: samples(10, 30, 20, 40, 50, 45, 60, 55, 70, 65)}
	spans := r.HeapSpans(2)
	require.Equal(t, []HeapSpan{
		{Until: 250 * time.Millisecond, Done: 40, MaxInuse: 50, MaxLive: 25},
		{Until: 500 * time.Millisecond, Done: 90, MaxInuse: 70, MaxLive: 35},
	}, spans)
	require.InDelta(t, 1.4, r.HeapGrowth(), 1e-9)

	require.Len(t, r.HeapSpans(10), 10, "one sample per tenth")
	require.Len(t, r.HeapSpans(20), 10, "empty slices are left out")
	require.Len(t, (&Result{Heap: samples(7)}).HeapSpans(10), 1)
	require.Nil(t, (&Result{}).HeapSpans(10))
	require.Zero(t, (&Result{Heap: samples(7)}).HeapGrowth(), "too few samples to compare")

	flat := &Result{Heap: samples(50, 60, 55, 58, 60, 52, 59, 61)}
	require.InDelta(t, 61.0/60, flat.HeapGrowth(), 1e-9)
}

func TestWriteTableShowsHeapOverTime(t *testing.T) {
	t.Parallel()
	rep := Report{Config: Config{ReclaimEntries: 100}.WithDefaults(), Reclaim: []Result{{
		Method: "driver reclaim c=512, page 500", Part: PartReclaim, Entries: 100, Wall: time.Second, Verified: true,
		PeakHeapInuse: 70 << 20, LastHeapInuse: 65 << 20, BaseHeapInuse: 1 << 20,
		Heap: samples(10<<20, 30<<20, 20<<20, 40<<20, 50<<20, 45<<20, 60<<20, 55<<20, 70<<20, 65<<20),
	}}}
	var out bytes.Buffer
	require.NoError(t, WriteTable(&out, rep))
	s := out.String()
	require.Contains(t, s, "heap over time, driver reclaim c=512, page 500 (tenths of the run; peak 70.0 MiB, last 65.0 MiB, baseline 1.0 MiB)")
	require.Contains(t, s, "max live heap")
	require.Contains(t, s, "targets (issue 5, resources):\n  driver reclaim c=512, page 500: heap flat while draining (peak of the second half <= 1.25x the first): 1.40x  MISSED")
}

func TestParseDrivers(t *testing.T) {
	t.Parallel()
	got, err := ParseDrivers("c=16, c=16/p=484/plain ,c=512/fenced/r=256")
	require.NoError(t, err)
	require.Equal(t, []DriverVariant{
		{Concurrency: 16},
		{Concurrency: 16, Prefetch: 484, AckMode: driver.AckPlain},
		{Concurrency: 512, ReadCount: 256, AckMode: driver.AckFenced},
	}, got)
	require.Equal(t, "driver c=512 reads of 256", got[2].String())
	def, err := ParseDrivers("default")
	require.NoError(t, err)
	require.Equal(t, DefaultDrivers, def)
	for _, bad := range []string{"p=4", "c=0", "c=x", "c=-1", "c=16/q=1", "c=16/plain=1", "c=16,", "c", "c=16/r=x"} {
		_, err := ParseDrivers(bad)
		require.Error(t, err, bad)
	}
}

// medians keeps each method's median round and all its rates; ratioTo pairs
// the rounds.
func TestMediansAndPairedRatios(t *testing.T) {
	t.Parallel()
	run := func(method string, entries int, wall time.Duration) Result {
		return Result{Method: method, Entries: entries, Wall: wall}
	}
	rounds := [][]Result{
		{run("driver", 100, 1*time.Second), run("driver", 100, 4*time.Second), run("driver", 100, 2*time.Second)},
		{run("raw", 100, 1*time.Second), run("raw", 100, 2*time.Second), run("raw", 100, 1*time.Second)},
	}
	ms := medians(rounds)
	require.Len(t, ms, 2)
	require.Equal(t, 2*time.Second, ms[0].Wall, "median of 100, 25 and 50 entries/s")
	require.Equal(t, []float64{100, 25, 50}, ms[0].Rates)
	require.Equal(t, time.Second, ms[1].Wall)
	// Within each round: 1, 0.5, 0.5.
	require.InDelta(t, 0.5, ratioTo(&ms[0], &ms[1]), 1e-9)

	failed := run("driver", 100, time.Second)
	failed.Problem = "boom"
	ms = medians([][]Result{{run("driver", 100, time.Second), failed}})
	require.Equal(t, "boom", ms[0].Problem, "a failed round is reported, not hidden by the median")
}
