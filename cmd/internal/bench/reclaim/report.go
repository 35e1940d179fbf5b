package reclaim

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pelwarden/pelwarden/internal/measure"
)

// Report is the outcome of Run.
type Report struct {
	// Config is the configuration used, defaults applied.
	Config Config
	// RunInfo: when Run began, the server, its idle CPU.
	measure.RunInfo
	// Links has one element per link run, in Config.Links order.
	Links []LinkReport
}

// LinkReport holds the results of every method on one link.
type LinkReport struct {
	// Link is the network path.
	Link Link
	// Entries is the scenario size of every method on this link.
	Entries int
	// RTT is the median PING round trip measured on this link before the
	// methods ran.
	RTT time.Duration
	// BaseRTT is the median PING round trip of a direct connection,
	// measured at the same time.
	BaseRTT time.Duration
	// AddedLatency is the round-trip latency the proxy is asked to add (0 on
	// loopback): RTT is about BaseRTT plus AddedLatency.
	AddedLatency time.Duration
	// ProxyDelay is the delay per direction the proxy was calibrated to so
	// that RTT is about BaseRTT+AddedLatency (its own hop and timer
	// overshoot make up the rest). 0 on loopback.
	ProxyDelay time.Duration
	// Results has one element per method run, in Config.Methods order.
	Results []Result
}

// Result returns the result of method m, or nil.
func (l *LinkReport) Result(m Method) *Result {
	for i := range l.Results {
		if l.Results[i].Method == m {
			return &l.Results[i]
		}
	}
	return nil
}

// Result is one method's run on one link. The measurements cover the reclaim
// phase only: building the scenario and verifying it are not included.
type Result struct {
	// Method and Link identify the run.
	Method Method
	Link   Link
	// Sample: Entries is the PEL size at the start (live, poison and
	// deleted), Wall the wall time of the reclaim phase.
	measure.Sample
	// Poison entries were at MaxDeliveries; Deleted ones were gone from the
	// stream while pending.
	Poison, Deleted int
	// Handled is how many entries the method handed to its handler and
	// acked; DeadLettered how many it moved to the dead-letter stream.
	Handled, DeadLettered int
	// Passes over the PEL until it was empty (1 when one pass sufficed).
	Passes int
	// IdleCPU is the part of ServerCPU the server's idle rate accounts for
	// (Report.IdleCPU per second times Wall): cron and the like, which
	// long runs pay more of. ServerCPU includes it.
	IdleCPU time.Duration
	// CommandStatsUsec is the INFO commandstats time (µs) of the commands
	// the client sent. It covers command execution only, not reading,
	// parsing and writing, so it understates per-command overhead.
	CommandStatsUsec float64
	// Verified is true when the end state was checked and correct.
	Verified bool
	// Problem says what went wrong when the run failed or the end state
	// was wrong.
	Problem string
}

// NetCPUPerEntry is the server CPU time per entry without the idle share
// (ServerCPU minus IdleCPU), in microseconds.
func (r *Result) NetCPUPerEntry() float64 {
	return measure.PerEntry(float64(max(r.ServerCPU-r.IdleCPU, 0))/float64(time.Microsecond), r.Entries)
}

// CommandStatsPerEntry is CommandStatsUsec per entry, in microseconds.
func (r *Result) CommandStatsPerEntry() float64 {
	return measure.PerEntry(r.CommandStatsUsec, r.Entries)
}

// Targets of the reclaim benchmark: pelwarden against the textbook loop.
const (
	// TargetLoopbackSpeedup: pelwarden reclaims at least 10 times as many
	// entries per second as the textbook loop on loopback.
	TargetLoopbackSpeedup = 10
	// TargetProxiedSpeedup: at least 100 times at 1 ms round trip.
	TargetProxiedSpeedup = 100
)

