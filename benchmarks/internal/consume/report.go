package consume

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// Report is the outcome of Run.
type Report struct {
	// Config is the configuration used, defaults applied.
	Config Config
	// RunInfo: when Run began, the server, its idle CPU.
	measure.RunInfo
	// RTT is the median PING round trip before the methods ran.
	RTT time.Duration
	// Main, Reclaim, PEL, Ack, Slow and Large hold the results of each
	// part, in run order (Slow: one per round).
	Main, Reclaim, PEL, Ack, Slow, Large []Result
}

// Result is one method's run. The measurements cover the measured phase
// only: preparing the stream and verifying it are not included.
type Result struct {
	// Method names the run, e.g. "driver c=512", "watermill".
	Method string
	// Part is the section the run belongs to.
	Part Part
	// Sample: Entries the method had to ack (the new entries in PartPEL);
	// Wall the time from the start of consuming until every entry was
	// acked (for the driver, until its Metrics reported Entries acks; for
	// watermill, until its XACKs, counted by the hook, reached Entries);
	// RoundTrips and Commands what the method's client sent during Ran;
	// ServerCPU the server's CPU over Ran.
	measure.Sample
	// PEL is the size of the dead consumer's PEL (PartReclaim, PartPEL,
	// PartLarge).
	PEL int
	// Poison is how many entries of the PEL were at the delivery limit
	// (PartReclaim).
	Poison int
	// Concurrency is the driver's Config.Concurrency (1 for the others).
	Concurrency int
	// Ran is the whole measured phase (longer than Wall in PartPEL, which
	// runs at least Config.PELMinRun).
	Ran time.Duration
	// Setup is how long preparing the stream took (PartPEL).
	Setup time.Duration
	// Claims is how many claim function calls the client made.
	Claims int64
	// IdleChecks is how many XPENDING calls it made: the driver's check
	// for idle entries before each reclaim pass.
	IdleChecks int64
	// Read, Claimed, Acked and DeadLettered count entries read with
	// XREADGROUP, taken over by reclaim, acknowledged, and moved to the
	// dead-letter stream.
	Read, Claimed, Acked, DeadLettered int64
	// LeaseExtensions counts the driver's lease extensions.
	LeaseExtensions int64
	// LogRecords is how many records the driver logged at Info or above
	// (the level of slog.Default), LogWarnings how many of them at Warn or
	// above. Driver runs only.
	LogRecords, LogWarnings int64
	// Consumers holds what each consumer of PartSlow did.
	Consumers []ConsumerResult
	// Ideal is PartSlow's drain time with every handler of every consumer
	// busy from the burst to the end: entries x handler time / handlers.
	Ideal time.Duration
	// SlowLog is what the server's slow log recorded of the driver's
	// commands (PartLarge).
	SlowLog *SlowLogResult
	// ClientCPU is the benchmark process's user+system CPU time over Ran
	// (every goroutine: the method's client, the heap sampler, the
	// watchers); 0 where the platform does not report it.
	ClientCPU time.Duration
	// Rates holds the entries/s of every round of this method (PartMain
	// with Config.Rounds), in run order; this Result is the median one.
	Rates []float64
	// ClientCPUs holds the client CPU µs per entry of the same rounds, in
	// run order.
	ClientCPUs []float64
	// PeakHeapInuse is the highest runtime.MemStats.HeapInuse sampled every
	// 50ms during Ran; BaseHeapInuse is HeapInuse after a GC just before.
	// Both cover the whole benchmark process.
	PeakHeapInuse, BaseHeapInuse uint64
	// LastHeapInuse is HeapInuse at the end of Ran (no GC forced).
	LastHeapInuse uint64
	// Heap holds the samples behind PeakHeapInuse, every 50ms of Ran.
	Heap []HeapSample
	// Alloc is the bytes the process allocated during Ran (TotalAlloc
	// delta).
	Alloc uint64
	// Verified is true when the end state was checked and correct.
	Verified bool
	// Problem says what went wrong when the run failed.
	Problem string
}

