package ops

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// GroupsOptions are the options of ReadGroups.
type GroupsOptions struct {
	// StalledAfter: a consumer that owns entries and has been idle at
	// least this long is stalled (its entries are reclaimable). Use the
	// consumers' MinIdle. Required (positive).
	StalledAfter time.Duration
	// MaxStreams bounds the streams with groups read (0: no bound). The
	// streams past it are left out and GroupsSnapshot.Truncated is set.
	MaxStreams int
}

// GroupState is one consumer group as an operator watches it, read without
// walking its PEL or its stream's entries.
type GroupState struct {
	Stream, Group string
	// DeadLetterStream is the stream's dead-letter stream
	// (pelwarden.DeadLetterStreamFor).
	DeadLetterStream string
	// Length of the stream.
	Length int64
	// Lag is the number of entries not yet delivered to the group, -1 when
	// the server cannot tell (after deletions or trimming past entries the
	// group had not read: XINFO GROUPS reports no lag then).
	Lag int64
	// EntriesRead is the group's entries-read counter as XINFO GROUPS
	// reports it (0 when the server does not know it).
	EntriesRead int64
	// Pending is the PEL size; OldestPendingID its lowest id ("" when the
	// PEL is empty) and OldestPendingAge that id's age against the
	// server's clock (-1 when the PEL is empty).
	Pending          int64
	OldestPendingID  string
	OldestPendingAge time.Duration
	// Consumers of the group; Active the ones idle less than StalledAfter
	// (a driver consumer reads at least every ReadBlock, 2 s by default).
	// Stalled counts the ones that own entries and have been idle at least
	// StalledAfter; StalledPending the entries they own. Every such entry
	// has been idle at least as long as its owner (its delivery was one of
	// the owner's interactions).
	Consumers, Active, Stalled int
	StalledPending             int64
	// DeadLetterLength is the dead-letter stream's length and
	// DeadLetterAdded its entries-added counter (both 0 when it does not
	// exist). The dead-letter stream is the stream's, shared by its groups.
	DeadLetterLength, DeadLetterAdded int64
	// Lease is the stream's partition lease (nil when the stream is not a
	// partition in ordered mode, or LeaseErr says why it could not be
	// read).
	Lease    *LeaseState
	LeaseErr error
	// Pause is the group's pause on the stream (pelwarden.PauseGroup; nil
	// when it is not paused, or PauseErr says why it could not be read).
	Pause    *pelwarden.Pause
	PauseErr error
	// Err is set when the group's PEL summary or consumers could not be
	// read; the fields they fill are then zero.
	Err error
}

// GroupsSnapshot is what ReadGroups read.
type GroupsSnapshot struct {
	// At is the server's time of the snapshot.
	At time.Time
	// Groups sorted by stream, then group.
	Groups []GroupState
	// Streams is the number of streams with groups read; Truncated: more
	// streams with groups than GroupsOptions.MaxStreams.
	Streams   int
	Truncated bool
}

// streamReads are the per-stream commands of one snapshot.
type streamReads struct {
	stream, dlq string
	groups      *redis.XInfoGroupsCmd
	length      *redis.IntCmd
	dlqLength   *redis.IntCmd
	dlqInfo     *redis.XInfoStreamCmd
	lease       *redis.SliceCmd
	pauses      *redis.MapStringStringCmd
}

// groupReads are the per-group commands of one snapshot.
type groupReads struct {
	s         *streamReads
	g         redis.XInfoGroup
	pending   *redis.XPendingCmd
	consumers *redis.XInfoConsumersCmd
}

