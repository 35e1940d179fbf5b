package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// limitName is a limit of the test's own (no braces: the name is its keys'
// hash tag).
func limitName(t *testing.T) string {
	return strings.NewReplacer("/", ".", "{", "", "}", "").Replace(t.Name())
}

// serverMillis is the server's clock (TIME) in milliseconds.
func serverMillis(t *testing.T, s *target) int64 {
	tm, err := s.rdb.Time(t.Context()).Result()
	require.NoError(t, err)
	return tm.UnixMilli()
}

// A rate: the burst at once, then no more than the rate allows by the
// server's clock; Wait says when the next permit comes, and it is there
// then; permits refunded come back.
func TestLimitRate(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		st, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 20, Burst: 5})
		require.NoError(t, err)
		require.True(t, st.Exists)
		require.Equal(t, 5, st.Available, "a new limit starts with its burst")

		began := serverMillis(t, s)
		p, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 8})
		require.NoError(t, err)
		require.LessOrEqual(t, p.Granted, 5, "at most the burst at once")
		require.GreaterOrEqual(t, p.Granted, 5, "the whole burst is there")
		require.Positive(t, p.Token, "every holder has a lease")
		require.Zero(t, p.Share, "no cap, no share of it")
		require.Positive(t, p.Wait)
		granted := p.Granted
		token := p.Token
		// Taking one at a time until refused, then as soon as Wait says:
		// never more than burst + rate x elapsed (server time), and each
		// Wait honoured gives a permit.
		within := func() {
			elapsed := serverMillis(t, s) - began
			require.LessOrEqual(t, float64(granted), 5+20*float64(elapsed)/1000+1, "within the rate after %d ms", elapsed)
		}
		for range 6 {
			for p.Granted > 0 {
				p, err = s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1, Token: token})
				require.NoError(t, err)
				granted += p.Granted
			}
			within()
			require.Positive(t, p.Wait)
			require.LessOrEqual(t, p.Wait, 50*time.Millisecond, "one interval at most")
			time.Sleep(p.Wait)
			p, err = s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1, Token: token})
			require.NoError(t, err)
			require.Equal(t, 1, p.Granted, "a permit once Wait has passed")
			granted += p.Granted
			within()
		}

		// Refunded permits come back at once.
		st, err = s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		before := st.Available
		_, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Refund: 3})
		require.NoError(t, err)
		st, err = s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.GreaterOrEqual(t, st.Available, min(before+3, 5))
		require.LessOrEqual(t, st.Available, 5, "never beyond the burst")
	})
}

// With more than one holder, the rate's permits go a share at a time: a
// call that finds fewer than min(want, its share) due takes none and its
// Wait says when they are; a call wanting no more than is due takes it;
// a holder alone takes what is due, as many as it can. (A rate of one
// permit per 100 s: nothing comes due while the test runs.)
func TestLimitRateShares(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 0.01, Burst: 4})
		require.NoError(t, err)
		acquire := func(want int, token int64) *pelwarden.Permits {
			t.Helper()
			p, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: want, Token: token})
			require.NoError(t, err)
			return p
		}
		a := acquire(2, 0)
		require.Equal(t, 2, a.Granted, "alone: its share is the whole burst")
		b := acquire(3, 0)
		require.Equal(t, 2, b.Granted, "two holders: a share is ceil(4/2)")
		require.Zero(t, acquire(1, a.Token).Granted, "the burst is spent")

		// One permit back: one is due, less than a share.
		_, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: b.Token, Refund: 1})
		require.NoError(t, err)
		p := acquire(2, a.Token)
		require.Zero(t, p.Granted, "one due, a share is two: none taken")
		require.Greater(t, p.Wait, 90*time.Second, "the second comes due in 100 s")
		require.LessOrEqual(t, p.Wait, 100*time.Second)
		p = acquire(1, a.Token)
		require.Equal(t, 1, p.Granted, "wanting one, it takes the one due")

		// b leaves: a holds alone and takes what is due, one of two.
		_, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: b.Token, End: true})
		require.NoError(t, err)
		_, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Refund: 1})
		require.NoError(t, err)
		p = acquire(2, a.Token)
		require.Equal(t, 1, p.Granted, "alone, a holder takes what is due")
	})
}

