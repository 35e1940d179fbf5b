package consumebench

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
