package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/internal/reclaimbench"
)

// maxBenchEntries bounds --entries and --proxied-entries: each entry is
// written to the server (about 200 bytes with its PEL entry), per method.
const maxBenchEntries = 10_000_000

// benchJSON is the --json output of bench (durations in nanoseconds).
type benchJSON struct {
	Server  string                    `json:"server"`
	Target  string                    `json:"target"`
	IdleCPU time.Duration             `json:"idle_cpu_ns"`
	Links   []reclaimbench.LinkReport `json:"links"`
}

func (a *app) benchCommand() *cobra.Command {
	var (
		entries, proxiedEntries, pageSize int
		methods, links                    string
		latency                           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare reclaiming a dead consumer's PEL: pelwarden vs the textbook loop and others",
		Long: `bench builds the same pending entries list (live, poison and deleted entries)
for each method and reclaims it: pelwarden's claim function, the textbook
client-side loop (XAUTOCLAIM, XPENDING per entry, XADD+XACK), a
watermill-style loop and the pipelined floor, on loopback and through a proxy
that adds latency. It verifies each end state and prints a table with ratios
against the textbook loop. See BENCHMARKS.md.

Without --redis it starts a throwaway server like the demo does (image
$PELWARDEN_BENCH_IMAGE, else $PELWARDEN_DEMO_IMAGE, else ` + defaultThrowawayImage + `). With --redis it
creates keys {pwbench-…} and deletes them afterwards. A Redis Cluster is not
supported.`,
		Example: `  pelwarden bench --entries 20000 --links loopback
  pelwarden bench --redis redis://10.0.0.5:6379 --latency 2ms`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if a.clusterURL != "" {
				return usageErrorf("bench runs against one server; --cluster is not supported")
			}
			if err := intInRange("entries", entries, 1, maxBenchEntries); err != nil {
				return err
			}
			if err := intInRange("proxied-entries", proxiedEntries, 1, maxBenchEntries); err != nil {
				return err
			}
			if err := nonEmptyFlag(cmd, "methods", methods); err != nil {
				return err
			}
			if err := nonEmptyFlag(cmd, "links", links); err != nil {
				return err
			}
			if err := intInRange("page-size", pageSize, 1, 10000); err != nil {
				return err
			}
			if err := positiveDuration("latency", latency); err != nil {
				return err
			}
			ms, err := reclaimbench.ParseMethods(methods)
			if err != nil {
				return usageErrorf("--methods: %v", err)
			}
			ls, err := reclaimbench.ParseLinks(links)
			if err != nil {
				return usageErrorf("--links: %v", err)
			}
			e, err := a.resolve(true)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			live := newLiveLine(a.stderr, 0)
			defer live.Close()
			cfg := reclaimbench.Config{
				Entries: entries, ProxiedEntries: proxiedEntries, Methods: ms, Links: ls,
				RoundTripLatency: latency, PageSize: pageSize,
				Logf: func(format string, args ...any) { live.Event(fmt.Sprintf(format, args...)) },
			}
			target := ""
			if e == nil {
				tw, err := startThrowaway(ctx, []string{"PELWARDEN_BENCH_IMAGE", "PELWARDEN_DEMO_IMAGE"}, live.Event)
				if err != nil {
					return err
				}
				defer tw.Close()
				cfg.Options, target = tw.opts, tw.label
			} else {
				c, err := e.client(ctx) // checks the server answers
				if err != nil {
					return err
				}
				_ = c.Close()
				opts := *e.opts
				cfg.Options, target = &opts, e.shown
			}
			cfg.ServerLabel = target
			rep, err := reclaimbench.Run(ctx, cfg)
			live.Close()
			if a.json {
				if jerr := a.printJSON(benchJSON{Server: rep.Server, Target: target, IdleCPU: rep.IdleCPU, Links: rep.Links}); jerr != nil {
					return jerr
				}
			} else if werr := reclaimbench.WriteTable(a.stdout, rep); werr != nil && err == nil {
				err = werr
			}
			if err != nil {
				return failuref("bench: %v", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&entries, "entries", reclaimbench.DefaultEntries, "PEL size per method on loopback")
	f.IntVar(&proxiedEntries, "proxied-entries", reclaimbench.DefaultProxiedEntries, "PEL size per method through the latency proxy")
	f.StringVar(&methods, "methods", "all", "comma-separated methods: pelwarden, textbook, watermill, pipelined")
	f.StringVar(&links, "links", "all", "comma-separated links: loopback, proxied")
	f.DurationVar(&latency, "latency", reclaimbench.DefaultRoundTripLatency, "round-trip latency the proxy adds")
	f.IntVar(&pageSize, "page-size", reclaimbench.DefaultPageSize, "page size of pelwarden and the pipelined loop")
	return cmd
}
