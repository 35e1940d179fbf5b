package integration_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// serverClaims asks the server itself, on a scratch key, whether
// XREADGROUP takes CLAIM: the ground truth the driver's detection (INFO
// server) must agree with.
func serverClaims(t *testing.T, rdb *redis.Client) bool {
	t.Helper()
	ctx := t.Context()
	key := "{readclaim-probe-" + t.Name() + "}"
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, key, "g", "$").Err())
	t.Cleanup(func() { rdb.Del(context.WithoutCancel(ctx), key) })
	err := rdb.Do(ctx, "XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "CLAIM", 1000, "STREAMS", key, ">").Err()
	if err == nil || err == redis.Nil {
		return true
	}
	var reply redis.Error
	require.ErrorAs(t, err, &reply)
	require.Equal(t, pelwarden.ClassServer, pelwarden.Classify(err), "an unsupported option is a plain error reply: %v", err)
	return false
}

// passClaims counts the live entries the claim function handed out: a
// hook on the driver's client reads each pelwarden_v1_claim reply.
type passClaims struct{ calls, n *atomic.Int64 }

func (h passClaims) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h passClaims) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "fcall" && a[1] == pelwarden.FunctionClaim {
			h.calls.Add(1)
			if c, ok := cmd.(*redis.Cmd); ok {
				if v, ok := c.Val().([]any); ok && len(v) > 1 {
					if live, ok := v[1].([]any); ok {
						h.n.Add(int64(len(live)))
					}
				}
			}
		}
		return err
	}
}
func (h passClaims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// On Redis 8.4+ a consumer's reads take a crashed consumer's entries
// over: every live entry reaches a handler once, its second delivery,
// with no reclaim pass claiming anything (ReclaimInterval is an hour: the
// only pass is the one at start); the entries delivered MaxDeliveries
// times never reach a handler and are dead-lettered with reason
// max_deliveries; the entry deleted while pending stays for a reclaim
// pass. Elsewhere (Redis 7.0, Valkey) the reclaim passes do it all, with
// the same outcome.
func TestDriverReadClaimTakesOver(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		claims := serverClaims(t, s.rdb)
		f := s.fixture(t)
		ids := f.Produce(40, order)
		// The group starts past them: the consumer reads none of them as new.
		require.NoError(t, s.rdb.XGroupSetID(ctx, f.Stream, f.Group, "$").Err())

		passCalls, byPass := &atomic.Int64{}, &atomic.Int64{}
		rdb := redis.NewClient(s.rdb.Options())
		rdb.AddHook(passClaims{calls: passCalls, n: byPass})
		t.Cleanup(func() { _ = rdb.Close() })

		var mu sync.Mutex
		deliveries := map[string][]int64{}
		m := &pelwardentest.Metrics{}
		cfg := driver.Config{Consumer: "rescuer", MaxDeliveries: 3, Metrics: m,
			Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
				mu.Lock()
				deliveries[msg.ID] = append(deliveries[msg.ID], msg.Deliveries)
				mu.Unlock()
				return nil
			})}
		if claims {
			cfg.ReclaimInterval = time.Hour
		}
		c := f.WithClient(rdb).RunConsumer(cfg)
		// The crash comes after the pass at start (nothing to claim then):
		// the entries become a crashed consumer's, delivered once (three of
		// them three times), and one is deleted while pending.
		f.Eventually("the pass at start", func() bool { return passCalls.Load() >= 1 })
		xclaim := func(count int, ids ...string) {
			args := []any{"XCLAIM", f.Stream, f.Group, "crashed", 0}
			for _, id := range ids {
				args = append(args, id)
			}
			args = append(args, "RETRYCOUNT", count, "FORCE", "JUSTID")
			require.NoError(t, s.rdb.Do(ctx, args...).Err())
		}
		xclaim(3, ids[:3]...)
		xclaim(1, ids[3:]...)
		require.NoError(t, s.rdb.XDel(ctx, f.Stream, ids[3]).Err())

		f.Within(30 * time.Second).RequireAcked(ids[4:]...)
		f.RequireDeadLetterIDs(ids[:3]...)
		for _, id := range ids[:3] {
			f.RequireDeadLettered(id, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
		}
		if claims {
			f.RequirePending(ids[3], pelwardentest.Pending{Consumer: "crashed", Deliveries: 1})
		} else {
			f.Within(30 * time.Second).RequirePELEmpty()
		}
		require.NoError(t, c.Stop())

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, deliveries, 36)
		for _, id := range ids[4:] {
			require.Equal(t, []int64{2}, deliveries[id], "%s: handled once, its second delivery", id)
		}
		require.Equal(t, 36, m.Total(driver.EventClaimed))
		require.Equal(t, 3, m.DeadLetteredTotal(pelwarden.ReasonMaxDeliveries))
		if claims {
			require.Zero(t, byPass.Load(), "no reclaim pass claimed anything")
		} else {
			require.Equal(t, int64(36), byPass.Load())
		}
	})
}

// The reclaim pass clears what a read's CLAIM leaves: entries deleted
// while pending. With the reads claiming, it still empties the PEL.
func TestDriverReadClaimDeletedCleared(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(10, order)
		f.LeavePending("crashed", 10)
		require.NoError(t, s.rdb.XDel(ctx, f.Stream, ids[:4]...).Err())
		m := &pelwardentest.Metrics{}
		calls := &pelwardentest.Calls{}
		f.RunConsumer(driver.Config{Consumer: "rescuer", Metrics: m, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			calls.Add(msg.ID)
			return nil
		})})
		f.Within(30 * time.Second).RequirePELEmpty()
		f.Eventually("deleted ids counted", func() bool { return m.Total(driver.EventDeletedFromPEL) == 4 })
		f.RequireAcked(ids[4:]...)
		require.Equal(t, 6, calls.Distinct())
		for _, id := range ids[:4] {
			require.Zero(t, calls.Count(id))
		}
	})
}

// A poison entry that fails every time runs exactly MaxDeliveries times
// and is then dead-lettered with reason max_deliveries, on every server;
// where reads claim, its retries come through the reads. Its record's
// delivery count is the server's: MaxDeliveries where a pass
// dead-lettered it, one more where a read had taken it over first.
func TestDriverReadClaimPoisonExact(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		claims := serverClaims(t, s.rdb)
		f := s.fixture(t)
		poison := f.Add("n", "poison")
		calls := &pelwardentest.Calls{}
		var mu sync.Mutex
		var seen []int64
		f.RunConsumer(driver.Config{Consumer: "c", MaxDeliveries: 4, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			calls.Add(msg.ID)
			mu.Lock()
			seen = append(seen, msg.Deliveries)
			mu.Unlock()
			return errPoison
		})})
		rec := f.Within(30*time.Second).RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
		require.Equal(t, 4, calls.Count(poison), "exactly MaxDeliveries runs")
		mu.Lock()
		require.Equal(t, []int64{1, 2, 3, 4}, seen)
		mu.Unlock()
		want := int64(4)
		if claims {
			want = 5
		}
		if claims {
			// A pass (count 4) or a read's CLAIM (count 5) took it first.
			require.Contains(t, []int64{want - 1, want}, rec.Deliveries, "the server's count when it was dead-lettered")
		} else {
			require.Equal(t, want, rec.Deliveries, "the server's count when it was dead-lettered")
		}
		f.RequirePELEmpty()
	})
}
