package integration_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// snapshot is everything a call could change about one test's keys, in the
// server's own words (raw replies: field order, duplicates and bytes kept).
// Idle times are left out: they change by themselves.
type snapshot struct {
	Types     map[string]string
	Entries   map[string]any // XRANGE - + of every stream key
	Pending   []any          // XPENDING - + full list: id, owner, deliveries
	Groups    []any          // XINFO GROUPS without volatile fields
	Consumers []any          // XINFO CONSUMERS: name, pending
}

func snap(t *testing.T, ctx context.Context, rdb *redis.Client, k pelwardentest.Keys, extra ...string) snapshot {
	t.Helper()
	s := snapshot{Types: map[string]string{}, Entries: map[string]any{}}
	for _, key := range append([]string{k.Stream, k.DeadLetterStream}, extra...) {
		typ, err := rdb.Type(ctx, key).Result()
		require.NoError(t, err)
		s.Types[key] = typ
		if typ == "stream" {
			v, err := rdb.Do(ctx, "XRANGE", key, "-", "+").Slice()
			require.NoError(t, err)
			s.Entries[key] = v
		}
	}
	if s.Types[k.Stream] != "stream" {
		return s
	}
	groups, err := rdb.XInfoGroups(ctx, k.Stream).Result()
	require.NoError(t, err)
	for _, g := range groups {
		s.Groups = append(s.Groups, []any{g.Name, g.Consumers, g.Pending, g.LastDeliveredID, g.EntriesRead, g.Lag})
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Stream, Group: g.Name, Start: "-", End: "+", Count: 1 << 20}).Result()
		require.NoError(t, err)
		for _, e := range p {
			s.Pending = append(s.Pending, []any{g.Name, e.ID, e.Consumer, e.RetryCount})
		}
		cs, err := rdb.XInfoConsumers(ctx, k.Stream, g.Name).Result()
		require.NoError(t, err)
		for _, c := range cs {
			s.Consumers = append(s.Consumers, []any{g.Name, c.Name, c.Pending})
		}
	}
	return s
}

// hostileCase is one bad call and the error it must get.
type hostileCase struct {
	name string
	// arrange prepares hostile state on the case's keys (optional).
	arrange func(t *testing.T, ctx context.Context, s *target, k pelwardentest.Keys)
	call    func(ctx context.Context, s *target, k pelwardentest.Keys, ids []string) error
	// want is the sentinel the error must match.
	want error
}

