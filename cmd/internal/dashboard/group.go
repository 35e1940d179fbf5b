package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// errNoGroup: the stream or the group does not exist.
var errNoGroup = errors.New("no such stream or consumer group")

// groupView is the shared snapshot of a group page's live part.
type groupView struct {
	// At is the server's time of the snapshot.
	At                    time.Time
	Stream, Group, DLQ    string
	Info                  redis.XInfoGroup
	Length, DeadLetterLen int64
	Pending               int64
	LowestID, HighestID   string
	OldestAge             time.Duration
	Consumers             []redis.XInfoConsumer
	// LeaseKey is the stream's lease hash (pelwarden.LeaseKeyFor), Lease
	// its state (nil when the stream is not a partition in ordered mode),
	// LeaseNote why it could not be read ("" when it was).
	LeaseKey  string
	Lease     *ops.LeaseState
	LeaseNote string
	// Legacy: records an older pelwarden wrote under the stream's former
	// dead-letter stream name (nil when there are none).
	Legacy *ops.LegacyDeadLetters
	// Idempotency is the stream's idempotent publishing (nil where the
	// server does not report it, before Redis 8.6 and on Valkey, or the
	// user may not run XINFO STREAM).
	Idempotency *ops.Idempotency
	// Pause is the group's pause (nil when it is not paused); PauseNote
	// says why it could not be read ("" when it was).
	Pause     *pelwarden.Pause
	PauseNote string
}

// loadGroup reads a group's summary in one pipelined round trip: TIME,
// XINFO GROUPS (the group's row), XLEN of the stream and its dead-letter
// stream (and of its former dead-letter stream, for a stream without a hash
// tag), XPENDING's summary form, XINFO CONSUMERS (a row per consumer;
// nothing per pending entry), XINFO STREAM (not FULL: its idempotent
// publishing counters) and an HMGET of the stream's lease hash.
func (s *Server) loadGroup(ctx context.Context, stream, group, dlq string) (*groupView, error) {
	pipe := s.rdb.Pipeline()
	tm := pipe.Time(ctx)
	typ := pipe.Type(ctx, stream)
	groups := pipe.XInfoGroups(ctx, stream)
	length := pipe.XLen(ctx, stream)
	dlqLen := pipe.XLen(ctx, dlq)
	pending := pipe.XPending(ctx, stream, group)
	consumers := pipe.XInfoConsumers(ctx, stream, group)
	info := pipe.XInfoStream(ctx, stream)
	leaseKey := pelwarden.LeaseKeyFor(stream)
	lease := pipe.HMGet(ctx, leaseKey, ops.LeaseFields...)
	pause := pipe.HGet(ctx, pelwarden.PauseKeyFor(stream), group)
	var legacyLen *redis.IntCmd
	legacy, legacyDiffers := pelwarden.LegacyDeadLetterStreamFor(stream)
	if legacyDiffers && legacy != dlq {
		legacyLen = pipe.XLen(ctx, legacy)
	}
	_, _ = pipe.Exec(ctx)
	now, err := tm.Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	v := &groupView{At: now, Stream: stream, Group: group, DLQ: dlq, OldestAge: -1, LeaseKey: leaseKey}
	switch t, _ := typ.Result(); t {
	case "stream":
	case "none":
		return nil, fmt.Errorf("stream %q does not exist: %w", stream, errNoGroup)
	default:
		return nil, fmt.Errorf("key %q holds a %s, not a stream: %w", stream, t, errNoGroup)
	}
	gs, err := groups.Result()
	switch {
	case err != nil:
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", stream, err)
	}
	found := false
	for _, g := range gs {
		if g.Name == group {
			v.Info, found = g, true
		}
	}
	if !found {
		return nil, fmt.Errorf("stream %q has no group %q: %w", stream, group, errNoGroup)
	}
	if v.Length, err = length.Result(); err != nil {
		return nil, fmt.Errorf("XLEN %s: %w", stream, err)
	}
	v.DeadLetterLen, _ = dlqLen.Result()
	p, err := pending.Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s: %w", stream, group, err)
	}
	v.Pending, v.LowestID, v.HighestID = p.Count, p.Lower, p.Higher
	if t, ok := ops.IDTime(p.Lower); ok && p.Count > 0 {
		v.OldestAge = max(now.Sub(t), 0)
	}
	if v.Consumers, err = consumers.Result(); err != nil {
		return nil, fmt.Errorf("XINFO CONSUMERS %s %s: %w", stream, group, err)
	}
	// Idempotent publishing is a fact beside the group's state: a user that
	// may not run XINFO STREAM sees the rest of the page.
	if si, err := info.Result(); err == nil {
		v.Idempotency = ops.IdempotencyOf(si)
	} else if !pelwarden.Matches(err, pelwarden.ErrNoPermission) {
		return nil, fmt.Errorf("XINFO STREAM %s: %w", stream, err)
	}
	v.Lease, v.LeaseNote = leaseState(leaseKey, lease, now)
	v.Pause, v.PauseNote = pauseState(stream, group, pause)
	if legacyLen != nil {
		// A missing key reads 0; another type or a refused read shows
		// nothing: the panel is advice, not the group's state.
		if n, err := legacyLen.Result(); err == nil && n > 0 {
			v.Legacy = &ops.LegacyDeadLetters{Stream: legacy, Length: n}
		}
	}
	return v, nil
}

