package consume

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
	"github.com/pelwarden/pelwarden/internal/textbook"
)

const (
	benchGroup   = "bench"
	benchName    = "bench"
	deadConsumer = "dead"
	// reclaimMinIdle is the MinIdle of the driver's short-MinIdle method
	// of PartReclaim and of the driver in PartLarge (the driver's lowest):
	// PartLarge waits this long (plus a margin) before the measured phase.
	reclaimMinIdle = 10 * time.Millisecond
	// reclaimInterval is the driver's ReclaimInterval in those methods,
	// so a pass starts as soon as entries are idle.
	reclaimInterval = 10 * time.Millisecond
	// reclaimIdle is how idle PartReclaim's PEL is made (XCLAIM ... IDLE)
	// before the measured phase: past the default MinIdle, so the driver
	// with every field at its default finds it idle at start.
	reclaimIdle = 2 * driver.DefaultMinIdle
	// pelMinIdle is the MinIdle of PartPEL: the dead consumer's entries are
	// never idle that long during the run, so every pass walks all of them.
	pelMinIdle = time.Hour
	// pelReclaimInterval is the driver's ReclaimInterval in PartPEL.
	pelReclaimInterval = 100 * time.Millisecond
	// fillChunk entries are added (and delivered to the dead consumer) per
	// script call while preparing a stream, and at most fillBytes of
	// payload.
	fillChunk = 10_000
	fillBytes = 8 << 20
	// publishers is how many goroutines run watermill's Publisher while
	// preparing its stream (not measured).
	publishers = 16
)

// bench holds what every method shares.
type bench struct {
	cfg   Config
	ctl   *redis.Client // setup, INFO and checks; not counted
	runID string
}

type keys struct{ stream, dlq string }

func (b *bench) keys(method string) keys {
	s := fmt.Sprintf("{%s-%s-%s}", b.cfg.KeyPrefix, b.runID, method)
	return keys{stream: s, dlq: s + ":dead"}
}

func (b *bench) cleanup(ctx context.Context, k keys) {
	_ = b.ctl.Del(context.WithoutCancel(ctx), k.stream, k.dlq).Err()
}

// fillScript adds ARGV[1] entries with fields n (from ARGV[2]) and payload
// ARGV[3] to KEYS[1]; it returns the last id.
var fillScript = redis.NewScript(`
local last
local first = tonumber(ARGV[2])
for i = 0, tonumber(ARGV[1]) - 1 do
  last = redis.call('XADD', KEYS[1], '*', 'n', first + i, 'payload', ARGV[3])
end
return last`)

// readScript reads up to ARGV[3] new entries as consumer ARGV[2] of group
// ARGV[1], so they become pending; it returns how many it read.
var readScript = redis.NewScript(`
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not r then return 0 end
return #r[1][2]`)

// fill adds n entries with payloads of PayloadBytes to stream and returns
// the last id. A script adds them server side, in chunks, so a million
// entries take seconds.
func (b *bench) fill(ctx context.Context, stream string, n int) (string, error) {
	return b.fillWith(ctx, stream, 0, n, b.cfg.PayloadBytes)
}

// fillWith adds n entries (fields n from first on) with payloads of size
// bytes to stream, at most fillBytes of payload per script call, and
// returns the last id.
func (b *bench) fillWith(ctx context.Context, stream string, first, n, size int) (string, error) {
	payload := strings.Repeat("x", size)
	chunk := max(1, min(fillChunk, fillBytes/max(size, 1)))
	var last string
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		id, err := fillScript.Run(ctx, b.ctl, []string{stream}, k, first+done, payload).Text()
		if err != nil {
			return "", fmt.Errorf("fill %s: %w", stream, err)
		}
		last = id
	}
	return last, nil
}

// deliverToDead makes the next n entries of stream pending, owned by the
// dead consumer with one delivery each; a script reads at most chunk of
// them per call.
func (b *bench) deliverToDead(ctx context.Context, stream string, n, chunk int) error {
	for done := 0; done < n; {
		got, err := readScript.Run(ctx, b.ctl, []string{stream}, benchGroup, deadConsumer, min(chunk, n-done)).Int()
		if err != nil {
			return fmt.Errorf("deliver to %q: %w", deadConsumer, err)
		}
		if got == 0 {
			return fmt.Errorf("deliver to %q: stream exhausted after %d of %d entries", deadConsumer, done, n)
		}
		done += got
	}
	return nil
}

