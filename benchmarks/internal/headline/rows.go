package headline

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Format says how a figure's value is shown.
type Format int

// Formats of figures.
const (
	Ratio    Format = iota // 26.03×
	Rate                   // 71,913 entries/s
	Micros                 // 11.25 µs
	Millis                 // 5.9 ms
	Seconds                // 1.00 s
	Count                  // 2
	Trips                  // 0.0040
	MiB                    // 5.3 MiB
	Share                  // 50%
	MsgsRate               // 118,402 msgs/s
	CorePct                // 0.95% of a core
)

// formats says how each Format prints: its digits after the point (-1:
// rounded, with thousands separators), the factor its value is shown at,
// and its unit.
var formats = map[Format]struct {
	digits int
	scale  float64
	unit   string
}{
	Ratio:    {2, 1, "×"},
	Rate:     {-1, 1, " entries/s"},
	MsgsRate: {-1, 1, " msgs/s"},
	Micros:   {2, 1, " µs"},
	Millis:   {1, 1, " ms"},
	Seconds:  {2, 1, " s"},
	Count:    {0, 1, ""},
	Trips:    {4, 1, ""},
	MiB:      {1, 1, " MiB"},
	Share:    {0, 100, "%"},
	CorePct:  {2, 1, "% of a core"},
}

// String formats v.
func (f Format) String(v float64) string {
	p, ok := formats[f]
	if !ok {
		return fmt.Sprint(v)
	}
	if p.digits < 0 {
		return thousands(v*p.scale) + p.unit
	}
	return strconv.FormatFloat(v*p.scale, 'f', p.digits, 64) + p.unit
}

// bound formats a target's value: as String, without trailing zeros.
func (f Format) bound(x float64) string {
	p, ok := formats[f]
	if !ok || p.digits < 0 {
		return f.String(x)
	}
	return strconv.FormatFloat(x*p.scale, 'f', -1, 64) + p.unit
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Round(v))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Target is what a figure must reach.
type Target struct {
	// Text shows it, e.g. "≥ 10×".
	Text string
	// Met says whether v (the median) reaches it.
	Met func(v float64) bool
}

func atLeast(x float64, f Format) *Target {
	return &Target{Text: "≥ " + f.bound(x), Met: func(v float64) bool { return v >= x }}
}

func atMost(x float64, f Format) *Target {
	return &Target{Text: "≤ " + f.bound(x), Met: func(v float64) bool { return v <= x }}
}

func below(x float64, f Format) *Target {
	return &Target{Text: "< " + f.bound(x), Met: func(v float64) bool { return v < x }}
}

// A Figure is one line of the headline table: a value computed from one
// job's metrics in each round.
type Figure struct {
	// Row is the BENCHMARKS.md row the figure belongs to (its Method
	// sections refer to rows by number).
	Row int
	// What the figure is.
	What string
	// Job names the job whose metrics it reads.
	Job    string
	Format Format
	Target *Target
	value  func(Metrics) (float64, error)
}

// q quotes s for a metric name pattern.
func q(s string) string { return regexp.QuoteMeta(s) }

// val is the metric name (a pattern) in unit.
func val(name, unit string) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) { return ms.get(name, unit) }
}

// ratio is a's metric over b's, in one round.
func ratio(a, aUnit, b, bUnit string) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) {
		x, err := ms.get(a, aUnit)
		if err != nil {
			return 0, err
		}
		y, err := ms.get(b, bUnit)
		if err != nil {
			return 0, err
		}
		if y == 0 {
			return 0, fmt.Errorf("%s %s is 0", b, bUnit)
		}
		return x / y, nil
	}
}

// same is ratio with one unit.
func same(a, b, unit string) func(Metrics) (float64, error) { return ratio(a, unit, b, unit) }

// Metric names of the suites, as patterns.
var (
	rcLoop, rcProxy = "reclaim/loopback/", "reclaim/proxied/"

	mainDriver  = q("main/driver defaults")
	mainLimit   = q("main/driver defaults, under a limit")
	mainNoClaim = q("main/driver defaults,") + ".*read claim.*"
	mainRaw     = q("main/raw ") + ".*"
	mainWM      = q("main/watermill")
	rcDriver    = q("reclaim/driver defaults")
	rcClaimLoop = q("reclaim/Claim+Ack loop") + ".*"
	rcControl   = q("reclaim/control: ") + ".*"
)

