package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// trimJSON is the --json output of trim.
type trimJSON struct {
	Stream string `json:"stream"`
	DryRun bool   `json:"dry_run"`
	// Bound: every entry strictly below it is acknowledged by every group.
	Bound string `json:"bound"`
	// Holder is the group whose position sets the bound (the lagging one).
	Holder string          `json:"holder"`
	Groups []trimGroupJSON `json:"groups"`
	// WouldTrim is what the plan (a dry run, before anything is deleted)
	// found below the bound, counted up to --limit or 10000;
	// WouldTrimExact is false when there are more.
	WouldTrim      int64 `json:"would_trim"`
	WouldTrimExact bool  `json:"would_trim_exact"`
	// Trimmed entries (0 with --dry-run), FirstID and LastID the first and
	// last of them.
	Trimmed int64  `json:"trimmed"`
	FirstID string `json:"first_id"`
	LastID  string `json:"last_id"`
	// More: entries below the bound remain (--limit stopped the trim).
	More bool `json:"more"`
	// Length is the stream's length at the end.
	Length int64 `json:"length"`
	Calls  int   `json:"calls"`
}

type trimGroupJSON struct {
	Name          string `json:"name"`
	Pending       int64  `json:"pending"`
	OldestPending string `json:"oldest_pending_id"`
	LastDelivered string `json:"last_delivered_id"`
	Bound         string `json:"bound"`
}

// trimPlanMax is the most entries the plan counts when --limit is not given.
const trimPlanMax = pelwarden.MaxCount

