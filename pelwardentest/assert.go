package pelwardentest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// maxListed bounds the entries a failure message lists.
const maxListed = 10

// maxRead bounds the entries read from a stream or PEL for one check.
const maxRead = 10000

// DeadLetterRecord is one record of a dead-letter stream, decoded.
type DeadLetterRecord struct {
	// ID is the record's id in the dead-letter stream.
	ID string
	// OriginalID is the entry's id in its source stream.
	OriginalID string
	// Fields are the entry's original fields, in order, without metadata.
	Fields []pelwarden.Field
	// Reason is pelwarden.ReasonMaxDeliveries, pelwarden.ReasonHandler or
	// a caller's reason.
	Reason string
	// Error is the error text ("" for max_deliveries).
	Error string
	// Consumer that owned the entry, and its delivery count, when it was
	// dead-lettered.
	Consumer   string
	Deliveries int64
}

// String describes the record for failure messages.
func (r DeadLetterRecord) String() string { return r.OriginalID + " " + r.detail() }

func (r DeadLetterRecord) detail() string {
	s := fmt.Sprintf("(reason %q", r.Reason)
	if r.Error != "" {
		s += fmt.Sprintf(", error %q", r.Error)
	}
	return s + fmt.Sprintf(", %d deliveries)", r.Deliveries)
}

// Pending describes a pending entry RequirePending expects. Zero fields
// match anything.
type Pending struct {
	// Consumer that owns the entry.
	Consumer string
	// Deliveries is the entry's delivery count.
	Deliveries int64
}

// DeadLettered describes a dead-letter record RequireDeadLettered expects.
// Zero fields match anything.
type DeadLettered struct {
	// Reason, e.g. pelwarden.ReasonMaxDeliveries or pelwarden.ReasonHandler.
	Reason string
	// Error is the exact error text.
	Error string
	// ErrorContains is a substring of the error text.
	ErrorContains string
}

// DeadLetters returns the records of the fixture's dead-letter stream (the
// first 10000), in order.
func (f *Fixture) DeadLetters() []DeadLetterRecord {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	recs, err := f.deadLetters(ctx)
	if err != nil {
		f.fatalf("%v", err)
	}
	return recs
}

// PendingEntries returns the fixture's PEL (the first 10000 entries).
func (f *Fixture) PendingEntries() []redis.XPendingExt {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	p, err := f.pending(ctx)
	if err != nil {
		f.fatalf("%v", err)
	}
	return p
}

// PendingEntry returns id's entry in the fixture's PEL (owner, idle time,
// delivery count), and false when id is not pending.
func (f *Fixture) PendingEntry(id string) (redis.XPendingExt, bool) {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	p, err := f.srv.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		f.fatalf("XPENDING %s: %v", f, err)
	}
	if len(p) == 0 {
		return redis.XPendingExt{}, false
	}
	return p[0], true
}

// PendingCount returns the number of entries in the fixture's PEL (XPENDING
// summary: no limit, one round trip).
func (f *Fixture) PendingCount() int64 {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	p, err := f.srv.client.XPending(ctx, f.Stream, f.Group).Result()
	if err != nil {
		f.fatalf("XPENDING %s: %v", f, err)
	}
	return p.Count
}

func (f *Fixture) deadLetters(ctx context.Context) ([]DeadLetterRecord, error) {
	// XRANGE raw: go-redis's XRange decodes fields into a map, losing
	// their order and duplicates.
	raw, err := f.srv.client.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+", "COUNT", maxRead).Slice()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", f.DeadLetterStream, err)
	}
	out := make([]DeadLetterRecord, 0, len(raw))
	for _, e := range raw {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			continue
		}
		id, _ := pair[0].(string)
		kv, _ := pair[1].([]any)
		var fields []pelwarden.Field
		for i := 0; i+1 < len(kv); i += 2 {
			n, _ := kv[i].(string)
			v, _ := kv[i+1].(string)
			fields = append(fields, pelwarden.Field{Name: n, Value: v})
		}
		out = append(out, decodeRecord(id, fields))
	}
	return out, nil
}

// decodeRecord splits a dead-letter record into original fields and
// metadata (pelwarden.ParseDeadLetter; a foreign record keeps all fields).
func decodeRecord(id string, fields []pelwarden.Field) DeadLetterRecord {
	d, _ := pelwarden.ParseDeadLetter(fields)
	return DeadLetterRecord{ID: id, OriginalID: d.OriginalID, Fields: slices.Clone(d.Fields),
		Reason: d.Reason, Error: d.Error, Consumer: d.Consumer, Deliveries: d.Deliveries}
}

func (f *Fixture) pending(ctx context.Context) ([]redis.XPendingExt, error) {
	p, err := f.srv.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: "-", End: "+", Count: maxRead}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", f, err)
	}
	return p, nil
}

// entryState is what the server holds about one entry.
type entryState struct {
	id            string
	pending       *redis.XPendingExt
	dead          []DeadLetterRecord
	lastDelivered string // the group's
	exists        bool
}

