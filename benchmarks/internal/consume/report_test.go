package consume

import (
	"bytes"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"

	"github.com/pelwarden/pelwarden/internal/measure"
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
		Method: "driver reclaim c=512, page 500", Part: PartReclaim, Sample: measure.Sample{Entries: 100, Wall: time.Second}, Verified: true,
		PeakHeapInuse: 70 << 20, LastHeapInuse: 65 << 20, BaseHeapInuse: 1 << 20,
		Heap: samples(10<<20, 30<<20, 20<<20, 40<<20, 50<<20, 45<<20, 60<<20, 55<<20, 70<<20, 65<<20),
	}}}
	var out bytes.Buffer
	require.NoError(t, WriteTable(&out, rep))
	s := out.String()
	require.Contains(t, s, "heap over time, driver reclaim c=512, page 500 (tenths of the run; peak 70.0 MiB, last 65.0 MiB, baseline 1.0 MiB)")
	require.Contains(t, s, "max live heap")
	require.Contains(t, s, "targets (client memory stays flat):\n  driver reclaim c=512, page 500: heap flat while draining (peak of the second half <= 1.25x the first): 1.40x  MISSED")
}

func TestParseDrivers(t *testing.T) {
	t.Parallel()
	got, err := ParseDrivers("default, c=16/p=484/plain ,c=512/fenced/r=256,plain,p=4,default/plain")
	require.NoError(t, err)
	require.Equal(t, []DriverVariant{
		{},
		{Concurrency: 16, Prefetch: 484, AckMode: driver.AckPlain},
		{Concurrency: 512, ReadCount: 256, AckMode: driver.AckFenced},
		{AckMode: driver.AckPlain},
		{Prefetch: 4},
		{AckMode: driver.AckPlain},
	}, got)
	require.Equal(t, "driver defaults", got[0].String())
	require.Equal(t, "driver c=16 prefetch 484 plain acks", got[1].String())
	require.Equal(t, "driver c=512 reads of 256", got[2].String())
	require.Equal(t, "driver defaults, plain acks", got[3].String())
	require.Equal(t, "driver prefetch 4", got[4].String())
	def, err := ParseDrivers(DefaultDriversSpec)
	require.NoError(t, err)
	require.Equal(t, DefaultDrivers, def, "DefaultDriversSpec spells DefaultDrivers")
	empty, err := ParseDrivers("")
	require.NoError(t, err)
	require.Equal(t, DefaultDrivers, empty)
	for _, bad := range []string{"c=0", "c=x", "c=-1", "c=16/q=1", "c=16/plain=1", "c=16,", "c", "c=16/r=x", "default=1", ",plain"} {
		_, err := ParseDrivers(bad)
		require.Error(t, err, bad)
	}
	require.NoError(t, Config{Options: &redis.Options{}, Drivers: []DriverVariant{{}, {Prefetch: pelwarden.MaxCount - driver.DefaultConcurrency}}}.WithDefaults().validate())
	require.Error(t, Config{Options: &redis.Options{}, Drivers: []DriverVariant{{Prefetch: pelwarden.MaxCount - driver.DefaultConcurrency + 1}}}.WithDefaults().validate(),
		"the default Concurrency counts against MaxCount")
}

func TestParseParts(t *testing.T) {
	t.Parallel()
	all, err := ParseParts("all")
	require.NoError(t, err)
	require.Equal(t, AllParts, all)
	got, err := ParseParts("main, slow,large")
	require.NoError(t, err)
	require.Equal(t, []Part{PartMain, PartSlow, PartLarge}, got)
	_, err = ParseParts("main,fast")
	require.Error(t, err)
}

