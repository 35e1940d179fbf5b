package integration_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// leaseBenchRuns numbers the benchmark's runs, so each has its own keys.
var leaseBenchRuns atomic.Uint64

// BenchmarkLeaseNext measures the ordered step of the lease protocol on its
// own: 16 partitions, one lease holder each (a goroutine calling LeaseNext,
// which acks the entries of the previous call), a no-op handler, on the
// first server of the matrix; with one entry per call (count=1) and with
// the driver's batch (count=100), through LeaseNext (the new entries read
// inside the function) and through LeaseNextRead (read=apart: a plain
// XREADGROUP in the call's MULTI/EXEC, as the driver does while nothing is
// pending). It reports entries per second and the server's CPU per entry
// (used_cpu_user + used_cpu_sys of INFO cpu over the drain).
func BenchmarkLeaseNext(b *testing.B) {
	for _, count := range []int{1, 100} {
		b.Run("count="+strconv.Itoa(count), func(b *testing.B) { benchLeaseNext(b, count, false) })
	}
	b.Run("count=100/read=apart", func(b *testing.B) { benchLeaseNext(b, 100, true) })
}

func benchLeaseNext(b *testing.B, count int, apart bool) {
	s := servers[0]
	ctx := b.Context()
	const parts = 16
	base := strings.NewReplacer("/", ".").Replace(b.Name()) + "." + strconv.FormatUint(leaseBenchRuns.Add(1), 10) + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
	names, err := pelwarden.Partitions(base, parts)
	require.NoError(b, err)
	for _, p := range names {
		require.NoError(b, s.rdb.XGroupCreateMkStream(ctx, p, "g", "0").Err())
	}
	pipe := s.rdb.Pipeline()
	for i := range b.N {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: names[i%parts], Values: []string{"n", strconv.Itoa(i)}})
		if pipe.Len() == 1000 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	_, err = pipe.Exec(ctx)
	require.NoError(b, err)
	tokens := make([]int64, parts)
	for i, p := range names {
		l, err := s.lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: p, Lease: pelwarden.LeaseKeyFor(p), Group: "g", Consumer: "c", TTL: time.Hour})
		require.NoError(b, err)
		tokens[i] = l.Token
	}
	cpu0, err := measure.ServerCPU(ctx, s.rdb)
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for i, p := range names {
		wg.Go(func() {
			var acks, giveBack []string
			for {
				next := s.lib.LeaseNext
				if apart && len(giveBack) == 0 {
					next = s.lib.LeaseNextRead
				}
				n, err := next(ctx, pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: p, DeadLetterStream: pelwarden.DeadLetterStreamFor(p), Lease: pelwarden.LeaseKeyFor(p),
					Group: "g", Consumer: "c", Token: tokens[i], TTL: time.Hour, Count: count, AckIDs: acks, GiveBack: giveBack})
				if err != nil {
					errs[i] = err
					return
				}
				giveBack = n.Deferred
				if len(n.Entries) == 0 && len(giveBack) == 0 {
					return
				}
				acks = acks[:0]
				for _, e := range n.Entries {
					acks = append(acks, e.ID)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	for _, err := range errs {
		require.NoError(b, err)
	}
	cpu1, err := measure.ServerCPU(ctx, s.rdb)
	require.NoError(b, err)
	cpu := cpu1 - cpu0
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-µs/entry")
	b.ReportMetric(0, "ns/op")
	b.Logf("%s: %d entries over %d partitions in %v", s.srv.Name, b.N, parts, elapsed)
	for _, p := range names {
		n, err := s.rdb.XPending(ctx, p, "g").Result()
		require.NoError(b, err)
		require.Zero(b, n.Count, "every entry acked on %s", p)
	}
}