// deadPEL builds the scenario of PartReclaim and PartPEL: a group, n entries
// all pending at the dead consumer.
func (b *bench) deadPEL(ctx context.Context, stream string, n int) error {
	if err := b.ctl.XGroupCreateMkStream(ctx, stream, benchGroup, "$").Err(); err != nil {
		return fmt.Errorf("XGROUP CREATE: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := b.fill(ctx, stream, n); err != nil {
		return err
	}
	if err := b.deliverToDead(ctx, stream, n, fillChunk); err != nil {
		return err
	}
	return b.checkPEL(ctx, stream, int64(n))
}

// poisonPEL builds the scenario of PartReclaim: deadPEL's, with every
// PoisonEvery-th entry (the first included) at driver.DefaultMaxDeliveries
// deliveries. It returns how many entries are poison.
func (b *bench) poisonPEL(ctx context.Context, stream string, n int) (int, error) {
	if err := b.deadPEL(ctx, stream, n); err != nil {
		return 0, err
	}
	every := b.cfg.PoisonEvery
	if every < 0 {
		return 0, nil
	}
	var poison []string
	i := 0
	for start := "-"; ; {
		page, err := b.ctl.XRangeN(ctx, stream, start, "+", fillChunk).Result()
		if err != nil {
			return 0, fmt.Errorf("XRANGE: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if i%every == 0 {
				poison = append(poison, e.ID)
			}
			i++
		}
		start = "(" + page[len(page)-1].ID
	}
	// XCLAIM ... RETRYCOUNT sets the delivery count; claiming to the same
	// consumer keeps the dead consumer the owner.
	for done := 0; done < len(poison); done += 1000 {
		args := []any{"XCLAIM", stream, benchGroup, deadConsumer, 0}
		for _, id := range poison[done:min(done+1000, len(poison))] {
			args = append(args, id)
		}
		args = append(args, "RETRYCOUNT", driver.DefaultMaxDeliveries, "JUSTID")
		if err := b.ctl.Do(ctx, args...).Err(); err != nil {
			return 0, fmt.Errorf("XCLAIM RETRYCOUNT: %w", err)
		}
	}
	return len(poison), b.checkPEL(ctx, stream, int64(n))
}

// checkReclaimed verifies the end state of PartReclaim: the PEL is empty
// and the dead-letter stream holds one record per poison entry.
func (b *bench) checkReclaimed(ctx context.Context, k keys, poison int) error {
	if err := b.checkPEL(ctx, k.stream, 0); err != nil {
		return err
	}
	n, err := b.ctl.XLen(ctx, k.dlq).Result()
	if err != nil {
		return fmt.Errorf("XLEN %s: %w", k.dlq, err)
	}
	if n != int64(poison) {
		return fmt.Errorf("%d dead-letter records, want %d (one per poison entry)", n, poison)
	}
	return nil
}

func (b *bench) checkPEL(ctx context.Context, stream string, want int64) error {
	sum, err := b.ctl.XPending(ctx, stream, benchGroup).Result()
	if err != nil {
		return fmt.Errorf("XPENDING: %w", err)
	}
	if sum.Count != want {
		return fmt.Errorf("%d entries pending, want %d", sum.Count, want)
	}
	return nil
}

// checkConsumed verifies the end state of PartMain: the PEL is empty and the
// group has delivered every entry up to last.
func (b *bench) checkConsumed(ctx context.Context, stream, last string) error {
	if err := b.checkPEL(ctx, stream, 0); err != nil {
		return err
	}
	gs, err := b.ctl.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return fmt.Errorf("XINFO GROUPS: %w", err)
	}
	if len(gs) != 1 || gs[0].LastDeliveredID != last {
		return fmt.Errorf("group state %+v, want last delivered id %s", gs, last)
	}
	return nil
}

// clientOptions are the options of a method's own client.
func (b *bench) clientOptions() *redis.Options {
	o := measure.CloneOptions(b.cfg.Options)
	// Lets cancellation interrupt the driver's blocked XREADGROUP at the
	// end of a method (outside the measured phase).
	o.ContextTimeoutEnabled = true
	return o
}

// phase measures one method from begin to end.
type phase struct {
	b     *bench
	h     *hook
	h0    hookCounts
	mem   *memSampler
	cpu0  time.Duration
	self0 time.Duration
	start time.Time
}

// begin starts measuring; progress, when not nil, reports the entries the
// method has acked so far (for the heap samples).
func (b *bench) begin(ctx context.Context, h *hook, progress func() int64) (*phase, error) {
	cpu, err := measure.ServerCPU(ctx, b.ctl)
	if err != nil {
		return nil, err
	}
	p := &phase{b: b, h: h, h0: h.counts(), cpu0: cpu}
	// The sampler starts with a collection of what the setup left: it is
	// not the measured run's, so the process's CPU is read after it.
	p.mem = startMem(progress)
	p.self0 = measure.ProcessCPU()
	p.start = time.Now()
	return p, nil
}