// ConsumerResult is one consumer of PartSlow.
type ConsumerResult struct {
	// Name is the consumer's name in the group.
	Name string
	// Handled is how many entries it acked.
	Handled int64
	// MaxHeld is the most entries it had pending at once, sampled with
	// XPENDING every slowSample: queued, running, or handled and not yet
	// acked.
	MaxHeld int64
	// Samples is how many XPENDING samples were taken.
	Samples int
}

// SlowLogResult is what SLOWLOG GET said after PartLarge, which set
// slowlog-log-slower-than to 0 so that every command is recorded.
type SlowLogResult struct {
	// Commands is how many commands of the driver's client were recorded.
	Commands int
	// Slowest are the longest of them, longest first (at most 5).
	Slowest []SlowCommand
	// OverLimit is how many took TargetLargeCommand or longer.
	OverLimit int
}

// SlowCommand is one slow log entry.
type SlowCommand struct {
	// Name is the command, with the function's name for FCALL, e.g.
	// "XREADGROUP", "FCALL pelwarden_v1_claim".
	Name string
	// Duration is the server's execution time.
	Duration time.Duration
}

// HeapSpan sums up the heap samples of one slice of a run.
type HeapSpan struct {
	// Until is the end of the slice, from the start of the run.
	Until time.Duration
	// Done is the entries acked by then (-1 when unknown).
	Done int64
	// MaxInuse and MaxLive are the highest HeapInuse and live heap sampled
	// in the slice.
	MaxInuse, MaxLive uint64
}

// HeapSpans splits Heap into n slices of equal time and sums up each (fewer
// when the run has fewer samples).
func (r *Result) HeapSpans(n int) []HeapSpan {
	if len(r.Heap) == 0 || n < 1 {
		return nil
	}
	total := r.Heap[len(r.Heap)-1].At
	spans := make([]HeapSpan, 0, n)
	i := 0
	for k := 1; k <= n && i < len(r.Heap); k++ {
		until := total * time.Duration(k) / time.Duration(n)
		sp := HeapSpan{Until: until, Done: -1}
		for ; i < len(r.Heap) && (r.Heap[i].At <= until || k == n); i++ {
			h := r.Heap[i]
			sp.MaxInuse, sp.MaxLive, sp.Done = max(sp.MaxInuse, h.Inuse), max(sp.MaxLive, h.Live), h.Done
		}
		if sp.MaxInuse > 0 {
			spans = append(spans, sp)
		}
	}
	return spans
}

// HeapGrowth compares the second half of the run with the first: the
// highest HeapInuse sampled in the second half divided by the highest in
// the first. Memory that stays flat while a run goes on gives about 1; a
// leak gives more. 0 when there are too few samples.
func (r *Result) HeapGrowth() float64 {
	spans := r.HeapSpans(2)
	if len(spans) < 2 || spans[0].MaxInuse == 0 {
		return 0
	}
	return float64(spans[1].MaxInuse) / float64(spans[0].MaxInuse)
}

// ClientCPUPerEntry is the benchmark process's CPU time per entry, in
// microseconds.
func (r *Result) ClientCPUPerEntry() float64 {
	return measure.PerEntry(float64(r.ClientCPU)/float64(time.Microsecond), r.Entries)
}

// AllocPerEntry is the bytes the process allocated per entry.
func (r *Result) AllocPerEntry() float64 { return measure.PerEntry(float64(r.Alloc), r.Entries) }

// The targets for the driver with its defaults, side by side in one run.
const (
	// TargetVsWatermill: on new entries the driver consumes at least 30
	// times as many entries per second as watermill-redisstream.
	TargetVsWatermill = 30.0
	// TargetVsRaw: on new entries the driver reaches at least 90% of the
	// raw loop.
	TargetVsRaw = 0.9
	// TargetClientVsRaw: on new entries the driver's client CPU per entry
	// is at most 1.3 times the raw loop's (the median of the rounds'
	// ratios).
	TargetClientVsRaw = 1.3
	// TargetReclaimVsClaim: reclaiming a dead consumer's PEL, the driver
	// with its defaults reaches at least 95% of the Claim+Ack loop's rate
	// (the median of the rounds' ratios)...
	TargetReclaimVsClaim = 0.95
	// TargetReclaimVsClaimRound: ... and at least 90% in every round.
	TargetReclaimVsClaimRound = 0.90
	// TargetReclaimLogs: the driver writes at most this many log records
	// at the default level (Info) while it drains that PEL.
	TargetReclaimLogs = 50
	// TargetSlowShare: each of PartSlow's two consumers handles at least
	// this share of the burst.
	TargetSlowShare = 0.35
	// TargetSlowHeld: neither of PartSlow's consumers ever holds more than
	// this many times Concurrency entries.
	TargetSlowHeld = 4
	// TargetSlowDrain: PartSlow's burst drains within this many times the
	// ideal time.
	TargetSlowDrain = 2.5
	// TargetLargeCommand: in PartLarge no command of the driver takes this
	// long or longer on the server.
	TargetLargeCommand = 100 * time.Millisecond
)