// pauseState decodes the HGET of the group's field of the stream's pause
// hash: the pause (nil when the group is not paused), or a note saying why
// it could not be read (the rest of the page is shown).
func pauseState(stream, group string, cmd *redis.StringCmd) (*pelwarden.Pause, string) {
	key := pelwarden.PauseKeyFor(stream)
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ""
	case pelwarden.Matches(err, pelwarden.ErrNoPermission):
		return nil, fmt.Sprintf("this ACL user may not read %s (grant %%R~%s +hget to see whether the group is paused)", key, key)
	case err != nil:
		return nil, fmt.Sprintf("HGET %s %s: %v", key, group, err)
	}
	p, err := pelwarden.DecodePause(key, group, v)
	if err != nil {
		return nil, err.Error()
	}
	return p, ""
}

// leaseState decodes the HMGET of a stream's lease hash: its state (nil
// when there is none), or a note saying why it could not be read. The
// lease is a panel of the group page, so a key that is not a lease hash
// or an ACL user that may not read it is noted there and the rest of the
// page is shown.
func leaseState(key string, cmd *redis.SliceCmd, now time.Time) (*ops.LeaseState, string) {
	vals, err := cmd.Result()
	switch {
	case pelwarden.Matches(err, pelwarden.ErrWrongType):
		return nil, fmt.Sprintf("%s is not a lease hash (it holds another type): the partition's lease cannot be shown", key)
	case pelwarden.Matches(err, pelwarden.ErrNoPermission):
		return nil, fmt.Sprintf("this ACL user may not read %s (grant %%R~%s +hmget to see the partition's lease)", key, key)
	case err != nil:
		return nil, fmt.Sprintf("HMGET %s: %v", key, err)
	}
	l, err := ops.DecodeLease(key, vals, now)
	if err != nil {
		return nil, err.Error()
	}
	return l, ""
}

// pelPage is one page of a PEL.
type pelPage struct {
	Rows []redis.XPendingExt
	// Next is the cursor of the next page ("" at the end).
	Next string
}

// loadPEL reads one page of the PEL: XPENDING stream group start + count
// [consumer], from the id after "after" (or from "from" inclusive, or the
// start). One page costs the server the page, however long the PEL.
func (s *Server) loadPEL(ctx context.Context, stream, group, consumer, from, after string, count int) (*pelPage, error) {
	start := "-"
	switch {
	case after != "":
		start = "(" + after
	case from != "":
		start = from
	}
	rows, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: int64(count), Consumer: consumer}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s %s + %d: %w", stream, group, start, count, err)
	}
	p := &pelPage{Rows: rows}
	if len(rows) == count {
		p.Next = rows[len(rows)-1].ID
	}
	return p, nil
}

// stuckScan bounds the stuck entries a group page counts (XPENDING IDLE
// COUNT), stuckShown the ones it lists.
const (
	stuckScan  = 100
	stuckShown = 10
)

// stuckView is what a group page shows of its stuck entries: pending
// entries idle past the stuck threshold, which the driver's reclaim passes
// should have taken long before (its stall check reports the same).
type stuckView struct {
	// Rows are the first stuckShown stuck entries, lowest ids first.
	Rows []redis.XPendingExt
	// Count is how many there are, up to stuckScan; More is set when
	// there may be more.
	Count int
	More  bool
	// Unlisted is Count less the rows listed.
	Unlisted int
}