// A cap: never more held than it allows; a release frees permits for
// others; a lease that is not renewed expires and its permits come back;
// its late release is fenced (nothing is given back twice). Through FCALL
// and through the EVALSHA fallback.
func TestLimitConcurrency(t *testing.T) {
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		s = &target{srv: s.srv, rdb: s.rdb, lib: lib}
		ctx := t.Context()
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 3, Lease: time.Second})
		require.NoError(t, err)

		a, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 5})
		require.NoError(t, err)
		require.Equal(t, 3, a.Granted)
		require.Positive(t, a.Token)
		require.Equal(t, pelwarden.WaitForRelease, a.Wait)
		require.Equal(t, 3, a.Share, "alone, a holder's share is the whole cap")
		b, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1})
		require.NoError(t, err)
		require.Zero(t, b.Granted, "the cap is full")
		require.Equal(t, 3, b.InUse)
		require.Positive(t, b.Token, "a holder waiting has a lease too")
		require.NotEqual(t, a.Token, b.Token, "a lease per holder")
		require.Equal(t, 2, b.Share, "two holders: ceil(3/2) each")

		rel, err := s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: a.Token, Permits: 1})
		require.NoError(t, err)
		require.Equal(t, &pelwarden.PermitRelease{Released: 1}, rel)
		b, err = s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1, Token: b.Token})
		require.NoError(t, err)
		require.Equal(t, 1, b.Granted, "the released permit")
		a2, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1, Token: a.Token})
		require.NoError(t, err)
		require.Zero(t, a2.Granted, "a holds its share of two")
		require.Equal(t, pelwarden.WaitForRelease, a2.Wait)

		// b renews its lease; a stops renewing: its two come back once its
		// lease expires, and b takes them.
		st, err := s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 3, st.InUse)
		require.Equal(t, 2, st.Leases)
		for got := 0; got < 2; {
			r, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 2 - got, Token: b.Token})
			require.NoError(t, err)
			require.False(t, r.Lost, "b renews its lease with every call")
			require.Equal(t, b.Token, r.Token)
			got += r.Granted
			if got < 2 {
				time.Sleep(50 * time.Millisecond) // b's next renewal; a's lease runs out meanwhile
			}
		}
		st, err = s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 3, st.InUse, "b holds all three")
		require.Equal(t, 1, st.Leases)

		// a's late release and renewal: fenced.
		rel, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: a.Token, Permits: 2})
		require.NoError(t, err)
		require.Equal(t, &pelwarden.PermitRelease{Released: 0, NotHeld: 2}, rel)
		r, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 0, Token: a.Token})
		require.NoError(t, err)
		require.True(t, r.Lost)
		require.Zero(t, r.Token)

		rel, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: b.Token, Permits: 2})
		require.NoError(t, err)
		require.Equal(t, 2, rel.Released)
		st, err = s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 1, st.InUse)
		require.Equal(t, 1, st.Leases, "a holder stays one after a release")
		// Ending the lease gives back what it still holds.
		rel, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: b.Token, End: true})
		require.NoError(t, err)
		require.Equal(t, &pelwarden.PermitRelease{Released: 1}, rel)
		st, err = s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Zero(t, st.InUse)
		require.Zero(t, st.Leases)
	})
}