// Jobs are every job of the report, in run order.
func Jobs() []Job {
	return []Job{
		reclaimJob("reclaim", "pelwarden/redis:8.0"),
		consumeJob("consume", "pelwarden/redis:8.0", 0, "--drivers", "default,limit"),
		integrationJob("claim-page-1M", "^BenchmarkClaimPageOnMillionEntryPEL$", "200x", "pelwarden/redis:8.0"),
		consumeJob("consume-8.6", "pelwarden/redis:8.6", 0, "--parts", "main,reclaim", "--drivers", "default,noreadclaim", "--watermill=false"),
		integrationJob("ordered", "^BenchmarkOrdered$", "1x", "pelwarden/redis:8.0"),
		integrationJob("read-claim", "^BenchmarkReadClaim$", "1x", "pelwarden/redis:8.6"),
		integrationJob("kill-recovery", "^BenchmarkKillRecovery$", "1x", "pelwarden/redis:8.6"),
		reclaimJob("reclaim-valkey", "pelwarden/valkey:8.1"),
		integrationJob("scale-out", "^BenchmarkScaleOut$", "1x", "pelwarden/redis:8.0"),
		integrationJob("idle-partitions", "^BenchmarkIdlePartitions$", "1x", "pelwarden/redis:8.0"),
		dashboardScaleJob("dashboard-scale", "pelwarden/redis:8.0"),
		integrationJob("trim", "^BenchmarkTrim$", "1x", "pelwarden/redis:8.0"),
		integrationJob("claim-breakdown", "^BenchmarkClaimBreakdown$", "3x", "pelwarden/redis:7.0"),
		goBenchJob("watermill", "watermill.test", "pelwardenwatermill", "^BenchmarkRouter$", "30000x", "pelwarden/redis:8.0"),
		integrationJob("ordered-recovery", "^BenchmarkOrderedRecovery$", "1x", "pelwarden/redis:8.0"),
		integrationJob("failed-attempt", "^BenchmarkFailedAttempt$", "5000x", "pelwarden/redis:8.0"),
		integrationJob("exporter", "^BenchmarkGroupCollectorScrape$", "50x", "pelwarden/redis:8.0"),
		integrationJob("pause", "^BenchmarkPauseTakesEffect$", "10x", "pelwarden/redis:8.0"),
		consumeJob("drain-1M", "pelwarden/redis:8.0", 1, "--parts", "reclaim", "--reclaim-entries", "1000000", "--watermill=false"),
	}
}

