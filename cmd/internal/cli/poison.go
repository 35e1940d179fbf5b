package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// poisonJSON is the --json output of poison.
type poisonJSON struct {
	Stream           string   `json:"stream"`
	Group            string   `json:"group"`
	DeadLetterStream string   `json:"dead_letter_stream"`
	MaxDeliveries    int      `json:"max_deliveries"`
	MinIdleMs        int64    `json:"min_idle_ms"`
	Count            int      `json:"count"`
	DeadLettered     []string `json:"dead_lettered"`
	// Deleted ids were pending but their entries were gone from the stream;
	// they were cleared from the PEL.
	Deleted      []string `json:"deleted"`
	PendingAfter int64    `json:"pending_after"`
}

func (a *app) poisonCommand() *cobra.Command {
	var maxDeliveries int
	var minIdle time.Duration
	var dlq string
	cmd := &cobra.Command{
		Use:   "poison STREAM GROUP --max-deliveries N",
		Short: "Move pending entries delivered N times or more to the dead-letter stream",
		Long: `poison walks the group's pending entries list with the claim function in
dead-letter-only mode: every entry already delivered --max-deliveries times
(and idle at least --min-idle) is copied to the dead-letter stream with its
metadata (reason max_deliveries) and acknowledged, atomically per page. Every
other entry is left untouched, owned by whoever had it. Entries whose stream
entry was deleted are cleared from the PEL and listed apart.

--min-idle spares entries a consumer is working on right now; set it above
your handlers' p99 time when consumers are running.`,
		Example: `  pelwarden poison '{orders}' billing --max-deliveries 5
  pelwarden poison '{orders}' billing --max-deliveries 5 --min-idle 1m --json`,
		Args: exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			if !cmd.Flags().Changed("max-deliveries") {
				return usageErrorf("--max-deliveries is required: entries delivered at least this many times are dead-lettered")
			}
			if err := intInRange("max-deliveries", maxDeliveries, 1, 1<<31-1); err != nil {
				return err
			}
			if err := nonNegativeDuration("min-idle", minIdle); err != nil {
				return err
			}
			dlq, err := deadLetterFlag(cmd, stream, dlq)
			if err != nil {
				return err
			}
			if dlq == stream {
				return usageErrorf("--dlq must differ from the stream")
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			// Checks the stream, group and dead-letter key before any change.
			before, err := groupStats(ctx, rdb, stream, group, dlq)
			if err != nil {
				return err
			}
			out := poisonJSON{Stream: stream, Group: group, DeadLetterStream: dlq, MaxDeliveries: maxDeliveries,
				MinIdleMs: minIdle.Milliseconds(), DeadLettered: []string{}, Deleted: []string{}}
			live := progress.NewQuiet(a.stderr)
			defer live.Close()
			res, err := ops.Poison(ctx, rdb, ops.PoisonOptions{
				Stream: stream, Group: group, DeadLetterStream: dlq, MaxDeliveries: maxDeliveries, MinIdle: minIdle,
				Progress: func(p ops.PoisonProgress) {
					live.Set(fmt.Sprintf("walking the PEL of %s entries: page %d, at %s, moved %d", fmtCount(before.Pending), p.Page, p.Cursor, p.DeadLettered), false)
				},
			})
			if err != nil {
				if res != nil && len(res.DeadLettered) > 0 {
					live.Event(fmt.Sprintf("stopped after moving %d entries", len(res.DeadLettered)))
				}
				var ae *pelwarden.ArgumentError
				if errors.As(err, &ae) || errors.Is(err, ops.ErrInterrupted) {
					return opsError(err)
				}
				return explainGroupError(ctx, rdb, err, stream, group, dlq)
			}
			out.DeadLettered = append(out.DeadLettered, res.DeadLettered...)
			out.Deleted = append(out.Deleted, res.Deleted...)
			live.Close()
			out.Count = len(out.DeadLettered)
			if after, err := groupStats(ctx, rdb, stream, group, dlq); err == nil {
				out.PendingAfter = after.Pending
			}
			if a.json {
				return a.printJSON(out)
			}
			a.printf("moved %s delivered at least %d times to %s (reason %s)\n",
				plural(int64(out.Count), "entry", "entries"), maxDeliveries, dlq, pelwarden.ReasonMaxDeliveries)
			if len(out.Deleted) > 0 {
				a.printf("cleared %s whose stream entries were deleted: %v\n", plural(int64(len(out.Deleted)), "pending id", "pending ids"), firstStrings(out.Deleted, 10))
			}
			a.printf("%s still pending, left with their owners\n", plural(out.PendingAfter, "entry", "entries"))
			if out.Count > 0 {
				a.printf("inspect them with: pelwarden dlq list '%s'\n", dlq)
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&maxDeliveries, "max-deliveries", 0, "dead-letter entries delivered at least `N` times (required, positive)")
	cmd.Flags().DurationVar(&minIdle, "min-idle", 0, "only entries idle at least this long (0: every pending entry)")
	cmd.Flags().StringVar(&dlq, "dlq", "", "dead-letter stream `KEY` (default pelwarden.DeadLetterStreamFor(STREAM): STREAM:dead with a hash tag, else {STREAM}:dead)")
	return cmd
}
