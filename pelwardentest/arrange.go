package pelwardentest

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// PoisonField marks an entry added by AddPoison. Handlers under test can
// check it with IsPoison to fail on purpose.
const PoisonField = "pelwardentest.poison"

// IsPoison reports whether fields carry PoisonField (see AddPoison). Pass
// driver.Message.Fields or pelwarden.Entry.Fields.
func IsPoison(fields []pelwarden.Field) bool {
	for _, fl := range fields {
		if fl.Name == PoisonField {
			return true
		}
	}
	return false
}

// Add appends one entry with fields given as name, value pairs, in order
// (duplicates kept), and returns its id.
func (f *Fixture) Add(fields ...string) string {
	f.t.Helper()
	if len(fields) == 0 || len(fields)%2 != 0 {
		f.fatalf("Add wants name, value pairs, got %d strings", len(fields))
	}
	ctx, cancel := f.cmdCtx()
	defer cancel()
	id, err := f.srv.client.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: fields}).Result()
	if err != nil {
		f.fatalf("XADD %s: %v", f.Stream, err)
	}
	return id
}

// AddPoison appends an entry with fields followed by PoisonField = "1"
// and returns its id.
func (f *Fixture) AddPoison(fields ...string) string {
	f.t.Helper()
	return f.Add(append(append([]string(nil), fields...), PoisonField, "1")...)
}

// Produce appends n entries and returns their ids in order. Entry i has
// the fields fields(i) returns (name, value pairs), or "n", i when fields
// is nil. Entries are sent in pipelines of 1000.
func (f *Fixture) Produce(n int, fields func(i int) []string) []string {
	f.t.Helper()
	if fields == nil {
		fields = func(i int) []string { return []string{"n", strconv.Itoa(i)} }
	}
	ctx, cancel := f.cmdCtx()
	defer cancel()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 1000 {
		p := f.srv.client.Pipeline()
		var cmds []*redis.StringCmd
		for i := start; i < n && i < start+1000; i++ {
			fs := fields(i)
			if len(fs) == 0 || len(fs)%2 != 0 {
				f.fatalf("Produce: fields(%d) must return name, value pairs, got %d strings", i, len(fs))
			}
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: fs}))
		}
		if _, err := p.Exec(ctx); err != nil {
			f.fatalf("Produce: XADD %s: %v", f.Stream, err)
		}
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	return ids
}

// LeavePending reads up to n new entries as consumer (XREADGROUP ">") and
// never acknowledges them, as if consumer had crashed right after reading:
// they stay in the PEL with one delivery each. It returns their ids.
func (f *Fixture) LeavePending(consumer string, n int) []string {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	res, err := f.srv.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: consumer,
		Streams: []string{f.Stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil && err != redis.Nil {
		f.fatalf("LeavePending: XREADGROUP %s as %q: %v", f, consumer, err)
	}
	var ids []string
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// SetDeliveries sets the delivery count of pending entries to n, keeping
// their owner and idle time (XCLAIM ... IDLE <idle> RETRYCOUNT n JUSTID),
// as if they had already been delivered n times. An id that is not pending
// fails the test.
func (f *Fixture) SetDeliveries(n int64, ids ...string) {
	f.t.Helper()
	ctx, cancel := f.cmdCtx()
	defer cancel()
	for _, id := range ids {
		p, err := f.srv.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: f.Stream, Group: f.Group, Start: id, End: id, Count: 1}).Result()
		if err != nil {
			f.fatalf("SetDeliveries: XPENDING %s: %v", f, err)
		}
		if len(p) == 0 {
			f.fatalf("SetDeliveries: entry %s is not pending in %s (LeavePending first)", id, f)
		}
		err = f.srv.client.Do(ctx, "XCLAIM", f.Stream, f.Group, p[0].Consumer, 0, id,
			"IDLE", p[0].Idle.Milliseconds(), "RETRYCOUNT", n, "JUSTID").Err()
		if err != nil {
			f.fatalf("SetDeliveries: XCLAIM %s: %v", id, err)
		}
	}
}