// loadStuck reads the group's stuck entries: one XPENDING IDLE call,
// which stops after stuckScan of them.
func (s *Server) loadStuck(ctx context.Context, stream, group string, after time.Duration) (*stuckView, error) {
	rows, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Idle: after, Start: "-", End: "+", Count: stuckScan}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s IDLE %d - + %d: %w", stream, group, after.Milliseconds(), stuckScan, err)
	}
	v := &stuckView{Count: len(rows), More: len(rows) == stuckScan}
	v.Rows = rows[:min(len(rows), stuckShown)]
	v.Unlisted = v.Count - len(v.Rows)
	return v, nil
}

// groupPage is the data of the group template.
type groupPage struct {
	page
	V             *groupView
	PEL           *pelPage
	MinIdle       time.Duration
	StuckAfter    time.Duration
	Stuck         *stuckView
	MaxDeliveries int
	Consumer      string
	// From and After are the PEL page's position ("" for the first page).
	From, After string
	Count       int
	// Stalled counts consumers owning entries idle past MinIdle.
	Stalled int
	Reap    reapDefaults
	// Shown are the consumers listed (at most maxConsumersShown: stalled
	// first, then by pending entries), Hidden the number left out.
	Shown  []redis.XInfoConsumer
	Hidden int
}

// maxConsumersShown bounds the consumers a group page lists.
const maxConsumersShown = 200

// reapDefaults prefill the reap form.
type reapDefaults struct{ Idle time.Duration }

// IsStalled reports whether c owns entries and has been idle past
// p.MinIdle.
func (p *groupPage) IsStalled(c redis.XInfoConsumer) bool {
	return c.Pending > 0 && c.Idle >= p.MinIdle
}

func (s *Server) handleGroup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	stream, err := name(q, "stream")
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	group, err := name(q, "group")
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	p := &groupPage{page: s.newPage(stream+" / "+group, "group")}
	if p.MinIdle, err = duration(q, "min_idle", s.opts.MinIdle); err == nil {
		if p.StuckAfter, err = duration(q, "stuck_after", s.opts.StuckAfter); err == nil && p.StuckAfter == 0 {
			err = &paramError{"stuck_after", "must be a positive duration such as 2m30s"}
		}
	}
	if err == nil {
		if p.MaxDeliveries, err = integer(q, "max_deliveries", s.opts.MaxDeliveries, 1, 1<<31-1); err == nil {
			if p.Count, err = integer(q, "count", s.opts.PageSize, 1, MaxPageSize); err == nil {
				if p.Consumer, err = optName(q, "consumer"); err == nil {
					if p.From, err = optID(q, "from"); err == nil {
						p.After, err = optID(q, "after")
					}
				}
			}
		}
	}
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	dlq := pelwarden.DeadLetterStreamFor(stream)
	p.V, err = s.groups.get(r.Context(), stream+"\x00"+group, func(ctx context.Context) (*groupView, error) {
		return s.loadGroup(ctx, stream, group, dlq)
	})
	if errors.Is(err, errNoGroup) {
		s.failPage(w, r, http.StatusNotFound, "%v", err)
		return
	}
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "%v", err)
		return
	}
	p.Stuck, err = s.stuck.get(r.Context(), fmt.Sprintf("%s\x00%s\x00%d", stream, group, p.StuckAfter), func(ctx context.Context) (*stuckView, error) {
		return s.loadStuck(ctx, stream, group, p.StuckAfter)
	})
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "%v", err)
		return
	}
	for _, c := range p.V.Consumers {
		if p.IsStalled(c) {
			p.Stalled++
		}
	}
	p.Shown = slices.Clone(p.V.Consumers)
	slices.SortStableFunc(p.Shown, func(a, b redis.XInfoConsumer) int {
		if sa, sb := p.IsStalled(a), p.IsStalled(b); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.Pending, a.Pending); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(p.Shown) > maxConsumersShown {
		p.Hidden = len(p.Shown) - maxConsumersShown
		p.Shown = p.Shown[:maxConsumersShown]
	}
	p.Reap.Idle = max(p.MinIdle, time.Hour)
	if isFragment(r) {
		s.render(w, http.StatusOK, "group", "live", p)
		return
	}
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%d", stream, group, p.Consumer, p.From, p.After, p.Count)
	p.PEL, err = s.pels.get(r.Context(), key, func(ctx context.Context) (*pelPage, error) {
		return s.loadPEL(ctx, stream, group, p.Consumer, p.From, p.After, p.Count)
	})
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "%v", err)
		return
	}
	s.render(w, http.StatusOK, "group", "", p)
}
