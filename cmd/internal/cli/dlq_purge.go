package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/internal/ops"
)

// purgeJSON is the --json output of dlq purge.
type purgeJSON struct {
	DeadLetterStream string `json:"dead_letter_stream"`
	// OlderThanMs is 0 when every record was purged.
	OlderThanMs int64 `json:"older_than_ms"`
	Deleted     int64 `json:"deleted"`
	Remaining   int64 `json:"remaining"`
}

func (a *app) dlqPurgeCommand() *cobra.Command {
	var olderThan time.Duration
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge DLQ [--older-than D] --yes",
		Short: "Delete dead-letter records, all or those older than D",
		Long: `purge deletes dead-letter records for good: every record, or with
--older-than only those dead-lettered longer ago than D (by their record id,
against the server's clock; XTRIM MINID). It refuses without --yes, and
refuses a stream that has consumer groups: that is a work stream, not a
dead-letter stream.`,
		Example: `  pelwarden dlq purge '{orders}:dead' --older-than 720h --yes`,
		Args:    exactArgs("DLQ"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if cmd.Flags().Changed("older-than") {
				if err := positiveDuration("older-than", olderThan); err != nil {
					return err
				}
			}
			if !yes {
				what := "every record"
				if olderThan > 0 {
					what = "records older than " + fmtDuration(olderThan)
				}
				return usageErrorf("refusing to delete %s of %s without --yes", what, key)
			}
			ctx := cmd.Context()
			rdb, err := a.connectToStream(ctx, "dead-letter stream", key)
			if err != nil {
				return err
			}
			defer rdb.Close()
			res, err := ops.Purge(ctx, rdb, ops.PurgeOptions{DeadLetterStream: key, OlderThan: olderThan})
			if err != nil {
				return opsError(err)
			}
			out := purgeJSON{DeadLetterStream: key, OlderThanMs: olderThan.Milliseconds(), Deleted: res.Deleted, Remaining: res.Remaining}
			if a.json {
				return a.printJSON(out)
			}
			a.printf("deleted %s from %s; %s left\n", plural(out.Deleted, "record", "records"), key, fmtCount(out.Remaining))
			return nil
		}),
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "only records dead-lettered longer ago than this (e.g. 720h)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}