// Figures are the headline table, in row order.
func Figures() []Figure {
	rate := func(pattern string) func(Metrics) (float64, error) { return val(pattern, "entries/s") }
	return []Figure{
		{1, "Reclaiming a dead consumer's 100,000-entry PEL (5% poison, 1% deleted), loopback: pelwarden vs the textbook loop, entries/s", "reclaim", Ratio, atLeast(10, Ratio), same(rcLoop+"pelwarden", rcLoop+"textbook", "entries/s")},
		{1, "… pelwarden's entries/s", "reclaim", Rate, nil, rate(rcLoop + "pelwarden")},
		{2, "The same at 1 ms of round trip (20,000 entries): pelwarden vs the textbook loop", "reclaim", Ratio, atLeast(100, Ratio), same(rcProxy+"pelwarden", rcProxy+"textbook", "entries/s")},
		{2, "… the proxied link's round trip", "reclaim", Millis, nil, val("reclaim/proxied", "rtt-ms")},
		{3, "Server CPU per reclaimed entry, pelwarden vs the textbook loop, loopback", "reclaim", Ratio, atMost(1, Ratio), same(rcLoop+"pelwarden", rcLoop+"textbook", "server-µs/entry")},
		{3, "… at 1 ms", "reclaim", Ratio, atMost(1, Ratio), same(rcProxy+"pelwarden", rcProxy+"textbook", "server-µs/entry")},
		{3, "… pelwarden's server CPU per entry, loopback", "reclaim", Micros, nil, val(rcLoop+"pelwarden", "server-µs/entry")},
		{4, "Round trips per reclaimed entry: pelwarden", "reclaim", Trips, nil, val(rcLoop+"pelwarden", "round-trips/entry")},
		{4, "… the textbook loop", "reclaim", Trips, nil, val(rcLoop+"textbook", "round-trips/entry")},
		{5, "Reclaim vs a watermill-style claim loop (XPENDING IDLE, XCLAIM + XACK per entry), loopback", "reclaim", Ratio, nil, same(rcLoop+"pelwarden", rcLoop+"watermill", "entries/s")},
		{5, "… at 1 ms", "reclaim", Ratio, nil, same(rcProxy+"pelwarden", rcProxy+"watermill", "entries/s")},
		{6, "Reclaim vs the pipelined floor (XAUTOCLAIM 500 + pipelined XACKs: no delivery count, no dead letter), loopback", "reclaim", Ratio, nil, same(rcLoop+"pelwarden", rcLoop+"pipelined", "entries/s")},
		{6, "… at 1 ms", "reclaim", Ratio, nil, same(rcProxy+"pelwarden", rcProxy+"pipelined", "entries/s")},
		{7, "Row 1 on Valkey 8.1: pelwarden vs the textbook loop, loopback", "reclaim-valkey", Ratio, atLeast(10, Ratio), same(rcLoop+"pelwarden", rcLoop+"textbook", "entries/s")},
		{7, "… at 1 ms", "reclaim-valkey", Ratio, atLeast(100, Ratio), same(rcProxy+"pelwarden", rcProxy+"textbook", "entries/s")},
		{8, "One claim call on a 1,000,000-entry PEL (Count 500), nothing idle (the whole scan budget), mean", "claim-page-1M", Millis, nil, msPerOp(q("BenchmarkClaimPageOnMillionEntryPEL/busy"))},
		{8, "… 500 claimed, mean", "claim-page-1M", Millis, nil, msPerOp(q("BenchmarkClaimPageOnMillionEntryPEL/idle"))},
		{8, "… slowest of 200 (both cases; `busy-reply-threshold` is 5 s)", "claim-page-1M", Millis, nil, millis(mostOf(q("BenchmarkClaimPageOnMillionEntryPEL/")+".*", "slowest-µs/call", ""))},
		{9, "Consuming new entries (no-op handler, 200,000 entries): driver defaults vs a raw XREADGROUP COUNT 500 + one XACK loop", "consume", Ratio, atLeast(0.9, Ratio), same(mainDriver, mainRaw, "entries/s")},
		{9, "… the driver's entries/s", "consume", Rate, nil, rate(mainDriver)},
		{10, "The same vs watermill-redisstream (its default subscriber)", "consume", Ratio, atLeast(30, Ratio), same(mainDriver, mainWM, "entries/s")},
		{11, "Server CPU per consumed entry: driver", "consume", Micros, nil, val(mainDriver, "server-µs/entry")},
		{11, "… raw loop", "consume", Micros, nil, val(mainRaw, "server-µs/entry")},
		{11, "… watermill-redisstream", "consume", Micros, nil, val(mainWM, "server-µs/entry")},
		{11, "Client CPU per consumed entry: driver", "consume", Micros, nil, val(mainDriver, "client-µs/entry")},
		{11, "… raw loop", "consume", Micros, nil, val(mainRaw, "client-µs/entry")},
		{12, "Round trips per consumed entry: driver", "consume", Trips, nil, val(mainDriver, "round-trips/entry")},
		{12, "… raw loop", "consume", Trips, nil, val(mainRaw, "round-trips/entry")},
		{12, "… watermill-redisstream", "consume", Trips, nil, val(mainWM, "round-trips/entry")},
		{13, "Draining a dead consumer's 50,000-entry PEL (5% poison) through the driver with every field at its default vs the claim function's own page loop, Redis 8.0", "consume", Ratio, atLeast(0.95, Ratio), same(rcDriver, rcClaimLoop, "entries/s")},
		{13, "… control: the page loop run again, vs its first run (the machine's noise)", "consume", Ratio, nil, same(rcControl, rcClaimLoop, "entries/s")},
		{13, "… server CPU per entry, driver vs the page loop", "consume", Ratio, nil, same(rcDriver, rcClaimLoop, "server-µs/entry")},
		{14, "Log records during that drain (driver defaults)", "consume", Count, atMost(50, Count), val(rcDriver, "log-records")},
		{15, "Fenced ack vs XACK, server CPU per entry (batches of 500), ids in order", "consume", Ratio, nil, same(q("ack/fenced ack, ids in order"), q("ack/XACK"), "server-µs/entry")},
		{15, "… ids shuffled", "consume", Ratio, nil, same(q("ack/fenced ack, ids shuffled"), q("ack/XACK"), "server-µs/entry")},
		{16, "Two consumers, 40 ms handlers, a burst of 800 entries: the smaller share", "consume", Share, atLeast(0.35, Share), val("slow/.*", "least-share")},
		{16, "… the most entries one consumer held (4 × Concurrency = 64)", "consume", Count, atMost(64, Count), val("slow/.*", "most-held")},
		{16, "… drain time vs the ideal", "consume", Ratio, atMost(2.5, Ratio), val("slow/.*", "drain/ideal")},
		{17, "150 entries of 1 MiB (75 at a dead consumer): the longest command in the slow log", "consume", Millis, below(100, Millis), val("large/.*", "longest-command-ms")},
		{18, "Client heap as a non-idle PEL grows from 0 to 1,000,000: peak at 1,000,000 vs at 0", "consume", Ratio, atMost(1.25, Ratio), same(q("pel/driver, PEL 1M"), q("pel/driver, PEL 0"), "peak-heap-MiB")},
		{19, "Client heap while draining the 50,000-entry PEL: peak of the second half vs the first", "consume", Ratio, atMost(1.25, Ratio), val(rcDriver, "heap-growth")},
		{20, "Draining a 1,000,000-entry PEL (driver defaults): peak heap in use", "drain-1M", MiB, nil, val(rcDriver, "peak-heap-MiB")},
		{20, "… peak of the second half vs the first", "drain-1M", Ratio, atMost(1.25, Ratio), val(rcDriver, "heap-growth")},
		{20, "… entries/s vs the Claim+Ack loop", "drain-1M", Ratio, nil, same(rcDriver, rcClaimLoop, "entries/s")},
		{21, "Scale-out on a three-primary Redis Cluster, two consumers with the defaults, 200,000 entries: 6 partitions", "scale-out", Rate, nil, rate(q("BenchmarkScaleOut/6-partitions"))},
		{21, "… one stream on the cluster", "scale-out", Rate, nil, rate(q("BenchmarkScaleOut/one-stream"))},
		{21, "… one stream on a single server", "scale-out", Rate, nil, rate(q("BenchmarkScaleOut/one-stream-single-server"))},
		{21, "… one stream, cluster vs single server", "scale-out", Ratio, nil, same(q("BenchmarkScaleOut/one-stream"), q("BenchmarkScaleOut/one-stream-single-server"), "entries/s")},
		{21, "… round trips per entry, one stream on the cluster", "scale-out", Trips, nil, val(q("BenchmarkScaleOut/one-stream"), "trips/entry")},
		{21, "… redirects, 6 partitions", "scale-out", Count, atMost(0, Count), val(q("BenchmarkScaleOut/6-partitions"), "redirects")},
		{22, "The ceiling that implies (1 / the busiest primary's µs per entry): one stream", "scale-out", Rate, nil, perBusiest(q("BenchmarkScaleOut/one-stream"))},
		{22, "… 6 partitions", "scale-out", Rate, nil, perBusiest(q("BenchmarkScaleOut/6-partitions"))},
		{23, "64 idle partitions, one consumer with the defaults: server CPU above the idle server's", "idle-partitions", CorePct, below(1, CorePct), val(q("BenchmarkIdlePartitions"), "net-of-idle-%core")},
		{23, "… a new entry to its handler, the slowest", "idle-partitions", Millis, atMost(2000, Millis), val(q("BenchmarkIdlePartitions"), "max-latency-ms")},
		{24, "Server time per trimmed entry (calls of 1,000), 16-byte entries", "trim", Micros, nil, val(q("BenchmarkTrim/entry=16B"), "server-µs/entry")},
		{24, "… 1 KiB entries", "trim", Micros, nil, val(q("BenchmarkTrim/entry=1024B"), "server-µs/entry")},
		{25, "Dashboard on a 1,000,000-entry PEL and 100,000 dead letters: the slowest page's server time, the reason filter apart", "dashboard-scale", Millis, nil, millis(mostOf(q("BenchmarkDashboardScale/get/")+".*", "server-µs", "reason-filter"))},
		{25, "… the dead letters' reason filter (1 in 1,000 match)", "dashboard-scale", Millis, nil, millis(val(q("BenchmarkDashboardScale/get/")+".*reason-filter.*", "server-µs"))},
		{25, "… the slowest confirmation (counts before an action)", "dashboard-scale", Millis, nil, millis(mostOf(q("BenchmarkDashboardScale/post/")+".*", "server-µs", ""))},
		{25, "… the slowest of every page and confirmation (the test's bound)", "dashboard-scale", Millis, below(300, Millis), millis(mostOf(q("BenchmarkDashboardScale/")+".*", "server-µs", ""))},
		{26, "The claim function vs the floor (XAUTOCLAIM from the client), server CPU per reclaimed entry, Redis 7.0", "claim-breakdown", Ratio, nil, ratio(q("BenchmarkClaimBreakdown"), "pelwarden_v1_claim-µs/entry", q("BenchmarkClaimBreakdown"), "floor:_XAUTOCLAIM-µs/entry")},
		{27, "Watermill: pelwardenwatermill vs watermill-redisstream through a message.Router, no-op handler, both with their defaults", "watermill", Ratio, nil, same(q("BenchmarkRouter/pelwarden"), q("BenchmarkRouter/redisstream"), "msgs/s")},
		{27, "… pelwardenwatermill's msgs/s", "watermill", MsgsRate, nil, val(q("BenchmarkRouter/pelwarden"), "msgs/s")},
		{28, "A consumer crashes holding 50,000 entries, Redis 8.6: first entry at a handler after MinIdle, reads that claim", "read-claim", Millis, nil, val(q("BenchmarkReadClaim"), "read-claim-first-ms")},
		{28, "… reclaim passes only", "read-claim", Millis, nil, val(q("BenchmarkReadClaim"), "pass-first-ms")},
		{28, "… last entry handled, reads that claim", "read-claim", Seconds, nil, val(q("BenchmarkReadClaim"), "read-claim-handled-s")},
		{28, "… reclaim passes only", "read-claim", Seconds, nil, val(q("BenchmarkReadClaim"), "pass-handled-s")},
		{29, "The same: reclaim throughput from the moment the entries are idle, reads that claim vs passes", "read-claim", Ratio, nil, ratio(q("BenchmarkReadClaim"), "read-claim-entries/s", q("BenchmarkReadClaim"), "pass-entries/s")},
		{30, "The same: server CPU per entry, reads that claim vs passes", "read-claim", Ratio, nil, ratio(q("BenchmarkReadClaim"), "read-claim-µs/entry", q("BenchmarkReadClaim"), "pass-µs/entry")},
		{31, "Row 13 on Redis 8.6 (reads that claim by default): driver vs the claim function's page loop", "consume-8.6", Ratio, nil, same(rcDriver, rcClaimLoop, "entries/s")},
		{31, "… server CPU per entry, driver vs the page loop", "consume-8.6", Ratio, nil, same(rcDriver, rcClaimLoop, "server-µs/entry")},
		{32, "The main path on Redis 8.6: driver defaults (CLAIM on every read) vs the raw loop", "consume-8.6", Ratio, atLeast(0.9, Ratio), same(mainDriver, mainRaw, "entries/s")},
		{32, "… ReadClaimOff vs the raw loop", "consume-8.6", Ratio, nil, same(mainNoClaim, mainRaw, "entries/s")},
		{33, "A consumer SIGKILLed holding 16 entries, Redis 8.6: time until the other handled them all, reads that claim", "kill-recovery", Millis, nil, val(q("BenchmarkKillRecovery"), "read-claim-all-ms")},
		{33, "… reclaim passes only", "kill-recovery", Millis, nil, val(q("BenchmarkKillRecovery"), "pass-all-ms")},
		{34, "Ordered mode vs unordered, one consumer with the defaults, 100,000 keyed entries, 16 partitions", "ordered", Ratio, atLeast(0.5, Ratio), same(q("BenchmarkOrdered/partitions=16/ordered"), q("BenchmarkOrdered/partitions=16/unordered"), "entries/s")},
		{35, "… 64 partitions", "ordered", Ratio, nil, same(q("BenchmarkOrdered/partitions=64/ordered"), q("BenchmarkOrdered/partitions=64/unordered"), "entries/s")},
		{36, "Ordered mode: a dead owner's partitions owned again after the crash (PartitionLease 10 s)", "ordered-recovery", Seconds, atMost(11, Seconds), val(q("BenchmarkOrderedRecovery"), "crash-owned-s")},
		{37, "Ordered mode: a graceful hand-over, partitions owned by the other consumer after the stop began", "ordered-recovery", Seconds, atMost(2, Seconds), val(q("BenchmarkOrderedRecovery"), "handover-owned-s")},
		{38, "Recording a failed attempt, server CPU per call: fail with the last-errors key vs release", "failed-attempt", Ratio, nil, same(q("BenchmarkFailedAttempt/fail"), q("BenchmarkFailedAttempt/release"), "server-µs/call")},
		{38, "… fail with the key", "failed-attempt", Micros, nil, val(q("BenchmarkFailedAttempt/fail"), "server-µs/call")},
		{39, "Group state exporter, one scrape: 1,000 groups (100 streams × 10, two consumers each)", "exporter", Millis, nil, val(q("BenchmarkGroupCollectorScrape/groups-1000"), "ms/scrape")},
		{39, "… one group with a 1,000,000-entry PEL", "exporter", Millis, nil, val(q("BenchmarkGroupCollectorScrape/pel-1M"), "ms/scrape")},
		{40, "Pause with the defaults (two consumers under load): the longest from PauseGroup's return until both stopped taking entries", "pause", Seconds, atMost(2, Seconds), val(q("BenchmarkPauseTakesEffect"), "s-to-pause-max")},
		{40, "… from ResumeGroup's return until both handled an entry again", "pause", Seconds, atMost(2, Seconds), val(q("BenchmarkPauseTakesEffect"), "s-to-resume-max")},
		{41, "Consumers under a limit set above what they reach vs no limit (driver defaults, 200,000 entries)", "consume", Ratio, atLeast(0.9, Ratio), same(mainLimit, mainDriver, "entries/s")},
		{41, "… round trips per entry under the limit", "consume", Trips, nil, val(mainLimit, "round-trips/entry")},
	}
}

// msPerOp is a Go benchmark's ns/op in milliseconds.
func msPerOp(name string) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) {
		v, err := ms.get(name, "ns/op")
		return v / 1e6, err
	}
}

// mostOf is the largest value of the metrics matching name in unit, leaving
// out names that contain except (when not empty).
func mostOf(name, unit, except string) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) {
		vs, err := ms.matching(name, unit, except)
		if err != nil {
			return 0, err
		}
		return slices.Max(vs), nil
	}
}

// millis turns a value in µs into ms.
func millis(f func(Metrics) (float64, error)) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) {
		v, err := f(ms)
		return v / 1000, err
	}
}

// perBusiest is 1e6 over the busiest primary's µs per entry.
func perBusiest(name string) func(Metrics) (float64, error) {
	return func(ms Metrics) (float64, error) {
		v, err := ms.get(name, "busiest-primary-µs/entry")
		if err == nil && v <= 0 {
			err = fmt.Errorf("%s: busiest primary's µs per entry is %v", name, v)
		}
		if err != nil {
			return 0, err
		}
		return 1e6 / v, nil
	}
}
