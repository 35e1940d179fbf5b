package integration_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
	"github.com/pelwarden/pelwarden/producer"
)

// BenchmarkScaleOut compares one stream with six partitions
// (pelwarden.Partitions) on a three-primary Redis Cluster of its own, and
// one stream on the matrix's first server alone beside them (with two
// consumers, and with one): driver consumers with every flow-control
// field at its default drain entries produced beforehand (the producer
// package, pipelined). It reports entries/s from the consumers' start to
// the last ack (their start-up and their stop, which waits for a blocked
// read, are reported apart), each primary's server CPU per entry (INFO
// cpu deltas), the client's CPU per entry, and the round trips per entry
// and redirects (MOVED, ASK) the node clients saw. A primary serves 1 /
// (its server µs per entry) entries/s at most, so the busiest primary's
// figure gives the ceiling of k primaries: one stream stays on one
// primary whatever k is; n partitions spread evenly over k primaries (n a
// multiple of k) scale with k. Run it alone:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  PELWARDEN_IMAGES=pelwarden/redis:8.0 PELWARDEN_OLD_IMAGE=none \
//	  go test -run '^$' -bench ScaleOut -benchtime 1x -timeout 30m ./integration_test/
func BenchmarkScaleOut(b *testing.B) {
	const entries = 200_000
	ctx := context.Background()
	cluster, err := testserver.StartCluster(ctx, clusterImage(), testserver.ClusterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cluster.Close() })
	// The node clients count the round trips (a command or a pipeline sent
	// to one node) and the redirects they get.
	trips := &tripCounter{}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(),
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(trips)
			return c
		}})
	b.Cleanup(func() { _ = rdb.Close() })
	shards, err := cluster.Shards(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Loaded once up front: the first consumer would otherwise load it on
	// every primary inside the first timed run.
	if _, err := pelwarden.Load(ctx, rdb); err != nil {
		b.Fatal(err)
	}
	// The same server, alone (the matrix's first), for one stream side by
	// side: what the cluster costs a stream that lives on one primary.
	single := servers[0]
	singleTrips := &tripCounter{}
	srdb := redis.NewClient(single.rdb.Options())
	srdb.AddHook(singleTrips)
	b.Cleanup(func() { _ = srdb.Close() })
	if _, err := pelwarden.Load(ctx, srdb); err != nil {
		b.Fatal(err)
	}
	clusterCPU := func(b *testing.B) []time.Duration { return primaryCPU(b, ctx, shards) }
	singleCPU := func(b *testing.B) []time.Duration {
		cpu, err := measure.ServerCPU(ctx, single.rdb)
		if err != nil {
			b.Fatal(err)
		}
		return []time.Duration{cpu}
	}
	singleShards := []testserver.Shard{{}} // reportScale's one "primary": the single server
	for _, c := range []struct {
		name      string
		parts     int
		consumers int
		rdb       redis.UniversalClient
		trips     *tripCounter
		shards    []testserver.Shard
		cpu       func(*testing.B) []time.Duration
	}{
		{"one-stream", 1, 2, rdb, trips, shards, clusterCPU},
		{"one-stream-single-server", 1, 2, srdb, singleTrips, singleShards, singleCPU},
		{"one-stream-single-server-one-consumer", 1, 1, srdb, singleTrips, singleShards, singleCPU},
		{"6-partitions", 6, 2, rdb, trips, shards, clusterCPU},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("scale-%s-%d-%d", c.name, i, rand.Int64())
				parts, err := pelwarden.Partitions(name, c.parts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				produceKeyed(b, ctx, c.rdb, parts, entries)
				b.StartTimer()
				before := c.cpu(b)
				trips0 := c.trips.snapshot()
				self0 := measure.ProcessCPU()
				start := time.Now()
				d := drainWithDefaults(b, ctx, c.rdb, parts, entries, c.consumers, false)
				// From the consumers' start to the last ack: their start-up
				// (reported apart) counts, their stop does not (reported
				// apart too: a blocked read holds it up to ReadBlock).
				wall := d.lastAck.Sub(start)
				b.ReportMetric(d.firstHandled.Sub(start).Seconds(), "start-up-s")
				b.ReportMetric(d.stop.Seconds(), "stop-s")
				self := measure.ProcessCPU() - self0
				t := c.trips.snapshot().minus(trips0)
				after := c.cpu(b)
				reportScale(b, c.shards, before, after, entries, wall)
				b.ReportMetric(float64(t.trips)/float64(entries), "trips/entry")
				b.ReportMetric(float64(t.redirects), "redirects")
				b.ReportMetric(float64(self.Microseconds())/float64(entries), "client-µs/entry")
				b.Logf("round trips %d (%.4f per entry), commands %d, redirects %d, by command: %v", t.trips, float64(t.trips)/float64(entries), t.commands, t.redirects, t.byName)
				for _, p := range parts {
					c.rdb.Del(ctx, p, pelwarden.DeadLetterStreamFor(p))
				}
			}
		})
	}
}