// end fills r's measurements; wall is the time to the last ack.
func (p *phase) end(ctx context.Context, r *Result, wall time.Duration) error {
	r.Ran = time.Since(p.start)
	r.ClientCPU = measure.ProcessCPU() - p.self0
	r.Wall = wall
	c := p.h.counts()
	r.RoundTrips = c.roundTrips - p.h0.roundTrips
	r.Commands = c.commands - p.h0.commands
	r.Claims = c.claims - p.h0.claims
	r.IdleChecks = c.idleChecks - p.h0.idleChecks
	mem := p.mem.finish()
	r.PeakHeapInuse, r.BaseHeapInuse, r.LastHeapInuse, r.Alloc, r.Heap = mem.peak, mem.base, mem.last, mem.alloc, mem.samples
	cpu, err := measure.ServerCPU(ctx, p.b.ctl)
	if err != nil {
		return err
	}
	r.ServerCPU = cpu - p.cpu0
	return nil
}

// startProfile starts the profiles of a PartMain driver run (see
// profile); the returned func stops them.
func (b *bench) startProfile(spec driverSpec) (func(), error) {
	if spec.part != PartMain {
		return func() {}, nil
	}
	v := spec.v
	return b.profile(fmt.Sprintf("driver-c%d-p%d-r%d-%s", v.Concurrency, v.Prefetch, v.ReadCount, v.AckMode))
}

// profile starts the profiles of one PartMain run named name when
// Config.ProfileDir is set: a CPU profile (name.pprof) and the
// allocations (name-allocs.pprof, with name-allocs-base.pprof from the
// start: `go tool pprof -diff_base`). The returned func stops them.
func (b *bench) profile(name string) (func(), error) {
	if b.cfg.ProfileDir == "" {
		return func() {}, nil
	}
	path := func(suffix string) string { return filepath.Join(b.cfg.ProfileDir, name+suffix+".pprof") }
	writeAllocs := func(suffix string) {
		runtime.GC() // the profile shows what was allocated up to the last GC
		if err := writeProfile(path(suffix), pprof.Lookup("allocs")); err != nil {
			b.cfg.logf("profile: %v", err)
		}
	}
	writeAllocs("-allocs-base")
	f, err := os.Create(path(""))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.cfg.logf("profile: %v", err)
		}
		writeAllocs("-allocs")
	}, nil
}

// writeProfile writes p to a new file at path.
func writeProfile(path string, p *pprof.Profile) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := p.WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runDriver: PartMain, one driver variant.
func (b *bench) runDriver(ctx context.Context, v DriverVariant) (*Result, error) {
	method := v.String()
	k := b.keys(fmt.Sprintf("driver-%d-%d-%d-%s", v.Concurrency, v.Prefetch, v.ReadCount, v.AckMode))
	defer b.cleanup(ctx, k)
	n := b.cfg.Entries
	b.cfg.logf("%s: preparing %d entries", method, n)
	last, err := b.fill(ctx, k.stream, n)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	spec := driverSpec{method: method, part: PartMain, k: k, v: v, target: int64(n)}
	if v.Limit {
		spec.limit = k.stream[1:len(k.stream)-1] + "-limit"
		h, z := pelwarden.LimitKeysFor(spec.limit)
		defer b.ctl.Del(context.WithoutCancel(ctx), h, z)
		if _, err := pelwarden.NewLibrary(b.ctl).SetLimit(ctx, spec.limit, UnreachedLimit); err != nil {
			return nil, fmt.Errorf("consume: %s: set the limit: %w", method, err)
		}
	}
	b.cfg.logf("%s: consuming", method)
	r, err := b.measureDriver(ctx, spec)
	return b.finish(ctx, r, err, func() error { return b.checkConsumed(ctx, k.stream, last) })
}

// finish verifies the end state and logs the outcome.
func (b *bench) finish(ctx context.Context, r *Result, err error, verify func() error) (*Result, error) {
	if r == nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	if err == nil {
		err = verify()
	}
	if err != nil {
		r.Problem = err.Error()
		return r, fmt.Errorf("consume: %s: %w", r.Method, err)
	}
	r.Verified = true
	b.cfg.logf("%s: %d entries in %v (%s/s), %d round trips, server CPU %v, client CPU %v, peak heap %s", r.Method, r.Entries,
		r.Wall.Round(time.Millisecond), measure.FormatCount(r.EntriesPerSecond()), r.RoundTrips,
		r.ServerCPU.Round(time.Millisecond), r.ClientCPU.Round(time.Millisecond), fmtBytes(r.PeakHeapInuse))
	return r, nil
}

