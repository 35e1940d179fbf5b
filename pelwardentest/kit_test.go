package pelwardentest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// PendingEntry and PendingCount read the PEL; Eventually waits for what
// the Require methods do not describe, and reports what it waited for.
func TestPendingEntryAndEventually(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(3, nil)
	require.Zero(t, f.PendingCount())
	_, ok := f.PendingEntry(ids[0])
	require.False(t, ok, "not delivered yet")
	f.LeavePending("crashed", 2)
	require.EqualValues(t, 2, f.PendingCount())
	p, ok := f.PendingEntry(ids[1])
	require.True(t, ok)
	require.Equal(t, "crashed", p.Consumer)
	require.EqualValues(t, 1, p.RetryCount)

	var handled atomic.Int64
	f.RunConsumer(driver.Config{Consumer: "worker", MinIdle: 10 * time.Millisecond,
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { handled.Add(1); return nil })})
	f.Eventually("3 entries handled", func() bool { return handled.Load() == 3 })
	f.Within(0).RequirePELEmpty()

	rec := &recorder{name: t.Name()}
	defer rec.finish()
	msg := rec.run(func() {
		f.WithT(rec).Within(50*time.Millisecond).Eventually("the impossible", func() bool { return false })
	})
	require.Contains(t, msg, "want the impossible within 50ms")
	msg = rec.run(func() {
		f.WithT(rec).Within(50*time.Millisecond).EventuallyState("the impossible", func() (string, bool) { return "3 pending", false })
	})
	require.Contains(t, msg, "want the impossible within 50ms; last seen: 3 pending")
}

// ConsumerConfig fills the zero fields with the fixture's keys and the test
// timings, and keeps the caller's.
func TestConsumerConfig(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	cfg := f.ConsumerConfig(driver.Config{Consumer: "mine", MinIdle: time.Minute})
	require.Equal(t, f.Stream, cfg.Stream)
	require.Equal(t, f.Group, cfg.Group)
	require.Equal(t, f.DeadLetterStream, cfg.DeadLetterStream)
	require.Equal(t, "mine", cfg.Consumer)
	require.Equal(t, time.Minute, cfg.MinIdle, "the caller's value stays")
	require.Equal(t, pelwardentest.TestReclaimInterval, cfg.ReclaimInterval)
	require.Equal(t, pelwardentest.TestReadBlock, cfg.ReadBlock)
	require.Equal(t, pelwardentest.TestShutdownTimeout, cfg.ShutdownTimeout)
	require.NotNil(t, cfg.Logger)
	require.Zero(t, cfg.MaxDeliveries, "the driver's default")
	require.Equal(t, pelwardentest.TestMinIdle, f.ConsumerConfig(driver.Config{}).MinIdle)
}

// A Run error the test takes with Stop or Err is the test's: the cleanup
// does not report it again. One it never took fails the test.
func TestConsumerRunError(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t)
	// No group and CreateGroup false: Run fails at once.
	k := pelwardentest.NewKeys(t)
	h := driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })

	rec := &recorder{name: t.Name()}
	c := srv.FixtureFor(rec, k).RunConsumer(driver.Config{Handler: h})
	<-c.Done()
	require.Error(t, c.Err())
	rec.finish()
	require.Empty(t, rec.errors, "taken with Err")

	rec = &recorder{name: t.Name()}
	c = srv.FixtureFor(rec, k).RunConsumer(driver.Config{Handler: h})
	<-c.Done() // a Stop before Run saw the missing group would return nil
	require.Error(t, c.Stop())
	rec.finish()
	require.Empty(t, rec.errors, "taken with Stop")

	rec = &recorder{name: t.Name()}
	c = srv.FixtureFor(rec, k).RunConsumer(driver.Config{Handler: h})
	<-c.Done()
	rec.finish()
	require.Len(t, rec.errors, 1, "never taken")
	require.Contains(t, rec.errors[0], "Run returned")
}

// WithClient sends the fixture's commands, and its consumers', through
// another client: here one that counts them.
func TestWithClient(t *testing.T) {
	t.Parallel()
	srv := pelwardentest.Start(t)
	f := srv.NewFixture(t)
	ids := f.Produce(2, nil)
	rdb := redis.NewClient(srv.Client().(*redis.Client).Options())
	defer rdb.Close()
	var n atomic.Int64
	rdb.AddHook(countHook{&n})
	g := f.WithClient(rdb)
	g.LeavePending("crashed", 2)
	res := g.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
	require.Equal(t, ids, res.Acked)
	require.Positive(t, n.Load())
	f.RequireAcked(ids...)

	before := n.Load()
	id := f.Add("a", "1")
	c := g.RunConsumer(driver.Config{Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
	f.Within(0).RequireAcked(id)
	require.NoError(t, c.Stop())
	require.Greater(t, n.Load(), before, "the consumer used the view's client")
}

// Reclaim sums the entries Backoff left alone.
func TestReclaimBackedOff(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(2, nil)
	f.LeavePending("crashed", 2)
	f.SetDeliveries(2, ids[1])
	res := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Backoff: []time.Duration{0, time.Hour}})
	require.Equal(t, ids[:1], entryIDs(res.Claimed))
	require.Equal(t, 1, res.BackedOff)
	f.RequirePending(ids[1], pelwardentest.Pending{Consumer: "crashed", Deliveries: 2})
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// Metrics and Calls record what a consumer and its handler did: here two
// entries handled, one of them failing once, and a poison entry
// dead-lettered by the handler.
func TestMetricsAndCalls(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(2, nil)
	poison := f.AddPoison("n", "x")
	var m pelwardentest.Metrics
	var calls pelwardentest.Calls
	c := f.RunConsumer(driver.Config{Metrics: &m, MinIdle: 50 * time.Millisecond,
		Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
			n := calls.Add(msg.ID)
			switch {
			case pelwardentest.IsPoison(msg.Fields):
				return driver.DeadLetter(errors.New("poison"))
			case msg.ID == ids[0] && n == 1:
				return errors.New("first delivery fails")
			}
			return nil
		})})
	f.Eventually("both entries acked", func() bool { return m.Total(driver.EventAcked) == 2 })
	f.Within(0).RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonHandler})
	require.NoError(t, c.Stop())
	require.Equal(t, 2, calls.Count(ids[0]))
	require.Equal(t, 1, calls.Count(ids[1]))
	require.Equal(t, 3, calls.Distinct())
	require.Equal(t, 1, m.DeadLetteredTotal(pelwarden.ReasonHandler))
	require.Equal(t, 4, m.HandlerCalls())
}