// Holders racing for a cap of 4 never run more than 4 at once, checked by
// a counter the holders raise and lower on the server, and leave nothing
// held.
func TestLimitConcurrencyUnderRace(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Concurrency: 4})
		require.NoError(t, err)
		counter := name + ":running"
		t.Cleanup(func() { s.rdb.Del(context.Background(), counter) })
		var most atomic.Int64
		var runs atomic.Int64
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for range 15 {
					p, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1})
					if !assert.NoError(t, err) || p.Granted == 0 {
						continue
					}
					n, err := s.rdb.Incr(ctx, counter).Result()
					assert.NoError(t, err)
					for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
					}
					runs.Add(1)
					assert.NoError(t, s.rdb.Decr(ctx, counter).Err())
					_, err = s.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: p.Token, Permits: 1})
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		require.Positive(t, runs.Load())
		require.LessOrEqual(t, most.Load(), int64(4), "never more than the cap at once")
		st, err := s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Zero(t, st.InUse)
		t.Logf("%d runs, at most %d at once", runs.Load(), most.Load())
	})
}

// A limit not set, a key of another type, and a user without the limit's
// keys: typed errors, nothing changed.
func TestLimitErrors(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		_, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1})
		require.ErrorIs(t, err, pelwarden.ErrNoLimit)
		st, err := s.lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.False(t, st.Exists)

		other := name + ".string"
		h, _ := pelwarden.LimitKeysFor(other)
		require.NoError(t, s.rdb.Set(ctx, h, "x", 0).Err())
		t.Cleanup(func() { s.rdb.Del(context.Background(), h) })
		_, err = s.lib.SetLimit(ctx, other, pelwarden.LimitSettings{Rate: 1})
		require.ErrorIs(t, err, pelwarden.ErrWrongType)
		require.Equal(t, "x", s.rdb.Get(ctx, h).Val())

		_, err = s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 1})
		require.NoError(t, err)
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		rdb := restrictedClient(t, ctx, s, "limit-"+tag, "resetkeys", "~other*")
		_, err = pelwarden.NewLibrary(rdb).AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 1})
		require.ErrorIs(t, err, pelwarden.ErrNoPermission)
		hk, _ := pelwarden.LimitKeysFor(name)
		require.Contains(t, err.Error(), hk)
	})
}

// The CLI sets and shows limits; holders pick a change up at their next
// acquisition.
func TestCLILimit(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		set := pwJSON(t, s, "limit", "set", name, "--rate", "2.5", "--burst", "3", "--concurrency", "2", "--lease", "5s")
		require.Equal(t, 2.5, set["rate"])
		require.EqualValues(t, 3, num(t, set["burst"]))
		require.EqualValues(t, 2, num(t, set["concurrency"]))
		require.EqualValues(t, 5000, num(t, set["lease_ms"]))

		p, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 5})
		require.NoError(t, err)
		require.Equal(t, 2, p.Granted, "the cap of 2 (the burst of 3 allows more)")
		r := pw(t, s, "limit", "show", name)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, name+": rate 2.5/s (burst 3), concurrency 2, lease 5s")
		require.Contains(t, r.stdout, "in use: 2 of 2 (1 leases)")

		// A higher cap: the next acquisition gets the difference.
		pwJSON(t, s, "limit", "set", name, "--rate", "2.5", "--burst", "3", "--concurrency", "3", "--lease", "5s")
		p, err = s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 5, Token: p.Token})
		require.NoError(t, err)
		require.Equal(t, 1, p.Granted, "one more under the cap of 3 (the burst had 1 left)")

		// Every limit, without names (the server's other tests' limits too).
		all := pw(t, s, "limit", "show", "--json")
		require.Equal(t, exitOK, all.code, all.stderr)
		require.Contains(t, all.stdout, `"name": "`+name+`"`)
		missing := pw(t, s, "limit", "show", name+".none", "--json")
		require.Equal(t, exitOK, missing.code, missing.stderr)
		require.Contains(t, missing.stdout, `"exists": false`)

		requireError(t, pw(t, s, "limit", "set", name), exitUsage, "a limit needs a Rate or a Concurrency cap")
		requireError(t, pw(t, s, "limit", "set", "a{b", "--rate", "1"), exitUsage, "must not contain { or }")
	})
}