func hostileCases() []hostileCase {
	big := strings.Repeat("n", pelwarden.MaxNameBytes+1)
	claim := func(mod func(k pelwardentest.Keys, a *pelwarden.ClaimArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, _ []string) error {
			a := pelwarden.ClaimArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group, Consumer: "c", MaxDeliveries: 1}
			mod(k, &a)
			_, err := s.lib.Claim(ctx, a)
			return err
		}
	}
	ack := func(mod func(k pelwardentest.Keys, a *pelwarden.AckArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, ids []string) error {
			a := pelwarden.AckArgs{Stream: k.Stream, Group: k.Group, Consumer: "a", IDs: ids}
			mod(k, &a)
			_, err := s.lib.Ack(ctx, a)
			return err
		}
	}
	dl := func(mod func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, ids []string) error {
			a := pelwarden.DeadLetterArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group, Consumer: "a", IDs: ids, Error: "boom"}
			mod(k, &a)
			_, err := s.lib.DeadLetter(ctx, a)
			return err
		}
	}
	ext := func(mod func(k pelwardentest.Keys, a *pelwarden.ExtendArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, ids []string) error {
			a := pelwarden.ExtendArgs{Stream: k.Stream, Group: k.Group, Consumer: "a", IDs: ids}
			mod(k, &a)
			_, err := s.lib.Extend(ctx, a)
			return err
		}
	}
	rel := func(mod func(k pelwardentest.Keys, a *pelwarden.ReleaseArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, ids []string) error {
			a := pelwarden.ReleaseArgs{Stream: k.Stream, Group: k.Group, Consumer: "a", IDs: ids, MinIdle: time.Minute}
			mod(k, &a)
			_, err := s.lib.Release(ctx, a)
			return err
		}
	}
	reap := func(mod func(k pelwardentest.Keys, a *pelwarden.ReapArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, _ []string) error {
			a := pelwarden.ReapArgs{Stream: k.Stream, Group: k.Group, Idle: time.Hour}
			mod(k, &a)
			_, err := s.lib.Reap(ctx, a)
			return err
		}
	}
	redrive := func(mod func(k pelwardentest.Keys, a *pelwarden.RedriveArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, _ []string) error {
			a := pelwarden.RedriveArgs{DeadLetterStream: k.DeadLetterStream, Stream: k.Stream, AnySource: true}
			mod(k, &a)
			_, err := s.lib.Redrive(ctx, a)
			return err
		}
	}
	stats := func(mod func(k pelwardentest.Keys, a *pelwarden.StatsArgs)) func(context.Context, *target, pelwardentest.Keys, []string) error {
		return func(ctx context.Context, s *target, k pelwardentest.Keys, _ []string) error {
			a := pelwarden.StatsArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group}
			mod(k, &a)
			_, err := s.lib.Stats(ctx, a)
			return err
		}
	}
	hashAt := func(key func(k pelwardentest.Keys) string) func(*testing.T, context.Context, *target, pelwardentest.Keys) {
		return func(t *testing.T, ctx context.Context, s *target, k pelwardentest.Keys) {
			require.NoError(t, s.rdb.HSet(ctx, key(k), "f", "v").Err())
		}
	}
	dlqKey := func(k pelwardentest.Keys) string { return k.DeadLetterStream }
	missing := func(k pelwardentest.Keys) string { return k.Stream + ":missing" }
	strKey := func(k pelwardentest.Keys) string { return k.Stream + ":str" }
	setStr := func(t *testing.T, ctx context.Context, s *target, k pelwardentest.Keys) {
		require.NoError(t, s.rdb.Set(ctx, strKey(k), "x", 0).Err())
	}
	bad := pelwarden.ErrInvalidArgument
	badID := pelwarden.ErrInvalidID
	tooMany := make([]string, pelwarden.MaxCount+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("1-%d", i)
	}

	return []hostileCase{
		// Claim
		{name: "claim/empty stream", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Stream = "" }), want: bad},
		{name: "claim/oversized group", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Group = big }), want: bad},
		{name: "claim/empty consumer", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Consumer = "" }), want: bad},
		{name: "claim/dlq is stream", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.DeadLetterStream = k.Stream }), want: bad},
		{name: "claim/negative count", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Count = -1 }), want: bad},
		{name: "claim/absurd count", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Count = math.MaxInt }), want: bad},
		{name: "claim/negative min-idle", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.MinIdle = -time.Millisecond }), want: bad},
		{name: "claim/max-deliveries below NoDeliveryLimit", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.MaxDeliveries = -2 }), want: bad},
		{name: "claim/absurd max-deliveries", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.MaxDeliveries = math.MaxInt }), want: bad},
		{name: "claim/absurd max-bytes", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.MaxBytes = math.MaxInt }), want: bad},
		{name: "claim/negative max-bytes", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.MaxBytes = -1 }), want: bad},
		{name: "claim/negative backoff", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Backoff = []time.Duration{time.Second, -1} }), want: bad},
		{name: "claim/dead-letter-only without limit", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) {
			a.DeadLetterOnly, a.MaxDeliveries = true, pelwarden.NoDeliveryLimit
		}), want: bad},
		{name: "claim/malformed cursor", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Cursor = "(1-0" }), want: badID},
		{name: "claim/cursor past uint64", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Cursor = "99999999999999999999-0" }), want: badID},
		{name: "claim/cursor with NUL", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Cursor = "1-0\x00" }), want: badID},
		{name: "claim/missing group", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		{name: "claim/missing stream", call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Stream = missing(k) }), want: pelwarden.ErrNoGroup},
		{name: "claim/stream wrong type", arrange: setStr, call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) { a.Stream = strKey(k) }), want: pelwarden.ErrWrongType},
		{name: "claim/dlq wrong type", arrange: hashAt(dlqKey), call: claim(func(k pelwardentest.Keys, a *pelwarden.ClaimArgs) {}), want: pelwarden.ErrWrongType},
		// Ack
		{name: "ack/no ids", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.IDs = nil }), want: bad},
		{name: "ack/too many ids", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.IDs = tooMany }), want: bad},
		{name: "ack/empty id", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.IDs = append([]string{""}, a.IDs...) }), want: badID},
		{name: "ack/malformed id", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.IDs = append(a.IDs, "1-x") }), want: badID},
		{name: "ack/invalid utf8 id", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.IDs = append(a.IDs, "\xff-0") }), want: badID},
		{name: "ack/oversized consumer", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.Consumer = big }), want: bad},
		{name: "ack/missing group", call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		{name: "ack/stream wrong type", arrange: setStr, call: ack(func(k pelwardentest.Keys, a *pelwarden.AckArgs) { a.Stream = strKey(k) }), want: pelwarden.ErrWrongType},
		// DeadLetter
		{name: "deadletter/dlq is stream", call: dl(func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs) { a.DeadLetterStream = k.Stream }), want: bad},
		{name: "deadletter/oversized reason", call: dl(func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs) { a.Reason = strings.Repeat("r", 257) }), want: bad},
		{name: "deadletter/malformed id", call: dl(func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs) { a.IDs = []string{"0"} }), want: badID},
		{name: "deadletter/missing group", call: dl(func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		{name: "deadletter/dlq wrong type", arrange: hashAt(dlqKey), call: dl(func(k pelwardentest.Keys, a *pelwarden.DeadLetterArgs) {}), want: pelwarden.ErrWrongType},
		// Extend
		{name: "extend/no ids", call: ext(func(k pelwardentest.Keys, a *pelwarden.ExtendArgs) { a.IDs = []string{} }), want: bad},
		{name: "extend/id past uint64", call: ext(func(k pelwardentest.Keys, a *pelwarden.ExtendArgs) { a.IDs = []string{"18446744073709551616-0"} }), want: badID},
		{name: "extend/missing stream", call: ext(func(k pelwardentest.Keys, a *pelwarden.ExtendArgs) { a.Stream = missing(k) }), want: pelwarden.ErrNoGroup},
		// Release
		{name: "release/negative delay", call: rel(func(k pelwardentest.Keys, a *pelwarden.ReleaseArgs) { a.Delay = -time.Second }), want: bad},
		{name: "release/negative min-idle", call: rel(func(k pelwardentest.Keys, a *pelwarden.ReleaseArgs) { a.MinIdle = -time.Second }), want: bad},
		{name: "release/missing group", call: rel(func(k pelwardentest.Keys, a *pelwarden.ReleaseArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		// Reap
		{name: "reap/zero idle", call: reap(func(k pelwardentest.Keys, a *pelwarden.ReapArgs) { a.Idle = 0 }), want: bad},
		{name: "reap/negative idle", call: reap(func(k pelwardentest.Keys, a *pelwarden.ReapArgs) { a.Idle = -time.Hour }), want: bad},
		{name: "reap/empty keep", call: reap(func(k pelwardentest.Keys, a *pelwarden.ReapArgs) { a.Keep = []string{"a", ""} }), want: bad},
		{name: "reap/missing group", call: reap(func(k pelwardentest.Keys, a *pelwarden.ReapArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		// Redrive
		{name: "redrive/same key", call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) { a.Stream = k.DeadLetterStream }), want: bad},
		{name: "redrive/negative count", call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) { a.Count = -5 }), want: bad},
		{name: "redrive/malformed cursor", call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) { a.Cursor = "-" }), want: badID},
		{name: "redrive/empty dlq name", call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) { a.DeadLetterStream = "" }), want: bad},
		{name: "redrive/dlq wrong type", arrange: hashAt(dlqKey), call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) {}), want: pelwarden.ErrWrongType},
		{name: "redrive/target wrong type", arrange: setStr, call: redrive(func(k pelwardentest.Keys, a *pelwarden.RedriveArgs) { a.Stream = strKey(k) }), want: pelwarden.ErrWrongType},
		// Stats
		{name: "stats/missing group", call: stats(func(k pelwardentest.Keys, a *pelwarden.StatsArgs) { a.Group = "nope" }), want: pelwarden.ErrNoGroup},
		{name: "stats/oversized dlq", call: stats(func(k pelwardentest.Keys, a *pelwarden.StatsArgs) { a.DeadLetterStream = big }), want: bad},
		{name: "stats/dlq wrong type", arrange: hashAt(dlqKey), call: stats(func(k pelwardentest.Keys, a *pelwarden.StatsArgs) {}), want: pelwarden.ErrWrongType},
	}
}

