package cli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// statusJSON is the --json output of status.
type statusJSON struct {
	Stream           string  `json:"stream"`
	Group            string  `json:"group"`
	DeadLetterStream string  `json:"dead_letter_stream"`
	Pending          int64   `json:"pending"`
	OldestPendingID  *string `json:"oldest_pending_id"`
	// OldestPendingAgeMs is the age of the oldest pending entry (from the
	// time part of its id, against the server's clock).
	OldestPendingAgeMs *int64         `json:"oldest_pending_age_ms"`
	NewestPendingID    *string        `json:"newest_pending_id"`
	Consumers          []consumerJSON `json:"consumers"`
	Lag                *int64         `json:"lag"` // null when the server cannot tell
	EntriesRead        *int64         `json:"entries_read"`
	LastDeliveredID    string         `json:"last_delivered_id"`
	Length             int64          `json:"length"`
	DeadLetterLength   int64          `json:"dead_letter_length"`
	MinIdleMs          int64          `json:"min_idle_ms"`
	Stalled            int            `json:"stalled_consumers"`
	StalledPending     int64          `json:"stalled_pending"`
	LibraryVersion     string         `json:"library_version,omitempty"`
	// LegacyDeadLetterStream and LegacyDeadLetterLength: records an older
	// pelwarden wrote under the former dead-letter stream name (omitted
	// when there are none, or with --dlq).
	LegacyDeadLetterStream string `json:"legacy_dead_letter_stream,omitempty"`
	LegacyDeadLetterLength int64  `json:"legacy_dead_letter_length,omitempty"`
	// Idempotency: the stream's idempotent publishing (XINFO STREAM on
	// Redis 8.6+; omitted where the server does not report it or the user
	// may not run XINFO STREAM).
	Idempotency *idempotencyJSON `json:"idempotency,omitempty"`
	// Paused: the group's pause (pelwarden pause); null when it is not
	// paused.
	Paused *pausedJSON `json:"paused"`
}

// pausedJSON is a pelwarden.Pause with its age on the server's clock.
type pausedJSON struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	AtMs   int64  `json:"at_ms"`
	ForMs  int64  `json:"for_ms"`
}

// idempotencyJSON is ops.Idempotency: XINFO STREAM's iids-duplicates,
// iids-added, pids-tracked, iids-tracked, idmp-maxsize and idmp-duration.
type idempotencyJSON struct {
	Duplicates int64 `json:"duplicates"`
	Added      int64 `json:"added"`
	Producers  int64 `json:"producers_tracked"`
	IDs        int64 `json:"ids_tracked"`
	MaxSize    int64 `json:"max_size"`
	DurationS  int64 `json:"duration_s"`
}

type consumerJSON struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	IdleMs  int64  `json:"idle_ms"`
	// Stalled: owns entries and has been idle at least --min-idle, so its
	// entries are reclaimable (it is probably dead or stuck).
	Stalled bool `json:"stalled"`
}

