package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// BenchmarkClaimPageOnMillionEntryPEL measures one claim call on a PEL of
// 1,000,000 entries, the case where XPENDING IDLE would scan without limit:
//   - busy: no entry is idle long enough; the call scans its whole budget
//     (Count×10 PEL rows) and hands out nothing;
//   - idle: every entry is idle; the call claims Count live entries.
//
// It reports the mean and the slowest call, to compare with the server's
// busy-reply-threshold (5 s by default). Run it on one server:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.0 TESTCONTAINERS_RYUK_DISABLED=true \
//	  TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test -run '^$' -bench ClaimPageOnMillionEntryPEL -benchtime 200x ./integration_test/
func BenchmarkClaimPageOnMillionEntryPEL(b *testing.B) {
	const n = 1_000_000
	s := servers[0]
	ctx := context.Background()
	k := pelwardentest.Keys{Stream: "{bench-bigpel}", DeadLetterStream: "{bench-bigpel}:dead", Group: "g"}
	s.rdb.Del(ctx, k.Stream, k.DeadLetterStream)
	b.Cleanup(func() { s.rdb.Del(context.Background(), k.Stream, k.DeadLetterStream) })
	if err := s.rdb.XGroupCreateMkStream(ctx, k.Stream, k.Group, "$").Err(); err != nil {
		b.Fatal(err)
	}
	for start := 0; start < n; start += 5000 {
		p := s.rdb.Pipeline()
		for i := start; i < start+5000; i++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []string{"n", fmt.Sprint(i), "payload", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}})
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: k.Group, Consumer: "dead", Streams: []string{k.Stream, ">"}, Count: n, Block: -1}).Err(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		minIdle time.Duration
	}{{"busy", time.Hour}, {"idle", 0}} {
		b.Run(c.name, func(b *testing.B) {
			var slowest time.Duration
			cursor := "0-0"
			for b.Loop() {
				start := time.Now()
				p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group,
					Consumer: "rescuer", MinIdle: c.minIdle, Count: 500, MaxDeliveries: 5, Cursor: cursor})
				if err != nil {
					b.Fatal(err)
				}
				slowest = max(slowest, time.Since(start))
				cursor = p.Cursor
			}
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-µs/call")
		})
	}
}