// Every Library method given bad input returns a typed error, and the
// server's state is exactly what it was.
func TestHostileInput(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for _, c := range hostileCases() {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				f := s.fixture(t)
				ids := f.Produce(3, order)
				f.LeavePending("a", 2)
				if c.arrange != nil {
					c.arrange(t, ctx, s, f.Keys)
				}
				extra := []string{f.Stream + ":missing", f.Stream + ":str"}
				before := snap(t, ctx, s.rdb, f.Keys, extra...)
				err := c.call(ctx, s, f.Keys, ids[:2])
				require.Error(t, err)
				require.ErrorIs(t, err, c.want, "got %v", err)
				var pe *pelwarden.Error
				require.ErrorAs(t, err, &pe)
				require.NotContains(t, err.Error(), "user_function", "a raw Lua error leaked")
				require.Equal(t, before, snap(t, ctx, s.rdb, f.Keys, extra...), "state changed")
			})
		}
	})
}

// Absurd but valid values succeed and change nothing they should not.
func TestHostileAbsurdValid(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(3, order)
		f.LeavePending("a", 2)
		before := snap(t, ctx, s.rdb, f.Keys)

		// The largest cursor: nothing after it, the pass is done.
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c",
			Cursor: "18446744073709551615-18446744073709551615"})
		require.NoError(t, err)
		require.True(t, p.Done())
		require.Empty(t, p.Entries)
		// Idle longer than any entry: nothing is touched.
		p, err = s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c",
			MinIdle: time.Duration(math.MaxInt64), Backoff: []time.Duration{time.Duration(math.MaxInt64)}})
		require.NoError(t, err)
		require.Empty(t, p.Entries)
		// Release with an absurd MinIdle: the idle time is set, ownership and
		// delivery counts stay.
		r, err := s.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[:2], MinIdle: time.Duration(math.MaxInt64)})
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Released)
		rp0, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Cursor: "18446744073709551615-18446744073709551615"})
		require.NoError(t, err)
		require.True(t, rp0.Done())
		// Redrive of a missing dead-letter stream: nothing to do.
		rp, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Count: pelwarden.MaxCount})
		require.NoError(t, err)
		require.True(t, rp.Done())
		require.Equal(t, before, snap(t, ctx, s.rdb, f.Keys))
	})
}

