package driver

import (
	"context"
	"sync"
	"time"
)

// slotPool counts free handler slots. The read and reclaim loops take slots
// before a call (so they never fetch more entries than they can run), and a
// handler worker gives its slot back when its handler returns.
//
// It replaces a channel of tokens: taking or giving back n slots is one
// locked update and at most one wake-up, where a channel costs a wake-up of
// the waiting loop per token (hundreds per batch at high Concurrency).
type slotPool struct {
	mu   sync.Mutex
	free int
	// more holds a token while slots may be free for a waiting taker. A
	// taker that leaves slots behind puts the token back, so the other
	// loop is not left waiting with slots free.
	more chan struct{}
}

func newSlotPool(n int) *slotPool {
	p := &slotPool{free: n, more: make(chan struct{}, 1)}
	p.more <- struct{}{}
	return p
}

// take takes up to max free slots without waiting.
func (p *slotPool) take(max int) int {
	p.mu.Lock()
	n := min(p.free, max)
	p.free -= n
	left := p.free
	p.mu.Unlock()
	if left > 0 {
		signal(p.more)
	}
	return n
}

// release gives n slots back.
func (p *slotPool) release(n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.free += n
	p.mu.Unlock()
	signal(p.more)
}

// acquire takes at least one and at most max slots, blocking for the first.
// Once it has some, it waits up to linger for slots of handlers that are
// finishing, so one read or claim call takes a large batch instead of a few
// entries (each call has a fixed server cost). It returns 0 when ctx is done.
func (p *slotPool) acquire(ctx context.Context, max int, linger time.Duration) int {
	n := p.take(max)
	for n == 0 {
		select {
		case <-p.more:
		case <-ctx.Done():
			return 0
		}
		n = p.take(max)
	}
	if n == max || linger <= 0 {
		return n
	}
	timer := time.NewTimer(linger)
	defer timer.Stop()
	for n < max {
		select {
		case <-p.more:
			n += p.take(max - n)
		case <-timer.C:
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}