func (a *app) trimCommand() *cobra.Command {
	var dryRun bool
	var limit int64
	var batch int
	cmd := &cobra.Command{
		Use:   "trim STREAM [--dry-run] [--limit N]",
		Short: "Delete the entries every consumer group has acknowledged",
		Long: `trim deletes the oldest entries of a stream that every consumer group has
both delivered and acknowledged, and never an entry a group still needs
(pending there, or not yet delivered to it): the bound is the lowest, over the
groups, of each group's oldest pending id and the id right after its last
delivered one, and only entries strictly below it go. A group that lags
(never read, or holding an old pending entry) holds the trimming back at its
position; trim names it.

trim first shows what it would delete (the bound, each group's position, the
group holding the bound, and the entries below it, counted up to 10,000 or
--limit), then deletes them in calls of --batch entries (one atomic library
call each, so neither the server nor a group waits long), up to --limit.
--dry-run stops after showing. A stream without consumer groups is refused:
nothing records what its readers have processed (use XTRIM).`,
		Example: `  pelwarden trim '{orders}' --dry-run
  pelwarden trim '{orders}' --limit 100000 --json`,
		Args: exactArgs("STREAM"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream := args[0]
			if cmd.Flags().Changed("limit") && limit <= 0 {
				return usageErrorf("--limit must be positive, got %d", limit)
			}
			if cmd.Flags().Changed("batch") && (batch <= 0 || batch > pelwarden.MaxCount) {
				return usageErrorf("--batch must be between 1 and %d, got %d", pelwarden.MaxCount, batch)
			}
			ctx := cmd.Context()
			rdb, err := a.connectToStream(ctx, "stream", stream)
			if err != nil {
				return err
			}
			defer rdb.Close()

			planLimit := int64(trimPlanMax)
			if limit > 0 {
				planLimit = min(limit, planLimit)
			}
			plan, err := ops.PlanTrim(ctx, rdb, ops.TrimOptions{Stream: stream, Limit: planLimit})
			if err != nil {
				return trimError(err, stream)
			}
			out := trimJSON{Stream: stream, DryRun: dryRun, Groups: []trimGroupJSON{},
				WouldTrim: plan.Trimmed, WouldTrimExact: !plan.Last.More}
			out.setFrom(plan.Last)
			if !a.json {
				a.printPlan(out, plan)
			}
			if !dryRun && plan.Trimmed > 0 {
				rep, err := ops.Trim(ctx, rdb, ops.TrimOptions{Stream: stream, Limit: limit, Batch: batch}, nil)
				if err != nil {
					if rep != nil && rep.Trimmed > 0 && !a.json {
						a.printf("trimmed %s before the error\n", plural(rep.Trimmed, "entry", "entries"))
					}
					return trimError(err, stream)
				}
				out.Trimmed, out.FirstID, out.LastID, out.Calls = rep.Trimmed, rep.FirstID, rep.LastID, rep.Calls+1
				out.setFrom(rep.Last)
			} else {
				out.Calls = 1
				out.More = plan.Last.More
			}
			if a.json {
				return a.printJSON(out)
			}
			switch {
			case dryRun:
				a.printf("dry run: nothing deleted\n")
			case out.Trimmed == 0:
				a.printf("nothing to trim; %s in the stream\n", plural(out.Length, "entry", "entries"))
			default:
				a.printf("trimmed %s (%s .. %s) in %s; %s left in the stream",
					plural(out.Trimmed, "entry", "entries"), out.FirstID, out.LastID, plural(int64(out.Calls-1), "call", "calls"),
					plural(out.Length, "entry", "entries"))
				if out.More {
					a.printf("; more below the bound remain (--limit)")
				}
				a.printf("\n")
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be trimmed and delete nothing")
	cmd.Flags().Int64Var(&limit, "limit", 0, "delete at most `N` entries in all (default: every entry below the bound)")
	cmd.Flags().IntVar(&batch, "batch", pelwarden.DefaultTrimLimit, "entries deleted per library call (1..10000)")
	return cmd
}

// setFrom copies the bound, the groups, More and the length of a trim call.
func (o *trimJSON) setFrom(r *pelwarden.TrimResult) {
	o.Bound, o.Holder, o.Length, o.More = r.Bound, r.Holder, r.Length, r.More
	o.Groups = o.Groups[:0]
	for _, g := range r.Groups {
		o.Groups = append(o.Groups, trimGroupJSON{Name: g.Name, Pending: g.Pending, OldestPending: g.OldestPending,
			LastDelivered: g.LastDelivered, Bound: g.Bound})
	}
}

// printPlan shows the bound, each group's position and what a trim would
// delete.
func (a *app) printPlan(out trimJSON, plan *ops.TrimReport) {
	a.printf("stream %s: %s, bound %s (held back by group %q)\n", out.Stream,
		plural(int64(len(out.Groups)), "consumer group", "consumer groups"), out.Bound, out.Holder)
	tw := a.table()
	fmt.Fprintln(tw, "  GROUP\tPENDING\tOLDEST PENDING\tLAST DELIVERED\tBOUND\t")
	for _, g := range out.Groups {
		oldest := g.OldestPending
		if oldest == "" {
			oldest = "-"
		}
		mark := ""
		if g.Name == out.Holder {
			mark = "<- holds the bound"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", g.Name, fmtCount(g.Pending), oldest, g.LastDelivered, g.Bound, mark)
	}
	_ = tw.Flush()
	switch {
	case plan.Trimmed == 0:
		a.printf("nothing below the bound: every entry in the stream is still needed by some group\n")
	case plan.Last.More:
		a.printf("would trim at least %s (%s .. %s and more below the bound)\n",
			plural(plan.Trimmed, "entry", "entries"), plan.FirstID, plan.LastID)
	default:
		a.printf("would trim %s (%s .. %s)\n", plural(plan.Trimmed, "entry", "entries"), plan.FirstID, plan.LastID)
	}
}

// trimError explains a stream without consumer groups, else gives err its
// exit code.
func trimError(err error, stream string) error {
	if errors.Is(err, pelwarden.ErrNoGroup) {
		return targetErrorf("stream %q has no consumer groups: nothing records what its readers have processed, so trim deletes nothing (use XTRIM to trim a stream without groups)", stream)
	}
	return opsError(err)
}
