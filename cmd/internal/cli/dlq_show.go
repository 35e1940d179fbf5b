package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) dlqShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "show DLQ ID",
		Short:   "Show one dead-letter record in full: metadata, error text and original fields",
		Example: `  pelwarden dlq show '{orders}:dead' 1700000000123-0`,
		Args:    exactArgs("DLQ", "ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			if err := checkStreamID("record id", id); err != nil {
				return err
			}
			ctx := cmd.Context()
			rdb, err := a.connectToStream(ctx, "dead-letter stream", key)
			if err != nil {
				return err
			}
			defer rdb.Close()
			page, err := xrange(ctx, rdb, key, id, id, 1)
			if err != nil {
				return failuref("XRANGE %s: %v", key, err)
			}
			if len(page) == 0 {
				return targetErrorf("no record %s in %s (list them with pelwarden dlq list '%s')", id, key, key)
			}
			r := parseDeadRecord(page[0])
			if a.json {
				return a.printJSON(r)
			}
			tw := a.table()
			fmt.Fprintf(tw, "id\t%s\n", r.ID)
			if r.Foreign {
				fmt.Fprintf(tw, "metadata\tnone: not written by pelwarden\n")
			} else {
				fmt.Fprintf(tw, "original id\t%s\n", r.OriginalID)
				fmt.Fprintf(tw, "source stream\t%s\n", r.Stream)
				fmt.Fprintf(tw, "group\t%s\n", r.Group)
				fmt.Fprintf(tw, "last consumer\t%s\n", r.Consumer)
				fmt.Fprintf(tw, "deliveries\t%d\n", r.Deliveries)
				fmt.Fprintf(tw, "reason\t%s\n", r.Reason)
				fmt.Fprintf(tw, "dead-lettered at\t%s\n", r.DeadLetteredAt)
				if r.Redrives > 0 {
					fmt.Fprintf(tw, "redriven before\t%d time(s)\n", r.Redrives)
				}
			}
			_ = tw.Flush()
			if !r.Foreign {
				if r.Error == "" {
					a.printf("error:\n  (none recorded)\n")
				} else {
					a.printf("error:\n  %s\n", r.Error)
				}
			}
			a.printf("fields (%d):\n", len(r.Fields))
			tw = a.table()
			for _, f := range r.Fields {
				fmt.Fprintf(tw, "  %s\t%s\n", f.Name, f.Value)
			}
			_ = tw.Flush()
			return nil
		}),
	}
}
