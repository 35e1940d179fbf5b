package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/cmd/internal/dashboard"
	"github.com/pelwarden/pelwarden/internal/demo"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// demoFlags are the demo command's flags.
type demoFlags struct {
	o          demo.Options
	poisonRate float64
	// ui is --ui: where to serve the dashboard during the run ("": not).
	ui string
}

func (a *app) demoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch three consumers survive a crash, poison orders and a slow handler, then check nothing was lost",
		Long: fmt.Sprintf(`demo plays a scenario with the real driver: a producer writes orders to a
stream; three consumers of group %q handle them. One consumer is killed
in the middle of its work (its entries stay pending in its name); the others
reclaim them once they have been idle for MinIdle (%v). Some orders are poison:
a declined card fails on every attempt and is dead-lettered after %d deliveries
(reason max_deliveries); an unsupported currency is dead-lettered by its
handler at once (reason handler). Bulk orders take %v, longer than MinIdle:
the lease heartbeat keeps them with their consumer.

It shows live progress, then a report: per-consumer counts, what was reclaimed
from the dead consumer, the dead-letter records and why, duplicates, and an
invariant check: every order was handled and acknowledged or dead-lettered,
and the PEL is empty. The exit code is 4 if anything was lost, 1 if the run
did not settle within --duration.

Without --redis or --cluster (and $REDIS_URL is not used here) it starts a
throwaway server: a redis-server or valkey-server binary on PATH, else a
container from $PELWARDEN_DEMO_IMAGE (default %s) started with the docker
command, removed at the end. With --redis it uses new keys {demo-orders-…}
and deletes them at the end (--keep leaves them for status and dlq).

--ui ADDR serves the dashboard (pelwarden ui, read-only) on ADDR during the
run, on the demo's stream: open it to watch the consumers, the kill, the
reclaim and the dead letters as they happen. The rules of pelwarden ui
apply: anything but a loopback address needs $PELWARDEN_UI_USER and
$PELWARDEN_UI_PASSWORD.`,
			demo.Group, demo.MinIdle, demo.MaxDeliveries, demo.SlowWork, defaultThrowawayImage),
		Example: `  make demo
  pelwarden demo --orders 20000 --rate 1000
  pelwarden demo --redis redis://127.0.0.1:6379 --keep
  pelwarden demo --ui 127.0.0.1:8080 --duration 2m`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			o := f.o
			o.PoisonRate, o.NoPoison = f.poisonRate, f.poisonRate == 0
			if err := o.Validate(); err != nil {
				var oe *pelwarden.ArgumentError
				if errors.As(err, &oe) {
					return usageErrorf("--%s %s", demoFlagOf[oe.Field], oe.Reason)
				}
				return usageErrorf("%v", err)
			}
			e, err := a.resolve(true)
			if err != nil {
				return err
			}
			if o.Keep && e == nil {
				return usageErrorf("--keep needs --redis or --cluster or --sentinel: the throwaway server is removed at the end")
			}
			var ui *dashboard.Options
			if f.ui != "" {
				do, err := a.uiDashboardOptions(cmd, uiOptions{listen: f.ui, readOnly: true, refresh: time.Second,
					minIdle: demo.MinIdle, stuckAfter: demo.StallAfter, maxDeliveries: demo.MaxDeliveries})
				if err != nil {
					return err
				}
				ui = &do
			}
			return a.runDemo(cmd.Context(), e, o, f.ui, ui)
		}),
	}
	fl := cmd.Flags()
	fl.IntVar(&f.o.Orders, "orders", 5000, "number of orders to produce")
	fl.Float64Var(&f.poisonRate, "poison-rate", 0.02, "share of poison orders (0 to 0.5): half declined cards, half unsupported currencies")
	fl.DurationVar(&f.o.Duration, "duration", 55*time.Second, "upper bound of the run; unsettled orders after it make the exit code 1")
	fl.IntVar(&f.o.Rate, "rate", 250, "orders produced per second")
	fl.BoolVar(&f.o.Keep, "keep", false, "keep the demo's stream and dead-letter stream (needs --redis, --cluster or --sentinel)")
	fl.BoolVar(&f.o.Verbose, "verbose", false, "show the driver's warnings and errors")
	fl.StringVar(&f.ui, "ui", "", "serve the dashboard (read-only) on `ADDR` during the run, such as 127.0.0.1:8080")
	return cmd
}