// driver.New refuses bad configs with a *pelwarden.ArgumentError naming the
// field, and does no I/O.
func TestHostileDriverConfig(t *testing.T) {
	t.Parallel()
	h := driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })
	big := strings.Repeat("s", pelwarden.MaxNameBytes+1)
	base := func() driver.Config { return driver.Config{Stream: "{o}", Group: "g", Handler: h} }
	cases := []struct {
		field string
		mod   func(c *driver.Config)
	}{
		{"Stream", func(c *driver.Config) { c.Stream = "" }},
		{"Stream", func(c *driver.Config) { c.Stream = big }},
		{"Group", func(c *driver.Config) { c.Group = "" }},
		{"Consumer", func(c *driver.Config) { c.Consumer = big }},
		{"Handler", func(c *driver.Config) { c.Handler = nil }},
		{"DeadLetterStream", func(c *driver.Config) { c.DeadLetterStream = "{o}" }},
		{"DeadLetterStream", func(c *driver.Config) { c.DeadLetterStream = "{other}:dead" }},
		{"MaxDeliveries", func(c *driver.Config) { c.MaxDeliveries = -2 }},
		{"MaxDeliveries", func(c *driver.Config) { c.MaxDeliveries = math.MinInt }},
		{"MinIdle", func(c *driver.Config) { c.MinIdle = time.Millisecond }},
		{"MinIdle", func(c *driver.Config) { c.MinIdle = -time.Hour }},
		{"Tuning.HeartbeatInterval", func(c *driver.Config) { c.MinIdle, c.HeartbeatInterval = time.Second, time.Second }},
		{"Tuning.HeartbeatInterval", func(c *driver.Config) { c.HeartbeatInterval = -5 }},
		{"Tuning.ReclaimInterval", func(c *driver.Config) { c.ReclaimInterval = -1 }},
		{"Backoff[1]", func(c *driver.Config) { c.Backoff = []time.Duration{0, -1} }},
		{"Concurrency", func(c *driver.Config) { c.Concurrency = -1 }},
		{"Concurrency", func(c *driver.Config) { c.Concurrency = math.MaxInt }},
		{"Tuning.ReadBlock", func(c *driver.Config) { c.ReadBlock = -1 }},
		{"Tuning.ClaimCount", func(c *driver.Config) { c.ClaimCount = pelwarden.MaxCount + 1 }},
		{"Tuning.ReadCount", func(c *driver.Config) { c.ReadCount = pelwarden.MaxCount + 1 }},
		{"Tuning.AckBatch", func(c *driver.Config) { c.AckBatch = -1 }},
		{"Tuning.AckInterval", func(c *driver.Config) { c.AckInterval = -1 }},
		{"Tuning.AckMode", func(c *driver.Config) { c.AckMode = -1 }},
		{"Tuning.Prefetch", func(c *driver.Config) { c.Prefetch = -1 }},
		{"GroupStartID", func(c *driver.Config) { c.GroupStartID = "(1-0" }},
		{"GroupStartID", func(c *driver.Config) { c.GroupStartID = "\x00" }},
		{"ReapIdle", func(c *driver.Config) { c.ReapIdle = -1 }},
		{"ReapIdle", func(c *driver.Config) { c.ReapIdle = time.Second }},
		{"ShutdownTimeout", func(c *driver.Config) { c.ShutdownTimeout = -1 }},
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	for _, c := range cases {
		cfg := base()
		c.mod(&cfg)
		_, err := driver.New(rdb, cfg)
		var ce *pelwarden.ArgumentError
		require.ErrorAs(t, err, &ce, "field %s", c.field)
		require.Equal(t, "Config."+c.field, ce.Field, "%v", err)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	}
	_, err := driver.New(nil, base())
	var ce *pelwarden.ArgumentError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "rdb", ce.Field)
}

