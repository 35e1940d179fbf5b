package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// BenchmarkOrdered compares ordered mode with the default (unordered) mode
// on the same partitions: one driver consumer with every other field at
// its default and a no-op handler drains 100,000 entries produced
// beforehand (keyed, pipelined) over 16 or 64 partitions, on the first
// server of the matrix. It reports entries/s and the server's CPU per
// entry (INFO cpu deltas) and the benchmark process's (getrusage: the
// consumer, plus the harness's small share). Time counts from the first handler call to the
// last ack: ordered mode first waits for its second membership heartbeat
// (about a second) before it acquires a partition, a start-up cost that
// is not throughput. -count n runs each of the four cases n times in a
// row:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  PELWARDEN_IMAGES=pelwarden/redis:8.0 PELWARDEN_OLD_IMAGE=none \
//	  go test -run '^$' -bench '^BenchmarkOrdered$' -benchtime 1x -count 3 -timeout 30m ./integration_test/
func BenchmarkOrdered(b *testing.B) {
	const entries = 100_000
	s := servers[0]
	ctx := context.Background()
	if _, err := s.lib.Load(ctx); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{16, 64} {
		for _, ordered := range []bool{false, true} {
			mode := "unordered"
			if ordered {
				mode = "ordered"
			}
			b.Run(fmt.Sprintf("partitions=%d/%s", n, mode), func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					parts, err := pelwarden.Partitions(fmt.Sprintf("ordbench-%d-%s-%d-%d", n, mode, i, rand.Int64()), n)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					produceKeyed(b, ctx, s.rdb, parts, entries)
					b.StartTimer()
					cpu0, err := measure.ServerCPU(ctx, s.rdb)
					if err != nil {
						b.Fatal(err)
					}
					self0 := measure.ProcessCPU()
					d := drainWithDefaults(b, ctx, s.rdb, parts, entries, 1, ordered)
					wall := d.lastAck.Sub(d.firstHandled)
					self := measure.ProcessCPU() - self0
					cpu1, err := measure.ServerCPU(ctx, s.rdb)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(entries)/wall.Seconds(), "entries/s")
					b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(entries), "server-µs/entry")
					b.ReportMetric(float64(self.Microseconds())/float64(entries), "client-µs/entry")
					b.ReportMetric(0, "ns/op")
					for _, p := range parts {
						s.rdb.Del(ctx, p, pelwarden.DeadLetterStreamFor(p), pelwarden.LeaseKeyFor(p))
					}
					s.rdb.Del(ctx, driver.MembersKey(parts, "g"))
				}
			})
		}
	}
}

