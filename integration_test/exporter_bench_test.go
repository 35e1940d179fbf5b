package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/driver/prommetrics"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// BenchmarkGroupCollectorScrape measures one scrape of the group collector
// (the exporter's /metrics) after its discovery:
//   - groups-1000: 100 streams of 10 groups, each group with two consumers
//     holding 5 pending entries each;
//   - pel-1M: one group whose PEL holds 1,000,000 entries.
//
// It reports the server's CPU per scrape (INFO cpu user+sys), the round
// trips and commands the collector sent, and ns/op the scrape's wall time
// on loopback. Run it on one server:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.0 TESTCONTAINERS_RYUK_DISABLED=true \
//	  TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test -run '^$' -bench GroupCollectorScrape -benchtime 50x ./integration_test/
func BenchmarkGroupCollectorScrape(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	b.Run("groups-1000", func(b *testing.B) {
		var streams []string
		for i := range 100 {
			streams = append(streams, fmt.Sprintf("{bench-exp-%d}", i))
		}
		b.Cleanup(func() { s.rdb.Del(context.Background(), streams...) })
		p := s.rdb.Pipeline()
		for _, st := range streams {
			p.Del(ctx, st)
			for i := range 10 {
				p.XAdd(ctx, &redis.XAddArgs{Stream: st, Values: []string{"n", fmt.Sprint(i)}})
			}
			for g := range 10 {
				group := fmt.Sprintf("g%d", g)
				p.XGroupCreate(ctx, st, group, "0")
				for _, c := range []string{"c1", "c2"} {
					p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: c, Streams: []string{st, ">"}, Count: 5, Block: -1})
				}
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		benchScrape(b, s, prommetrics.GroupOptions{Streams: []string{"{bench-exp-*"}}, 1000)
	})
	b.Run("pel-1M", func(b *testing.B) {
		const n = 1_000_000
		st := "{bench-exp-bigpel}"
		s.rdb.Del(ctx, st)
		b.Cleanup(func() { s.rdb.Del(context.Background(), st) })
		if err := s.rdb.XGroupCreateMkStream(ctx, st, "g", "$").Err(); err != nil {
			b.Fatal(err)
		}
		for start := 0; start < n; start += 5000 {
			p := s.rdb.Pipeline()
			for i := start; i < start+5000; i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: st, Values: []string{"n", fmt.Sprint(i)}})
			}
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{st, ">"}, Count: n, Block: -1}).Err(); err != nil {
			b.Fatal(err)
		}
		benchScrape(b, s, prommetrics.GroupOptions{Streams: []string{st}}, 1)
	})
}

// benchScrape scrapes a collector over o b.N times after one scrape that
// discovers the streams, and checks each scrape saw the groups.
func benchScrape(b *testing.B, s *target, o prommetrics.GroupOptions, groups int) {
	ctx := context.Background()
	rdb := redis.NewClient(measure.CloneOptions(s.rdb.Options()))
	defer rdb.Close()
	counter := measure.NewRoundTripCounter()
	rdb.AddHook(counter)
	gc, err := prommetrics.NewGroupCollector(rdb, o)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(gc)
	gather := func() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "pelwarden_group_pending" && len(mf.GetMetric()) != groups {
				b.Fatalf("%d groups exported, want %d", len(mf.GetMetric()), groups)
			}
		}
	}
	gather() // discovers the streams: later scrapes within DiscoverEvery reuse it
	counter.Reset()
	cpu0, err := measure.ServerCPU(ctx, s.rdb)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for b.Loop() {
		gather()
	}
	wall := time.Since(start)
	cpu1, err := measure.ServerCPU(ctx, s.rdb)
	if err != nil {
		b.Fatal(err)
	}
	sent := counter.Snapshot()
	n := float64(b.N)
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/n, "server-µs/scrape")
	b.ReportMetric(float64(sent.RoundTrips)/n, "round-trips/scrape")
	b.ReportMetric(float64(sent.Commands)/n, "commands/scrape")
	b.ReportMetric(float64(wall.Milliseconds())/n, "ms/scrape")
}