// Every part prints its table and its targets with a verdict.
func TestWriteTableTargets(t *testing.T) {
	t.Parallel()
	cfg := Config{Rounds: 1}.WithDefaults()
	res := func(method string, part Part, entries int, wall time.Duration) Result {
		return Result{Method: method, Part: part, Sample: measure.Sample{Entries: entries, Wall: wall}, Verified: true, Concurrency: 16}
	}
	rep := Report{Config: cfg,
		Main: []Result{res("driver defaults", PartMain, 1000, time.Second), res("watermill", PartMain, 1000, 40*time.Second),
			res("raw COUNT 500", PartMain, 1000, 900*time.Millisecond)},
		Reclaim: []Result{res("Claim+Ack loop, page 500", PartReclaim, 1000, time.Second),
			res("driver defaults", PartReclaim, 1000, time.Second),
			res("driver, MinIdle 10ms, ReclaimInterval 10ms", PartReclaim, 1000, 1250*time.Millisecond),
			res("control: Claim+Ack loop, page 500", PartReclaim, 1000, 1100*time.Millisecond),
			res("textbook loop, XAUTOCLAIM 50", PartReclaim, 1000, 10*time.Second)},
		Slow:  []Result{res("driver defaults x 2, handler 40ms", PartSlow, 800, 1500*time.Millisecond)},
		Large: []Result{res("driver defaults, MinIdle 10ms, ReclaimInterval 10ms", PartLarge, 150, time.Second)},
	}
	rep.Main[0].ClientCPU, rep.Main[2].ClientCPU = 1400*time.Millisecond, time.Second
	rep.Reclaim[1].LogRecords, rep.Reclaim[1].LogWarnings = 3, 1
	rep.Slow[0].Ideal = time.Second
	rep.Slow[0].Consumers = []ConsumerResult{{Name: "consumer-a", Handled: 500, MaxHeld: 40}, {Name: "consumer-b", Handled: 300, MaxHeld: 70}}
	rep.Large[0].SlowLog = &SlowLogResult{Commands: 40, OverLimit: 1, Slowest: []SlowCommand{{Name: "XREADGROUP", Duration: 120 * time.Millisecond}}}
	var out bytes.Buffer
	require.NoError(t, WriteTable(&out, rep))
	s := out.String()
	for _, want := range []string{
		"== main path:", "== reclaim path:", "== slow handlers:", "== large entries:",
		"targets (the driver with its defaults):",
		"  main path, driver defaults: entries/s >= 30x watermill-redisstream: 40.0x  met",
		"  main path, driver defaults: entries/s >= 90% of the raw loop: 90%  met",
		"  main path, driver defaults: client CPU per entry <= 1.3x the raw loop's (median of the rounds): 1.40x, rounds 1.40x-1.40x  MISSED",
		"  reclaim, driver defaults: entries/s >= 95% of the Claim+Ack loop (median of the rounds), >= 90% in every round: 100%, least 100%  met",
		"  reclaim, driver, MinIdle 10ms, ReclaimInterval 10ms: entries/s >= 95% of the Claim+Ack loop (median of the rounds), >= 90% in every round: 80%, least 80%  MISSED",
		"  reclaim, control: the Claim+Ack loop against itself: 91% (median of the rounds), least 91%, most 91% (no target: the machine's noise)",
		"  reclaim, driver: entries/s vs the textbook loop: 10.0x",
		"  reclaim, driver: log records at the default level <= 50: 3 (1 at Warn or above)  met",
		"  slow handlers: each consumer handles >= 35%: lowest 38% (consumer-b, driver defaults x 2, handler 40ms)  met",
		"  slow handlers: no consumer holds more than 4x Concurrency (64): most 70 (consumer-b, driver defaults x 2, handler 40ms)  MISSED",
		"  slow handlers: the burst drains within 2.5x the ideal time: 1.50x  met",
		"  large entries: no command takes 100ms or longer: 1 (longest XREADGROUP, 120ms)  MISSED",
		"500 / 300", "62% / 38%", "40 / 70",
	} {
		require.Contains(t, s, want)
	}
}

// medians keeps each method's median round and all its rates; ratioTo pairs
// the rounds.
func TestMediansAndPairedRatios(t *testing.T) {
	t.Parallel()
	run := func(method string, entries int, wall time.Duration) Result {
		return Result{Method: method, Sample: measure.Sample{Entries: entries, Wall: wall}, ClientCPU: wall / 2}
	}
	rounds := [][]Result{
		{run("driver", 100, 1*time.Second), run("driver", 100, 4*time.Second), run("driver", 100, 2*time.Second)},
		{run("raw", 100, 1*time.Second), run("raw", 100, 2*time.Second), run("raw", 100, 1*time.Second)},
	}
	ms := medians(rounds)
	require.Len(t, ms, 2)
	require.Equal(t, 2*time.Second, ms[0].Wall, "median of 100, 25 and 50 entries/s")
	require.Equal(t, []float64{100, 25, 50}, ms[0].Rates)
	require.Equal(t, []float64{5000, 20000, 10000}, ms[0].ClientCPUs, "µs per entry of each round")
	require.Equal(t, time.Second, ms[1].Wall)
	// Within each round: 1, 0.5, 0.5; the client CPU's: 1, 2, 2.
	require.InDelta(t, 0.5, ratioTo(&ms[0], &ms[1]), 1e-9)
	require.Equal(t, []float64{1, 2, 2}, clientRatios(&ms[0], &ms[1]))
	require.Nil(t, clientRatios(&Result{}, &ms[1]), "no CPU time reported, no ratio")

	failed := run("driver", 100, time.Second)
	failed.Problem = "boom"
	ms = medians([][]Result{{run("driver", 100, time.Second), failed}})
	require.Equal(t, "boom", ms[0].Problem, "a failed round is reported, not hidden by the median")
}