// tripCounter is a redis.Hook on node clients: the round trips (a command,
// or a pipeline or transaction, sent to one node), the commands in them by
// name, and the MOVED and ASK redirects among their replies.
type tripCounter struct {
	mu sync.Mutex
	tripStats
}

type tripStats struct {
	trips, commands, redirects int64
	byName                     map[string]int64
}

func (h *tripCounter) snapshot() tripStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.tripStats
	s.byName = maps.Clone(h.byName)
	return s
}

// minus returns s less an earlier snapshot.
func (s tripStats) minus(o tripStats) tripStats {
	d := tripStats{trips: s.trips - o.trips, commands: s.commands - o.commands, redirects: s.redirects - o.redirects, byName: map[string]int64{}}
	for k, v := range s.byName {
		if v -= o.byName[k]; v != 0 {
			d.byName[k] = v
		}
	}
	return d
}

func (h *tripCounter) record(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName == nil {
		h.byName = map[string]int64{}
	}
	h.trips++
	for _, c := range cmds {
		h.commands++
		name := c.Name()
		if name == "fcall" || name == "evalsha" {
			if a := c.Args(); len(a) > 1 {
				name = fmt.Sprint(name, " ", a[1])
			}
		}
		h.byName[name]++
		if err := c.Err(); redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
			h.redirects++
		}
	}
}

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record([]redis.Cmder{cmd})
		return err
	}
}

func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.record(cmds)
		return err
	}
}

