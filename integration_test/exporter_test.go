package integration_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// gathered is one scrape of a registry: metric name to its series.
type gathered map[string][]*dto.Metric

// scrape gathers reg once.
func scrape(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := gathered{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out
}

// value is the value of name's series whose labels include want; ok false
// when there is none.
func (g gathered) value(name string, want map[string]string) (float64, bool) {
	for _, m := range g[name] {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// must is value, failing the test when the series is missing.
func (g gathered) must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := g.value(name, want)
	require.True(t, ok, "no series %s%v in %v", name, want, g[name])
	return v
}

// waitConsumerIdle waits until consumer has been idle at least d on the
// server (its idle time only grows while nothing touches it).
func waitConsumerIdle(t *testing.T, rdb redis.UniversalClient, stream, group, consumer string, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		cs, err := rdb.XInfoConsumers(t.Context(), stream, group).Result()
		require.NoError(t, err)
		for _, c := range cs {
			if c.Name == consumer {
				return c.Idle >= d
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
}

// collectGroups scrapes a GroupCollector over rdb once, in a pedantic
// registry of its own.
func collectGroups(t *testing.T, rdb redis.UniversalClient, o prommetrics.GroupOptions) gathered {
	t.Helper()
	gc, err := prommetrics.NewGroupCollector(rdb, o)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(gc))
	return scrape(t, reg)
}

// The group collector exports what XPENDING, XINFO and XLEN say of a
// group, read on the server: pending, lag (absent once the server cannot
// tell), the oldest pending entry's age on the server's clock, consumers,
// the stalled ones and their entries, the stream's and its dead-letter
// stream's lengths.
func TestGroupCollector(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f, ids := statusFixture(t, s)
		waitConsumerIdle(t, s.rdb, f.Stream, f.Group, "c1", 20*time.Millisecond)

		collect := func(o prommetrics.GroupOptions) gathered { return collectGroups(t, s.rdb, o) }
		before, err := s.rdb.Time(ctx).Result()
		require.NoError(t, err)
		g := collect(prommetrics.GroupOptions{Streams: []string{f.Stream}, StalledAfter: 20 * time.Millisecond})
		after, err := s.rdb.Time(ctx).Result()
		require.NoError(t, err)

		grp := map[string]string{"stream": f.Stream, "group": f.Group}
		require.EqualValues(t, 3, g.must(t, "pelwarden_group_pending", grp))
		require.EqualValues(t, 2, g.must(t, "pelwarden_group_lag", grp), "6 entries, 4 delivered")
		require.EqualValues(t, 2, g.must(t, "pelwarden_group_consumers", grp))
		require.LessOrEqual(t, g.must(t, "pelwarden_group_active_consumers", grp), 1.0, "c1 has been idle past 20ms")
		require.EqualValues(t, 3, g.must(t, "pelwarden_group_stalled", grp), "c1's entries: it has been idle past 20ms")
		require.EqualValues(t, 1, g.must(t, "pelwarden_group_stalled_consumers", grp), "c2 owns nothing")
		added, ok := ops.IDTime(ids[0])
		require.True(t, ok, ids[0])
		oldest := g.must(t, "pelwarden_group_oldest_pending_seconds", grp)
		require.GreaterOrEqual(t, oldest, before.Sub(added).Seconds())
		require.LessOrEqual(t, oldest, after.Sub(added).Seconds())
		require.EqualValues(t, 6, g.must(t, "pelwarden_stream_length", map[string]string{"stream": f.Stream}))
		dead := map[string]string{"stream": f.Stream, "dead_letter_stream": f.DeadLetterStream}
		require.EqualValues(t, 1, g.must(t, "pelwarden_dead_letter_entries", dead))
		require.EqualValues(t, 1, g.must(t, "pelwarden_dead_letter_added_total", dead))
		require.EqualValues(t, 1, g.must(t, "pelwarden_state_up", nil))
		require.EqualValues(t, 1, g.must(t, "pelwarden_state_streams", nil))
		require.EqualValues(t, 0, g.must(t, "pelwarden_state_read_errors", nil))
		require.EqualValues(t, 1, g.must(t, "pelwarden_state_discovery_complete", nil))
		require.EqualValues(t, 0, g.must(t, "pelwarden_state_truncated", nil))
		require.Empty(t, g["pelwarden_partition_lease_owner"], "not a partition")

		// The dead-letter stream has no group: it is not a group's stream.
		g = collect(prommetrics.GroupOptions{Streams: []string{f.Stream, f.DeadLetterStream}, StalledAfter: time.Hour})
		require.EqualValues(t, 1, g.must(t, "pelwarden_state_streams", nil))
		require.EqualValues(t, 0, g.must(t, "pelwarden_group_stalled", grp), "nobody idle for an hour")
		require.EqualValues(t, 0, g.must(t, "pelwarden_group_stalled_consumers", grp))
		require.EqualValues(t, 2, g.must(t, "pelwarden_group_active_consumers", grp), "both seen within the hour")

		require.EqualValues(t, 0, g.must(t, "pelwarden_group_paused", grp))
		require.EqualValues(t, 0, g.must(t, "pelwarden_group_paused_seconds", grp))

		// Paused by an operator: the pause and its age on the server's clock.
		require.NoError(t, pelwarden.PauseGroup(ctx, s.rdb, f.Stream, f.Group, pelwarden.Pause{By: "ops", Reason: "test"}))
		p, err := pelwarden.ReadPause(ctx, s.rdb, f.Stream, f.Group)
		require.NoError(t, err)
		g = collect(prommetrics.GroupOptions{Streams: []string{f.Stream}})
		now, err := s.rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, g.must(t, "pelwarden_group_paused", grp))
		pausedFor := g.must(t, "pelwarden_group_paused_seconds", grp)
		require.GreaterOrEqual(t, pausedFor, 0.0)
		require.LessOrEqual(t, pausedFor, now.Sub(p.At).Seconds())
		_, err = pelwarden.ResumeGroup(ctx, s.rdb, f.Stream, f.Group)
		require.NoError(t, err)

		// An entry deleted past the group's last delivery: the server can
		// no longer count the lag, and the series goes away.
		require.NoError(t, s.rdb.XDel(ctx, f.Stream, ids[5]).Err())
		g = collect(prommetrics.GroupOptions{Streams: []string{f.Stream}})
		_, ok = g.value("pelwarden_group_lag", grp)
		require.False(t, ok, "lag unknown after XDEL: %v", g["pelwarden_group_lag"])
		require.EqualValues(t, 3, g.must(t, "pelwarden_group_pending", grp))

		// Acked, the PEL is empty: the oldest pending age is 0.
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[0], ids[1], ids[2]).Err())
		g = collect(prommetrics.GroupOptions{Streams: []string{f.Stream}})
		require.EqualValues(t, 0, g.must(t, "pelwarden_group_pending", grp))
		require.EqualValues(t, 0, g.must(t, "pelwarden_group_oldest_pending_seconds", grp))
	})
}

