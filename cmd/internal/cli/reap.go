package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// reapJSON is the --json output of reap.
type reapJSON struct {
	Stream  string   `json:"stream"`
	Group   string   `json:"group"`
	IdleMs  int64    `json:"idle_ms"`
	Deleted []string `json:"deleted"`
	// Kept consumers were idle long enough but still own pending entries.
	Kept []keptJSON `json:"kept"`
}

type keptJSON struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
}

func (a *app) reapCommand() *cobra.Command {
	var idle time.Duration
	var keep []string
	cmd := &cobra.Command{
		Use:   "reap STREAM GROUP --idle D",
		Short: "Delete consumers idle longer than D that own nothing",
		Long: `reap deletes the group's consumers idle at least --idle that own no pending
entries (the check and XGROUP DELCONSUMER are one atomic step). Consumers idle
that long that still own entries are kept and listed: deleting them would drop
their entries from the PEL. Reclaim those first (a running driver does after
its MinIdle), or move poison ones with pelwarden poison.`,
		Example: `  pelwarden reap '{orders}' billing --idle 1h`,
		Args:    exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			if !cmd.Flags().Changed("idle") {
				return usageErrorf("--idle is required: consumers idle at least this long are deleted")
			}
			if err := positiveDuration("idle", idle); err != nil {
				return err
			}
			if idle < time.Millisecond {
				return usageErrorf("--idle must be at least 1ms, got %v", idle)
			}
			if cmd.Flags().Changed("keep") && len(keep) == 0 {
				return usageErrorf("--keep must not be empty")
			}
			for _, k := range keep {
				if err := pelwarden.CheckName(k); err != nil {
					return usageErrorf("--keep %v", err)
				}
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			res, err := ops.Reap(ctx, rdb, ops.ReapOptions{Stream: stream, Group: group, Idle: idle, Keep: keep})
			if err != nil {
				return explainGroupError(ctx, rdb, err, stream, group, "")
			}
			out := reapJSON{Stream: stream, Group: group, IdleMs: idle.Milliseconds(), Deleted: []string{}, Kept: []keptJSON{}}
			out.Deleted = append(out.Deleted, res.Deleted...)
			for _, k := range res.Kept {
				out.Kept = append(out.Kept, keptJSON{Name: k.Name, Pending: k.Pending})
			}
			if a.json {
				return a.printJSON(out)
			}
			a.printf("deleted %s idle at least %v that owned nothing", plural(int64(len(out.Deleted)), "consumer", "consumers"), fmtDuration(idle))
			if len(out.Deleted) > 0 {
				a.printf(": %v", out.Deleted)
			}
			a.printf("\n")
			if len(out.Kept) > 0 {
				a.printf("kept %s idle that long that still own entries (reclaim them first):\n", plural(int64(len(out.Kept)), "consumer", "consumers"))
				tw := a.table()
				fmt.Fprintln(tw, "  NAME\tPENDING")
				for _, k := range out.Kept {
					fmt.Fprintf(tw, "  %s\t%s\n", k.Name, fmtCount(k.Pending))
				}
				_ = tw.Flush()
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&idle, "idle", 0, "delete consumers idle at least this long (required, positive)")
	cmd.Flags().StringSliceVar(&keep, "keep", nil, "consumer `NAME`s never deleted (repeat or comma-separate)")
	return cmd
}