func (a *app) statusCommand() *cobra.Command {
	var minIdle time.Duration
	var dlq string
	var partitions int
	cmd := &cobra.Command{
		Use:   "status STREAM GROUP",
		Short: "PEL size, oldest pending age, consumers, lag and dead-letter length of a group",
		Long: `status shows what the guides do with XPENDING by hand, in one atomic read:
the size of the group's pending entries list (PEL) and the age of its oldest
entry, each consumer's pending count and idle time (flagging consumers that
own entries and have been idle past --min-idle: their entries are
reclaimable), the group's lag and the dead-letter stream's length. On Redis
8.6 and newer it adds the stream's idempotent publishing (XADD IDMP): the
publishes the server dropped as duplicates, and the ids it keeps per
producer, for how long.

Several streams at once: with --partitions N, STREAM is a partitioned
stream's name (pelwarden.Partitions(STREAM, N)), and a STREAM with glob
characters (SCAN MATCH syntax) names every stream it matches. One table
then has a row per stream, with its partition lease's owner, the head that
blocks it (ordered mode) and whether it is paused, and a line of totals;
the streams are read in three pipelined round trips.`,
		Example: `  pelwarden status '{orders}' billing
  pelwarden status '{orders}' billing --min-idle 30s --json
  pelwarden status payments billing --partitions 16
  pelwarden status '{orders-*' billing`,
		Args: exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			if err := nonNegativeDuration("min-idle", minIdle); err != nil {
				return err
			}
			dlq, err := deadLetterFlag(cmd, stream, dlq)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("partitions") && (partitions < 1 || partitions > pelwarden.MaxPartitions) {
				return usageErrorf("--partitions must be between 1 and %d, got %d", pelwarden.MaxPartitions, partitions)
			}
			many := partitions > 0 || strings.ContainsAny(stream, `*?[`)
			if many && cmd.Flags().Changed("dlq") {
				return usageErrorf("--dlq names one stream's dead-letter stream: not with several streams")
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			if many {
				streams, complete, err := statusStreams(ctx, rdb, stream, partitions)
				if err != nil {
					return err
				}
				return a.statusMany(ctx, rdb, group, streams, complete, partitions > 0, minIdle)
			}
			st, err := groupStats(ctx, rdb, stream, group, dlq)
			if err != nil {
				return err
			}
			now := serverTime(ctx, rdb)
			out := statusJSON{
				Stream: stream, Group: group, DeadLetterStream: dlq,
				Pending: st.Pending, Consumers: []consumerJSON{},
				LastDeliveredID: st.LastDeliveredID, Length: st.Length,
				DeadLetterLength: st.DeadLetterLength, MinIdleMs: minIdle.Milliseconds(),
			}
			if st.LowestID != "" {
				lo, hi := st.LowestID, st.HighestID
				out.OldestPendingID, out.NewestPendingID = &lo, &hi
				if t, ok := ops.IDTime(lo); ok {
					age := max(now.Sub(t).Milliseconds(), 0)
					out.OldestPendingAgeMs = &age
				}
			}
			if st.Lag >= 0 {
				lag := st.Lag
				out.Lag = &lag
			}
			if st.EntriesRead >= 0 {
				er := st.EntriesRead
				out.EntriesRead = &er
			}
			for _, c := range st.Consumers {
				stalled := c.Pending > 0 && c.Idle >= minIdle
				out.Consumers = append(out.Consumers, consumerJSON{Name: c.Name, Pending: c.Pending, IdleMs: c.Idle.Milliseconds(), Stalled: stalled})
				if stalled {
					out.Stalled++
					out.StalledPending += c.Pending
				}
			}
			switch p, err := pelwarden.ReadPause(ctx, rdb, stream, group); {
			case pelwarden.Matches(err, pelwarden.ErrNoPermission):
				// An operator that may not read the pause key sees the rest.
			case err != nil:
				return classify(err)
			case p != nil:
				out.Paused = &pausedJSON{By: p.By, Reason: p.Reason, AtMs: p.At.UnixMilli(), ForMs: max(now.Sub(p.At).Milliseconds(), 0)}
			}
			if v, err := pelwarden.NewLibrary(rdb).Version(ctx); err == nil {
				out.LibraryVersion = v
			}
			idmp, err := ops.StreamIdempotency(ctx, rdb, stream)
			if err != nil {
				return err
			}
			if idmp != nil {
				out.Idempotency = &idempotencyJSON{Duplicates: idmp.Duplicates, Added: idmp.Added, Producers: idmp.Producers,
					IDs: idmp.IDs, MaxSize: idmp.MaxSize, DurationS: int64(idmp.Duration / time.Second)}
			}
			if !cmd.Flags().Changed("dlq") {
				legacy, err := ops.FindLegacyDeadLetters(ctx, rdb, stream)
				if err != nil {
					return err
				}
				if legacy != nil {
					out.LegacyDeadLetterStream, out.LegacyDeadLetterLength = legacy.Stream, legacy.Length
				}
			}
			if a.json {
				return a.printJSON(out)
			}
			a.printStatus(out, minIdle)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&minIdle, "min-idle", time.Minute, "flag consumers that own entries and have been idle at least this long (their entries are reclaimable); use your consumers' MinIdle")
	cmd.Flags().IntVar(&partitions, "partitions", 0, "STREAM is a partitioned stream of `N` partitions: one row per partition")
	cmd.Flags().StringVar(&dlq, "dlq", "", "dead-letter stream `KEY` (default pelwarden.DeadLetterStreamFor(STREAM): STREAM:dead with a hash tag, else {STREAM}:dead)")
	return cmd
}

func (a *app) printStatus(s statusJSON, minIdle time.Duration) {
	a.printf("stream %s, group %s\n", s.Stream, s.Group)
	tw := a.table()
	pending := plural(s.Pending, "entry", "entries")
	if s.OldestPendingID != nil {
		pending += ", oldest " + *s.OldestPendingID
		if s.OldestPendingAgeMs != nil {
			pending += " (added " + fmtDuration(time.Duration(*s.OldestPendingAgeMs)*time.Millisecond) + " ago)"
		}
	}
	_, _ = tw.Write([]byte("  pending\t" + pending + "\n"))
	if p := s.Paused; p != nil {
		line := "yes, for " + fmtDuration(time.Duration(p.ForMs)*time.Millisecond) + " by " + p.By
		if p.Reason != "" {
			line += ": " + p.Reason
		}
		_, _ = tw.Write([]byte("  PAUSED\t" + line + " (pelwarden resume ends it)\n"))
	}
	lag := "unknown (the server cannot tell after deletions or trimming)"
	if s.Lag != nil {
		lag = plural(*s.Lag, "entry", "entries") + " not yet delivered to the group"
	}
	_, _ = tw.Write([]byte("  lag\t" + lag + "\n"))
	_, _ = tw.Write([]byte("  stream length\t" + fmtCount(s.Length) + "\n"))
	_, _ = tw.Write([]byte("  dead-letter\t" + s.DeadLetterStream + ": " + plural(s.DeadLetterLength, "record", "records") + "\n"))
	if s.LegacyDeadLetterStream != "" {
		legacy := ops.LegacyDeadLetters{Stream: s.LegacyDeadLetterStream, Length: s.LegacyDeadLetterLength}
		_, _ = tw.Write([]byte("  former dead-letter\t" + legacy.Stream + ": " + plural(legacy.Length, "record", "records") + ", " + legacy.Advice() + "\n"))
	}
	if i := s.Idempotency; i != nil {
		_, _ = tw.Write([]byte("  idempotency\t" + plural(i.Duplicates, "duplicate", "duplicates") + " dropped, " + fmtCount(i.Added) + " added; keeps " +
			plural(i.MaxSize, "id", "ids") + " per producer for " + fmtDuration(time.Duration(i.DurationS)*time.Second) + " (" + plural(i.Producers, "producer", "producers") + " tracked)\n"))
	}
	_ = tw.Flush()
	if len(s.Consumers) == 0 {
		a.printf("consumers: none\n")
		return
	}
	a.printf("consumers (%d):\n", len(s.Consumers))
	tw = a.table()
	_, _ = tw.Write([]byte("  NAME\tPENDING\tIDLE\t\n"))
	for _, c := range s.Consumers {
		note := ""
		switch {
		case c.Stalled:
			note = "stalled: idle past --min-idle " + fmtDuration(minIdle) + "; its entries are reclaimable"
		case c.Pending == 0 && time.Duration(c.IdleMs)*time.Millisecond >= minIdle:
			note = "idle, owns nothing (pelwarden reap can delete it)"
		}
		_, _ = tw.Write([]byte("  " + c.Name + "\t" + fmtCount(c.Pending) + "\t" + fmtDuration(time.Duration(c.IdleMs)*time.Millisecond) + "\t" + note + "\n"))
	}
	_ = tw.Flush()
	if s.Stalled > 0 {
		a.printf("%s owned by stalled consumers: a running driver reclaims them after its MinIdle;\n", plural(s.StalledPending, "entry", "entries"))
		a.printf("entries delivered too often can be moved with `pelwarden poison %s %s --max-deliveries N`.\n", s.Stream, s.Group)
	}
}
