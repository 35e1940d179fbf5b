package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// BenchmarkReadClaim: a consumer crashes holding 50,000 entries (5% at
// MaxDeliveries, 1% deleted while pending) while another one runs with
// the defaults but for MinIdle and ReclaimInterval (500 ms each, so the
// run takes seconds), side by side: "read-claim" (ReadClaimAuto, the
// reads take the idle entries over where the server has XREADGROUP ...
// CLAIM) and "pass" (ReadClaimOff: only the reclaim passes take them).
// Each iteration runs both on fresh streams. The crash is made after the
// running consumer's pass at start (XCLAIM ... FORCE to consumer "dead",
// pipelined, well within MinIdle/2); from its start it reports:
//   - first-ms: until the first entry reached a handler, less MinIdle (an
//     entry cannot be taken before);
//   - handled-s: until the last live entry was handled, MinIdle included;
//   - drain-s: until the PEL is empty (the deleted ids too, which only a
//     pass clears), MinIdle included;
//   - entries/s: 50,000 / (handled - MinIdle), from the moment entries
//     are idle; rate/s: 50,000 / (handled - first), once taking began;
//   - µs/entry: server CPU (INFO cpu, used_cpu_user + used_cpu_sys)
//     from the end of the crash (before any entry is idle) to the empty
//     PEL, per entry.
//
// On servers without CLAIM both run the same passes. Run on Redis 8.6:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.6 go test -run '^$' -bench ReadClaim -benchtime 1x -count 3 ./integration_test/
func BenchmarkReadClaim(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	const n = 50_000
	const minIdle = 500 * time.Millisecond
	modes := []struct {
		name string
		mode driver.ReadClaimMode
	}{{"read-claim", driver.ReadClaimAuto}, {"pass", driver.ReadClaimOff}}
	for i := range b.N {
		for _, m := range modes {
			stream := fmt.Sprintf("{bench-readclaim-%s-%d-%d}", m.name, i, time.Now().UnixNano())
			r, err := drainCrashed(ctx, s, stream, n, minIdle, m.mode)
			s.rdb.Del(ctx, stream, pelwarden.DeadLetterStreamFor(stream))
			if err != nil {
				b.Fatalf("%s: %v", m.name, err)
			}
			b.Logf("%-10s first entry %4.0f ms after MinIdle, last handled %6.3f s, PEL empty %6.3f s, %7.0f entries/s (%7.0f once taking began), %5.2f µs of server CPU per entry; by reads %d, by passes %d",
				m.name, float64((r.first-minIdle).Microseconds())/1000, r.handled.Seconds(), r.drain.Seconds(),
				float64(n)/(r.handled-minIdle).Seconds(), float64(n)/(r.handled-r.first).Seconds(), r.cpuPerEntry, r.byReads, r.byPasses)
			b.ReportMetric(float64(n)/(r.handled-r.first).Seconds(), m.name+"-rate/s")
			b.ReportMetric(float64((r.first-minIdle).Microseconds())/1000, m.name+"-first-ms")
			b.ReportMetric(r.handled.Seconds(), m.name+"-handled-s")
			b.ReportMetric(r.drain.Seconds(), m.name+"-drain-s")
			b.ReportMetric(float64(n)/(r.handled-minIdle).Seconds(), m.name+"-entries/s")
			b.ReportMetric(r.cpuPerEntry, m.name+"-µs/entry")
		}
	}
}

type crashDrain struct {
	drain, first      time.Duration
	handled           time.Duration // until the last live entry was handled
	cpuPerEntry       float64
	byReads, byPasses int64
}