// demoFlagOf names the flag of each demo.Options field.
var demoFlagOf = map[string]string{"Orders": "orders", "PoisonRate": "poison-rate", "Duration": "duration", "Rate": "rate"}

// runDemo picks the server (e, else a throwaway one), plays the demo and
// prints its report; the invariant decides the exit code.
//
// With ui set, the dashboard serves the demo's stream on uiAddr from the
// moment its keys exist until the report is written.
func (a *app) runDemo(ctx context.Context, e *endpoint, o demo.Options, uiAddr string, ui *dashboard.Options) error {
	live := progress.New(a.stderr, 2*time.Second)
	defer live.Close()
	logf := func(s string) { live.Event(s) }

	var srv demo.Server
	if e == nil {
		tw, err := startThrowaway(ctx, []string{"PELWARDEN_DEMO_IMAGE"}, logf)
		if err != nil {
			return err
		}
		defer func() {
			if err := tw.Close(); err != nil {
				logf("removing the throwaway server: " + err.Error())
			} else {
				logf("removed the throwaway server")
			}
		}()
		srv.NewClient = func() redis.UniversalClient {
			opts := *tw.opts
			opts.PoolSize = 128
			return redis.NewClient(&opts)
		}
		srv.Label = tw.label
	} else {
		srv.NewClient = func() redis.UniversalClient {
			if e.cluster != nil {
				o := *e.cluster
				o.PoolSize = max(o.PoolSize, 128)
				return redis.NewClusterClient(&o)
			}
			if e.failover != nil {
				o := *e.failover
				o.PoolSize = max(o.PoolSize, 128)
				return redis.NewFailoverClient(&o)
			}
			o := *e.opts
			o.PoolSize = max(o.PoolSize, 128)
			return redis.NewClient(&o)
		}
		c, err := e.client(ctx) // checks the server answers
		if err != nil {
			return err
		}
		_ = c.Close()
		srv.Label = e.shown
	}
	var started func(demo.Started)
	if ui != nil {
		// Listen before the run, so a busy address fails the command at
		// once; serve once the demo's stream exists.
		ln, err := net.Listen("tcp", uiAddr)
		if err != nil {
			return failuref("--ui: listen on %s: %v", uiAddr, err)
		}
		uiClient := srv.NewClient()
		defer uiClient.Close()
		var stopUI func() error
		defer func() {
			if stopUI == nil {
				_ = ln.Close()
				return
			}
			if err := stopUI(); err != nil {
				logf("dashboard: " + err.Error())
			}
		}()
		started = func(st demo.Started) {
			do := *ui
			do.Streams = st.Stream
			d, err := dashboard.New(uiClient, do)
			if err != nil {
				logf(fmt.Sprintf("dashboard not served: %v", err))
				return
			}
			uiCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.Serve(uiCtx, ln) }()
			stopUI = func() error { cancel(); return <-done }
			logf(fmt.Sprintf("dashboard: http://%s%s/ (read-only, stream %s)", ln.Addr(), do.BasePath, st.Stream))
		}
	}
	rep, err := demo.Run(ctx, o, srv, live, started)
	switch {
	case errors.Is(err, demo.ErrInterrupted):
		return failuref("%v", err)
	case err != nil:
		return err
	}
	if a.json {
		if err := a.printJSON(rep); err != nil {
			return err
		}
	} else {
		live.Close()
		if err := rep.WriteText(a.stdout); err != nil {
			return failuref("write the report: %v", err)
		}
	}
	switch inv := rep.Invariant; {
	case inv.Lost > 0:
		return &exitError{code: ExitLost, err: fmt.Errorf("demo: %d order(s) lost: %s", inv.Lost, strings.Join(firstStrings(inv.LostIDs, 5), " "))}
	case !inv.OK:
		return failuref("demo: not settled within --duration %v: %d order(s) unsettled, %d pending", o.Duration, inv.Unsettled, inv.Pending)
	}
	return nil
}

// firstStrings is the first n strings of s, with "..." when there are
// more.
func firstStrings(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}