// The limits guide's grants for a holder are enough: a user with the limit's
// keys and those commands only sets, takes, renews, releases and reads.
func TestLimitACL(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		rdb := restrictedClient(t, ctx, s, "holder-"+tag, "resetkeys", "~{pelwarden:limit:"+name+"}*", "-@all",
			"+fcall", "+fcall_ro", "+type", "+hmget", "+hget", "+hset", "+hincrby", "+hdel", "+zadd", "+zrem", "+zrangebyscore", "+zcount", "+time")
		lib := pelwarden.NewLibrary(rdb)
		_, err := lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 10, Burst: 2, Concurrency: 1})
		require.NoError(t, err)
		p, err := lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 2})
		require.NoError(t, err)
		require.Equal(t, 1, p.Granted)
		p, err = lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Token: p.Token})
		require.NoError(t, err)
		require.False(t, p.Lost)
		rel, err := lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: p.Token, Permits: 1, Refund: 1})
		require.NoError(t, err)
		require.Equal(t, 1, rel.Released)
		st, err := lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.Zero(t, st.InUse)
	})
}

// testClusterLimits: a limit on each primary of the cluster (each limit's
// keys in a slot of their own), taken, renewed, released and read through
// the cluster client.
func testClusterLimits(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, shards []testserver.Shard) {
	lib := pelwarden.NewLibrary(rdb)
	for i, sh := range shards {
		name := ""
		for n := 0; name == ""; n++ {
			candidate := fmt.Sprintf("%s.%d.%d", limitName(t), i, n)
			if h, _ := pelwarden.LimitKeysFor(candidate); sh.Owns(pelwarden.Slot(h)) {
				name = candidate
			}
		}
		_, err := lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 100, Burst: 4, Concurrency: 3})
		require.NoError(t, err)
		p, err := lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 5})
		require.NoError(t, err)
		require.Equal(t, 3, p.Granted, "the cap (the burst allows 4)")
		p, err = lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Token: p.Token})
		require.NoError(t, err)
		require.False(t, p.Lost)
		rel, err := lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: name, Token: p.Token, Permits: 3})
		require.NoError(t, err)
		require.Equal(t, 3, rel.Released)
		st, err := lib.ReadLimit(ctx, name)
		require.NoError(t, err)
		require.True(t, st.Exists)
		require.Zero(t, st.InUse)
	}
}

// The group collector (and so the exporter) shows each limit's settings
// and use: the limits named, or every limit on the server.
func TestGroupCollectorLimits(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := limitName(t)
		_, err := s.lib.SetLimit(ctx, name, pelwarden.LimitSettings{Rate: 4, Burst: 3, Concurrency: 5})
		require.NoError(t, err)
		p, err := s.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: name, Want: 2})
		require.NoError(t, err)
		require.Equal(t, 2, p.Granted)
		lbl := map[string]string{"limit": name}
		for _, o := range []prommetrics.GroupOptions{
			{Streams: []string{"no-such-stream"}, Limits: []string{name}},
			{}, // every stream with groups and every limit on the server
		} {
			g := collectGroups(t, s.rdb, o)
			require.EqualValues(t, 4, g.must(t, "pelwarden_limit_rate", lbl))
			require.EqualValues(t, 3, g.must(t, "pelwarden_limit_burst", lbl))
			require.EqualValues(t, 5, g.must(t, "pelwarden_limit_concurrency", lbl))
			require.EqualValues(t, 2, g.must(t, "pelwarden_limit_in_use", lbl))
			require.EqualValues(t, 1, g.must(t, "pelwarden_limit_leases", lbl))
			available := g.must(t, "pelwarden_limit_available", lbl)
			require.GreaterOrEqual(t, available, 1.0, "the burst of 3 less the 2 taken, and what the rate refilled")
			require.LessOrEqual(t, available, 3.0)
			require.EqualValues(t, 1, g.must(t, "pelwarden_state_up", nil))
		}
	})
}
