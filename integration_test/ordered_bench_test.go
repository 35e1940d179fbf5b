package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// BenchmarkOrdered compares ordered mode with the default (unordered) mode
// on the same partitions: one driver consumer with every other field at
// its default and a no-op handler drains 100,000 entries produced
// beforehand (keyed, pipelined) over 16 or 64 partitions, on the first
// server of the matrix. It reports entries/s and the server's CPU per
// entry (INFO cpu deltas). Time counts from the first handler call to the
// last ack: ordered mode first waits for its second membership heartbeat
// (about a second) before it acquires a partition, a start-up cost that
// is not throughput. -count 3 interleaves the four cases round by
// round:
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
					wall := drainOne(b, ctx, s, parts, entries, ordered)
					cpu1, err := measure.ServerCPU(ctx, s.rdb)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(entries)/wall.Seconds(), "entries/s")
					b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(entries), "server-µs/entry")
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

// drainOne runs one consumer with the driver's defaults (ordered or not)
// over parts until n entries were acked, then stops it. It returns the
// time from the first handler call to the last ack.
func drainOne(b *testing.B, ctx context.Context, s *target, parts []string, n int, ordered bool) time.Duration {
	b.Helper()
	var acked, first atomic.Int64
	var last time.Time
	var once sync.Once
	done := make(chan struct{})
	m := ackCounter(func(k int) {
		if acked.Add(int64(k)) >= int64(n) {
			once.Do(func() {
				last = time.Now()
				close(done)
			})
		}
	})
	c, err := driver.New(s.rdb, driver.Config{Streams: parts, Group: "g", Consumer: "c-" + strconv.FormatBool(ordered), Metrics: m, Ordered: ordered,
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
			if first.Load() == 0 {
				first.CompareAndSwap(0, time.Now().UnixNano())
			}
			return nil
		})})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d entries acked after 10 minutes", acked.Load(), n)
	}
	stop()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return last.Sub(time.Unix(0, first.Load()))
}