// runWatermill: PartMain, watermill-redisstream's Subscriber with its
// default config on a fresh group, acking each message with msg.Ack(). The
// stream is written by its Publisher beforehand.
func (b *bench) runWatermill(ctx context.Context) (*Result, error) {
	const method = "watermill"
	k := b.keys(method)
	defer b.cleanup(ctx, k)
	n := b.cfg.Entries
	b.cfg.logf("%s: publishing %d messages with its Publisher", method, n)
	last, err := b.publishWatermill(ctx, k.stream, n)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	b.cfg.logf("%s: consuming", method)
	r, err := b.measureWatermill(ctx, k, n)
	return b.finish(ctx, r, err, func() error { return b.checkConsumed(ctx, k.stream, last) })
}

func (b *bench) publishWatermill(ctx context.Context, stream string, n int) (string, error) {
	// The Publisher closes its client.
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redis.NewClient(measure.CloneOptions(b.cfg.Options))}, nil)
	if err != nil {
		return "", err
	}
	defer pub.Close()
	pad := strings.Repeat("x", b.cfg.PayloadBytes)
	var wg sync.WaitGroup
	errs := make([]error, publishers)
	per := (n + publishers - 1) / publishers
	for w := range publishers {
		wg.Go(func() {
			for i := w * per; i < min(n, (w+1)*per) && ctx.Err() == nil; i += 100 {
				batch := make([]*message.Message, 0, 100)
				for j := i; j < min(i+100, (w+1)*per, n); j++ {
					p := []byte(fmt.Sprintf("%d:%s", j, pad))[:b.cfg.PayloadBytes]
					batch = append(batch, message.NewMessage(watermill.NewUUID(), p))
				}
				if err := pub.Publish(stream, batch...); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return "", err
	}
	info, err := b.ctl.XInfoStream(ctx, stream).Result()
	if err != nil {
		return "", fmt.Errorf("XINFO STREAM: %w", err)
	}
	if info.Length != int64(n) {
		return "", fmt.Errorf("published %d messages, want %d", info.Length, n)
	}
	return info.LastGeneratedID, nil
}

func (b *bench) measureWatermill(ctx context.Context, k keys, n int) (*Result, error) {
	r := &Result{Method: "watermill", Part: PartMain, Sample: measure.Sample{Entries: n}, Concurrency: 1}
	done := make(chan struct{})
	var once sync.Once
	h := &hook{onAck: func(total int64) {
		if total >= int64(n) {
			once.Do(func() { close(done) })
		}
	}}
	rdb := redis.NewClient(b.clientOptions()) // the Subscriber closes it
	rdb.AddHook(h)
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: benchGroup}, nil)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	defer sub.Close()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	p, err := b.begin(ctx, h, h.xacked.Load)
	if err != nil {
		return nil, err
	}
	msgs, err := sub.Subscribe(subCtx, k.stream)
	if err != nil {
		return nil, err
	}
	var got atomic.Int64
	go func() {
		for msg := range msgs {
			got.Add(1)
			msg.Ack() // the no-op handler succeeded
		}
	}()
	timeout := time.NewTimer(b.cfg.Timeout)
	defer timeout.Stop()
	var problem error
	select {
	case <-done:
	case <-timeout.C:
		problem = fmt.Errorf("timeout: %d of %d messages acked after %v", h.xacked.Load(), n, b.cfg.Timeout)
	case <-ctx.Done():
		problem = ctx.Err()
	}
	wall := time.Since(p.start)
	if err := p.end(ctx, r, wall); err != nil {
		return r, err
	}
	r.Acked = h.xacked.Load()
	r.Read = got.Load()
	cancel()
	if err := sub.Close(); err != nil && problem == nil {
		problem = err
	}
	if problem == nil && r.Acked != int64(n) {
		problem = fmt.Errorf("%d messages acked, want %d", r.Acked, n)
	}
	return r, problem
}