// WriteTable prints the report: per link a table of every method with its
// speed relative to the textbook loop, then pelwarden's ratios against the
// textbook, watermill-style and pipelined loops, then the targets.
func WriteTable(w io.Writer, rep Report) error {
	ew := &measure.ReportWriter{W: w}
	cfg := rep.Config
	label := ""
	if cfg.ServerLabel != "" {
		label = " [" + cfg.ServerLabel + "]"
	}
	ew.Printf("pelwarden reclaim benchmark, %s\n", rep.Started.UTC().Format(time.RFC3339))
	ew.Printf("server: %s%s; server idle CPU %s per second (subtracted only in \"net of idle\")\n", rep.Server, label, measure.FormatDuration(rep.IdleCPU))
	ew.Printf("client: %s %s/%s, %d CPUs\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	ew.Printf("scenario: a PEL left by a dead consumer; %s at %d deliveries (poison, max deliveries %d), %s deleted while pending; min-idle %v\n",
		every(cfg.PoisonEvery), cfg.MaxDeliveries, cfg.MaxDeliveries, every(cfg.DeletedEvery), cfg.MinIdle)
	ew.Printf("pages: pelwarden %d, textbook %d, watermill %d, pipelined %d\n",
		cfg.PageSize, cfg.TextbookPageSize, cfg.WatermillPageSize, cfg.PageSize)

	for i := range rep.Links {
		l := &rep.Links[i]
		ew.Printf("\n== %s: %d entries per method, measured round trip %s", linkTitle(l), l.Entries, measure.FormatDuration(l.RTT))
		if l.Link == LinkProxied {
			ew.Printf(" (direct %s, proxy delay %s each way)", measure.FormatDuration(l.BaseRTT), measure.FormatDuration(l.ProxyDelay))
		}
		if l.Link == LinkProxied && l.Entries < cfg.Entries {
			ew.Printf(" (fewer entries than on loopback: the per-entry loops take minutes at this latency)")
		}
		ew.Printf(" ==\n")
		base := l.Result(MethodTextbook)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "method\twall\tentries/s\tvs textbook\tround trips/entry\tcommands/entry\tserver CPU µs/entry\tnet of idle\tcmdstats µs/entry\tdead-lettered\tpasses\tend state\t\n")
		for j := range l.Results {
			r := &l.Results[j]
			vs := "-"
			if base != nil && base.EntriesPerSecond() > 0 {
				vs = measure.FormatRatio(r.EntriesPerSecond() / base.EntriesPerSecond())
			}
			state := "verified"
			if !r.Verified {
				state = "FAILED"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%s\t\n",
				r.Method, measure.FormatDuration(r.Wall), measure.FormatCount(r.EntriesPerSecond()), vs,
				r.RoundTripsPerEntry(), measure.PerEntry(float64(r.Commands), r.Entries),
				r.CPUPerEntry(), r.NetCPUPerEntry(), r.CommandStatsPerEntry(), r.DeadLettered, r.Passes, state)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for j := range l.Results {
			if p := l.Results[j].Problem; p != "" {
				ew.Printf("  %s: %s\n", l.Results[j].Method, p)
			}
		}
		if pw := l.Result(MethodPelwarden); pw != nil {
			for _, m := range []Method{MethodTextbook, MethodWatermill, MethodPipelined} {
				o := l.Result(m)
				if o == nil {
					continue
				}
				ew.Printf("pelwarden vs %-9s %s entries/s, %s round trips/entry, %s server CPU/entry\n", string(m)+":",
					measure.FormatRatio(measure.Ratio(pw.EntriesPerSecond(), o.EntriesPerSecond())),
					measure.FormatFewer(measure.Ratio(o.RoundTripsPerEntry(), pw.RoundTripsPerEntry())),
					measure.FormatRatio(measure.Ratio(pw.CPUPerEntry(), o.CPUPerEntry())))
			}
		}
	}

	var lines []string
	for i := range rep.Links {
		l := &rep.Links[i]
		pw, tb := l.Result(MethodPelwarden), l.Result(MethodTextbook)
		if pw == nil || tb == nil {
			continue
		}
		speed := measure.Ratio(pw.EntriesPerSecond(), tb.EntriesPerSecond())
		target := float64(TargetLoopbackSpeedup)
		if l.Link == LinkProxied {
			target = TargetProxiedSpeedup
		}
		lines = append(lines, fmt.Sprintf("  %s: entries/s >= %gx textbook: %s  %s", linkTitle(l), target, measure.FormatRatio(speed), measure.Verdict(speed >= target)))
		cpu := measure.Ratio(pw.CPUPerEntry(), tb.CPUPerEntry())
		lines = append(lines, fmt.Sprintf("  %s: server CPU/entry <= textbook: %.2f vs %.2f µs (%s)  %s", linkTitle(l),
			pw.CPUPerEntry(), tb.CPUPerEntry(), measure.FormatRatio(cpu), measure.Verdict(cpu <= 1)))
	}
	if len(lines) > 0 {
		ew.Printf("\ntargets (pelwarden against the textbook loop):\n%s\n", strings.Join(lines, "\n"))
	}
	return ew.Err
}

func linkTitle(l *LinkReport) string {
	if l.Link == LinkProxied {
		return fmt.Sprintf("proxied (+%v round trip)", l.AddedLatency)
	}
	return string(l.Link)
}

func every(n int) string {
	if n <= 0 {
		return "no entries"
	}
	return fmt.Sprintf("1 in %d entries (%.3g%%)", n, 100/float64(n))
}
