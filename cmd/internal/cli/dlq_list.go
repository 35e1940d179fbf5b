package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// dlqListJSON is the --json output of dlq list.
type dlqListJSON struct {
	DeadLetterStream string       `json:"dead_letter_stream"`
	Length           int64        `json:"length"`
	Records          []deadRecord `json:"records"`
	// Warning: DLQ does not look like a dead-letter stream (it has
	// consumer groups, or none of its records has pelwarden's metadata);
	// omitted when it does.
	Warning string `json:"warning,omitempty"`
}

func (a *app) dlqListCommand() *cobra.Command {
	var count int
	var afterID string
	cmd := &cobra.Command{
		Use:   "list DLQ",
		Short: "List dead-letter records, oldest first",
		Example: `  pelwarden dlq list '{orders}:dead'
  pelwarden dlq list '{orders}:dead' --count 100 --after 1700000000000-0 --json`,
		Args: exactArgs("DLQ"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := intInRange("count", count, 1, 10000); err != nil {
				return err
			}
			if cmd.Flags().Changed("after") {
				if err := checkStreamID("--after", afterID); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			rdb, err := a.connectToStream(ctx, "dead-letter stream", key)
			if err != nil {
				return err
			}
			defer rdb.Close()
			out, err := listDeadLetters(ctx, rdb, key, afterID, count)
			if err != nil {
				return err
			}
			out.Warning = notDeadLetterWarning(ctx, rdb, key, out.Records)
			if a.json {
				return a.printJSON(out)
			}
			if out.Warning != "" {
				fmt.Fprintln(a.stderr, "warning: "+out.Warning)
			}
			now := serverTime(ctx, rdb)
			tw := a.table()
			fmt.Fprintln(tw, "ID\tORIGINAL ID\tSOURCE\tGROUP\tCONSUMER\tDELIVERIES\tREASON\tAGE\tERROR")
			for _, r := range out.Records {
				if r.Foreign {
					fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t(no pelwarden metadata)\t-\t-\n", r.ID)
					continue
				}
				age := "-"
				if r.DeadLetteredAtMs > 0 {
					age = fmtDuration(now.Sub(time.UnixMilli(r.DeadLetteredAtMs)).Truncate(time.Second))
				}
				errText := r.Error
				if errText == "" {
					errText = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.OriginalID, r.Stream, r.Group, r.Consumer,
					r.Deliveries, r.Reason, age, clipText(errText, 60))
			}
			_ = tw.Flush()
			a.printf("%d of %s in %s", len(out.Records), plural(out.Length, "record", "records"), key)
			if len(out.Records) > 0 && int64(len(out.Records)) < out.Length {
				a.printf("; next page: --after %s", out.Records[len(out.Records)-1].ID)
			}
			a.printf("\n")
			return nil
		}),
	}
	cmd.Flags().IntVar(&count, "count", 20, "show at most `N` records (1 to 10000)")
	cmd.Flags().StringVar(&afterID, "after", "", "list records after this record `ID` (the next page)")
	return cmd
}

// listDeadLetters reads up to count records after the record afterID (""
// for the first page), oldest first, with ops.ListDeadLetters.
func listDeadLetters(ctx context.Context, rdb redis.UniversalClient, key, afterID string, count int) (*dlqListJSON, error) {
	page, err := ops.ListDeadLetters(ctx, rdb, ops.DeadLetterQuery{Key: key, After: afterID, Count: count})
	if err != nil {
		return nil, opsError(err)
	}
	out := &dlqListJSON{DeadLetterStream: key, Length: page.Length, Records: []deadRecord{}}
	for _, e := range page.Records {
		out.Records = append(out.Records, parseDeadRecord(e))
	}
	return out, nil
}

// notDeadLetterWarning says why key does not look like a dead-letter
// stream, naming the one it likely meant: a stream with consumer groups is
// a work stream (its dead-letter stream is pelwarden.DeadLetterStreamFor
// of it), and a page of records none of which has pelwarden's metadata was
// not written by pelwarden. "" when neither.
func notDeadLetterWarning(ctx context.Context, rdb redis.UniversalClient, key string, page []deadRecord) string {
	if groups, err := rdb.XInfoGroups(ctx, key).Result(); err == nil && len(groups) > 0 {
		names := make([]string, len(groups))
		for i, g := range groups {
			names[i] = g.Name
		}
		dlq := pelwarden.DeadLetterStreamFor(key)
		n, _ := rdb.XLen(ctx, dlq).Result()
		return fmt.Sprintf("%s has consumer groups (%s): it is a work stream, not a dead-letter stream; its dead-letter stream is %s (%s)",
			key, strings.Join(names, ", "), dlq, plural(n, "record", "records"))
	}
	if len(page) == 0 {
		return ""
	}
	for _, r := range page {
		if !r.Foreign {
			return ""
		}
	}
	return fmt.Sprintf("no record listed from %s has pelwarden's dead-letter metadata: is it a dead-letter stream?", key)
}
