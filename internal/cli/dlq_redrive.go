package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
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
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			if err := needStream(ctx, rdb, "dead-letter stream", key); err != nil {
				return err
			}
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

// redrive moves records page by page. Pages are at most a tenth of a
// second's worth at --rate (1 to 100 records).
func (a *app) redrive(ctx context.Context, rdb redis.UniversalClient, key string, o redriveOptions) (*redriveJSON, error) {
	lib := pelwarden.NewLibrary(rdb)
	out := &redriveJSON{DeadLetterStream: key, To: o.to, ByStream: map[string]int{}, Moves: []moveJSON{}, Foreign: []string{}, Skipped: []skippedJSON{}}
	total, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		return nil, failuref("XLEN %s: %v", key, err)
	}
	if o.limit > 0 {
		total = min(total, int64(o.limit))
	}
	pageMax := int(min(max(o.rate/10, 1), 100))
	live := newProgressLine(a.stderr)
	defer live.Close()
	started := time.Now()
	examined := 0
	// Source streams checked so far: "" when usable, else why not.
	sources := map[string]string{}
	cursor := "0-0"
	for {
		n := pageMax
		if o.limit > 0 {
			n = min(n, o.limit-out.Moved)
			if n == 0 {
				return out, nil
			}
		}
		var done bool
		var seen int
		if o.to != "" {
			page, err := lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: key, Stream: o.to, AnySource: true, Cursor: cursor, Count: n})
			if err != nil {
				return out, classify(err)
			}
			for _, m := range page.Moved {
				out.Moves = append(out.Moves, moveJSON{From: m.From, To: m.To, Stream: o.to})
				out.ByStream[o.to]++
			}
			out.Moved += len(page.Moved)
			out.Foreign = append(out.Foreign, page.Foreign...)
			seen = len(page.Moved) + len(page.Foreign) + len(page.OtherSource)
			done, cursor = page.Done(), page.Cursor
		} else {
			var err error
			seen, done, cursor, err = a.redrivePageToSources(ctx, rdb, lib, key, cursor, n, sources, out)
			if err != nil {
				return out, err
			}
		}
		examined += seen
		live.Set(progressText("redriving", int64(examined), total, started, fmt.Sprintf("moved %s", fmtCount(int64(out.Moved)))), false)
		if done {
			live.Set(progressText("redriving", int64(examined), total, started, fmt.Sprintf("moved %s", fmtCount(int64(out.Moved)))), true)
			out.Complete = true
			return out, nil
		}
		// Rate limit: the records examined so far may not come faster than
		// --rate per second.
		due := started.Add(time.Duration(float64(examined) / o.rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return out, failuref("interrupted")
			case <-t.C:
			}
		}
	}
}

// redrivePageToSources reads one page of records after cursor, groups them
// by source stream and moves each group back with Redrive (AnySource
// false), examining exactly the records of the page. It returns how many
// records it examined, whether the stream is done and the next cursor.
func (a *app) redrivePageToSources(ctx context.Context, rdb redis.UniversalClient, lib *pelwarden.Library, key, cursor string, n int,
	sources map[string]string, out *redriveJSON) (int, bool, string, error) {
	start, more := after(cursor)
	if !more {
		return 0, true, cursor, nil
	}
	page, err := xrange(ctx, rdb, key, start, "+", int64(n))
	if err != nil {
		return 0, false, cursor, failuref("XRANGE %s: %v", key, err)
	}
	if len(page) == 0 {
		return 0, true, cursor, nil
	}
	bySource := map[string][]string{}
	var order []string
	for _, e := range page {
		r := parseDeadRecord(e)
		if r.Foreign || r.Stream == "" {
			out.Foreign = append(out.Foreign, r.ID)
			continue
		}
		if _, ok := bySource[r.Stream]; !ok {
			order = append(order, r.Stream)
		}
		bySource[r.Stream] = append(bySource[r.Stream], r.ID)
	}
	// Records still in the window (cursor, last]: each Redrive call examines
	// exactly them, so records beyond this page are never touched.
	window := len(page)
	for _, src := range order {
		ids := bySource[src]
		why, checked := sources[src]
		if !checked {
			why = a.checkSource(ctx, rdb, key, src)
			sources[src] = why
		}
		if why != "" {
			for _, id := range ids {
				out.Skipped = append(out.Skipped, skippedJSON{ID: id, Stream: src, Reason: why})
			}
			continue
		}
		p, err := lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: key, Stream: src, AnySource: false, Cursor: cursor, Count: window})
		if errors.Is(err, pelwarden.ErrCrossSlot) {
			sources[src] = "in another cluster slot than the dead-letter stream (use --to with the same hash tag)"
			for _, id := range ids {
				out.Skipped = append(out.Skipped, skippedJSON{ID: id, Stream: src, Reason: sources[src]})
			}
			continue
		}
		if err != nil {
			return len(page), false, cursor, classify(err)
		}
		for _, m := range p.Moved {
			out.Moves = append(out.Moves, moveJSON{From: m.From, To: m.To, Stream: src})
		}
		out.ByStream[src] += len(p.Moved)
		out.Moved += len(p.Moved)
		window -= len(p.Moved)
	}
	last := page[len(page)-1].ID
	return len(page), len(page) < n, last, nil
}

// checkSource returns "" when records can go back to src, else why not.
func (a *app) checkSource(ctx context.Context, rdb redis.UniversalClient, key, src string) string {
	if _, ok := rdb.(*redis.ClusterClient); ok && pelwarden.Slot(src) != pelwarden.Slot(key) {
		return "in another cluster slot than the dead-letter stream (use --to with the same hash tag)"
	}
	t, err := rdb.Type(ctx, src).Result()
	switch {
	case err != nil:
		return "TYPE failed: " + err.Error()
	case t == "none":
		return "source stream does not exist any more (use --to)"
	case t != "stream":
		return "source key holds a " + t + ", not a stream"
	}
	return ""
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