func (s entryState) delivered() bool {
	return s.lastDelivered != "" && pelwarden.CompareIDs(s.id, s.lastDelivered) <= 0
}

func (s entryState) String() string {
	var parts []string
	if p := s.pending; p != nil {
		parts = append(parts, fmt.Sprintf("pending, owned by %q, %d deliveries, idle %v", p.Consumer, p.RetryCount, p.Idle.Round(time.Millisecond)))
	}
	for _, r := range s.dead {
		parts = append(parts, "dead-lettered "+r.detail())
	}
	if len(parts) == 0 {
		switch {
		case !s.delivered():
			parts = append(parts, fmt.Sprintf("never delivered (the group's last-delivered-id is %s)", s.lastDelivered))
		default:
			parts = append(parts, "acked")
		}
	}
	if !s.exists {
		parts = append(parts, "not in the stream")
	}
	return strings.Join(parts, "; ")
}

func (f *Fixture) state(ctx context.Context, id string, dead []DeadLetterRecord) (entryState, error) {
	s := entryState{id: id}
	p, err := f.srv.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		return s, fmt.Errorf("XPENDING %s: %w", f, err)
	}
	if len(p) > 0 {
		s.pending = &p[0]
	}
	for _, r := range dead {
		if r.OriginalID == id {
			s.dead = append(s.dead, r)
		}
	}
	groups, err := f.srv.client.XInfoGroups(ctx, f.Stream).Result()
	if err != nil {
		return s, fmt.Errorf("XINFO GROUPS %s: %w", f.Stream, err)
	}
	for _, g := range groups {
		if g.Name == f.Group {
			s.lastDelivered = g.LastDeliveredID
		}
	}
	msgs, err := f.srv.client.XRangeN(ctx, f.Stream, id, id, 1).Result()
	if err != nil {
		return s, fmt.Errorf("XRANGE %s: %w", f.Stream, err)
	}
	s.exists = len(msgs) > 0
	return s, nil
}

// check runs cond once, or until it holds within f.within, and fails the
// test with what cond last reported. cond returns "" when the state is the
// expected one, else a description of the actual state.
func (f *Fixture) check(what string, cond func(ctx context.Context) (string, error)) {
	f.t.Helper()
	var deadline time.Time
	if f.within > 0 {
		deadline = time.Now().Add(f.within)
	}
	var last string
	for {
		ctx, cancel := f.cmdCtx()
		msg, err := cond(ctx)
		cancel()
		if err != nil {
			msg = "error: " + err.Error()
		}
		if msg == "" {
			return
		}
		last = msg
		if deadline.IsZero() || time.Now().After(deadline) || f.ctx.Err() != nil {
			break
		}
		time.Sleep(pollInterval)
	}
	if f.within > 0 {
		f.fatalf("%s: want %s within %v; last seen: %s", f, what, f.within, last)
	}
	f.fatalf("%s: want %s; got: %s", f, what, last)
}

// Eventually waits until cond returns true, calling it every few
// milliseconds, for up to the fixture's Within duration (DefaultWithin on a
// fixture without Within), and fails the test with what ("all entries
// acked") when it does not come. cond runs on the caller's goroutine, so
// it may use the fixture's helpers and fail the test itself. Use it for
// what the Require methods do not describe: a handler's count, a metric, a
// consumer's state.
func (f *Fixture) Eventually(what string, cond func() bool) {
	f.t.Helper()
	f.EventuallyState(what, func() (string, bool) { return "", cond() })
}

// EventuallyState is Eventually for a cond that also describes the state
// it saw ("pool 4 connections, 2 idle"): the failure message carries the
// last description.
func (f *Fixture) EventuallyState(what string, cond func() (state string, ok bool)) {
	f.t.Helper()
	d := f.within
	if d <= 0 {
		d = DefaultWithin
	}
	deadline := time.Now().Add(d)
	for {
		state, ok := cond()
		if ok {
			return
		}
		last := ""
		if state != "" {
			last = "; last seen: " + state
		}
		if time.Now().After(deadline) {
			f.fatalf("%s: want %s within %v%s", f, what, d, last)
			return
		}
		if f.ctx.Err() != nil {
			f.fatalf("%s: want %s: the test ended%s", f, what, last)
			return
		}
		time.Sleep(pollInterval)
	}
}

// RequireAcked fails the test unless every id was delivered to the group
// and acknowledged: not pending and not in the dead-letter stream.
func (f *Fixture) RequireAcked(ids ...string) {
	f.t.Helper()
	f.check(fmt.Sprintf("%s acked", plural("entry", "entries", ids)), func(ctx context.Context) (string, error) {
		dead, err := f.deadLetters(ctx)
		if err != nil {
			return "", err
		}
		var bad []string
		for _, id := range ids {
			s, err := f.state(ctx, id, dead)
			if err != nil {
				return "", err
			}
			if s.pending != nil || len(s.dead) > 0 || !s.delivered() {
				bad = append(bad, id+": "+s.String())
			}
		}
		return strings.Join(bad, "; "), nil
	})
}