// BenchmarkOrderedRecovery measures how soon partitions run again when
// their owner goes, with the driver's defaults (PartitionLease 10 s): two
// consumers share 16 partitions (8 each) while a producer adds an entry
// to every partition every 20 ms; then one crashes (its client is closed:
// no release, no heartbeat, no ack) and the benchmark reports the time
// until the other owns every one of its partitions (crash-owned-s) and
// has handled an entry on each (crash-handled-s); then a new consumer
// joins, takes its share, and the other stops gracefully: the time from
// the stop until the newcomer owns and has handled each of the stopped
// consumer's partitions (handover-owned-s, handover-handled-s).
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  PELWARDEN_IMAGES=pelwarden/redis:8.0 PELWARDEN_OLD_IMAGE=none \
//	  go test -run '^$' -bench '^BenchmarkOrderedRecovery$' -benchtime 1x -count 3 -timeout 30m ./integration_test/
func BenchmarkOrderedRecovery(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		parts, err := pelwarden.Partitions(fmt.Sprintf("ordrec-%d-%d", i, rand.Int64()), 16)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range parts {
			if err := s.rdb.XGroupCreateMkStream(ctx, p, "g", "0").Err(); err != nil {
				b.Fatal(err)
			}
		}
		prodCtx, stopProd := context.WithCancel(ctx)
		prodDone := make(chan struct{})
		go func() {
			defer close(prodDone)
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for prodCtx.Err() == nil {
				pipe := s.rdb.Pipeline()
				for _, p := range parts {
					pipe.XAdd(prodCtx, &redis.XAddArgs{Stream: p, Values: []string{"n", "1"}})
				}
				_, _ = pipe.Exec(prodCtx) // stops with the context
				select {
				case <-t.C:
				case <-prodCtx.Done():
				}
			}
		}()
		var mu sync.Mutex
		handled := map[string]map[string]time.Time{} // consumer -> partition -> first handled at
		start := func(name string) (stop func(), crash func() (reap func())) {
			opts := s.srv.Options()
			opts.MaxRetries = -1
			rdb := redis.NewClient(opts)
			c, err := driver.NewOrdered(rdb, driver.OrderedConfig{Streams: parts, Group: "g", Consumer: name,
				Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
					mu.Lock()
					if handled[name] == nil {
						handled[name] = map[string]time.Time{}
					}
					if _, ok := handled[name][m.Stream]; !ok {
						handled[name][m.Stream] = time.Now()
					}
					mu.Unlock()
					return nil
				})})
			if err != nil {
				b.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { errc <- c.Run(runCtx) }()
			stop = func() {
				cancel()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				_ = rdb.Close()
			}
			crash = func() func() {
				_ = rdb.Close() // from now on nothing it sends reaches the server
				return func() {
					cancel()
					<-errc // a crashed consumer's error does not matter
				}
			}
			return stop, crash
		}
		owners := func() map[string][]string {
			out := map[string][]string{}
			for _, p := range parts {
				o, err := s.rdb.HGet(ctx, pelwarden.LeaseKeyFor(p), "owner").Result()
				if err == nil && o != "" {
					out[o] = append(out[o], p)
				}
			}
			return out
		}
		waitFor := func(what string, cond func() bool) time.Time {
			deadline := time.Now().Add(2 * time.Minute)
			for !cond() {
				if time.Now().After(deadline) {
					b.Fatalf("%s: not after 2 minutes (owners %v)", what, owners())
				}
				time.Sleep(5 * time.Millisecond)
			}
			return time.Now()
		}
		// after measures, from t0, when to owns every partition in ps and
		// when it first handled an entry on each after t0.
		after := func(t0 time.Time, to string, ps []string) (owned, ran time.Duration) {
			ownedAt := waitFor(to+" owns "+strconv.Itoa(len(ps)), func() bool {
				got := map[string]bool{}
				for _, p := range owners()[to] {
					got[p] = true
				}
				for _, p := range ps {
					if !got[p] {
						return false
					}
				}
				return true
			})
			var last time.Time
			waitFor(to+" handled on each", func() bool {
				mu.Lock()
				defer mu.Unlock()
				last = time.Time{}
				for _, p := range ps {
					at, ok := handled[to][p]
					if !ok || at.Before(t0) {
						return false
					}
					if at.After(last) {
						last = at
					}
				}
				return true
			})
			return ownedAt.Sub(t0), last.Sub(t0)
		}
		b.StopTimer()
		_, crashA := start("a")
		stopB, _ := start("b")
		waitFor("8/8", func() bool { o := owners(); return len(o["a"]) == 8 && len(o["b"]) == 8 })
		lost := owners()["a"]
		mu.Lock()
		delete(handled, "b")
		mu.Unlock()
		b.StartTimer()
		t0 := time.Now()
		reapA := crashA()
		crashOwned, crashRan := after(t0, "b", lost)
		b.StopTimer()
		reapA()
		stopC, _ := start("c")
		waitFor("8/8 again", func() bool { o := owners(); return len(o["b"]) == 8 && len(o["c"]) == 8 })
		moved := owners()["b"]
		b.StartTimer()
		t1 := time.Now()
		stopB()
		handOwned, handRan := after(t1, "c", moved)
		b.StopTimer()
		stopC()
		stopProd()
		<-prodDone
		b.ReportMetric(crashOwned.Seconds(), "crash-owned-s")
		b.ReportMetric(crashRan.Seconds(), "crash-handled-s")
		b.ReportMetric(handOwned.Seconds(), "handover-owned-s")
		b.ReportMetric(handRan.Seconds(), "handover-handled-s")
		b.ReportMetric(0, "ns/op")
		b.Logf("crash: %d partitions owned again after %v, handled after %v (PartitionLease %v); graceful stop: %d owned after %v, handled after %v",
			len(lost), crashOwned.Round(time.Millisecond), crashRan.Round(time.Millisecond), driver.DefaultPartitionLease,
			len(moved), handOwned.Round(time.Millisecond), handRan.Round(time.Millisecond))
		for _, p := range parts {
			s.rdb.Del(ctx, p, pelwarden.DeadLetterStreamFor(p), pelwarden.LeaseKeyFor(p))
		}
		s.rdb.Del(ctx, driver.MembersKey(parts, "g"))
		b.StartTimer()
	}
}