// Partitions of a partitioned stream, found by its name: each one with a
// lease exports its owner, the time left and the head that blocks it; a
// key under the name that pelwarden.Partitions did not make is left out.
func TestGroupCollectorPartitions(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := "exp-" + strings.NewReplacer("/", "-").Replace(t.Name())
		keys := blockedPartition(t, s, name, 2)
		p := keys[0]
		decoy := "{" + name + "/2/0/999}"
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, decoy, "g", "0").Err())
		t.Cleanup(func() { _ = s.rdb.Del(context.Background(), decoy).Err() })

		gc, err := prommetrics.NewGroupCollector(s.rdb, prommetrics.GroupOptions{Partitioned: []string{name}})
		require.NoError(t, err)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(gc))
		g := scrape(t, reg)
		require.EqualValues(t, 2, g.must(t, "pelwarden_state_streams", nil), "both partitions, not the decoy")
		part := map[string]string{"stream": p, "partition_of": name, "partition": "0"}
		owner := map[string]string{"stream": p, "partition_of": name, "partition": "0", "owner": "a"}
		require.EqualValues(t, 1, g.must(t, "pelwarden_partition_lease_owner", owner))
		left := g.must(t, "pelwarden_partition_lease_seconds_left", part)
		require.Greater(t, left, 3500.0)
		require.LessOrEqual(t, left, 3600.0)
		require.EqualValues(t, 1, g.must(t, "pelwarden_partition_head_blocked", part))
		require.EqualValues(t, 1, g.must(t, "pelwarden_partition_head_deliveries", part))
		require.EqualValues(t, 1, g.must(t, "pelwarden_group_pending", map[string]string{"stream": p, "group": "g"}))
		require.Len(t, g["pelwarden_partition_head_blocked"], 1, "partition 1 has no lease yet")
		_, ok := g.value("pelwarden_group_pending", map[string]string{"stream": decoy})
		require.False(t, ok, "the decoy is not a partition")
	})
}