// RequirePending fails the test unless id is in the group's PEL as want
// describes.
func (f *Fixture) RequirePending(id string, want Pending) {
	f.t.Helper()
	what := "entry " + id + " pending"
	if want.Consumer != "" {
		what += fmt.Sprintf(", owned by %q", want.Consumer)
	}
	if want.Deliveries > 0 {
		what += fmt.Sprintf(", %d deliveries", want.Deliveries)
	}
	f.check(what, func(ctx context.Context) (string, error) {
		dead, err := f.deadLetters(ctx)
		if err != nil {
			return "", err
		}
		s, err := f.state(ctx, id, dead)
		if err != nil {
			return "", err
		}
		p := s.pending
		if p == nil || (want.Consumer != "" && p.Consumer != want.Consumer) || (want.Deliveries > 0 && p.RetryCount != want.Deliveries) {
			return id + ": " + s.String(), nil
		}
		return "", nil
	})
}

// RequireDeadLettered fails the test unless the dead-letter stream holds a
// record of id as want describes, and returns it.
func (f *Fixture) RequireDeadLettered(id string, want DeadLettered) DeadLetterRecord {
	f.t.Helper()
	what := "entry " + id + " dead-lettered"
	if want.Reason != "" {
		what += fmt.Sprintf(" with reason %q", want.Reason)
	}
	if want.Error != "" {
		what += fmt.Sprintf(" and error %q", want.Error)
	}
	if want.ErrorContains != "" {
		what += fmt.Sprintf(" and an error containing %q", want.ErrorContains)
	}
	var found DeadLetterRecord
	f.check(what, func(ctx context.Context) (string, error) {
		dead, err := f.deadLetters(ctx)
		if err != nil {
			return "", err
		}
		s, err := f.state(ctx, id, dead)
		if err != nil {
			return "", err
		}
		for _, r := range s.dead {
			if (want.Reason == "" || r.Reason == want.Reason) && (want.Error == "" || r.Error == want.Error) &&
				strings.Contains(r.Error, want.ErrorContains) {
				found = r
				return "", nil
			}
		}
		return id + ": " + s.String(), nil
	})
	return found
}

// RequireDeadLetterIDs fails the test unless the dead-letter stream holds
// exactly one record for each of ids (original ids, in any order) and no
// other.
func (f *Fixture) RequireDeadLetterIDs(ids ...string) {
	f.t.Helper()
	want := slices.Clone(ids)
	sort.Slice(want, func(i, j int) bool { return pelwarden.CompareIDs(want[i], want[j]) < 0 })
	f.check(fmt.Sprintf("the dead-letter stream %s to hold exactly %v", f.DeadLetterStream, want), func(ctx context.Context) (string, error) {
		dead, err := f.deadLetters(ctx)
		if err != nil {
			return "", err
		}
		count := map[string]int{}
		for _, r := range dead {
			count[r.OriginalID]++
		}
		var missing, dup []string
		for _, id := range want {
			switch count[id] {
			case 0:
				missing = append(missing, id)
			case 1:
			default:
				dup = append(dup, fmt.Sprintf("%s x%d", id, count[id]))
			}
			delete(count, id)
		}
		var extra []string
		for _, r := range dead {
			if count[r.OriginalID] > 0 {
				extra = append(extra, r.String())
				count[r.OriginalID] = 0
			}
		}
		if len(missing)+len(dup)+len(extra) == 0 && len(dead) == len(want) {
			return "", nil
		}
		var recs []string
		for _, r := range dead {
			recs = append(recs, r.String())
		}
		msg := fmt.Sprintf("%d records %s", len(dead), list(recs))
		if len(missing) > 0 {
			msg += "; missing " + list(missing)
		}
		if len(extra) > 0 {
			msg += "; unexpected " + list(extra)
		}
		if len(dup) > 0 {
			msg += "; duplicated " + list(dup)
		}
		return msg, nil
	})
}

// RequirePELEmpty fails the test unless the group has no pending entries.
func (f *Fixture) RequirePELEmpty() {
	f.t.Helper()
	f.check("an empty PEL", func(ctx context.Context) (string, error) {
		p, err := f.pending(ctx)
		if err != nil {
			return "", err
		}
		if len(p) == 0 {
			return "", nil
		}
		var es []string
		for _, e := range p {
			es = append(es, fmt.Sprintf("%s (owned by %q, %d deliveries, idle %v)", e.ID, e.Consumer, e.RetryCount, e.Idle.Round(time.Millisecond)))
		}
		return fmt.Sprintf("%s pending: %s", plural("entry", "entries", es), list(es)), nil
	})
}

// plural renders "1 entry" or "3 entries".
func plural[E any](one, many string, xs []E) string {
	if len(xs) == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", len(xs), many)
}

// list renders at most maxListed items.
func list(xs []string) string {
	if len(xs) > maxListed {
		return "[" + strings.Join(xs[:maxListed], ", ") + fmt.Sprintf(", ... %d more]", len(xs)-maxListed)
	}
	return "[" + strings.Join(xs, ", ") + "]"
}
