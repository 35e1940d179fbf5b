package consumebench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// hook is a go-redis hook counting what a method's client sends, as
// reclaimbench's counter does: one round trip per Process call and one per
// pipeline exec. It also sums the replies of XACK (for watermill, whose acks
// are plain XACKs) and counts calls of the claim function and the driver's
// "anything idle?" checks (XPENDING IDLE) before a reclaim pass.
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
// and its TotalAlloc over the measured phase.
type memSampler struct {
	baseInuse, baseAlloc uint64
	peak                 atomic.Uint64
	stop                 chan struct{}
	done                 sync.WaitGroup
}

// sampleEvery is the memory sampling period.
const sampleEvery = 50 * time.Millisecond

// startMem collects garbage, records the baseline and starts sampling.
func startMem() *memSampler {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &memSampler{baseInuse: ms.HeapInuse, baseAlloc: ms.TotalAlloc, stop: make(chan struct{})}
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
	for {
		p := s.peak.Load()
		if ms.HeapInuse <= p || s.peak.CompareAndSwap(p, ms.HeapInuse) {
			return
		}
	}
}

// finish stops sampling; it returns the peak HeapInuse, the baseline and
// the bytes allocated since startMem.
func (s *memSampler) finish() (peak, base, alloc uint64) {
	close(s.stop)
	s.done.Wait()
	s.sample()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return s.peak.Load(), s.baseInuse, ms.TotalAlloc - s.baseAlloc
}
