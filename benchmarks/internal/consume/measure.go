package consume

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// hook is a go-redis hook counting what a method's client sends, the way
// measure.RoundTripCounter does (one round trip per Process call and one
// per pipeline exec), with atomics because the driver's goroutines share
// it. It also sums the replies of XACK (for watermill, whose acks are plain
// XACKs) and counts calls of the claim function and the driver's "anything
// idle?" checks (XPENDING IDLE) before a reclaim pass.
type hook struct {
	roundTrips atomic.Int64
	commands   atomic.Int64
	claims     atomic.Int64
	idleChecks atomic.Int64
	xacked     atomic.Int64
	// onAck, when set, is called with the running XACK total.
	onAck func(total int64)
}

var _ redis.Hook = (*hook)(nil)

// DialHook implements redis.Hook; dials are not counted.
func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.roundTrips.Add(1)
		h.commands.Add(1)
		h.countClaim(cmd)
		err := next(ctx, cmd)
		if err == nil && cmd.Name() == "xack" {
			if ic, ok := cmd.(*redis.IntCmd); ok {
				t := h.xacked.Add(ic.Val())
				if h.onAck != nil {
					h.onAck(t)
				}
			}
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.roundTrips.Add(1)
		h.commands.Add(int64(len(cmds)))
		for _, c := range cmds {
			h.countClaim(c)
		}
		return next(ctx, cmds)
	}
}

// hookCounts are a hook's counters at one moment.
type hookCounts struct{ roundTrips, commands, claims, idleChecks int64 }

func (h *hook) counts() hookCounts {
	return hookCounts{roundTrips: h.roundTrips.Load(), commands: h.commands.Load(), claims: h.claims.Load(), idleChecks: h.idleChecks.Load()}
}

func (h *hook) countClaim(cmd redis.Cmder) {
	name := cmd.Name()
	if name == "xpending" {
		h.idleChecks.Add(1)
		return
	}
	if name != "fcall" && name != "evalsha" && name != "eval" {
		return
	}
	args := cmd.Args()
	// FCALL fn numkeys ...; EVALSHA sha numkeys keys... fn ... (the library
	// in EVAL mode passes the function name as the first argument).
	if len(args) > 1 && args[1] == pelwarden.FunctionClaim {
		h.claims.Add(1)
		return
	}
	if name != "fcall" && len(args) > 2 {
		if nk, ok := args[2].(int); ok && len(args) > 3+nk && args[3+nk] == pelwarden.FunctionClaim {
			h.claims.Add(1)
		}
	}
}

// memSampler records the process's peak HeapInuse, sampled every 50 ms,
// its TotalAlloc over the measured phase, and the samples themselves (for
// the heap over time of a long run).
type memSampler struct {
	baseInuse, baseAlloc uint64
	start                time.Time
	progress             func() int64 // entries done so far; nil when unknown
	peak                 atomic.Uint64
	samples              []HeapSample // appended by the sampling goroutine only
	stop                 chan struct{}
	done                 sync.WaitGroup
}

// HeapSample is one memory sample of a measured phase.
type HeapSample struct {
	// At is the time since the start of the phase.
	At time.Duration
	// Inuse is runtime.MemStats.HeapInuse.
	Inuse uint64
	// Live is the heap the last GC found live (runtime/metrics
	// /gc/heap/live:bytes): it does not saw-tooth with the GC cycle, so it
	// shows what the process keeps.
	Live uint64
	// Done is how many entries the method had acked, -1 when unknown.
	Done int64
}

// sampleEvery is the memory sampling period.
const sampleEvery = 50 * time.Millisecond

// liveHeapMetric is the runtime/metrics name of the live heap.
const liveHeapMetric = "/gc/heap/live:bytes"

// startMem collects garbage, returns the freed memory to the system,
// records the baseline and starts sampling. progress, when not nil,
// reports the entries done so far.
//
// The memory goes back now, not in the measured run: the setup before it
// (a million entries written, say) leaves a heap far larger than the run
// needs, and Go's background scavenger would give it back to the system
// during the run, on the run's CPU. That cost is the setup's, not the
// method's, and its size varies from run to run (from about 1% to a sixth
// of a raw loop's CPU in the profiles taken on these machines).
func startMem(progress func() int64) *memSampler {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &memSampler{baseInuse: ms.HeapInuse, baseAlloc: ms.TotalAlloc, start: time.Now(), progress: progress, stop: make(chan struct{})}
	s.peak.Store(ms.HeapInuse)
	s.done.Go(func() {
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return s
}

func (s *memSampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(live)
	h := HeapSample{At: time.Since(s.start), Inuse: ms.HeapInuse, Done: -1}
	if live[0].Value.Kind() == metrics.KindUint64 {
		h.Live = live[0].Value.Uint64()
	}
	if s.progress != nil {
		h.Done = s.progress()
	}
	s.samples = append(s.samples, h)
	for {
		p := s.peak.Load()
		if ms.HeapInuse <= p || s.peak.CompareAndSwap(p, ms.HeapInuse) {
			return
		}
	}
}

// memResult is what a memSampler measured.
type memResult struct {
	peak, base, last, alloc uint64
	samples                 []HeapSample
}

// finish stops sampling, takes a last sample and returns the measurements:
// the peak HeapInuse, the baseline, the last sample's HeapInuse (no GC
// forced), the bytes allocated since startMem and every sample.
func (s *memSampler) finish() memResult {
	close(s.stop)
	s.done.Wait()
	s.sample()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memResult{peak: s.peak.Load(), base: s.baseInuse, last: s.samples[len(s.samples)-1].Inuse,
		alloc: ms.TotalAlloc - s.baseAlloc, samples: s.samples}
}