// binaryFields are field names and values no text-minded code would
// expect: NUL bytes, invalid UTF-8, empty strings, duplicate names, names
// that look like pelwarden's metadata.
var binaryFields = []string{
	"\x00", "a\x00b",
	"\xff\xfe", "\xc3\x28 invalid",
	"", "",
	"dup", "1", "dup", "2",
	pelwarden.FieldMetaCount, "3",
	"\xed\xa0\x80", "\x00\x00\x00",
}

// Binary field values round-trip byte for byte through claim, dead-letter
// (at max deliveries and by DeadLetter) and redrive.
func TestHostileBinaryRoundTrip(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		id1 := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: binaryFields}).Val()
		id2 := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: binaryFields}).Val()
		f.LeavePending("a", 2)

		want := toFields(binaryFields)
		// Claim hands them out unchanged.
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b"})
		require.NoError(t, err)
		require.Len(t, p.Entries, 2)
		for _, e := range p.Entries {
			require.Equal(t, want, e.Fields)
		}
		// id1 dead-lettered at max deliveries (2), id2 by DeadLetter.
		p, err = s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b", MaxDeliveries: 2, Count: 1})
		require.NoError(t, err)
		require.Equal(t, []string{id1}, p.DeadLettered)
		d, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b", IDs: []string{id2}, Error: "bad \xff\x00 bytes"})
		require.NoError(t, err)
		require.Equal(t, []string{id2}, d.DeadLettered)
		recs, err := s.rdb.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+").Slice()
		require.NoError(t, err)
		require.Len(t, recs, 2)
		for _, r := range recs {
			flat := r.([]any)[1].([]any)
			require.Equal(t, binaryFields, anyStrings(flat[:len(binaryFields)]), "original fields come first, unchanged")
		}
		// Redrive restores them, plus the redrive counter.
		rp, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream})
		require.NoError(t, err)
		require.Len(t, rp.Moved, 2)
		require.Empty(t, rp.Foreign)
		for _, m := range rp.Moved {
			e, err := s.rdb.Do(ctx, "XRANGE", f.Stream, m.To, m.To).Slice()
			require.NoError(t, err)
			require.Len(t, e, 1)
			got := anyStrings(e[0].([]any)[1].([]any))
			require.Equal(t, append(append([]string{}, binaryFields...), pelwarden.FieldRedrives, "1"), got)
		}
	})
}