// runRaw: PartMain, the practical limit. XREADGROUP COUNT RawCount, a no-op
// handler per entry, one XACK of the batch's ids; one connection, no
// goroutines.
func (b *bench) runRaw(ctx context.Context) (*Result, error) {
	method := fmt.Sprintf("raw COUNT %d", b.cfg.RawCount)
	k := b.keys("raw")
	defer b.cleanup(ctx, k)
	n := b.cfg.Entries
	b.cfg.logf("%s: preparing %d entries", method, n)
	last, err := b.fill(ctx, k.stream, n)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	b.cfg.logf("%s: consuming", method)
	r := &Result{Method: method, Part: PartMain, Sample: measure.Sample{Entries: n}, Concurrency: 1}
	o := b.clientOptions()
	o.PoolSize = 1
	rdb := redis.NewClient(o)
	defer rdb.Close()
	h := &hook{}
	rdb.AddHook(h)

	stopProfile, err := b.profile(fmt.Sprintf("raw-count%d", b.cfg.RawCount))
	if err != nil {
		return nil, err
	}
	p, err := b.begin(ctx, h, nil)
	if err != nil {
		stopProfile()
		return nil, err
	}
	rerr := func() error {
		if err := rdb.XGroupCreate(ctx, k.stream, benchGroup, "0").Err(); err != nil {
			return fmt.Errorf("XGROUP CREATE: %w", err)
		}
		ids := make([]string, 0, b.cfg.RawCount)
		for r.Acked < int64(n) {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: benchGroup, Consumer: benchName,
				Streams: []string{k.stream, ">"}, Count: int64(b.cfg.RawCount), Block: -1}).Result()
			if errors.Is(err, redis.Nil) {
				return fmt.Errorf("stream exhausted after %d entries", r.Read)
			}
			if err != nil {
				return fmt.Errorf("XREADGROUP: %w", err)
			}
			ids = ids[:0]
			for _, m := range res[0].Messages {
				handle(m.ID, m.Values)
				ids = append(ids, m.ID)
			}
			r.Read += int64(len(ids))
			acked, err := rdb.XAck(ctx, k.stream, benchGroup, ids...).Result()
			if err != nil {
				return fmt.Errorf("XACK: %w", err)
			}
			r.Acked += acked
		}
		return nil
	}()
	wall := time.Since(p.start)
	err = p.end(ctx, r, wall)
	stopProfile() // after the measures: its collection is not the run's
	if err != nil {
		return r, err
	}
	return b.finish(ctx, r, rerr, func() error { return b.checkConsumed(ctx, k.stream, last) })
}

// handle is the raw loop's and the claim loop's handler: it does nothing.
func handle(id string, fields any) {}

// runClaimLoop: PartReclaim, the claim function's own rate. Library.Claim
// page by page (Count ClaimCount; the function dead-letters the poison
// entries), a no-op handler, one Library.Ack per page, as reclaimbench's
// pelwarden method does, on one connection.
func (b *bench) runClaimLoop(ctx context.Context) (*Result, error) {
	return b.claimLoop(ctx, fmt.Sprintf("Claim+Ack loop, page %d", b.cfg.ClaimCount), "claimloop")
}

// runClaimLoopControl: PartReclaim, runClaimLoop's method once more in
// each round, as a control: its ratio to the first run across the rounds
// is the noise of the machine (and of the method), against which the
// driver's ratios are read.
func (b *bench) runClaimLoopControl(ctx context.Context) (*Result, error) {
	return b.claimLoop(ctx, fmt.Sprintf("%sClaim+Ack loop, page %d", controlPrefix, b.cfg.ClaimCount), "claimloopcontrol")
}

// controlPrefix starts the name of PartReclaim's control method.
const controlPrefix = "control: "

