package cli

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/internal/ops"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// redriveJSON is the --json output of dlq redrive.
type redriveJSON struct {
	DeadLetterStream string `json:"dead_letter_stream"`
	// To is the --to stream, "" when records went back to their sources.
	To    string `json:"to,omitempty"`
	Moved int    `json:"moved"`
	// ByStream counts moved records per target stream.
	ByStream map[string]int `json:"by_stream"`
	// Moves map each record to the new entry that replaced it.
	Moves []moveJSON `json:"moves"`
	// Foreign records have no pelwarden metadata; they are never moved.
	Foreign []string `json:"foreign"`
	// Skipped records stay, with the reason (source stream missing, ...).
	Skipped   []skippedJSON `json:"skipped"`
	Remaining int64         `json:"remaining"`
	// Complete: the whole dead-letter stream was examined (not stopped by
	// --limit).
	Complete bool `json:"complete"`
}

type moveJSON struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Stream string `json:"stream"`
}

type skippedJSON struct {
	ID     string `json:"id"`
	Stream string `json:"stream"`
	Reason string `json:"reason"`
}

type redriveOptions struct {
	to    string
	limit int
	rate  float64
}

func (a *app) dlqRedriveCommand() *cobra.Command {
	var o redriveOptions
	cmd := &cobra.Command{
		Use:   "redrive DLQ [--to STREAM] [--limit N] [--rate R]",
		Short: "Move dead-letter records back to their source stream (or --to), rate-limited",
		Long: `redrive moves dead-letter records back as new entries: the original fields
(metadata dropped) plus pelwarden.redrives, the number of times the entry was
redriven. Each page moves and deletes its records atomically, so the command
is resumable: run it again and it continues with what is left.

Without --to each record goes back to the stream it came from (its
pelwarden.stream field); records whose source stream no longer exists stay.
With --to every pelwarden record goes to that stream, which must exist.
Records without pelwarden metadata are never moved. On a Redis Cluster the
target must share the dead-letter stream's hash tag.`,
		Example: `  pelwarden dlq redrive '{orders}:dead'
  pelwarden dlq redrive '{orders}:dead' --to '{orders}:retry' --limit 1000 --rate 200`,
		Args: exactArgs("DLQ"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := nonEmptyFlag(cmd, "to", o.to); err != nil {
				return err
			}
			if o.to == key {
				return usageErrorf("--to must differ from the dead-letter stream")
			}
			if cmd.Flags().Changed("limit") {
				if err := positiveInt("limit", o.limit); err != nil {
					return err
				}
			}
			if !(o.rate > 0) || o.rate > 1e6 {
				return usageErrorf("--rate must be positive (records per second, at most 1000000), got %v", o.rate)
			}
			ctx := cmd.Context()
			rdb, err := a.connectToStream(ctx, "dead-letter stream", key)
			if err != nil {
				return err
			}
			defer rdb.Close()
			if o.to != "" {
				if err := needStream(ctx, rdb, "--to stream", o.to); err != nil {
					return err
				}
			}
			out, err := a.redrive(ctx, rdb, key, o)
			if out != nil {
				if n, lerr := rdb.XLen(context.WithoutCancel(ctx), key).Result(); lerr == nil {
					out.Remaining = n
				}
			}
			if err != nil {
				if out != nil && out.Moved > 0 {
					err = fmt.Errorf("%w (after moving %d records; run again to continue)", err, out.Moved)
				}
				return err
			}
			if a.json {
				return a.printJSON(out)
			}
			a.printRedrive(out)
			return nil
		}),
	}
	cmd.Flags().StringVar(&o.to, "to", "", "move every record to this `STREAM` instead of its source stream")
	cmd.Flags().IntVar(&o.limit, "limit", 0, "move at most `N` records (default: all)")
	cmd.Flags().Float64Var(&o.rate, "rate", 500, "move at most `R` records per second")
	return cmd
}

// redrive moves records with ops.Redrive (pages of at most a tenth of a
// second's worth at --rate, 1 to 100 records), showing progress on stderr.
func (a *app) redrive(ctx context.Context, rdb redis.UniversalClient, key string, o redriveOptions) (*redriveJSON, error) {
	live := progress.NewQuiet(a.stderr)
	defer live.Close()
	started := time.Now()
	res, err := ops.Redrive(ctx, rdb, ops.RedriveOptions{
		DeadLetterStream: key, To: o.to, Limit: o.limit, Rate: o.rate,
		Progress: func(p ops.RedriveProgress) {
			live.Set(progress.Text("redriving", p.Examined, p.Total, started, fmt.Sprintf("moved %s", fmtCount(int64(p.Moved)))), p.Done)
		},
	})
	if res == nil {
		return nil, opsError(err)
	}
	out := &redriveJSON{DeadLetterStream: key, To: o.to, ByStream: res.ByStream, Moves: []moveJSON{}, Foreign: res.Foreign,
		Skipped: []skippedJSON{}, Moved: res.Moved(), Complete: res.Complete}
	for _, m := range res.Moves {
		out.Moves = append(out.Moves, moveJSON{From: m.From, To: m.To, Stream: m.Stream})
	}
	for _, s := range res.Skipped {
		out.Skipped = append(out.Skipped, skippedJSON{ID: s.ID, Stream: s.Stream, Reason: s.Reason})
	}
	if err != nil {
		return out, opsError(err)
	}
	return out, nil
}

func (a *app) printRedrive(out *redriveJSON) {
	a.printf("moved %s from %s", plural(int64(out.Moved), "record", "records"), out.DeadLetterStream)
	if len(out.ByStream) > 0 {
		names := make([]string, 0, len(out.ByStream))
		for s := range out.ByStream {
			names = append(names, s)
		}
		sort.Strings(names)
		a.printf(" to")
		for i, s := range names {
			sep := ","
			if i == 0 {
				sep = ""
			}
			a.printf("%s %s (%d)", sep, s, out.ByStream[s])
		}
	}
	a.printf("\n")
	if len(out.Foreign) > 0 {
		a.printf("left %s without pelwarden metadata: %v\n", plural(int64(len(out.Foreign)), "record", "records"), firstStrings(out.Foreign, 10))
	}
	if len(out.Skipped) > 0 {
		why := map[string]int{}
		for _, s := range out.Skipped {
			why[s.Stream+": "+s.Reason]++
		}
		a.printf("left %s in place:\n", plural(int64(len(out.Skipped)), "record", "records"))
		for w, n := range why {
			a.printf("  %d  %s\n", n, w)
		}
	}
	if out.Complete {
		a.printf("%s left in %s\n", plural(out.Remaining, "record", "records"), out.DeadLetterStream)
	} else {
		a.printf("stopped at --limit; %s left in %s: run again to continue\n", plural(out.Remaining, "record", "records"), out.DeadLetterStream)
	}
}
