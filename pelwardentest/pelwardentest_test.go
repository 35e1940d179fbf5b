package pelwardentest_test

import (
	"context"
	"errors"
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

func TestKeysAreOwnAndHashTagged(t *testing.T) {
	t.Parallel()
	a, b := pelwardentest.NewKeys(t), pelwardentest.NewKeys(t)
	require.NotEqual(t, a.Stream, b.Stream)
	require.True(t, strings.HasPrefix(a.Stream, "{TestKeysAreOwnAndHashTagged."), a.Stream)
	require.Equal(t, pelwarden.DeadLetterStreamFor(a.Stream), a.DeadLetterStream)
	require.Equal(t, pelwarden.Slot(a.Stream), pelwarden.Slot(a.DeadLetterStream))
	require.Equal(t, pelwardentest.DefaultGroup, a.Group)
}

func TestServerIsSharedAndLoaded(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t)
	require.Same(t, srv, pelwardentest.Start(t), "one server per process and options")
	require.NotEmpty(t, srv.Image())
	v, err := srv.Library().Version(context.Background())
	require.NoError(t, err)
	require.Equal(t, pelwarden.LibraryVersion, v)
}

// Arrange a crashed consumer with two entries at their last delivery, then
// one reclaim pass: the two are dead-lettered, the rest handled.
func TestArrangeAndReclaim(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(5, nil)
	poison := f.AddPoison("order", "7", "order", "dup")
	pending := f.LeavePending("crashed", 10)
	require.Equal(t, append(ids, poison), pending)
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "crashed", Deliveries: 1})
	f.SetDeliveries(3, ids[0], ids[1])
	f.RequirePending(ids[1], pelwardentest.Pending{Consumer: "crashed", Deliveries: 3})

	var mu sync.Mutex
	var seen []*driver.Message
	res := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: 3, Count: 2,
		Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
			mu.Lock()
			seen = append(seen, m)
			mu.Unlock()
			switch {
			case pelwardentest.IsPoison(m.Fields):
				return driver.DeadLetter(errors.New("poison order"))
			case m.ID == ids[4]:
				return errors.New("try later")
			}
			return nil
		})})
	require.Equal(t, []string{ids[2], ids[3]}, res.Acked)
	require.Equal(t, []string{ids[4]}, res.Failed)
	require.ElementsMatch(t, []string{ids[0], ids[1], poison}, res.DeadLettered)
	require.Greater(t, res.Pages, 1)
	require.Len(t, seen, 4)
	last := seen[3]
	require.Equal(t, poison, last.ID)
	require.Equal(t, int64(2), last.Deliveries)
	require.Equal(t, []pelwarden.Field{{Name: "order", Value: "7"}, {Name: "order", Value: "dup"},
		{Name: pelwardentest.PoisonField, Value: "1"}}, last.Fields, "fields in order, duplicates kept")

	f.RequireAcked(ids[2], ids[3])
	f.RequirePending(ids[4], pelwardentest.Pending{Consumer: "reclaimer", Deliveries: 2})
	f.RequireDeadLettered(ids[0], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
	rec := f.RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, Error: "poison order"})
	require.Equal(t, "reclaimer", rec.Consumer)
	require.True(t, pelwardentest.IsPoison(rec.Fields))
	f.RequireDeadLetterIDs(poison, ids[1], ids[0])

	// ids[4] failed on delivery 2: the next pass, at MaxDeliveries 2,
	// dead-letters it with that attempt's error, as a consumer would.
	res = f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: 2})
	require.Equal(t, []string{ids[4]}, res.DeadLettered)
	f.RequireDeadLettered(ids[4], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries, Error: "try later"})
}