// claimLoop runs the Claim+Ack loop as method, on keys named slug.
func (b *bench) claimLoop(ctx context.Context, method, slug string) (*Result, error) {
	k := b.keys(slug)
	defer b.cleanup(ctx, k)
	n, poison, err := b.prepareReclaim(ctx, method, k)
	if err != nil {
		return nil, err
	}
	r := &Result{Method: method, Part: PartReclaim, Sample: measure.Sample{Entries: n}, PEL: n, Poison: poison, Concurrency: 1}
	rdb, h, lib, err := b.oneConnection(ctx)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	var settled atomic.Int64 // acked and dead-lettered, readable by the heap sampler
	p, err := b.begin(ctx, h, settled.Load)
	if err != nil {
		return nil, err
	}
	rerr := func() error {
		args := pelwarden.ClaimArgs{Stream: k.stream, DeadLetterStream: k.dlq, Group: benchGroup, Consumer: benchName,
			MinIdle: driver.DefaultMinIdle, Count: b.cfg.ClaimCount, MaxDeliveries: driver.DefaultMaxDeliveries}
		for {
			page, err := lib.Claim(ctx, args)
			if err != nil {
				return err
			}
			r.Claimed += int64(len(page.Entries))
			r.DeadLettered += int64(len(page.DeadLettered))
			if len(page.Entries) > 0 {
				ids := make([]string, 0, len(page.Entries))
				for _, e := range page.Entries {
					handle(e.ID, e.Fields)
					ids = append(ids, e.ID)
				}
				res, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: k.stream, Group: benchGroup, Consumer: benchName, IDs: ids})
				if err != nil {
					return err
				}
				if err := res.Err(); err != nil {
					return err
				}
				r.Acked += res.Acked
			}
			settled.Store(r.Acked + r.DeadLettered)
			if page.Done() {
				return nil
			}
			args.Cursor = page.Cursor
		}
	}()
	wall := time.Since(p.start)
	if err := p.end(ctx, r, wall); err != nil {
		return r, err
	}
	if rerr == nil {
		rerr = checkSettled(r)
	}
	return b.finish(ctx, r, rerr, func() error { return b.checkReclaimed(ctx, k, poison) })
}

// prepareReclaim builds PartReclaim's scenario for method on k: a dead
// consumer's PEL of ReclaimEntries entries with its poison entries
// (poisonPEL), idle for reclaimIdle (see backdate). It returns the PEL
// size and how many entries are poison; the caller cleans k up.
func (b *bench) prepareReclaim(ctx context.Context, method string, k keys) (n, poison int, err error) {
	n = b.cfg.ReclaimEntries
	b.cfg.logf("%s: preparing a PEL of %d entries", method, n)
	if poison, err = b.poisonPEL(ctx, k.stream, n); err != nil {
		return 0, 0, fmt.Errorf("consume: %s: %w", method, err)
	}
	if err := b.backdate(ctx, k.stream, reclaimIdle); err != nil {
		return 0, 0, fmt.Errorf("consume: %s: %w", method, err)
	}
	b.cfg.logf("%s: reclaiming", method)
	return n, poison, nil
}

