package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// limitJSON is a limit in --json output.
type limitJSON struct {
	Name        string  `json:"name"`
	Exists      bool    `json:"exists"`
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	LeaseMs     int64   `json:"lease_ms,omitempty"`
	InUse       int     `json:"in_use"`
	Leases      int     `json:"leases"`
	// Available is the rate's permits available now (-1 without a rate).
	Available int `json:"available"`
}

func toLimitJSON(st *pelwarden.LimitState) limitJSON {
	return limitJSON{Name: st.Name, Exists: st.Exists, Rate: st.Rate, Burst: st.Burst, Concurrency: st.Concurrency,
		LeaseMs: st.Lease.Milliseconds(), InUse: st.InUse, Leases: st.Leases, Available: st.Available}
}

func (a *app) limitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limit",
		Short: "Set and show limits shared by consumers (a rate, a concurrency cap)",
		Long: `limit sets and shows named limits: a rate (permits a second, with a burst)
and a concurrency cap (permits held at once), kept on the server and shared
by every holder that names the limit (pelwarden.Library.SetLimit,
AcquirePermits). A change applies to every holder's next acquisition.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("limit needs a subcommand: set or show (see pelwarden limit --help)")
		},
	}
	cmd.AddCommand(a.limitSetCommand(), a.limitShowCommand())
	return cmd
}

func (a *app) limitSetCommand() *cobra.Command {
	var s pelwarden.LimitSettings
	cmd := &cobra.Command{
		Use:   "set NAME [--rate R --burst B] [--concurrency N] [--lease D]",
		Short: "Create or change a limit",
		Long: `set creates the named limit or changes it. A limit needs --rate (permits a
second across every holder, --burst of them at once after a quiet spell),
--concurrency (permits held at once), or both. --lease is how long a
holder's permits of the cap stay held without a renewal: a holder that
crashed gives them back that long after its last renewal.`,
		Example: `  pelwarden limit set payments-gateway --rate 100 --burst 10
  pelwarden limit set email --concurrency 20 --lease 30s`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			st, err := pelwarden.NewLibrary(rdb).SetLimit(ctx, args[0], s)
			if err != nil {
				return classify(err)
			}
			if a.json {
				return a.printJSON(toLimitJSON(st))
			}
			a.printf("limit %s: %s\n", st.Name, st.LimitSettings)
			return nil
		}),
	}
	cmd.Flags().Float64Var(&s.Rate, "rate", 0, "permits a `second` across every holder (0: no rate)")
	cmd.Flags().IntVar(&s.Burst, "burst", 1, "permits the rate grants at once after a quiet spell")
	cmd.Flags().IntVar(&s.Concurrency, "concurrency", 0, "permits held at once across every holder (0: no cap)")
	cmd.Flags().DurationVar(&s.Lease, "lease", pelwarden.DefaultLimitLease, "how long a holder's permits of the cap stay held without a renewal")
	return cmd
}

func (a *app) limitShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show [NAME...]",
		Short: "Show limits: their settings and use",
		Long: `show prints each named limit's settings and what is in use now: the cap's
permits held, the leases holding them, and the rate's permits available.
Without names it shows every limit on the server (SCAN on every primary).`,
		Example: `  pelwarden limit show
  pelwarden limit show payments-gateway --json`,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			names := args
			if len(names) == 0 {
				var complete bool
				if names, complete, err = ops.DiscoverLimits(ctx, rdb, 0); err != nil {
					return opsError(err)
				}
				if !complete {
					fmt.Fprintf(a.stderr, "warning: the scan stopped after %d keys a primary: some limits may be missing\n", ops.DefaultScanKeys)
				}
			}
			lib := pelwarden.NewLibrary(rdb)
			out := []limitJSON{}
			for _, name := range names {
				st, err := lib.ReadLimit(ctx, name)
				if err != nil {
					return classify(err)
				}
				out = append(out, toLimitJSON(st))
			}
			if a.json {
				return a.printJSON(out)
			}
			if len(out) == 0 {
				a.printf("no limits set\n")
			}
			for _, l := range out {
				if !l.Exists {
					a.printf("%s: not set\n", l.Name)
					continue
				}
				s := pelwarden.LimitSettings{Rate: l.Rate, Burst: l.Burst, Concurrency: l.Concurrency, Lease: time.Duration(l.LeaseMs) * time.Millisecond}
				a.printf("%s: %s\n", l.Name, s)
				if l.Concurrency > 0 {
					a.printf("  in use: %d of %d (%d leases)\n", l.InUse, l.Concurrency, l.Leases)
				}
				if l.Available >= 0 {
					a.printf("  rate permits available now: %d of %d\n", l.Available, l.Burst)
				}
			}
			return nil
		}),
	}
	return cmd
}
