package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/cmd/internal/bench/consume"
	"github.com/pelwarden/pelwarden/cmd/internal/bench/reclaim"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// maxBenchEntries bounds --entries, --proxied-entries, --consume-entries and
// --consume-reclaim-entries: each entry is written to the server (about 200
// bytes with its PEL entry), per method.
const maxBenchEntries = 10_000_000

// The benchmark suites of bench --suite.
const (
	suiteReclaim = "reclaim"
	suiteConsume = "consume"
	suiteAll     = "all"
)

// benchJSON is the --json output of bench --suite reclaim (durations in
// nanoseconds).
type benchJSON struct {
	Server  string               `json:"server"`
	Target  string               `json:"target"`
	IdleCPU time.Duration        `json:"idle_cpu_ns"`
	Links   []reclaim.LinkReport `json:"links"`
}

// benchOptions are bench's flags.
type benchOptions struct {
	suite string

	// The reclaim suite.
	entries, proxiedEntries, pageSize int
	methods, links                    string
	latency                           time.Duration

	// The consume suite.
	consumeEntries, consumeReclaimEntries, consumeRounds int
	consumeParts, consumeDrivers, consumeProfileDir      string
	consumeWatermill                                     bool
}

func (a *app) benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pelwarden against the textbook loop, watermill-redisstream and the raw limit",
		Long: `bench runs pelwarden's benchmark suites (cmd/internal/bench) and prints their
tables with ratios and targets. See BENCHMARKS.md.

--suite reclaim (the default) builds the same pending entries list (live,
poison and deleted entries) for each method and reclaims it: pelwarden's claim
function, the textbook client-side loop (XAUTOCLAIM, XPENDING per entry,
XADD+XACK), a watermill-style loop and the pipelined floor, on loopback and
through a proxy that adds latency. It verifies each end state.

--suite consume measures the driver with its defaults: new entries against a
raw go-redis loop and watermill-redisstream, a dead consumer's PEL against
the claim function's page loop and the textbook loop, two consumers with slow
handlers, large entries against the slow log, acks, and memory as the PEL
grows (several minutes). --suite all runs both.

Without --redis it starts a throwaway server like the demo does (image
$PELWARDEN_BENCH_IMAGE, else $PELWARDEN_DEMO_IMAGE, else ` + defaultThrowawayImage + `). With --redis it
creates keys {pwbench-…} and deletes them afterwards. A Redis Cluster is not
supported. --json prints the reclaim suite's results as JSON.`,
		Example: `  pelwarden bench --entries 20000 --links loopback
  pelwarden bench --suite consume --consume-parts main,reclaim
  pelwarden bench --redis redis://10.0.0.5:6379 --latency 2ms`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.runBench(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.suite, "suite", suiteReclaim, "benchmarks to run: reclaim, consume or all")
	f.IntVar(&o.entries, "entries", reclaim.DefaultEntries, "reclaim suite: PEL size per method on loopback")
	f.IntVar(&o.proxiedEntries, "proxied-entries", reclaim.DefaultProxiedEntries, "reclaim suite: PEL size per method through the latency proxy")
	f.StringVar(&o.methods, "methods", "all", "reclaim suite: comma-separated methods: pelwarden, textbook, watermill, pipelined")
	f.StringVar(&o.links, "links", "all", "reclaim suite: comma-separated links: loopback, proxied")
	f.DurationVar(&o.latency, "latency", reclaim.DefaultRoundTripLatency, "reclaim suite: round-trip latency the proxy adds")
	f.IntVar(&o.pageSize, "page-size", reclaim.DefaultPageSize, "reclaim suite: page size of pelwarden and the pipelined loop")
	f.IntVar(&o.consumeEntries, "consume-entries", consume.DefaultEntries, "consume suite: stream size per method of the main path")
	f.StringVar(&o.consumeParts, "consume-parts", "all", "consume suite: comma-separated parts: main, reclaim, pel, ack, slow, large")
	f.StringVar(&o.consumeDrivers, "consume-drivers", consume.DefaultDriversSpec, "consume suite: driver configurations of the main path, comma-separated, each \"default\" (every field at its default) or options joined by /: c=N, p=N, r=N, plain or fenced, noreadclaim (Concurrency, Prefetch, ReadCount, AckMode, ReadClaim off; an option left out keeps the default)")
	f.IntVar(&o.consumeRounds, "consume-rounds", 5, "consume suite: run the methods of the main and reclaim parts this many times, interleaved, and report the median of each (watermill runs once); the slow part runs this many times")
	f.BoolVar(&o.consumeWatermill, "consume-watermill", true, "consume suite: include watermill-redisstream in the main path (over a minute)")
	f.IntVar(&o.consumeReclaimEntries, "consume-reclaim-entries", consume.DefaultReclaimEntries, "consume suite: PEL size of the reclaim part (make bench-drain: 1000000)")
	f.StringVar(&o.consumeProfileDir, "consume-profile-dir", "", "consume suite: write a CPU profile of each driver run of the main path to this directory")
	return cmd
}