// backdate makes every entry of stream (all of them pending, to the dead
// consumer) idle for idle: XCLAIM to the same consumer with IDLE and
// JUSTID, which keeps the delivery counts.
func (b *bench) backdate(ctx context.Context, stream string, idle time.Duration) error {
	for start := "-"; ; {
		page, err := b.ctl.XRangeN(ctx, stream, start, "+", fillChunk).Result()
		if err != nil {
			return fmt.Errorf("XRANGE: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		args := []any{"XCLAIM", stream, benchGroup, deadConsumer, 0}
		for _, e := range page {
			args = append(args, e.ID)
		}
		args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
		if err := b.ctl.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("XCLAIM IDLE: %w", err)
		}
		start = "(" + page[len(page)-1].ID
	}
}

// checkSettled verifies the counts of a PartReclaim method: every poison
// entry dead-lettered, every other one acked.
func checkSettled(r *Result) error {
	if r.Acked != int64(r.Entries-r.Poison) || r.DeadLettered != int64(r.Poison) {
		return fmt.Errorf("%d entries acked and %d dead-lettered, want %d and %d", r.Acked, r.DeadLettered, r.Entries-r.Poison, r.Poison)
	}
	return nil
}

// runDriverReclaim: PartReclaim, the same scenario reclaimed by the driver
// with its defaults (every field), no-op handler, until every entry is
// acked or dead-lettered. Its first reclaim pass, at start, finds the PEL
// idle.
func (b *bench) runDriverReclaim(ctx context.Context) (*Result, error) {
	return b.driverReclaim(ctx, "driver defaults", "driverreclaim", 0, 0)
}

// runDriverReclaimShort: PartReclaim, the driver with its defaults but
// MinIdle and ReclaimInterval (reclaimMinIdle and reclaimInterval): a
// short MinIdle, whose entries need their leases extended soon after
// they are claimed.
func (b *bench) runDriverReclaimShort(ctx context.Context) (*Result, error) {
	method := fmt.Sprintf("driver, MinIdle %v, ReclaimInterval %v", reclaimMinIdle, reclaimInterval)
	return b.driverReclaim(ctx, method, "driverreclaimshort", reclaimMinIdle, reclaimInterval)
}

// driverReclaim runs PartReclaim's scenario through the driver, on keys
// named slug, with MinIdle and ReclaimInterval (0: the default).
func (b *bench) driverReclaim(ctx context.Context, method, slug string, minIdle, interval time.Duration) (*Result, error) {
	k := b.keys(slug)
	defer b.cleanup(ctx, k)
	n, poison, err := b.prepareReclaim(ctx, method, k)
	if err != nil {
		return nil, err
	}
	r, err := b.measureDriver(ctx, driverSpec{method: method, part: PartReclaim, k: k,
		minIdle: minIdle, reclaimInterval: interval, target: int64(n)})
	if r != nil {
		r.PEL, r.Poison = n, poison
		if err == nil {
			err = checkSettled(r)
		}
	}
	return b.finish(ctx, r, err, func() error { return b.checkReclaimed(ctx, k, poison) })
}

// runTextbook: PartReclaim, the same scenario reclaimed by the seeds'
// textbook loop (textbook.Loop: XAUTOCLAIM COUNT
// textbook.DefaultPageSize, one XPENDING per entry, XADD and
// XACK for poison entries, XACK for the others) on one connection.
func (b *bench) runTextbook(ctx context.Context) (*Result, error) {
	method := fmt.Sprintf("textbook loop, XAUTOCLAIM %d", textbook.DefaultPageSize)
	k := b.keys("textbook")
	defer b.cleanup(ctx, k)
	n, poison, err := b.prepareReclaim(ctx, method, k)
	if err != nil {
		return nil, err
	}
	r := &Result{Method: method, Part: PartReclaim, Sample: measure.Sample{Entries: n}, PEL: n, Poison: poison, Concurrency: 1}
	rdb, h, _, err := b.oneConnection(ctx)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	var acked, dead atomic.Int64
	p, err := b.begin(ctx, h, func() int64 { return acked.Load() + dead.Load() })
	if err != nil {
		return nil, err
	}
	rerr := textbook.Loop{Stream: k.stream, DeadLetterStream: k.dlq, Group: benchGroup, Consumer: benchName,
		MinIdle: driver.DefaultMinIdle, Count: textbook.DefaultPageSize, MaxDeliveries: driver.DefaultMaxDeliveries,
		Handled:      func(string) { acked.Add(1) },
		DeadLettered: func(string) { dead.Add(1) },
	}.Pass(ctx, rdb)
	wall := time.Since(p.start)
	if err := p.end(ctx, r, wall); err != nil {
		return r, err
	}
	r.Acked, r.DeadLettered = acked.Load(), dead.Load()
	r.Claimed = r.Acked // as the others count: claimed and handed to the handler
	if rerr == nil {
		rerr = checkSettled(r)
	}
	return b.finish(ctx, r, rerr, func() error { return b.checkReclaimed(ctx, k, poison) })
}

// runDriverPEL: PartPEL, the driver (defaults but MinIdle 1h and
// ReclaimInterval 100ms) consuming PELNewEntries new entries while its
// reclaim passes walk a PEL of size entries owned by the dead consumer that
// are not idle yet. It runs at least PELMinRun.
func (b *bench) runDriverPEL(ctx context.Context, size int) (*Result, error) {
	method := fmt.Sprintf("driver, PEL %s", fmtCountShort(size))
	k := b.keys(fmt.Sprintf("pel-%d", size))
	defer b.cleanup(ctx, k)
	b.cfg.logf("%s: preparing a PEL of %d entries and %d new entries", method, size, b.cfg.PELNewEntries)
	setup := time.Now()
	if err := b.deadPEL(ctx, k.stream, size); err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	last, err := b.fill(ctx, k.stream, b.cfg.PELNewEntries)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	setupTime := time.Since(setup)
	b.cfg.logf("%s: prepared in %v; consuming", method, setupTime.Round(time.Millisecond))
	r, err := b.measureDriver(ctx, driverSpec{method: method, part: PartPEL, k: k,
		minIdle: pelMinIdle, reclaimInterval: pelReclaimInterval, target: int64(b.cfg.PELNewEntries), minRun: b.cfg.PELMinRun})
	if r != nil {
		r.PEL = size
		r.Setup = setupTime
	}
	return b.finish(ctx, r, err, func() error {
		if r.Claimed != 0 {
			return fmt.Errorf("%d entries claimed, want none (none was idle)", r.Claimed)
		}
		if err := b.checkPEL(ctx, k.stream, int64(size)); err != nil {
			return err
		}
		gs, err := b.ctl.XInfoGroups(ctx, k.stream).Result()
		if err != nil {
			return fmt.Errorf("XINFO GROUPS: %w", err)
		}
		if len(gs) != 1 || gs[0].LastDeliveredID != last {
			return fmt.Errorf("group state %+v, want last delivered id %s", gs, last)
		}
		return nil
	})
}

// oneConnection returns a method's client on one connection, counted by
// the returned hook, and the library loaded through it.
func (b *bench) oneConnection(ctx context.Context) (*redis.Client, *hook, *pelwarden.Library, error) {
	o := b.clientOptions()
	o.PoolSize = 1
	rdb := redis.NewClient(o)
	h := &hook{}
	rdb.AddHook(h)
	lib := pelwarden.NewLibrary(rdb)
	if _, err := lib.Load(ctx); err != nil {
		rdb.Close()
		return nil, nil, nil, err
	}
	return rdb, h, lib, nil
}

// ackMethod is one way of acknowledging in PartAck.
type ackMethod struct {
	name, slug string
	// ack acks one batch (ids in the stream's order).
	ack func(ctx context.Context, rdb *redis.Client, lib *pelwarden.Library, stream string, ids []string) (int64, error)
}

var ackMethods = []ackMethod{
	{name: "XACK", slug: "xack", ack: func(ctx context.Context, rdb *redis.Client, _ *pelwarden.Library, stream string, ids []string) (int64, error) {
		return rdb.XAck(ctx, stream, benchGroup, ids...).Result()
	}},
	{name: "fenced ack, ids in order", slug: "fenced", ack: func(ctx context.Context, _ *redis.Client, lib *pelwarden.Library, stream string, ids []string) (int64, error) {
		r, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: stream, Group: benchGroup, Consumer: deadConsumer, IDs: ids})
		if err != nil {
			return 0, err
		}
		return r.Acked, r.Err()
	}},
	{name: "fenced ack, ids shuffled", slug: "shuffled", ack: func(ctx context.Context, rdb *redis.Client, _ *pelwarden.Library, stream string, ids []string) (int64, error) {
		args := make([]any, 0, 3+len(ids))
		args = append(args, benchGroup, deadConsumer, "0")
		for _, i := range rand.Perm(len(ids)) {
			args = append(args, ids[i])
		}
		v, err := rdb.FCall(ctx, pelwarden.FunctionAck, []string{stream}, args...).Slice()
		if err != nil {
			return 0, err
		}
		if len(v) < 2 {
			return 0, fmt.Errorf("ack reply %v", v)
		}
		if lost, _ := v[1].([]any); len(lost) > 0 {
			return 0, fmt.Errorf("%d ids not owned", len(lost))
		}
		n, _ := v[0].(int64)
		return n, nil
	}},
}