// drainCrashed runs one side of BenchmarkReadClaim on stream.
func drainCrashed(ctx context.Context, s *target, stream string, n int, minIdle time.Duration, mode driver.ReadClaimMode) (crashDrain, error) {
	var r crashDrain
	// The entries exist before the group's position: the running consumer
	// never reads them as new.
	payload := strings.Repeat("x", 64)
	ids := make([]string, 0, n)
	for i := 0; i < n; i += 1000 {
		p := s.rdb.Pipeline()
		var cmds []*redis.StringCmd
		for j := i; j < i+1000 && j < n; j++ {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"n", fmt.Sprint(j), "payload", payload}}))
		}
		if _, err := p.Exec(ctx); err != nil {
			return r, err
		}
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	if err := s.rdb.XGroupCreate(ctx, stream, "g", "$").Err(); err != nil {
		return r, err
	}

	passCalls, byPasses := &atomic.Int64{}, &atomic.Int64{}
	rdb := redis.NewClient(s.rdb.Options())
	defer rdb.Close()
	rdb.AddHook(passClaims{calls: passCalls, n: byPasses})
	var handled, firstAt, lastAt atomic.Int64
	want := int64(0) // set before the crash: the live entries not deleted
	m := &benchMetrics{}
	c, err := driver.New(rdb, driver.Config{Stream: stream, Group: "g", Consumer: "rescuer",
		MinIdle: minIdle, Metrics: m,
		Logger: slog.New(slog.DiscardHandler),
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
			switch handled.Add(1) {
			case 1:
				firstAt.Store(time.Now().UnixNano())
			case atomic.LoadInt64(&want):
				lastAt.Store(time.Now().UnixNano())
			}
			return nil
		}), Tuning: driver.Tuning{ReclaimInterval: minIdle, ReadClaim: mode}})
	if err != nil {
		return r, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for passCalls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}

	// The crash: every entry delivered to "dead", 1 in 20 for the fifth
	// time (MaxDeliveries 5, the default), 1 in 100 then deleted.
	p := s.rdb.Pipeline()
	var poison, live, deleted []string
	for i, id := range ids {
		switch {
		case i%20 == 0:
			poison = append(poison, id)
		default:
			live = append(live, id)
		}
	}
	for _, set := range []struct {
		ids   []string
		count int
	}{{live, 1}, {poison, driver.DefaultMaxDeliveries}} {
		for i := 0; i < len(set.ids); i += 1000 {
			args := []any{"XCLAIM", stream, "g", "dead", 0}
			for _, id := range set.ids[i:min(i+1000, len(set.ids))] {
				args = append(args, id)
			}
			p.Do(ctx, append(args, "RETRYCOUNT", set.count, "FORCE", "JUSTID")...)
		}
	}
	for i := 1; i < len(live); i += 100 {
		deleted = append(deleted, live[i])
	}
	p.XDel(ctx, stream, deleted...)
	atomic.StoreInt64(&want, int64(len(live)-len(deleted)))
	t0 := time.Now()
	if _, err := p.Exec(ctx); err != nil {
		return r, err
	}
	before, err := measure.ServerCPU(ctx, s.rdb)
	if err != nil {
		return r, err
	}
	if made := time.Since(t0); made >= minIdle/2 {
		// The CPU is counted from here: nothing may be idle yet.
		return r, fmt.Errorf("the crash took %v, more than MinIdle/2", made)
	}
	for {
		sum, err := s.rdb.XPending(ctx, stream, "g").Result()
		if err != nil {
			return r, err
		}
		if sum.Count == 0 {
			break
		}
		if time.Since(t0) > 5*time.Minute {
			return r, fmt.Errorf("PEL not empty after 5 minutes: %d pending", sum.Count)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.drain = time.Since(t0)
	after, err := measure.ServerCPU(ctx, s.rdb)
	if err != nil {
		return r, err
	}
	r.first = time.Duration(firstAt.Load() - t0.UnixNano())
	r.handled = time.Duration(lastAt.Load() - t0.UnixNano())
	r.cpuPerEntry = float64((after - before).Microseconds()) / float64(n)
	r.byPasses = byPasses.Load()
	r.byReads = m.claimed.Load() - r.byPasses
	if got, want := handled.Load(), atomic.LoadInt64(&want); got < want || r.handled <= 0 {
		return r, fmt.Errorf("%d entries handled, want %d", got, want)
	}
	if dl, err := s.rdb.XLen(ctx, pelwarden.DeadLetterStreamFor(stream)).Result(); err != nil || dl != int64(len(poison)) {
		return r, fmt.Errorf("dead-letter stream holds %d records (%v), want %d", dl, err, len(poison))
	}
	return r, nil
}

// benchMetrics counts the entries taken over (by reads and passes).
type benchMetrics struct{ claimed atomic.Int64 }

func (m *benchMetrics) Count(e driver.Event, n int) {
	if e == driver.EventClaimed {
		m.claimed.Add(int64(n))
	}
}
func (*benchMetrics) DeadLettered(string, int)      {}
func (*benchMetrics) HandlerDuration(time.Duration) {}