// The driver's reads hand each entry's fields over exactly as written (in
// order, duplicate names, binary and empty values, a value full of RESP
// framing, 5,000 fields), through RESP2 and RESP3 clients, for new entries
// and for an entry taken over from a dead consumer (by the read's CLAIM on
// servers that have it, else by a reclaim pass).
func TestDriverReadsFieldsExactly(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for _, protocol := range []int{2, 3} {
			t.Run(fmt.Sprintf("resp%d", protocol), func(t *testing.T) {
				ctx := t.Context()
				f := s.fixture(t)
				written := [][]string{
					binaryFields,
					{"framing", strings.Repeat("\r\n$5\r\n*2\r\n", 1<<16)},
					manyFields(5000),
					{"k", "v"},
				}
				want := map[string][]pelwarden.Field{}
				var ids []string
				for _, fields := range written {
					id := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: fields}).Val()
					want[id] = toFields(fields)
					ids = append(ids, id)
				}
				f.LeavePending("dead", 1)

				o := *s.rdb.Options()
				o.Protocol = protocol
				rdb := redis.NewClient(&o)
				defer rdb.Close()
				var mu sync.Mutex
				got := map[string][]pelwarden.Field{}
				deliveries := map[string]int64{}
				r := f.WithClient(rdb).RunConsumer(driver.Config{Consumer: "w", Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
					mu.Lock()
					defer mu.Unlock()
					got[m.ID] = slices.Clone(m.Fields)
					deliveries[m.ID] = m.Deliveries
					return nil
				})})
				f.Eventually("every entry handled", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(got) == len(written)
				})
				require.NoError(t, r.Stop())
				for id, fields := range want {
					require.Equal(t, fields, got[id], "entry %s", id)
				}
				require.EqualValues(t, 2, deliveries[ids[0]], "taken over from the dead consumer")
				require.EqualValues(t, 1, deliveries[ids[1]])
				require.Zero(t, f.PendingCount())
			})
		}
	})
}

// A PEL of 1 MiB entries: with MaxBytes set each page carries one entry,
// live or dead-lettered, never the whole PEL.
func TestHostileLargeValues(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		mib := strings.Repeat("x", 1<<20)
		var ids []string
		for i := 0; i < 4; i++ {
			ids = append(ids, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: []string{"i", fmt.Sprint(i), "blob", mib}}).Val())
		}
		f.LeavePending("a", 4)

		a := pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b", Count: 100, MaxBytes: 64 << 10}
		var got []string
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			p, err := s.lib.Claim(ctx, a)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Entries), 1, "a page holds one 1 MiB entry")
			for _, e := range p.Entries {
				got = append(got, e.ID)
				require.Len(t, e.Fields[1].Value, 1<<20)
			}
			if p.Done() {
				break
			}
			a.Cursor = p.Cursor
		}
		require.Equal(t, ids, got)

		// Dead-lettering counts against the same budget.
		a.Cursor, a.MaxDeliveries = "", 2
		var dead []string
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			p, err := s.lib.Claim(ctx, a)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.DeadLettered), 1, "a page copies one 1 MiB entry")
			dead = append(dead, p.DeadLettered...)
			if p.Done() {
				break
			}
			a.Cursor = p.Cursor
		}
		require.Equal(t, ids, dead)
		require.Zero(t, f.PendingCount())
		require.EqualValues(t, 4, s.rdb.XLen(ctx, f.DeadLetterStream).Val())
	})
}