// runAck: PartAck, one method acking AckEntries entries pending at the dead
// consumer, in batches of driver.DefaultAckBatch, on one connection.
func (b *bench) runAck(ctx context.Context, m ackMethod) (*Result, error) {
	k := b.keys("ack-" + m.slug)
	defer b.cleanup(ctx, k)
	n := b.cfg.AckEntries
	b.cfg.logf("%s: preparing a PEL of %d entries", m.name, n)
	if err := b.deadPEL(ctx, k.stream, n); err != nil {
		return nil, fmt.Errorf("consume: %s: %w", m.name, err)
	}
	ids := make([]string, 0, n)
	for start := "-"; len(ids) < n; {
		page, err := b.ctl.XRangeN(ctx, k.stream, start, "+", 10_000).Result()
		if err != nil {
			return nil, fmt.Errorf("consume: %s: XRANGE: %w", m.name, err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			ids = append(ids, e.ID)
		}
		start = "(" + page[len(page)-1].ID
	}
	r := &Result{Method: m.name, Part: PartAck, Sample: measure.Sample{Entries: n}, PEL: n, Concurrency: 1}
	rdb, h, lib, err := b.oneConnection(ctx)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	b.cfg.logf("%s: acking", m.name)
	var acked atomic.Int64
	p, err := b.begin(ctx, h, acked.Load)
	if err != nil {
		return nil, err
	}
	rerr := func() error {
		for start := 0; start < len(ids); start += driver.DefaultAckBatch {
			got, err := m.ack(ctx, rdb, lib, k.stream, ids[start:min(start+driver.DefaultAckBatch, len(ids))])
			if err != nil {
				return err
			}
			acked.Add(got)
		}
		return nil
	}()
	wall := time.Since(p.start)
	if err := p.end(ctx, r, wall); err != nil {
		return r, err
	}
	r.Acked = acked.Load()
	if rerr == nil && r.Acked != int64(n) {
		rerr = fmt.Errorf("%d entries acked, want %d", r.Acked, n)
	}
	return b.finish(ctx, r, rerr, func() error { return b.checkPEL(ctx, k.stream, 0) })
}
