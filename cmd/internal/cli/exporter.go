package cli

import (
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/cmd/internal/httpserve"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
)

// DefaultExporterListen is the default address of `pelwarden exporter`.
const DefaultExporterListen = ":9240"

func (a *app) exporterCommand() *cobra.Command {
	var listen string
	var o prommetrics.GroupOptions
	cmd := &cobra.Command{
		Use:   "exporter [--listen ADDR] [--stream NAME|GLOB]... [--partitioned NAME]... [--limit NAME]...",
		Short: "Serve the state of consumer groups as Prometheus metrics",
		Long: `exporter serves /metrics for Prometheus, the way redis_exporter does: per
stream and group the pending entries, the lag, the oldest pending entry's
age, the consumers and the stalled ones and the entries they hold; per
stream its length and its dead-letter stream's records; per partition of a
partitioned stream (ordered mode) its lease owner and whether a failing
head blocks it; per limit (pelwarden limit) its settings and use. Every
metric is listed in docs/operations/metrics.md and
in the GroupCollector's doc (driver/prommetrics), which a consumer can
register in its own process instead.

Without --stream or --partitioned it watches every stream with consumer
groups (a bounded SCAN ... TYPE stream on every primary, repeated every
--discover-every). Each scrape then reads the groups in three pipelined
round trips, whatever the size of their PELs.`,
		Example: `  pelwarden exporter                               # every stream with groups, on :9240
  pelwarden exporter --stream '{orders}' --stream '{audit}*' --stalled-after 30s
  pelwarden exporter --partitioned payments       # every partition of pelwarden.Partitions("payments", n)`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageErrorf("--listen %q: want host:port or :port (%v)", listen, err)
			}
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"stalled-after", o.StalledAfter}, {"discover-every", o.DiscoverEvery}, {"timeout", o.Timeout}} {
				if d.v <= 0 {
					return usageErrorf("--%s must be positive, got %v", d.flag, d.v)
				}
			}
			for _, name := range o.Partitioned {
				if _, err := pelwarden.Partitions(name, 1); err != nil {
					return usageErrorf("--partitioned %q: %v", name, err)
				}
			}
			if o.MaxStreams < 1 {
				return usageErrorf("--max-streams must be at least 1, got %d", o.MaxStreams)
			}
			o.Logger = slog.New(slog.NewTextHandler(a.stderr, nil))
			ctx := cmd.Context()
			rdb, e, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			gc, err := prommetrics.NewGroupCollector(rdb, o)
			if err != nil {
				return usageErrorf("%v", err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(gc, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return failuref("cannot listen on %s: %v", listen, err)
			}
			fmt.Fprintf(a.stderr, "pelwarden exporter: serving %s on http://%s/metrics; Ctrl-C stops\n", e.shown, ln.Addr())
			if err := httpserve.Serve(ctx, ln, exporterHandler(reg)); err != nil {
				return failuref("serving metrics: %v", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", DefaultExporterListen, "`ADDR` to listen on (host:port or :port)")
	f.StringArrayVar(&o.Streams, "stream", nil, "watch this stream `NAME` or the streams matching this GLOB (SCAN MATCH syntax); repeatable (default: every stream with groups)")
	f.StringArrayVar(&o.Partitioned, "partitioned", nil, "watch every partition of the partitioned stream `NAME` (the name given to pelwarden.Partitions); repeatable")
	f.StringArrayVar(&o.Limits, "limit", nil, "watch the limit `NAME` (pelwarden limit set); repeatable (default: every limit on the server, unless --stream or --partitioned is given)")
	f.DurationVar(&o.StalledAfter, "stalled-after", driver.DefaultMinIdle, "count a consumer that owns entries and has been idle this long as stalled; use your consumers' MinIdle")
	f.IntVar(&o.MaxStreams, "max-streams", prommetrics.DefaultMaxStreams, "export at most this many streams with groups (state_truncated says when more exist)")
	f.DurationVar(&o.DiscoverEvery, "discover-every", prommetrics.DefaultDiscoverEvery, "look for new streams this often (scrapes in between read the streams already found)")
	f.DurationVar(&o.Timeout, "timeout", prommetrics.DefaultScrapeTimeout, "bound one scrape's reads")
	return cmd
}

// exporterHandler serves /metrics from reg and a page linking to it at /.
func exporterHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprintf(w, "<!doctype html><title>pelwarden exporter</title><h1>pelwarden exporter %s</h1><p><a href=\"metrics\">metrics</a></p>\n", html.EscapeString(buildVersion().Version))
	})
	return mux
}