// TargetHeapGrowth is "flat" memory: the driver's peak heap with
// the largest PEL is at most this many times its peak with an empty PEL,
// and a drain's peak in its second half at most this many times its first.
const TargetHeapGrowth = 1.25

// roundsNote explains the rows of a part run in rounds ("" for one round).
func roundsNote(rounds int) string {
	if rounds < 2 {
		return ""
	}
	return fmt.Sprintf(" (each row the median of %d interleaved rounds, ratios the median of the ratios within a round)", rounds)
}

// fmtRates shows the entries/s of every round in thousands, "-" for one.
func fmtRates(rates []float64) string {
	if len(rates) < 2 {
		return "-"
	}
	parts := make([]string, len(rates))
	for i, x := range rates {
		parts[i] = fmt.Sprintf("%.0fk", x/1000)
	}
	return strings.Join(parts, " ")
}

func find(rs []Result, pred func(*Result) bool) *Result {
	for i := range rs {
		if pred(&rs[i]) {
			return &rs[i]
		}
	}
	return nil
}

// WriteTable prints the report: a table per part with ratios, then the
// targets with their verdicts.
func WriteTable(w io.Writer, rep Report) error {
	ew := &measure.ReportWriter{W: w}
	cfg := rep.Config
	label := ""
	if cfg.ServerLabel != "" {
		label = " [" + cfg.ServerLabel + "]"
	}
	ew.Printf("pelwarden consume benchmark, %s\n", rep.Started.UTC().Format(time.RFC3339))
	ew.Printf("server: %s%s; idle CPU %s per second; PING round trip %s\n", rep.Server, label,
		measure.FormatDuration(rep.IdleCPU), measure.FormatDuration(rep.RTT))
	ew.Printf("client: %s %s/%s, %d CPUs, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	ew.Printf("entries: fields n and payload (%d bytes); heap = the whole bench process (peak HeapInuse sampled every 50ms, over a post-GC baseline)\n", cfg.PayloadBytes)
	ew.Printf("driver defaults: only Stream, Group, Consumer, Handler, CreateGroup (and a counting Logger and Metrics) set; other fields as each row says\n")

	var lines []string // targets
	if err := writeMain(ew, rep, &lines); err != nil {
		return err
	}
	if err := writeReclaim(ew, rep, &lines); err != nil {
		return err
	}
	pelFlat, err := writePEL(ew, rep)
	if err != nil {
		return err
	}
	if err := writeAck(ew, rep); err != nil {
		return err
	}
	if err := writeSlow(ew, rep, &lines); err != nil {
		return err
	}
	if err := writeLarge(ew, rep, &lines); err != nil {
		return err
	}

	if len(lines) > 0 {
		ew.Printf("\ntargets (the driver with its defaults):\n%s\n", strings.Join(lines, "\n"))
	}
	var flat []string
	for i := range rep.Reclaim {
		r := &rep.Reclaim[i]
		if x := r.HeapGrowth(); x > 0 {
			flat = append(flat, fmt.Sprintf("  %s: heap flat while draining (peak of the second half <= %gx the first): %s  %s",
				r.Method, TargetHeapGrowth, measure.FormatRatio(x), measure.Verdict(x <= TargetHeapGrowth)))
		}
	}
	flat = append(flat, pelFlat...)
	if len(flat) > 0 {
		ew.Printf("\ntargets (client memory stays flat):\n%s\n", strings.Join(flat, "\n"))
	}
	return ew.Err
}

// isDriver reports whether a row is a driver run.
func isDriver(r *Result) bool { return strings.HasPrefix(r.Method, "driver") }

func writeMain(ew *measure.ReportWriter, rep Report, lines *[]string) error {
	cfg := rep.Config
	if len(rep.Main) == 0 {
		return nil
	}
	raw := find(rep.Main, func(r *Result) bool { return strings.HasPrefix(r.Method, "raw") })
	wm := find(rep.Main, func(r *Result) bool { return r.Method == "watermill" })
	rounds := roundsNote(cfg.Rounds)
	if cfg.Rounds > 1 && !cfg.SkipWatermill {
		rounds = strings.TrimSuffix(rounds, ")") + "; watermill ran once)"
	}
	ew.Printf("\n== main path: %d new entries per method, no-op handler%s ==\n", cfg.Entries, rounds)
	tw := newTable(ew, "method\twall\tentries/s\tall rounds\tvs watermill\tvs raw\tround trips/entry\tserver CPU µs/entry\tclient CPU µs/entry\tpeak heap\tbaseline heap\talloc B/entry\tlog records\tend state\t")
	for i := range rep.Main {
		r := &rep.Main[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%.2f\t%.2f\t%s\t%s\t%.0f\t%s\t%s\t\n", r.Method,
			measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()), fmtRates(r.Rates),
			vs(r, wm), vs(r, raw), r.RoundTripsPerEntry(), r.CPUPerEntry(), r.ClientCPUPerEntry(),
			fmtBytes(r.PeakHeapInuse), fmtBytes(r.BaseHeapInuse), r.AllocPerEntry(), logs(r), state(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems(ew, rep.Main)
	for i := range rep.Main {
		r := &rep.Main[i]
		if !isDriver(r) {
			continue
		}
		if wm != nil {
			x := measure.Ratio(r.EntriesPerSecond(), wm.EntriesPerSecond())
			*lines = append(*lines, fmt.Sprintf("  main path, %s: entries/s >= %gx watermill-redisstream: %s  %s", r.Method, TargetVsWatermill, measure.FormatRatio(x), measure.Verdict(x >= TargetVsWatermill)))
		}
		if raw != nil {
			x := ratioTo(r, raw)
			*lines = append(*lines, fmt.Sprintf("  main path, %s: entries/s >= %.0f%% of the raw loop: %.0f%%  %s", r.Method, TargetVsRaw*100, x*100, measure.Verdict(x >= TargetVsRaw)))
			if xs := clientRatios(r, raw); xs != nil {
				x := xs[(len(xs)-1)/2]
				*lines = append(*lines, fmt.Sprintf("  main path, %s: client CPU per entry <= %gx the raw loop's (median of the rounds): %s, rounds %s-%s  %s",
					r.Method, TargetClientVsRaw, measure.FormatRatio(x), measure.FormatRatio(xs[0]), measure.FormatRatio(xs[len(xs)-1]),
					measure.Verdict(x <= TargetClientVsRaw)))
			}
		}
	}
	return nil
}

func writeReclaim(ew *measure.ReportWriter, rep Report, lines *[]string) error {
	cfg := rep.Config
	if len(rep.Reclaim) == 0 {
		return nil
	}
	claim := find(rep.Reclaim, func(r *Result) bool { return strings.HasPrefix(r.Method, "Claim") })
	tb := find(rep.Reclaim, func(r *Result) bool { return strings.HasPrefix(r.Method, "textbook") })
	poison := "no poison entries"
	if cfg.PoisonEvery > 0 {
		poison = fmt.Sprintf("1 in %d poison (at %d deliveries, dead-lettered on the first claim)", cfg.PoisonEvery, driver.DefaultMaxDeliveries)
	}
	ew.Printf("\n== reclaim path: a PEL of %d entries left by a dead consumer, %s, idle for %v (past the default MinIdle, %v)%s ==\n",
		cfg.ReclaimEntries, poison, reclaimIdle, driver.DefaultMinIdle, roundsNote(cfg.Rounds))
	tw := newTable(ew, "method\twall\tentries/s\tall rounds\tvs Claim+Ack loop\tvs textbook\tround trips/entry\tclaim calls\tserver CPU µs/entry\tdead-lettered\tlease extensions\tlog records\tpeak heap\talloc B/entry\tend state\t")
	for i := range rep.Reclaim {
		r := &rep.Reclaim[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%d\t%.2f\t%d\t%s\t%s\t%s\t%.0f\t%s\t\n", r.Method,
			measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()), fmtRates(r.Rates),
			vs(r, claim), vs(r, tb), r.RoundTripsPerEntry(), r.Claims, r.CPUPerEntry(), r.DeadLettered,
			driverOnly(r, r.LeaseExtensions), logs(r), fmtBytes(r.PeakHeapInuse), r.AllocPerEntry(), state(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems(ew, rep.Reclaim)
	for i := range rep.Reclaim {
		if err := writeHeapOverTime(ew, &rep.Reclaim[i]); err != nil {
			return err
		}
	}
	d := find(rep.Reclaim, isDriver)
	if d == nil {
		return nil
	}
	if claim != nil {
		for i := range rep.Reclaim {
			r := &rep.Reclaim[i]
			if !isDriver(r) {
				continue
			}
			x, least := ratioTo(r, claim), leastRatio(r, claim)
			*lines = append(*lines, fmt.Sprintf("  reclaim, %s: entries/s >= %.0f%% of the Claim+Ack loop (median of the rounds), >= %.0f%% in every round: %.0f%%, least %.0f%%  %s",
				r.Method, TargetReclaimVsClaim*100, TargetReclaimVsClaimRound*100, x*100, least*100,
				measure.Verdict(x >= TargetReclaimVsClaim && least >= TargetReclaimVsClaimRound)))
		}
	}
	if ctl := find(rep.Reclaim, func(r *Result) bool { return strings.HasPrefix(r.Method, controlPrefix) }); ctl != nil && claim != nil {
		*lines = append(*lines, fmt.Sprintf("  reclaim, control: the Claim+Ack loop against itself: %.0f%% (median of the rounds), least %.0f%%, most %.0f%% (no target: the machine's noise)",
			ratioTo(ctl, claim)*100, leastRatio(ctl, claim)*100, mostRatio(ctl, claim)*100))
	}
	if tb != nil {
		*lines = append(*lines, fmt.Sprintf("  reclaim, driver: entries/s vs the textbook loop: %s (no target; about 9x expected on loopback)", measure.FormatRatio(ratioTo(d, tb))))
	}
	*lines = append(*lines, fmt.Sprintf("  reclaim, driver: log records at the default level <= %d: %d (%d at Warn or above)  %s", TargetReclaimLogs, d.LogRecords, d.LogWarnings, measure.Verdict(d.LogRecords <= TargetReclaimLogs)))
	return nil
}

// writePEL prints PartPEL and returns its target line.
func writePEL(ew *measure.ReportWriter, rep Report) ([]string, error) {
	cfg := rep.Config
	if len(rep.PEL) == 0 {
		return nil, nil
	}
	pel0 := find(rep.PEL, func(r *Result) bool { return r.PEL == 0 })
	ew.Printf("\n== memory as the PEL grows: the driver (defaults, MinIdle %v, ReclaimInterval %v) consumes %d new entries while its reclaim passes walk a PEL that is not idle; each run lasts at least %v ==\n",
		pelMinIdle, pelReclaimInterval, cfg.PELNewEntries, cfg.PELMinRun)
	tw := newTable(ew, "PEL\tsetup\twall to last ack\tentries/s\tran\tidle checks\tclaim calls\tround trips\tserver CPU\tpeak heap\tvs PEL 0\tbaseline heap\talloc B/new entry\tend state\t")
	for i := range rep.PEL {
		r := &rep.PEL[i]
		growth := "-"
		if pel0 != nil && pel0.PeakHeapInuse > 0 {
			growth = measure.FormatRatio(float64(r.PeakHeapInuse) / float64(pel0.PeakHeapInuse))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", measure.FormatCount(float64(r.PEL)),
			measure.FormatDuration(r.Setup), measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()),
			measure.FormatDuration(r.Ran), r.IdleChecks, r.Claims, r.RoundTrips, measure.FormatDuration(r.ServerCPU),
			fmtBytes(r.PeakHeapInuse), growth, fmtBytes(r.BaseHeapInuse), r.AllocPerEntry(), state(r))
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	problems(ew, rep.PEL)
	if pel0 == nil || len(rep.PEL) < 2 {
		return nil, nil
	}
	big := &rep.PEL[len(rep.PEL)-1]
	x := measure.Ratio(float64(big.PeakHeapInuse), float64(pel0.PeakHeapInuse))
	return []string{fmt.Sprintf("  peak heap flat (PEL %s <= %gx PEL 0): %s vs %s (%s)  %s", measure.FormatCount(float64(big.PEL)), TargetHeapGrowth,
		fmtBytes(big.PeakHeapInuse), fmtBytes(pel0.PeakHeapInuse), measure.FormatRatio(x), measure.Verdict(x <= TargetHeapGrowth))}, nil
}

func writeAck(ew *measure.ReportWriter, rep Report) error {
	if len(rep.Ack) == 0 {
		return nil
	}
	xack := find(rep.Ack, func(r *Result) bool { return r.Method == "XACK" })
	ew.Printf("\n== acks: %d pending entries acked in batches of %d, one connection ==\n", rep.Config.AckEntries, driver.DefaultAckBatch)
	tw := newTable(ew, "method\twall\tentries/s\tround trips/entry\tserver CPU µs/entry\tvs XACK\tclient CPU µs/entry\tend state\t")
	for i := range rep.Ack {
		r := &rep.Ack[i]
		x := "-"
		if xack != nil && xack.CPUPerEntry() > 0 {
			x = measure.FormatRatio(r.CPUPerEntry() / xack.CPUPerEntry())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t%.2f\t%s\t%.2f\t%s\t\n", r.Method,
			measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()),
			r.RoundTripsPerEntry(), r.CPUPerEntry(), x, r.ClientCPUPerEntry(), state(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems(ew, rep.Ack)
	return nil
}

func writeSlow(ew *measure.ReportWriter, rep Report, lines *[]string) error {
	cfg := rep.Config
	if len(rep.Slow) == 0 {
		return nil
	}
	first := &rep.Slow[0]
	ew.Printf("\n== slow handlers: %d consumers with the driver's defaults (Concurrency %d), handler %v, a burst of %d entries added at once while both wait; ideal drain %s (entries x handler time / %d handlers); pending entries per consumer sampled every %v; one row per round ==\n",
		len(first.Consumers), first.Concurrency, cfg.SlowHandlerTime, cfg.SlowEntries, measure.FormatDuration(first.Ideal),
		len(first.Consumers)*first.Concurrency, slowSample)
	tw := newTable(ew, "method\tdrain\tvs ideal\thandled\tshares\tmost held\tsamples\tround trips/entry\tserver CPU µs/entry\tlog records\tend state\t")
	for i := range rep.Slow {
		r := &rep.Slow[i]
		var handled, shares, held []string
		samples := 0
		for _, c := range r.Consumers {
			handled = append(handled, fmt.Sprint(c.Handled))
			shares = append(shares, fmt.Sprintf("%.0f%%", 100*share(r, c)))
			held = append(held, fmt.Sprint(c.MaxHeld))
			samples = max(samples, c.Samples)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%.4f\t%.2f\t%s\t%s\t\n", r.Method,
			measure.FormatDuration(r.Wall), measure.FormatRatio(drainRatio(r)),
			strings.Join(handled, " / "), strings.Join(shares, " / "), strings.Join(held, " / "), samples,
			r.RoundTripsPerEntry(), r.CPUPerEntry(), logs(r), state(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems(ew, rep.Slow)

	var low, high *ConsumerResult
	var lowRun, highRun *Result
	drains := make([]float64, 0, len(rep.Slow))
	for i := range rep.Slow {
		r := &rep.Slow[i]
		drains = append(drains, drainRatio(r))
		for j := range r.Consumers {
			c := &r.Consumers[j]
			if low == nil || share(r, *c) < share(lowRun, *low) {
				low, lowRun = c, r
			}
			if high == nil || c.MaxHeld > high.MaxHeld {
				high, highRun = c, r
			}
		}
	}
	runs := ""
	if len(rep.Slow) > 1 {
		runs = fmt.Sprintf(" over %d rounds", len(rep.Slow))
	}
	if low != nil {
		x := share(lowRun, *low)
		*lines = append(*lines, fmt.Sprintf("  slow handlers: each consumer handles >= %.0f%%: lowest%s %.0f%% (%s, %s)  %s", TargetSlowShare*100, runs, x*100, low.Name, lowRun.Method, measure.Verdict(x >= TargetSlowShare)))
		limit := int64(TargetSlowHeld * highRun.Concurrency)
		*lines = append(*lines, fmt.Sprintf("  slow handlers: no consumer holds more than %dx Concurrency (%d): most%s %d (%s, %s)  %s", TargetSlowHeld, limit, runs, high.MaxHeld, high.Name, highRun.Method, measure.Verdict(high.MaxHeld <= limit)))
	}
	sorted := slices.Clone(drains)
	slices.Sort(sorted)
	med := sorted[(len(sorted)-1)/2]
	worst := ""
	if len(sorted) > 1 {
		worst = fmt.Sprintf(" (median of %d rounds; slowest %s)", len(sorted), measure.FormatRatio(sorted[len(sorted)-1]))
	}
	*lines = append(*lines, fmt.Sprintf("  slow handlers: the burst drains within %gx the ideal time: %s%s  %s", TargetSlowDrain, measure.FormatRatio(med), worst, measure.Verdict(med <= TargetSlowDrain)))
	return nil
}

// share is c's part of r's entries.
func share(r *Result, c ConsumerResult) float64 {
	return measure.Ratio(float64(c.Handled), float64(r.Entries))
}

// drainRatio is r's drain time over the ideal.
func drainRatio(r *Result) float64 { return measure.Ratio(float64(r.Wall), float64(r.Ideal)) }

func writeLarge(ew *measure.ReportWriter, rep Report, lines *[]string) error {
	cfg := rep.Config
	if len(rep.Large) == 0 {
		return nil
	}
	ew.Printf("\n== large entries: %d entries of %s, %d of them pending at a dead consumer (idle past MinIdle), the rest new; the server's slow log records every command (slowlog-log-slower-than 0, restored afterwards) ==\n",
		cfg.LargeEntries, fmtBytes(uint64(cfg.LargeEntryBytes)), cfg.LargeEntries/2)
	tw := newTable(ew, "method\twall\tentries/s\tread\tclaimed\tround trips\tcommands logged\tlongest command\ttook\tat least 100ms\tpeak heap\tlog records\tend state\t")
	for i := range rep.Large {
		r := &rep.Large[i]
		logged, longest, took, over := "-", "-", "-", "-"
		if sl := r.SlowLog; sl != nil {
			logged, over = fmt.Sprint(sl.Commands), fmt.Sprint(sl.OverLimit)
			if len(sl.Slowest) > 0 {
				longest, took = sl.Slowest[0].Name, measure.FormatDuration(sl.Slowest[0].Duration)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Method,
			measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()), r.Read, r.Claimed, r.RoundTrips,
			logged, longest, took, over, fmtBytes(r.PeakHeapInuse), logs(r), state(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems(ew, rep.Large)
	for i := range rep.Large {
		r := &rep.Large[i]
		if r.SlowLog == nil || len(r.SlowLog.Slowest) == 0 {
			continue
		}
		var s []string
		for _, c := range r.SlowLog.Slowest {
			s = append(s, fmt.Sprintf("%s %s", c.Name, measure.FormatDuration(c.Duration)))
		}
		ew.Printf("slowest commands, %s: %s\n", r.Method, strings.Join(s, ", "))
		*lines = append(*lines, fmt.Sprintf("  large entries: no command takes %v or longer: %d (longest %s, %s)  %s", TargetLargeCommand,
			r.SlowLog.OverLimit, r.SlowLog.Slowest[0].Name, measure.FormatDuration(r.SlowLog.Slowest[0].Duration), measure.Verdict(r.SlowLog.OverLimit == 0)))
	}
	return nil
}

// logs shows a driver run's log records, "-" for the other methods.
func logs(r *Result) string {
	if !isDriver(r) {
		return "-"
	}
	return fmt.Sprint(r.LogRecords)
}

// driverOnly shows n for a driver run, "-" for the other methods.
func driverOnly(r *Result, n int64) string {
	if !isDriver(r) {
		return "-"
	}
	return fmt.Sprint(n)
}

// writeHeapOverTime prints the heap of one run by tenths of its time.
func writeHeapOverTime(ew *measure.ReportWriter, r *Result) error {
	spans := r.HeapSpans(10)
	if len(spans) == 0 {
		return nil
	}
	ew.Printf("\nheap over time, %s (tenths of the run; peak %s, last %s, baseline %s):\n", r.Method,
		fmtBytes(r.PeakHeapInuse), fmtBytes(r.LastHeapInuse), fmtBytes(r.BaseHeapInuse))
	tw := newTable(ew, "until\tentries acked\tmax HeapInuse\tmax live heap\t")
	for _, sp := range spans {
		done := "-"
		if sp.Done >= 0 {
			done = measure.FormatCount(float64(sp.Done))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", measure.FormatDuration(sp.Until), done, fmtBytes(sp.MaxInuse), fmtBytes(sp.MaxLive))
	}
	return tw.Flush()
}

func newTable(w io.Writer, header string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	return tw
}

func problems(ew *measure.ReportWriter, rs []Result) {
	for i := range rs {
		if p := rs[i].Problem; p != "" {
			ew.Printf("  %s: %s\n", rs[i].Method, p)
		}
	}
}

func vs(r, base *Result) string {
	if base == nil {
		return "-"
	}
	return measure.FormatRatio(ratioTo(r, base))
}

// ratioTo is r's entries/s over base's. With several rounds of both it is
// the median of the ratios within each round (runs of one round are
// neighbours in time, so a slow spell of a shared machine hits both),
// otherwise the ratio of the two Results.
func ratioTo(r, base *Result) float64 {
	xs := roundRatios(r, base)
	return xs[(len(xs)-1)/2]
}

// leastRatio is the lowest of the rounds' ratios of r to base (see
// ratioTo).
func leastRatio(r, base *Result) float64 { return roundRatios(r, base)[0] }

// mostRatio is the highest of the rounds' ratios of r to base.
func mostRatio(r, base *Result) float64 {
	xs := roundRatios(r, base)
	return xs[len(xs)-1]
}

// roundRatios returns the ratios of r to base within each round, sorted;
// without paired rounds, the one ratio of the two Results.
func roundRatios(r, base *Result) []float64 {
	if len(r.Rates) < 2 || len(r.Rates) != len(base.Rates) {
		return []float64{measure.Ratio(r.EntriesPerSecond(), base.EntriesPerSecond())}
	}
	xs := make([]float64, len(r.Rates))
	for i := range xs {
		xs[i] = measure.Ratio(r.Rates[i], base.Rates[i])
	}
	slices.Sort(xs)
	return xs
}

// clientRatios returns the ratios of r's client CPU per entry to base's
// within each round, sorted (without paired rounds, the one ratio of the
// two Results); nil where the platform reports no CPU time.
func clientRatios(r, base *Result) []float64 {
	if len(r.ClientCPUs) < 2 || len(r.ClientCPUs) != len(base.ClientCPUs) {
		if r.ClientCPU == 0 || base.ClientCPU == 0 {
			return nil
		}
		return []float64{measure.Ratio(r.ClientCPUPerEntry(), base.ClientCPUPerEntry())}
	}
	xs := make([]float64, len(r.ClientCPUs))
	for i := range xs {
		if r.ClientCPUs[i] == 0 || base.ClientCPUs[i] == 0 {
			return nil
		}
		xs[i] = r.ClientCPUs[i] / base.ClientCPUs[i]
	}
	slices.Sort(xs)
	return xs
}

func state(r *Result) string {
	if r.Verified {
		return "verified"
	}
	return "FAILED"
}

func fmtBytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
}

func fmtCountShort(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprint(n)
	}
}