// The driver consumer of RunConsumer handles, dead-letters on request and
// after MaxDeliveries, and Stop returns Run's result.
func TestRunConsumer(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ok := f.Produce(20, func(i int) []string { return []string{"i", "x"} })
	bad := f.Add("kind", "malformed")
	poison := f.AddPoison("kind", "crash")
	c := f.RunConsumer(driver.Config{Consumer: "w", MaxDeliveries: 2, Handler: driver.HandlerFunc(
		func(_ context.Context, m *driver.Message) error {
			if k, _ := m.Value("kind"); k == "malformed" {
				return driver.DeadLetter(errors.New("malformed order"))
			}
			if pelwardentest.IsPoison(m.Fields) {
				return errors.New("crashes every time")
			}
			return nil
		})})
	require.Equal(t, "w", c.Name())
	f.Within(0).RequireDeadLetterIDs(bad, poison)
	f.Within(0).RequirePELEmpty()
	f.RequireAcked(ok...)
	f.RequireDeadLettered(bad, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, Error: "malformed order"})
	rec := f.RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
	require.Equal(t, int64(2), rec.Deliveries)
	require.Len(t, f.DeadLetters(), 2)
	require.NoError(t, c.Stop())
	require.NoError(t, c.Stop(), "Stop is idempotent")
}

// What the assertions report on a wrong state: what was expected and what
// the stream holds.
func TestFailureMessages(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t)
	f := srv.NewFixture(t)
	ids := f.Produce(4, nil)
	f.LeavePending("crashed", 2) // ids[0], ids[1]
	f.SetDeliveries(4, ids[1])
	res := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: 3, Consumer: "r"}) // ids[1] dead-lettered, ids[0] to "r"
	require.Equal(t, []string{ids[1]}, res.DeadLettered)
	require.Equal(t, []string{ids[0]}, entryIDs(res.Claimed))

	rec := &recorder{name: t.Name()}
	defer rec.finish()
	g := f.WithT(rec)
	cases := []struct {
		name string
		fn   func()
		want []string
	}{
		{"acked but pending", func() { g.RequireAcked(ids[0]) },
			[]string{"want 1 entry acked; got: " + ids[0] + `: pending, owned by "r", 2 deliveries, idle`}},
		{"acked but never delivered", func() { g.RequireAcked(ids[3]) },
			[]string{ids[3] + ": never delivered (the group's last-delivered-id is " + ids[1] + ")"}},
		{"acked but dead-lettered", func() { g.RequireAcked(ids[1]) },
			[]string{ids[1] + `: dead-lettered (reason "max_deliveries", 4 deliveries)`}},
		{"pending by another", func() { g.RequirePending(ids[0], pelwardentest.Pending{Consumer: "crashed", Deliveries: 1}) },
			[]string{`want entry ` + ids[0] + ` pending, owned by "crashed", 1 deliveries; got: ` + ids[0] + `: pending, owned by "r", 2 deliveries`}},
		{"dead-lettered with another reason", func() {
			g.RequireDeadLettered(ids[1], pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler, ErrorContains: "boom"})
		}, []string{`want entry ` + ids[1] + ` dead-lettered with reason "handler" and an error containing "boom"; got: ` + ids[1] + `: dead-lettered (reason "max_deliveries"`}},
		{"dead-letter ids", func() { g.RequireDeadLetterIDs(ids[0]) },
			[]string{"to hold exactly [" + ids[0] + "]; got: 1 records [" + ids[1], "missing [" + ids[0] + "]; unexpected [" + ids[1]}},
		{"PEL not empty", func() { g.RequirePELEmpty() },
			[]string{"want an empty PEL; got: 1 entry pending: [" + ids[0] + ` (owned by "r", 2 deliveries, idle`}},
		{"waiting reports the last state", func() { g.Within(150 * time.Millisecond).RequirePELEmpty() },
			[]string{"want an empty PEL within 150ms; last seen: 1 entry pending"}},
		{"arrange on a wrong state", func() { g.SetDeliveries(2, ids[3]) },
			[]string{"SetDeliveries: entry " + ids[3] + " is not pending in stream " + f.Stream}},
	}
	for _, c := range cases {
		msg := rec.run(c.fn)
		t.Logf("%s: %s", c.name, msg)
		require.NotEmpty(t, msg, "%s: the assertion must fail", c.name)
		require.True(t, strings.HasPrefix(msg, "pelwardentest: "), msg)
		for _, w := range c.want {
			require.Contains(t, msg, w, c.name)
		}
	}
	// And they pass on the right state.
	require.Empty(t, rec.run(func() {
		g.RequirePending(ids[0], pelwardentest.Pending{Consumer: "r", Deliveries: 2})
		g.RequireDeadLetterIDs(ids[1])
		g.RequireDeadLettered(ids[1], pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
	}))
}

