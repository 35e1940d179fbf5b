package integration_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// BenchmarkFailedAttempt measures what recording a failed attempt costs,
// one call per failed entry as the driver makes it, on the first server of
// the matrix: release (what the driver called before library 1.3.0: the
// entry re-timed, no error kept), fail without the last-errors key, and
// fail with it (the driver's call: the error kept in the hash, a few stale
// fields pruned). It reports the server's CPU per call (INFO cpu) and the
// hash's fields at the end. A success calls none of them: acks never touch
// the hash.
func BenchmarkFailedAttempt(b *testing.B) {
	for _, method := range []string{"release", "fail/no-key", "fail"} {
		b.Run(method, func(b *testing.B) { benchFailedAttempt(b, method) })
	}
}

func benchFailedAttempt(b *testing.B, method string) {
	s := servers[0]
	ctx := b.Context()
	stream := "{" + strings.NewReplacer("/", ".").Replace(b.Name()) + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + "}"
	errs := pelwarden.LastErrorsKeyFor(stream)
	b.Cleanup(func() { s.rdb.Del(ctx, stream, errs) })
	require.NoError(b, s.rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err())
	pipe := s.rdb.Pipeline()
	for i := range b.N {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"n", strconv.Itoa(i)}})
		if pipe.Len() == 1000 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
	var ids []string
	for len(ids) < b.N {
		r, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: 10000, Block: -1}).Result()
		require.NoError(b, err)
		for _, m := range r[0].Messages {
			ids = append(ids, m.ID)
		}
	}
	text := "payment gateway: 503 Service Unavailable (retry later)"
	backoff := []time.Duration{time.Second, 5 * time.Second}
	cpu0, err := measure.ServerCPU(ctx, s.rdb)
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	for _, id := range ids {
		var err error
		switch method {
		case "release":
			_, err = s.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: stream, Group: "g", Consumer: "c", IDs: []string{id}, MinIdle: time.Minute})
		case "fail/no-key":
			_, err = s.lib.Fail(ctx, pelwarden.FailArgs{Stream: stream, Group: "g", Consumer: "c", IDs: []string{id}, MinIdle: time.Minute, Backoff: backoff, Error: text})
		default:
			_, err = s.lib.Fail(ctx, pelwarden.FailArgs{Stream: stream, LastErrors: errs, Group: "g", Consumer: "c", IDs: []string{id}, MinIdle: time.Minute, Backoff: backoff, Error: text})
		}
		require.NoError(b, err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1, err := measure.ServerCPU(ctx, s.rdb)
	require.NoError(b, err)
	fields, err := s.rdb.HLen(ctx, errs).Result()
	require.NoError(b, err)
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server-µs/call")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(fields), "hash-fields")
	b.ReportMetric(0, "ns/op")
}