// runBench checks the flags, finds the server and runs the suites.
func (a *app) runBench(cmd *cobra.Command, o benchOptions) error {
	if o.suite != suiteReclaim && o.suite != suiteConsume && o.suite != suiteAll {
		return usageErrorf("--suite must be reclaim, consume or all, got %q", o.suite)
	}
	if a.clusterURL != "" {
		return usageErrorf("bench runs against one server; --cluster is not supported")
	}
	if a.sentinelURL != "" {
		return usageErrorf("bench runs against one server; --sentinel is not supported")
	}
	if a.json && o.suite != suiteReclaim {
		return usageErrorf("--json prints the reclaim suite only; the consume suite prints its table")
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"entries", o.entries}, {"proxied-entries", o.proxiedEntries}, {"consume-entries", o.consumeEntries}, {"consume-reclaim-entries", o.consumeReclaimEntries}} {
		if err := intInRange(n.name, n.v, 1, maxBenchEntries); err != nil {
			return err
		}
	}
	if err := intInRange("consume-rounds", o.consumeRounds, 1, 100); err != nil {
		return err
	}
	for _, n := range []struct{ name, v string }{{"methods", o.methods}, {"links", o.links}, {"consume-parts", o.consumeParts}, {"consume-drivers", o.consumeDrivers}} {
		if err := nonEmptyFlag(cmd, n.name, n.v); err != nil {
			return err
		}
	}
	if err := intInRange("page-size", o.pageSize, 1, 10000); err != nil {
		return err
	}
	if err := positiveDuration("latency", o.latency); err != nil {
		return err
	}
	ms, err := reclaim.ParseMethods(o.methods)
	if err != nil {
		return usageErrorf("--methods: %v", err)
	}
	ls, err := reclaim.ParseLinks(o.links)
	if err != nil {
		return usageErrorf("--links: %v", err)
	}
	parts, err := consume.ParseParts(o.consumeParts)
	if err != nil {
		return usageErrorf("--consume-parts: %v", err)
	}
	drivers, err := consume.ParseDrivers(o.consumeDrivers)
	if err != nil {
		return usageErrorf("--consume-drivers: %v", err)
	}
	e, err := a.resolve(true)
	if err != nil {
		return err
	}

	ctx := cmd.Context()
	live := progress.New(a.stderr, 0)
	defer live.Close()
	logf := func(format string, args ...any) { live.Event(fmt.Sprintf(format, args...)) }
	srv, err := a.benchServer(ctx, e, live.Event)
	if err != nil {
		return err
	}
	defer srv.Close()

	if o.suite != suiteConsume {
		rep, err := reclaim.Run(ctx, reclaim.Config{
			Options: srv.opts, ServerLabel: srv.label, Logf: logf,
			Entries: o.entries, ProxiedEntries: o.proxiedEntries, Methods: ms, Links: ls,
			RoundTripLatency: o.latency, PageSize: o.pageSize,
		})
		live.Close()
		if a.json {
			if jerr := a.printJSON(benchJSON{Server: rep.Server, Target: srv.label, IdleCPU: rep.IdleCPU, Links: rep.Links}); jerr != nil {
				return jerr
			}
		} else if werr := reclaim.WriteTable(a.stdout, rep); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			return failuref("bench: %v", err)
		}
	}
	if o.suite == suiteReclaim {
		return nil
	}
	if o.suite == suiteAll {
		_, _ = io.WriteString(a.stdout, "\n")
	}
	rep, err := consume.Run(ctx, consume.Config{
		Options: srv.opts, ServerLabel: srv.label, Logf: logf,
		Parts: parts, Drivers: drivers, Rounds: o.consumeRounds, Entries: o.consumeEntries,
		SkipWatermill: !o.consumeWatermill, ReclaimEntries: o.consumeReclaimEntries, ProfileDir: o.consumeProfileDir,
	})
	live.Close()
	if werr := consume.WriteTable(a.stdout, rep); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return failuref("bench: %v", err)
	}
	return nil
}