// RunConsumer's cleanup fails the test when Run returned an error.
func TestRunConsumerReportsRunError(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	rec := &recorder{name: t.Name()}
	c := f.WithT(rec).RunConsumer(driver.Config{Handler: driver.HandlerFunc(
		func(context.Context, *driver.Message) error { return nil })})
	require.NoError(t, f.Client().XGroupDestroy(f.Context(), f.Stream, f.Group).Err())
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop after its group disappeared")
	}
	rec.finish()
	require.Len(t, rec.errors, 1)
	require.Contains(t, rec.errors[0], `consumer "consumer" on stream `+f.Stream)
	require.Contains(t, rec.errors[0], "Run returned")
}

// Use wraps a client of the caller's; the fixture helpers work on it.
func TestUse(t *testing.T) {
	t.Parallel()
	rdb := pelwardentest.Start(t).Client()
	srv := pelwardentest.Use(t, rdb)
	require.Empty(t, srv.Image())
	f := srv.NewFixture(t)
	id := f.Add("a", "1")
	f.LeavePending("c", 1)
	f.RequirePending(id, pelwardentest.Pending{Consumer: "c"})
}

func TestValkey(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t, pelwardentest.WithValkey())
	require.Contains(t, srv.Image(), "valkey")
	f := srv.NewFixture(t)
	ids := f.Produce(3, nil)
	f.RunConsumer(driver.Config{Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
	f.Within(0).RequireAcked(ids...)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t, pelwardentest.WithCluster())
	require.True(t, srv.IsCluster())
	require.IsType(t, &redis.ClusterClient{}, srv.Client())
	f := srv.NewFixture(t)
	ids := f.Produce(10, nil)
	bad := f.AddPoison("n", "x")
	f.RunConsumer(driver.Config{MaxDeliveries: 2, Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
		if pelwardentest.IsPoison(m.Fields) {
			return errors.New("poison")
		}
		return nil
	})})
	f.Within(30 * time.Second).RequireDeadLetterIDs(bad)
	f.Within(0).RequirePELEmpty()
	f.RequireAcked(ids...)
}

// Without Docker (or with an unreachable URL), Start fails with one clear
// message, and remembers it.
func TestStartUnreachableURL(t *testing.T) {
	t.Setenv(pelwardentest.EnvRedisURL, "redis://user:secret@127.0.0.1:1/0")
	rec := &recorder{name: t.Name()}
	defer rec.finish()
	for range 2 {
		msg := rec.run(func() { pelwardentest.Start(rec) })
		require.Contains(t, msg, "pelwardentest: connect to redis://user:xxxxx@127.0.0.1:1/0")
		require.NotContains(t, msg, "secret")
	}
}

func entryIDs(es []pelwarden.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// Reclaim treats driver.RetryAfter as the driver does (a delay within
// MinIdle releases the entry for a retry after it, a longer one holds it),
// and a panicking Handler fails the test with the panic instead of
// crashing the test binary.
func TestReclaimRetryAfterAndPanic(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(2, nil)
	f.LeavePending("crashed", 2)
	res := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, MinIdle: time.Hour, Count: 10,
		Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
			if m.ID == ids[0] {
				return driver.RetryAfter(time.Minute, errors.New("busy"))
			}
			return nil
		})})
	require.Empty(t, res.Claimed, "nothing idle for an hour")
	res = f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, MinIdle: 0, Count: 10,
		Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
			if m.ID == ids[0] {
				return driver.RetryAfter(time.Minute, errors.New("busy"))
			}
			return nil
		})})
	require.Equal(t, []string{ids[0]}, res.Held, "a delay beyond MinIdle is held")
	require.Empty(t, res.Retried)
	require.Equal(t, []string{ids[1]}, res.Acked)
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "reclaimer", Deliveries: 2})
	res = f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, MinIdle: 0, Count: 10,
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
			return driver.RetryAfter(0, errors.New("busy"))
		})})
	require.Equal(t, []string{ids[0]}, res.Retried, "a delay within MinIdle is released")
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "reclaimer", Deliveries: 3})

	rec := &recorder{name: t.Name()}
	defer rec.finish()
	g := f.WithT(rec)
	msg := rec.run(func() {
		g.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, MinIdle: 0, Count: 10,
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { panic("handler bug") })})
	})
	require.Contains(t, msg, "panicked")
	require.Contains(t, msg, "handler bug")
}
