package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/cmd/internal/bench/reclaim"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// maxBenchEntries bounds --entries and --proxied-entries: each entry is
// written to the server (about 200 bytes with its PEL entry), per method.
const maxBenchEntries = 10_000_000

// suiteReclaim is the one benchmark suite of bench --suite.
const suiteReclaim = "reclaim"

// consumeSuiteMoved says where the consume suite went: it compares the
// driver with watermill-redisstream, and the CLI, which every user installs,
// must not build Watermill for it.
const consumeSuiteMoved = "the consume suite (the driver against a raw loop and watermill-redisstream) is not part of the pelwarden binary; " +
	"run it from pelwarden's repository: go run ./benchmarks/cmd/consume (or make bench BENCH_SUITE=consume; see BENCHMARKS.md)"

// removedConsumeFlags are the flags of the consume suite: still accepted
// (hidden) so that an old command line gets consumeSuiteMoved, not
// "unknown flag". The value is the new program's flag.
var removedConsumeFlags = []struct{ old, now string }{
	{"consume-entries", "--entries"},
	{"consume-parts", "--parts"},
	{"consume-drivers", "--drivers"},
	{"consume-rounds", "--rounds"},
	{"consume-watermill", "--watermill"},
	{"consume-reclaim-entries", "--reclaim-entries"},
	{"consume-profile-dir", "--profile-dir"},
}

// benchJSON is the --json output of bench (durations in nanoseconds).
type benchJSON struct {
	Server  string               `json:"server"`
	Target  string               `json:"target"`
	IdleCPU time.Duration        `json:"idle_cpu_ns"`
	Links   []reclaim.LinkReport `json:"links"`
}

// benchOptions are bench's flags.
type benchOptions struct {
	suite string

	entries, proxiedEntries, pageSize int
	methods, links                    string
	latency                           time.Duration
}

func (a *app) benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pelwarden's reclaim against the textbook loop, a watermill-style loop and the pipelined floor",
		Long: `bench runs pelwarden's reclaim benchmark and prints its tables with ratios
and targets. See BENCHMARKS.md.

It builds the same pending entries list (live, poison and deleted entries)
for each method and reclaims it: pelwarden's claim function, the textbook
client-side loop (XAUTOCLAIM, XPENDING per entry, XADD+XACK), a
watermill-style loop and the pipelined floor, on loopback and through a
proxy that adds latency. It verifies each end state. --suite reclaim is the
default and the only suite: the consume benchmark (the driver against a raw
loop and watermill-redisstream) runs from pelwarden's repository with
go run ./benchmarks/cmd/consume.

Without --redis it starts a throwaway server like the demo does (image
$PELWARDEN_BENCH_IMAGE, else $PELWARDEN_DEMO_IMAGE, else ` + defaultThrowawayImage + `). With --redis it
creates keys {pwbench-…} and deletes them afterwards. A Redis Cluster is not
supported. --json prints the results as JSON.`,
		Example: `  pelwarden bench --entries 20000 --links loopback
  pelwarden bench --redis redis://10.0.0.5:6379 --latency 2ms`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.runBench(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.suite, "suite", suiteReclaim, "benchmarks to run: reclaim (the consume suite runs from the repository: go run ./benchmarks/cmd/consume)")
	f.IntVar(&o.entries, "entries", reclaim.DefaultEntries, "PEL size per method on loopback")
	f.IntVar(&o.proxiedEntries, "proxied-entries", reclaim.DefaultProxiedEntries, "PEL size per method through the latency proxy")
	f.StringVar(&o.methods, "methods", "all", "comma-separated methods: pelwarden, textbook, watermill, pipelined")
	f.StringVar(&o.links, "links", "all", "comma-separated links: loopback, proxied")
	f.DurationVar(&o.latency, "latency", reclaim.DefaultRoundTripLatency, "round-trip latency the proxy adds")
	f.IntVar(&o.pageSize, "page-size", reclaim.DefaultPageSize, "page size of pelwarden and the pipelined loop")
	for _, r := range removedConsumeFlags {
		f.String(r.old, "", "")
		_ = f.MarkHidden(r.old)
	}
	f.Lookup("consume-watermill").NoOptDefVal = "true" // a bool flag: given alone
	return cmd
}

// runBench checks the flags, finds the server and runs the suite.
func (a *app) runBench(cmd *cobra.Command, o benchOptions) error {
	switch o.suite {
	case suiteReclaim:
	case "consume", "all":
		return usageErrorf("--suite %s: %s", o.suite, consumeSuiteMoved)
	default:
		return usageErrorf("--suite must be reclaim, got %q (%s)", o.suite, consumeSuiteMoved)
	}
	for _, r := range removedConsumeFlags {
		if cmd.Flags().Changed(r.old) {
			return usageErrorf("--%s: %s, whose flag is %s", r.old, consumeSuiteMoved, r.now)
		}
	}
	if a.clusterURL != "" {
		return usageErrorf("bench runs against one server; --cluster is not supported")
	}
	if a.sentinelURL != "" {
		return usageErrorf("bench runs against one server; --sentinel is not supported")
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"entries", o.entries}, {"proxied-entries", o.proxiedEntries}} {
		if err := intInRange(n.name, n.v, 1, maxBenchEntries); err != nil {
			return err
		}
	}
	for _, n := range []struct{ name, v string }{{"methods", o.methods}, {"links", o.links}} {
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
	return nil
}
