package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// statusManyJSON is the --json output of status over several streams (a
// glob, or --partitions).
type statusManyJSON struct {
	Group   string           `json:"group"`
	Streams []streamRowJSON  `json:"streams"`
	Totals  statusTotalsJSON `json:"totals"`
	// Complete: the glob's discovery scanned every primary's keyspace.
	Complete bool `json:"complete"`
}

// streamRowJSON is one stream of status over several streams.
type streamRowJSON struct {
	Stream string `json:"stream"`
	// Missing: the stream or the group on it does not exist (every other
	// field is then zero).
	Missing            bool    `json:"missing,omitempty"`
	Pending            int64   `json:"pending"`
	OldestPendingAgeMs *int64  `json:"oldest_pending_age_ms"`
	Lag                *int64  `json:"lag"`
	Consumers          int     `json:"consumers"`
	StalledConsumers   int     `json:"stalled_consumers"`
	StalledPending     int64   `json:"stalled_pending"`
	DeadLetterLength   int64   `json:"dead_letter_length"`
	LeaseOwner         *string `json:"lease_owner"` // null: no lease hash (not a partition in ordered mode)
	LeaseLeftMs        *int64  `json:"lease_left_ms"`
	BlockedHead        *string `json:"blocked_head"`
	Paused             bool    `json:"paused"`
	Error              string  `json:"error,omitempty"`
}

type statusTotalsJSON struct {
	Pending          int64  `json:"pending"`
	Lag              *int64 `json:"lag"` // null when one stream's lag is unknown
	DeadLetterLength int64  `json:"dead_letter_length"`
	StalledPending   int64  `json:"stalled_pending"`
	Blocked          int    `json:"blocked"`
	Paused           int    `json:"paused"`
}

// statusStreams are the streams status reads for STREAM: the partitions of
// a partitioned stream (partitions > 0), the streams matching a glob, or
// nil for one plain stream (the single-stream status).
func statusStreams(ctx context.Context, rdb redis.UniversalClient, stream string, partitions int) ([]string, bool, error) {
	if partitions > 0 {
		keys, err := pelwarden.Partitions(stream, partitions)
		return keys, true, err
	}
	if !strings.ContainsAny(stream, `*?[`) {
		return nil, true, nil
	}
	d, err := ops.DiscoverStreams(ctx, rdb, ops.DiscoverOptions{Match: stream})
	if err != nil {
		return nil, false, classify(err)
	}
	return d.Streams, d.Complete, nil
}

// statusMany is status over several streams: one row per stream from one
// ops.ReadGroups (three pipelined round trips whatever their number).
func (a *app) statusMany(ctx context.Context, rdb redis.UniversalClient, group string, streams []string, complete, partitioned bool, minIdle time.Duration) error {
	snap, err := ops.ReadGroups(ctx, rdb, streams, ops.GroupsOptions{StalledAfter: max(minIdle, time.Millisecond)})
	if err != nil {
		return classify(err)
	}
	byStream := map[string]*ops.GroupState{}
	for i := range snap.Groups {
		if g := &snap.Groups[i]; g.Group == group {
			byStream[g.Stream] = g
		}
	}
	out := statusManyJSON{Group: group, Streams: []streamRowJSON{}, Complete: complete}
	var lag int64
	lagKnown := true
	for _, s := range streams {
		g := byStream[s]
		if g == nil {
			if partitioned {
				out.Streams = append(out.Streams, streamRowJSON{Stream: s, Missing: true})
			}
			continue
		}
		row := streamRowJSON{Stream: s, Pending: g.Pending, Consumers: g.Consumers, StalledConsumers: g.Stalled,
			StalledPending: g.StalledPending, DeadLetterLength: g.DeadLetterLength, Paused: g.Pause != nil}
		if g.Err != nil {
			row.Error = g.Err.Error()
		}
		if g.OldestPendingAge >= 0 {
			ms := g.OldestPendingAge.Milliseconds()
			row.OldestPendingAgeMs = &ms
		}
		if g.Lag >= 0 {
			l := g.Lag
			row.Lag = &l
			lag += l
		} else {
			lagKnown = false
		}
		if l := g.Lease; l != nil {
			owner, left := l.Owner, l.Left.Milliseconds()
			row.LeaseOwner, row.LeaseLeftMs = &owner, &left
			if l.Blocked != "" {
				b := l.Blocked
				row.BlockedHead = &b
				out.Totals.Blocked++
			}
		}
		out.Totals.Pending += row.Pending
		out.Totals.DeadLetterLength += row.DeadLetterLength
		out.Totals.StalledPending += row.StalledPending
		if row.Paused {
			out.Totals.Paused++
		}
		out.Streams = append(out.Streams, row)
	}
	if lagKnown {
		out.Totals.Lag = &lag
	}
	if a.json {
		return a.printJSON(out)
	}
	tw := a.table()
	fmt.Fprintln(tw, "STREAM\tPENDING\tOLDEST\tLAG\tCONSUMERS\tSTALLED\tDEAD\tLEASE OWNER\tBLOCKED HEAD\tPAUSED")
	for _, r := range out.Streams {
		if r.Missing {
			fmt.Fprintf(tw, "%s\t(no group %s)\t\t\t\t\t\t\t\t\n", r.Stream, group)
			continue
		}
		oldest, lagText, owner, blocked, paused := "-", "?", "-", "-", "-"
		if r.OldestPendingAgeMs != nil {
			oldest = fmtDuration(time.Duration(*r.OldestPendingAgeMs) * time.Millisecond)
		}
		if r.Lag != nil {
			lagText = fmtCount(*r.Lag)
		}
		if r.LeaseOwner != nil {
			switch {
			case *r.LeaseOwner == "":
				owner = "(free)"
			case *r.LeaseLeftMs <= 0:
				owner = *r.LeaseOwner + " (expired)"
			default:
				owner = *r.LeaseOwner
			}
		}
		if r.BlockedHead != nil {
			blocked = *r.BlockedHead
		}
		if r.Paused {
			paused = "PAUSED"
		}
		stalled := "0"
		if r.StalledConsumers > 0 {
			stalled = fmt.Sprintf("%d (%s)", r.StalledConsumers, plural(r.StalledPending, "entry", "entries"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Stream, fmtCount(r.Pending), oldest, lagText, r.Consumers,
			stalled, fmtCount(r.DeadLetterLength), owner, blocked, paused)
	}
	_ = tw.Flush()
	total := "?"
	if out.Totals.Lag != nil {
		total = fmtCount(*out.Totals.Lag)
	}
	a.printf("group %s on %s: %s pending, lag %s, %s; %d blocked, %d paused\n", group, plural(int64(len(out.Streams)), "stream", "streams"),
		fmtCount(out.Totals.Pending), total, plural(out.Totals.DeadLetterLength, "dead letter", "dead letters"), out.Totals.Blocked, out.Totals.Paused)
	if !complete {
		a.printf("the keyspace scan stopped before its end: more streams may match\n")
	}
	return nil
}