// Entries with 10,000 fields: claimed whole; too large to be copied by Lua,
// so dead-lettering leaves them pending and reports them (never a raw Lua
// error, never acked without a copy). Entries just under the limit move.
func TestHostileManyFields(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		huge := manyFields(10000)
		fits := manyFields(3940) // 7,880 values + 20 of metadata: the limit
		hugeID := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: huge}).Val()
		fitsID := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: fits}).Val()
		f.LeavePending("a", 2)

		// Claimed whole.
		p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b"})
		require.NoError(t, err)
		require.Len(t, p.Entries, 2)
		require.Equal(t, toFields(huge), p.Entries[0].Fields)
		require.Equal(t, toFields(fits), p.Entries[1].Fields)

		// DeadLetter: the huge one is reported and left pending, owned by b.
		before := snap(t, ctx, s.rdb, f.Keys)
		d, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b", IDs: []string{hugeID}, Error: "x"})
		require.NoError(t, err)
		require.Equal(t, []string{hugeID}, d.TooLarge)
		require.Empty(t, d.DeadLettered)
		require.Equal(t, before, snap(t, ctx, s.rdb, f.Keys), "nothing changed")

		// Claim at max deliveries: the huge one reported, the other moved.
		p, err = s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c", MaxDeliveries: 2, DeleteDeadLettered: true})
		require.NoError(t, err)
		require.Equal(t, []string{hugeID}, p.TooLarge)
		require.Equal(t, []string{fitsID}, p.DeadLettered)
		pe, _ := f.PendingEntry(hugeID)
		require.NotNil(t, pe, "still pending")
		require.Equal(t, "b", pe.Consumer)
		require.EqualValues(t, 2, pe.RetryCount)
		require.EqualValues(t, 1, s.rdb.XLen(ctx, f.Stream).Val(), "the huge entry is not deleted")

		// Redrive: the record that fits comes back whole.
		rp, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream})
		require.NoError(t, err)
		require.Len(t, rp.Moved, 1)
		e, err := s.rdb.Do(ctx, "XRANGE", f.Stream, rp.Moved[0].To, rp.Moved[0].To).Slice()
		require.NoError(t, err)
		require.Equal(t, append(append([]string{}, fits...), pelwarden.FieldRedrives, "1"), anyStrings(e[0].([]any)[1].([]any)))

		// A dead-letter record too large to re-add (written by someone else
		// with pelwarden's metadata) is reported and left in place.
		rec := append(append([]string{}, huge...), pelwarden.FieldOriginalID, "1-0", pelwarden.FieldStream, f.Stream, pelwarden.FieldMetaCount, "3")
		bigRec := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.DeadLetterStream, Values: rec}).Val()
		before = snap(t, ctx, s.rdb, f.Keys)
		rp, err = s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream})
		require.NoError(t, err)
		require.Equal(t, []string{bigRec}, rp.TooLarge)
		require.Empty(t, rp.Moved)
		require.Equal(t, before, snap(t, ctx, s.rdb, f.Keys), "nothing changed")
	})
}

// A dead-letter stream holding foreign entries, some dressed up with parts
// of pelwarden's metadata: redrive moves only genuine records and reports
// the others, unchanged.
func TestHostileForeignDeadLetters(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(1, order)
		f.LeavePending("a", 1)
		add := func(fields ...string) string {
			return s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.DeadLetterStream, Values: fields}).Val()
		}
		meta := pelwarden.FieldMetaCount
		foreign := []string{
			add("plain", "entry"),
			add(meta, "1"),                              // the count is all there is
			add("a", "b", meta, "nan"),                  // not a number
			add("a", "b", meta, "inf"),                  // not a number
			add("a", "b", "c", "d", meta, "1.5"),        // not an integer
			add("a", "b", meta, "0x1"),                  // hex
			add("a", "b", meta, "-1"),                   // negative
			add("a", "b", meta, "0"),                    // zero
			add("a", "b", meta, "99999999999999999999"), // absurd
			add("a", "b", meta, "2"),                    // the count takes in a foreign field
			add("a", "b", meta, " 1"),                   // padded
			add("a", "b", meta, "\x00"),                 // binary
		}
		_, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a", IDs: ids})
		require.NoError(t, err)
		beforeDLQ, err := s.rdb.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+").Slice()
		require.NoError(t, err)

		var page pelwarden.RedrivePage
		a := pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream, Count: 5}
		for {
			p, err := s.lib.Redrive(ctx, a)
			require.NoError(t, err)
			page.Moved = append(page.Moved, p.Moved...)
			page.Foreign = append(page.Foreign, p.Foreign...)
			if p.Done() {
				break
			}
			a.Cursor = p.Cursor
		}
		require.Equal(t, foreign, page.Foreign)
		require.Len(t, page.Moved, 1)
		afterDLQ, err := s.rdb.Do(ctx, "XRANGE", f.DeadLetterStream, "-", "+").Slice()
		require.NoError(t, err)
		require.Equal(t, beforeDLQ[:len(foreign)], afterDLQ, "foreign entries stay, unchanged")
	})
}

func manyFields(n int) []string {
	out := make([]string, 0, 2*n)
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("f%05d", i), fmt.Sprintf("v%d", i))
	}
	return out
}

func toFields(flat []string) []pelwarden.Field {
	out := make([]pelwarden.Field, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out = append(out, pelwarden.Field{Name: flat[i], Value: flat[i+1]})
	}
	return out
}

func anyStrings(a []any) []string {
	out := make([]string, len(a))
	for i, v := range a {
		out[i] = v.(string)
	}
	return out
}
