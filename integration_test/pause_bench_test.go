package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// BenchmarkPauseTakesEffect measures, with the driver's defaults and two
// consumers under a steady load (entries every millisecond, 2 ms
// handlers), the time from pelwarden.PauseGroup's return until both
// consumers stopped taking entries (their EventGroupPaused), and from
// ResumeGroup's return until each of them handled an entry again. Each round pauses and
// resumes once; it reports the longest of each over the rounds (the
// target is 2 s). Run it on one server:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.0 TESTCONTAINERS_RYUK_DISABLED=true \
//	  TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test -run '^$' -bench PauseTakesEffect -benchtime 10x ./integration_test/
func BenchmarkPauseTakesEffect(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	stream, group := "{bench-pause}", "g"
	s.rdb.Del(ctx, stream, pelwarden.PauseKeyFor(stream))
	b.Cleanup(func() { s.rdb.Del(context.Background(), stream, pelwarden.PauseKeyFor(stream)) })
	log := &handledLog{times: map[string]int{}}
	ms := []*trMetrics{{}, {}}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	for i, m := range ms {
		c, err := driver.New(s.rdb, driver.Config{Stream: stream, Group: group, Consumer: "c" + itoa(i), CreateGroup: true, Handler: log.handler(2 * time.Millisecond), Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		go func() { done <- c.Run(runCtx) }()
	}
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for runCtx.Err() == nil {
			<-t.C
			s.rdb.XAdd(runCtx, &redis.XAddArgs{Stream: stream, Values: []string{"n", "1"}})
		}
	}()
	wait := func(cond func() bool) {
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("not within 30s")
			}
		}
	}
	wait(func() bool { return log.count() > 100 })
	var worstPause, worstResume time.Duration
	for i := 0; b.Loop(); i++ {
		if err := pelwarden.PauseGroup(ctx, s.rdb, stream, group, pelwarden.Pause{By: "bench"}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		wait(func() bool {
			return ms[0].get(driver.EventGroupPaused) == int64(i+1) && ms[1].get(driver.EventGroupPaused) == int64(i+1)
		})
		worstPause = max(worstPause, time.Since(start))
		wait(func() bool { return log.running.Load() == 0 }) // the handlers running at the pause finish
		before0, before1 := log.of("c0"), log.of("c1")
		if _, err := pelwarden.ResumeGroup(ctx, s.rdb, stream, group); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		wait(func() bool { return log.of("c0") > before0 && log.of("c1") > before1 })
		worstResume = max(worstResume, time.Since(start))
	}
	b.ReportMetric(worstPause.Seconds(), "s-to-pause-max")
	b.ReportMetric(worstResume.Seconds(), "s-to-resume-max")
	cancel()
	for range ms {
		<-done
	}
}