// `pelwarden exporter` serves the collector on /metrics (with the Go
// runtime's and the process's metrics) until interrupted, then exits 0.
func TestCLIExporter(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	f.Produce(4, order)
	f.LeavePending("c1", 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- executeCLI(runCtx, []string{"--redis", serverURL(t, s), "exporter", "--listen", addr, "--stream", f.Stream}, &out, &errb)
	}()
	get := func() (int, string) {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get(); return code == http.StatusOK },
		30*time.Second, 20*time.Millisecond, "the exporter answers; stderr: %s", errb.String())
	_, body := get()
	require.Contains(t, body, `pelwarden_group_pending{group="`+f.Group+`",stream="`+f.Stream+`"} 3`)
	require.Contains(t, body, `pelwarden_group_lag{group="`+f.Group+`",stream="`+f.Stream+`"} 1`)
	require.Contains(t, body, "pelwarden_state_up 1")
	require.Contains(t, body, "go_goroutines ")

	cancel()
	requireStopped(t, "exporter", done, &errb)
	require.Contains(t, errb.String(), "pelwarden exporter: serving")
}

// `status` over the partitions of a partitioned stream, or a glob: one row
// per stream with its lease owner, blocked head and pause, and totals.
func TestCLIStatusPartitions(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		name := "st-" + strings.NewReplacer("/", "-").Replace(t.Name())
		keys := blockedPartition(t, s, name, 2)
		require.NoError(t, pelwarden.PauseGroup(ctx, s.rdb, keys[1], "g", pelwarden.Pause{By: "ops"}))
		t.Cleanup(func() { _ = s.rdb.Del(context.Background(), pelwarden.PauseKeyFor(keys[1])).Err() })

		for _, args := range [][]string{{"status", name, "g", "--partitions", "2"}, {"status", "{" + name + "/*", "g"}} {
			v := pwJSON(t, s, args...)
			rows := list(t, v["streams"])
			require.Len(t, rows, 2, "%v", args)
			r0, r1 := obj(t, rows[0]), obj(t, rows[1])
			require.Equal(t, keys[0], r0["stream"])
			require.Equal(t, "a", r0["lease_owner"])
			require.NotNil(t, r0["blocked_head"])
			require.EqualValues(t, 1, num(t, r0["pending"]), "the blocked head")
			require.Equal(t, false, r0["paused"])
			require.Equal(t, keys[1], r1["stream"])
			require.Nil(t, r1["lease_owner"], "no lease hash yet")
			require.Equal(t, true, r1["paused"])
			require.EqualValues(t, 2, num(t, r1["lag"]))
			totals := obj(t, v["totals"])
			require.EqualValues(t, 1, num(t, totals["blocked"]))
			require.EqualValues(t, 1, num(t, totals["paused"]))
			require.EqualValues(t, 3, num(t, totals["lag"]), "1 behind the head, 2 on the other")
		}
		r := pw(t, s, "status", name, "g", "--partitions", "2")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "LEASE OWNER")
		require.Contains(t, r.stdout, "PAUSED")
		require.Contains(t, r.stdout, "group g on 2 streams: 1 pending, lag 3, 0 dead letters; 1 blocked, 1 paused")

		v := pwJSON(t, s, "status", name, "nope", "--partitions", "2")
		for _, row := range list(t, v["streams"]) {
			require.Equal(t, true, obj(t, row)["missing"])
		}
	})
}

// The numbers KEDA's redis-streams scaler computes (lagCount: XINFO GROUPS
// lag; pendingEntriesCount: the XPENDING summary's count; streamLength:
// XLEN) are the ones `pelwarden status` and the exporter show.
func TestKEDAAgrees(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f, _ := statusFixture(t, s)
		f.Produce(7, order) // more lag
		groups, err := s.rdb.XInfoGroups(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
		kedaLag := groups[0].Lag
		p, err := s.rdb.XPending(ctx, f.Stream, f.Group).Result()
		require.NoError(t, err)
		kedaPending := p.Count
		kedaLength, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 9, kedaLag)
		require.EqualValues(t, 3, kedaPending)
		require.EqualValues(t, 13, kedaLength)

		st := pwJSON(t, s, "status", f.Stream, f.Group)
		require.EqualValues(t, kedaLag, num(t, st["lag"]))
		require.EqualValues(t, kedaPending, num(t, st["pending"]))
		require.EqualValues(t, kedaLength, num(t, st["length"]))

		gc, err := prommetrics.NewGroupCollector(s.rdb, prommetrics.GroupOptions{Streams: []string{f.Stream}})
		require.NoError(t, err)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(gc))
		g := scrape(t, reg)
		grp := map[string]string{"stream": f.Stream, "group": f.Group}
		require.EqualValues(t, kedaLag, g.must(t, "pelwarden_group_lag", grp))
		require.EqualValues(t, kedaPending, g.must(t, "pelwarden_group_pending", grp))
		require.EqualValues(t, kedaLength, g.must(t, "pelwarden_stream_length", map[string]string{"stream": f.Stream}))
	})
}