// ReadGroups reads every consumer group of streams in three pipelined
// round trips: TIME; per stream XINFO GROUPS, XLEN, the dead-letter
// stream's XLEN and XINFO STREAM (not FULL: its entries-added counter), an
// HMGET of the stream's lease hash and an HGETALL of its pause hash; per group XPENDING (the summary
// form: one row per consumer) and XINFO CONSUMERS. Nothing reads a PEL's
// entries or a stream's entries, so the server's work grows with the
// number of groups and consumers, not with the PELs' sizes.
//
// Streams without groups (dead-letter streams) and streams that are gone
// are left out. It fails only when the server's time cannot be read; a
// group that could not be read has its Err set.
func ReadGroups(ctx context.Context, rdb redis.UniversalClient, streams []string, o GroupsOptions) (*GroupsSnapshot, error) {
	if o.StalledAfter <= 0 {
		return nil, argumentError("StalledAfter", "must be positive, got %v", o.StalledAfter)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, commandError("TIME", "", err)
	}
	out := &GroupsSnapshot{At: now, Groups: []GroupState{}}
	reads := make([]*streamReads, 0, len(streams))
	pipe := rdb.Pipeline()
	for _, name := range streams {
		sr := &streamReads{stream: name, dlq: pelwarden.DeadLetterStreamFor(name)}
		sr.groups = pipe.XInfoGroups(ctx, name)
		sr.length = pipe.XLen(ctx, name)
		sr.dlqLength = pipe.XLen(ctx, sr.dlq)
		sr.dlqInfo = pipe.XInfoStream(ctx, sr.dlq)
		sr.lease = pipe.HMGet(ctx, pelwarden.LeaseKeyFor(name), LeaseFields...)
		sr.pauses = pipe.HGetAll(ctx, pelwarden.PauseKeyFor(name))
		reads = append(reads, sr)
	}
	if len(reads) > 0 {
		// Each command's error is read below (a missing dead-letter stream
		// fails XINFO STREAM, which is fine).
		_, _ = pipe.Exec(ctx)
	}
	var groups []*groupReads
	pipe = rdb.Pipeline()
	for _, sr := range reads {
		gs, err := sr.groups.Result()
		if err != nil || len(gs) == 0 {
			continue // a stream without groups (a dead-letter stream), or gone
		}
		if o.MaxStreams > 0 && out.Streams == o.MaxStreams {
			out.Truncated = true
			break
		}
		out.Streams++
		for _, g := range gs {
			gr := &groupReads{s: sr, g: g}
			gr.pending = pipe.XPending(ctx, sr.stream, g.Name)
			gr.consumers = pipe.XInfoConsumers(ctx, sr.stream, g.Name)
			groups = append(groups, gr)
		}
	}
	if len(groups) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for _, gr := range groups {
		out.Groups = append(out.Groups, gr.state(now, o.StalledAfter))
	}
	sort.SliceStable(out.Groups, func(i, j int) bool {
		a, b := out.Groups[i], out.Groups[j]
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		return a.Group < b.Group
	})
	return out, nil
}

// state decodes one group's replies.
func (gr *groupReads) state(now time.Time, stalledAfter time.Duration) GroupState {
	st := GroupState{Stream: gr.s.stream, Group: gr.g.Name, DeadLetterStream: gr.s.dlq,
		Lag: gr.g.Lag, EntriesRead: gr.g.EntriesRead, Pending: gr.g.Pending,
		Consumers: int(gr.g.Consumers), OldestPendingAge: -1}
	st.Length, _ = gr.s.length.Result()
	st.DeadLetterLength, _ = gr.s.dlqLength.Result()
	if info, err := gr.s.dlqInfo.Result(); err == nil {
		st.DeadLetterAdded = info.EntriesAdded
	}
	st.Lease, st.LeaseErr = DecodeLeaseReply(pelwarden.LeaseKeyFor(gr.s.stream), gr.s.lease, now)
	if pauses, err := gr.s.pauses.Result(); err != nil {
		st.PauseErr = commandError("HGETALL", pelwarden.PauseKeyFor(gr.s.stream), err)
	} else if v, ok := pauses[gr.g.Name]; ok {
		st.Pause, st.PauseErr = pelwarden.DecodePause(pelwarden.PauseKeyFor(gr.s.stream), gr.g.Name, v)
	}
	if p, err := gr.pending.Result(); err == nil {
		st.Pending = p.Count
		if p.Count > 0 {
			st.OldestPendingID = p.Lower
			if t, ok := IDTime(p.Lower); ok {
				st.OldestPendingAge = max(now.Sub(t), 0)
			}
		}
	} else if pelwarden.Classify(err) != pelwarden.ClassNoGroup {
		st.Err = commandError("XPENDING", gr.s.stream, err)
	}
	if cs, err := gr.consumers.Result(); err == nil {
		st.Consumers = len(cs)
		for _, c := range cs {
			if c.Idle < stalledAfter {
				st.Active++
			}
			if c.Pending > 0 && c.Idle >= stalledAfter {
				st.Stalled++
				st.StalledPending += c.Pending
			}
		}
	} else if st.Err == nil && pelwarden.Classify(err) != pelwarden.ClassNoGroup {
		st.Err = commandError("XINFO CONSUMERS", gr.s.stream, err)
	}
	return st
}

// DecodeLeaseReply decodes the reply of an HMGET of LeaseFields on key read
// at the server time now: nil and no error when there is no lease hash (the
// stream is not a partition in ordered mode). A key of another type fails
// matching pelwarden.ErrWrongType, a user who may not read it
// pelwarden.ErrNoPermission.
func DecodeLeaseReply(key string, cmd *redis.SliceCmd, now time.Time) (*LeaseState, error) {
	vals, err := cmd.Result()
	if err != nil {
		return nil, commandError("HMGET", key, err)
	}
	return DecodeLease(key, vals, now)
}

// IDTime is the time part of a stream id (false when id is not one).
func IDTime(id string) (time.Time, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}
