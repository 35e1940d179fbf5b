package driver

// The operator's pause (pelwarden.PauseGroup): read every second for each
// stream of a Run, and applied by its parts through the stream's gate.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden"
)

// pauseCheckEvery is how often a Run reads the pause of its group on each
// of its streams: a pause or a resume takes effect within it (plus one
// round trip), whatever the configuration.
const pauseCheckEvery = time.Second

// pauseServer reads the pause of the group on one stream.
type pauseServer interface {
	// pauseState returns the group's pause on the stream (nil: not paused).
	pauseState(ctx context.Context) (*pelwarden.Pause, error)
}

// pauseGate is one stream's pause as its parts apply it. While it is
// closed to new work:
//   - the lane's reads and reclaim passes wait (await, isPaused), and in
//     ordered mode the partition's owner makes no next call (it acks what
//     it handled and keeps its lease);
//   - a worker that takes an entry of the stream from the job queue
//     holds it here instead of running it (hold); the entry stays in hand
//     under the heartbeat, and goes back to the queue when the pause ends.
//
// Handlers running when the pause came finish, and their acks land.
type pauseGate struct {
	// on mirrors pause != nil for the fast path of every job and read,
	// without the lock: a job taken as the pause lands may still start,
	// like a handler already running.
	on      atomic.Bool
	mu      sync.Mutex
	pause   *pelwarden.Pause
	resumed chan struct{} // closed when the pause ends; nil while not paused
	held    []job         // entries a worker took while paused
	closed  bool          // the shutdown took the held entries: hold no more
}

// set applies the pause read from the server (nil: not paused). It reports
// whether the state changed, and on a resume returns the held entries to
// queue again.
func (g *pauseGate) set(p *pelwarden.Pause) (changed bool, requeue []job) {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.pause != nil
	g.on.Store(p != nil)
	if p != nil {
		g.pause = p
		if !was {
			g.resumed = make(chan struct{})
		}
		return !was, nil
	}
	if !was {
		return false, nil
	}
	g.pause = nil
	close(g.resumed)
	g.resumed = nil
	requeue, g.held = g.held, nil
	return true, requeue
}

// isPaused reports whether the stream is paused.
func (g *pauseGate) isPaused() bool { return g.on.Load() }

// wait returns a channel closed once the stream is not paused (already
// closed when it is not).
func (g *pauseGate) wait() <-chan struct{} {
	if !g.on.Load() {
		return closedChan
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pause == nil {
		return closedChan
	}
	return g.resumed
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// await waits while the stream is paused; it reports false when ctx ended
// first.
func (g *pauseGate) await(ctx context.Context) bool {
	select {
	case <-g.wait():
		return true
	case <-ctx.Done():
		return false
	}
}

// hold keeps j back while the stream is paused, reporting whether it did.
func (g *pauseGate) hold(j job) bool {
	if !g.on.Load() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pause == nil || g.closed {
		return false
	}
	g.held = append(g.held, j)
	return true
}

// close ends the holding at shutdown and returns the held entries.
func (g *pauseGate) close() []job {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	held := g.held
	g.held = nil
	return held
}

// pauseSource is one stream whose pause a Run watches.
type pauseSource struct {
	scope *streamScope
	srv   pauseServer
	gate  *pauseGate
	// requeue queues again the entries held while paused (unordered mode;
	// nil in ordered mode, which holds none).
	requeue func([]job)
	// blind: the ACL user may not read the pause key; the source is no
	// longer read.
	blind bool
}

// checkPauses reads the pause of every source once and applies it.
func (c *core) checkPauses(ctx context.Context, srcs []*pauseSource) {
	for _, s := range srcs {
		if s.blind || ctx.Err() != nil {
			continue
		}
		p, err := s.srv.pauseState(ctx)
		if err != nil {
			if fatal(err) {
				s.blind = true
				s.scope.log.Warn("cannot read the group's pause key: operator pauses (pelwarden pause) are not applied to this stream; grant read access to it (+hget)",
					"key", pelwarden.PauseKeyFor(s.scope.cfg.Stream), "err", err)
				continue
			}
			c.commandError(s.scope, "read pause", err, 0)
			continue
		}
		changed, requeue := s.gate.set(p)
		if !changed {
			continue
		}
		if p != nil {
			c.m.Count(EventGroupPaused, 1)
			s.scope.log.Warn("group paused by an operator: taking no new entries and starting no handler until resumed; running handlers finish",
				"by", p.By, "reason", p.Reason, "paused_at", p.At)
			continue
		}
		s.scope.log.Info("group resumed: taking new entries again", "held", len(requeue))
		if len(requeue) > 0 && s.requeue != nil {
			s.requeue(requeue)
		}
	}
}

// pauseLoop checks the pauses every pauseCheckEvery until ctx ends.
func (c *core) pauseLoop(ctx context.Context, srcs []*pauseSource) {
	tickEvery(ctx, pauseCheckEvery, func() { c.checkPauses(ctx, srcs) })
}