// produceKeyed writes n entries keyed key-<i> to parts, pipelined.
func produceKeyed(b *testing.B, ctx context.Context, rdb redis.UniversalClient, parts []string, n int) {
	b.Helper()
	p, err := producer.New(rdb, producer.Config{Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 5000
	msgs := make([]producer.Message, 0, batch)
	payload := pelwarden.Field{Name: "payload", Value: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	for i := 0; i < n; i++ {
		msgs = append(msgs, producer.Message{Key: "key-" + strconv.Itoa(i), Fields: []pelwarden.Field{{Name: "n", Value: strconv.Itoa(i)}, payload}})
		if len(msgs) == batch || i == n-1 {
			if _, err := p.PublishBatch(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	for _, s := range parts {
		if err := rdb.XGroupCreate(ctx, s, "g", "0").Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// drainWithDefaults runs consumers (named a, b, ...) with the driver's
// defaults (ordered or not) over parts until n entries were acked, then
// stops them.
func drainWithDefaults(b *testing.B, ctx context.Context, rdb redis.UniversalClient, parts []string, n, consumers int, ordered bool) drainTimes {
	b.Helper()
	var acked, first atomic.Int64
	var t drainTimes
	var once sync.Once
	done := make(chan struct{})
	m := ackCounter(func(k int) {
		if acked.Add(int64(k)) >= int64(n) {
			once.Do(func() {
				t.lastAck = time.Now()
				close(done)
			})
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	errs := make(chan error, consumers)
	for i := range consumers {
		name := string(rune('a' + i))
		cfg := driver.Config{Streams: parts, Group: "g", Consumer: name, Metrics: m,
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
				if first.Load() == 0 {
					first.CompareAndSwap(0, time.Now().UnixNano())
				}
				return nil
			})}
		c, err := driver.New(rdb, cfg)
		if ordered {
			c, err = driver.NewOrdered(rdb, inOrder(cfg, driver.DefaultPartitionLease))
		}
		if err != nil {
			b.Fatal(err)
		}
		go func() { errs <- c.Run(runCtx) }()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d entries acked after 10 minutes", acked.Load(), n)
	}
	stopAt := time.Now()
	stop()
	for range consumers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	t.stop = time.Since(stopAt)
	t.firstHandled = time.Unix(0, first.Load())
	return t
}

// drainTimes are the moments of a drain: the first handler call, the
// last ack, and how long the consumers' Run took to return once stopped.
type drainTimes struct {
	firstHandled, lastAck time.Time
	stop                  time.Duration
}

// ackCounter is a driver.Metrics that reports acks.
type ackCounter func(n int)

func (f ackCounter) Count(e driver.Event, n int) {
	if e == driver.EventAcked {
		f(n)
	}
}
func (f ackCounter) DeadLettered(string, int)      {}
func (f ackCounter) HandlerDuration(time.Duration) {}

// primaryCPU reads used_cpu_user+used_cpu_sys of every primary.
func primaryCPU(b *testing.B, ctx context.Context, shards []testserver.Shard) []time.Duration {
	b.Helper()
	out := make([]time.Duration, len(shards))
	for i, sh := range shards {
		c := sh.Primary.Client()
		cpu, err := measure.ServerCPU(ctx, c)
		_ = c.Close()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = cpu
	}
	return out
}

// reportScale reports entries/s, each primary's server µs per entry, and
// the ceilings the busiest primary implies for 3, 10 and 100 primaries.
func reportScale(b *testing.B, shards []testserver.Shard, before, after []time.Duration, n int, wall time.Duration) {
	b.Helper()
	var busiest float64
	var total time.Duration
	per := make([]float64, len(shards))
	for i := range shards {
		d := after[i] - before[i]
		total += d
		per[i] = float64(d.Microseconds()) / float64(n)
		busiest = max(busiest, per[i])
	}
	b.ReportMetric(float64(n)/wall.Seconds(), "entries/s")
	b.ReportMetric(float64(total.Microseconds())/float64(n), "server-µs/entry")
	b.ReportMetric(busiest, "busiest-primary-µs/entry")
	for i, v := range per {
		addr := "the single server"
		if shards[i].Primary != nil {
			addr = shards[i].Primary.Addr()
		}
		b.Logf("primary %d (%s): %.2f µs/entry, %.0f%% of the server CPU", i, addr, v, 100*float64(after[i]-before[i])/float64(total))
	}
	// One primary's ceiling: 1 / busiest µs per entry. The busiest primary
	// limits the whole: a single stream keeps all its work there; n even
	// partitions give each of k primaries n/k of it.
	perPrimary := 1e6 / busiest
	b.Logf("ceiling of the busiest primary: %.0f entries/s", perPrimary)
	b.ReportMetric(perPrimary, "ceiling-entries/s/primary")
}

// BenchmarkIdlePartitions measures what a consumer over 64 idle partitions
// costs the server: its CPU over a minute with the consumer running, less
// the server's own idle CPU measured before it starts, as a share of one
// core; and how long a new entry in a random partition takes to reach a
// handler (produced one at a time, 20 times, at random moments). The
// driver's defaults, ReadBlock 2 s included. Run it alone:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  PELWARDEN_IMAGES=pelwarden/redis:8.0 PELWARDEN_OLD_IMAGE=none \
//	  go test -run '^$' -bench IdlePartitions -benchtime 1x -timeout 30m ./integration_test/
func BenchmarkIdlePartitions(b *testing.B) {
	const (
		n      = 64
		window = time.Minute
		probes = 20
	)
	s := servers[0]
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		parts, err := pelwarden.Partitions(fmt.Sprintf("idle-%d-%d", i, rand.Int64()), n)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range parts {
			if err := s.rdb.XGroupCreateMkStream(ctx, p, "g", "$").Err(); err != nil {
				b.Fatal(err)
			}
		}
		cpu := func() time.Duration {
			d, err := measure.ServerCPU(ctx, s.rdb)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}
		c0 := cpu()
		time.Sleep(window / 4)
		idlePerSec := (cpu() - c0).Seconds() / (window / 4).Seconds()

		seen := make(chan time.Time, probes)
		c, err := driver.New(s.rdb, driver.Config{Streams: parts, Group: "g", Consumer: "idle",
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { seen <- time.Now(); return nil })})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- c.Run(runCtx) }()
		time.Sleep(5 * time.Second) // started: groups checked, first reads done
		c1 := cpu()
		time.Sleep(window)
		perSec := (cpu() - c1).Seconds() / window.Seconds()

		var lat []time.Duration
		for range probes {
			time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Second))))
			p := parts[rand.IntN(n)]
			sent := time.Now()
			if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p, Values: []string{"probe", "1"}}).Err(); err != nil {
				b.Fatal(err)
			}
			select {
			case at := <-seen:
				lat = append(lat, at.Sub(sent))
			case <-time.After(30 * time.Second):
				b.Fatal("a probe entry did not reach its handler within 30 s")
			}
		}
		stop()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(100*perSec, "server-%core")
		b.ReportMetric(100*(perSec-idlePerSec), "net-of-idle-%core")
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "median-latency-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-latency-ms")
		b.Logf("%d idle partitions: server %.3f%% of a core (idle server alone %.3f%%); new entry to handler: median %v, max %v (ReadBlock %v)",
			n, 100*perSec, 100*idlePerSec, lat[len(lat)/2], lat[len(lat)-1], driver.DefaultReadBlock)
		for _, p := range parts {
			s.rdb.Del(ctx, p)
		}
	}
}
