package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// pendingJSON is the --json output of pending.
type pendingJSON struct {
	Stream   string             `json:"stream"`
	Group    string             `json:"group"`
	Consumer string             `json:"consumer,omitempty"`
	Entries  []pendingEntryJSON `json:"entries"`
	// Pending is the group's PEL size (the consumer's, with --consumer),
	// Scanned how many of those entries were examined.
	Pending int64 `json:"pending"`
	Scanned int64 `json:"scanned"`
	// Complete: every entry that matches is listed.
	Complete bool `json:"complete"`
}

type pendingEntryJSON struct {
	ID         string `json:"id"`
	Consumer   string `json:"consumer"`
	IdleMs     int64  `json:"idle_ms"`
	Deliveries int64  `json:"deliveries"`
}

func (a *app) pendingCommand() *cobra.Command {
	var (
		consumer      string
		minIdle       time.Duration
		minDeliveries int64
		limit         int
		scan          int64
	)
	cmd := &cobra.Command{
		Use:   "pending STREAM GROUP",
		Short: "List a group's pending entries: owner, idle time and deliveries",
		Long: `pending lists the entries of the group's pending entries list (PEL), oldest
id first, with the consumer that owns each, how long it has been idle and how
many times it was delivered. --consumer, --min-idle and --min-deliveries
narrow the list. It reads XPENDING pages of 1,000 and stops after --limit
entries listed or --scan entries examined, so it is bounded on a PEL of any
size; it says when more may match.`,
		Example: `  pelwarden pending '{orders}' billing
  pelwarden pending '{orders}' billing --min-idle 5m --min-deliveries 3 --json`,
		Args: exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			if err := nonEmptyFlag(cmd, "consumer", consumer); err != nil {
				return err
			}
			if consumer != "" {
				if err := pelwarden.CheckName(consumer); err != nil {
					return usageErrorf("--consumer %v", err)
				}
			}
			if err := nonNegativeDuration("min-idle", minIdle); err != nil {
				return err
			}
			if minDeliveries < 0 {
				return usageErrorf("--min-deliveries must not be negative, got %d", minDeliveries)
			}
			if err := intInRange("limit", limit, 1, ops.MaxPendingLimit); err != nil {
				return err
			}
			if scan < 1 || scan > ops.MaxPendingScan {
				return usageErrorf("--scan must be between 1 and %d, got %d", ops.MaxPendingScan, scan)
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			res, err := ops.ListPending(ctx, rdb, ops.PendingOptions{Stream: stream, Group: group, Consumer: consumer,
				MinIdle: minIdle, MinDeliveries: minDeliveries, Limit: limit, Scan: scan})
			if err != nil {
				return explainGroupError(ctx, rdb, err, stream, group, "")
			}
			out := pendingJSON{Stream: stream, Group: group, Consumer: consumer, Entries: []pendingEntryJSON{},
				Pending: res.Pending, Scanned: res.Scanned, Complete: res.Complete}
			for _, e := range res.Entries {
				out.Entries = append(out.Entries, pendingEntryJSON{ID: e.ID, Consumer: e.Consumer, IdleMs: e.Idle.Milliseconds(), Deliveries: e.Deliveries})
			}
			if a.json {
				return a.printJSON(out)
			}
			if len(out.Entries) > 0 {
				tw := a.table()
				fmt.Fprintln(tw, "ID\tCONSUMER\tIDLE\tDELIVERIES")
				for _, e := range res.Entries {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.ID, e.Consumer, fmtDuration(e.Idle), e.Deliveries)
				}
				_ = tw.Flush()
			}
			a.printf("%s listed of %s pending", plural(int64(len(out.Entries)), "entry", "entries"), fmtCount(out.Pending))
			if consumer != "" {
				a.printf(" owned by %s", consumer)
			}
			a.printf(", %s examined", fmtCount(out.Scanned))
			if !out.Complete {
				a.printf("; more may match (raise --limit or --scan)")
			}
			a.printf("\n")
			return nil
		}),
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "list only the entries this consumer owns")
	cmd.Flags().DurationVar(&minIdle, "min-idle", 0, "list only entries idle at least this long")
	cmd.Flags().Int64Var(&minDeliveries, "min-deliveries", 0, "list only entries delivered at least this many times")
	cmd.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many entries (1 to %d)", ops.MaxPendingLimit))
	cmd.Flags().Int64Var(&scan, "scan", 100_000, fmt.Sprintf("examine at most this many PEL entries (1 to %d)", ops.MaxPendingScan))
	return cmd
}
