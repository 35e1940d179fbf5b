package driver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// Every handler outcome, run through a worker: what the server sees, what
// stays in hand, and what is counted.
func TestRunJobOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		handler    func(ctx context.Context, m *Message) error
		lost       bool // another consumer took the entry over meanwhile
		shutdown   bool // the shutdown cancelled the handlers
		huge       bool // too many fields to dead-letter
		queued     int  // acks queued
		held       int  // entries still in hand
		pending    bool // still pending on the server
		dead       bool
		released   []string // release delays
		delayed    bool     // held back by the heartbeat loop
		handled    int
		errs       int
		panics     int
		lostEvents int
	}{
		{name: "success: ack queued, held until sent", handler: func(context.Context, *Message) error { return nil },
			queued: 1, held: 1, pending: true, handled: 1},
		{name: "dead-letter", handler: func(context.Context, *Message) error { return DeadLetter(errHandler) },
			dead: true, errs: 1},
		{name: "dead-letter of an entry with too many fields: released", huge: true,
			handler: func(context.Context, *Message) error { return DeadLetter(errHandler) },
			pending: true, released: []string{"0s"}, errs: 1},
		{name: "retry after a delay within MinIdle: released with it", handler: func(context.Context, *Message) error { return RetryAfter(time.Second/2, errHandler) },
			pending: true, released: []string{"500ms"}, errs: 1},
		{name: "retry after a negative delay: released at once", handler: func(context.Context, *Message) error { return RetryAfter(-time.Second, errHandler) },
			pending: true, released: []string{"0s"}, errs: 1},
		{name: "retry after longer than MinIdle: held back", handler: func(context.Context, *Message) error { return RetryAfter(time.Hour, errHandler) },
			pending: true, delayed: true, errs: 1},
		{name: "error: released for the next pass", handler: func(context.Context, *Message) error { return errHandler },
			pending: true, released: []string{"0s"}, errs: 1},
		{name: "panic: released for the next pass", handler: func(context.Context, *Message) error { panic("boom") },
			pending: true, released: []string{"0s"}, errs: 1, panics: 1},
		{name: "lost meanwhile: outcome dropped", lost: true, handler: func(context.Context, *Message) error { return nil },
			pending: true, lostEvents: 1},
		{name: "cancelled by the shutdown: stays pending", shutdown: true, handler: func(ctx context.Context, _ *Message) error { return ctx.Err() },
			pending: true, errs: 1},
		{name: "success during the shutdown is still acked", shutdown: true, handler: func(context.Context, *Message) error { return nil },
			queued: 1, held: 1, pending: true, handled: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) { cfg.Handler = HandlerFunc(c.handler) })
				ids := h.srv.add(1)
				if c.huge {
					h.srv.entries[ids[0]] = append(h.srv.entries[ids[0]], pelwarden.Field{Name: "huge"})
				}
				handlerCtx, cancel := context.WithCancel(t.Context())
				defer cancel()
				jobs := h.read(handlerCtx, 1)
				if c.lost {
					h.l.hand.lost(ids)
				}
				if c.shutdown {
					cancel()
				}
				h.l.drain.unfinished.Store(1)
				h.l.exec.runJob(jobs[0])

				require.Len(t, h.l.acks.queue.take(nil), c.queued, "acks queued")
				require.Equal(t, c.held, h.l.hand.count(), "held")
				require.Equal(t, c.pending, len(h.srv.pendingIDs()) == 1, "pending")
				require.Equal(t, c.dead, len(h.srv.deadLettered()) == 1, "dead-lettered")
				require.Equal(t, c.released, h.srv.releases(ids[0]), "releases")
				extend, _, _ := h.l.hand.heartbeatDue(false, time.Second/3, time.Second/6, time.Second)
				require.Equal(t, c.delayed, len(extend) == 1, "held back by the lease loop")
				require.Equal(t, c.handled, h.m.get(EventHandled))
				require.Equal(t, c.errs, h.m.get(EventHandlerError))
				require.Equal(t, c.panics, h.m.get(EventHandlerPanic))
				require.Equal(t, c.lostEvents, h.m.get(EventLostOwnership))
				require.Zero(t, h.l.drain.unfinished.Load(), "settled")
				_, held := h.l.flow.size()
				require.Zero(t, held, "its place in the window given back")
				require.Error(t, jobs[0].f.ctx.Err(), "the entry's context is finished")
				if c.dead {
					require.Equal(t, errHandler.Error(), h.srv.deadText[ids[0]], "the dead-letter record has the handler's error")
					require.Equal(t, 1, h.m.deadLettered(pelwarden.ReasonHandler))
				}
			})
		})
	}
}

// A handler that succeeds after the acker stopped leaves its entry
// pending.
func TestRunJobAfterAckerStopped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.add(1)
		jobs := h.read(t.Context(), 1)
		h.l.acks.start(t.Context())
		h.l.acks.stop()
		<-h.l.acks.done()
		h.l.exec.runJob(jobs[0])
		require.Zero(t, h.l.hand.count())
		require.Contains(t, h.logs.String(), "after the ack loop stopped")
	})
}

// The dead-letter and release calls retry transient errors, end at an
// error retrying cannot fix (core.failedForGood), and keep trying while the
// server is out of memory until the handlers are cancelled.
func TestDeadLetterAndReleaseRetry(t *testing.T) {
	t.Parallel()
	oom := replyErr("OOM command not allowed when used memory > 'maxmemory'.")
	for _, c := range []struct {
		name        string
		op          string
		outcome     error
		errs        []error
		createGroup bool
		calls       int
		pending     bool
		stopped     bool
		paused      bool // paused for lack of memory meanwhile
	}{
		{name: "dead-letter after a lost connection", op: "deadLetter", outcome: DeadLetter(errHandler),
			errs: []error{context.DeadlineExceeded}, calls: 2},
		{name: "dead-letter while out of memory, then freed", op: "deadLetter", outcome: DeadLetter(errHandler),
			errs: []error{oom, oom}, calls: 3, paused: true},
		{name: "release after a lost connection", op: "release", outcome: errHandler,
			errs: []error{context.DeadlineExceeded}, calls: 2, pending: true},
		{name: "release: the group is gone", op: "release", outcome: errHandler,
			errs: []error{errNoGroup}, calls: 1, pending: true, stopped: true},
		{name: "release: the group is gone and created again", op: "release", outcome: errHandler, createGroup: true,
			errs: []error{errNoGroup}, calls: 1, pending: true},
		{name: "release: a wrong type stops the consumer", op: "release", outcome: errHandler,
			errs: []error{&pelwarden.Error{Kind: pelwarden.ErrWrongType}}, calls: 1, pending: true, stopped: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) {
					cfg.CreateGroup = c.createGroup
					cfg.Handler = HandlerFunc(func(context.Context, *Message) error { return c.outcome })
				})
				handlersCancelled := make(chan struct{})
				h.s.handlersDone = handlersCancelled
				h.srv.add(1)
				jobs := h.read(t.Context(), 1)
				h.srv.failNext(c.op, c.errs...)
				h.l.exec.runJob(jobs[0])
				require.Equal(t, c.calls, h.srv.callCount(c.op), "calls")
				require.Equal(t, c.pending, len(h.srv.pendingIDs()) == 1, "pending")
				require.Equal(t, c.stopped, h.s.stopping(), "stopped")
				require.Equal(t, c.paused, h.m.get(EventPaused) == 1, "paused meanwhile")
				require.False(t, h.l.flow.paused, "not paused at the end")
				require.Equal(t, len(c.errs), h.m.get(EventCommandError), "failures counted")
			})
		})
	}
}

// A worker tells what its handlers finished in batches, their places in
// the window with them while no call waits for room; a batch whose worker
// is held by its next handler (slow, or blocked) is told by its timer,
// finishedAge after its first entry, so the acks of the fast handlers
// before are not held with it. While a call waits for room, a place goes
// back as its handler ends, with those its batch held, and the call
// takes them.
func TestFinishedBatchFlushesWhileTheWorkerIsHeld(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.add(4)
		jobs := h.read(t.Context(), 4)
		h.l.drain.unfinished.Store(4)
		done := finished{exec: h.l.exec}
		for _, j := range jobs[:2] {
			h.l.exec.runAt(j, h.clock.now(), &done)
		}
		require.False(t, done.due(h.clock.now()), "two entries, no time passed")
		require.Empty(t, h.l.acks.queue.take(nil), "nothing told yet")
		require.Equal(t, int64(4), h.l.drain.unfinished.Load())
		_, held := h.l.flow.size()
		require.Equal(t, 4, held, "no call waits: their places go with the batch")

		time.Sleep(finishedAge) // the worker is held: its timer tells the batch
		synctest.Wait()
		require.Len(t, h.l.acks.queue.take(nil), 2, "the acks told by the timer")
		require.Equal(t, int64(2), h.l.drain.unfinished.Load())
		require.Equal(t, 2, h.m.get(EventHandled))
		_, held = h.l.flow.size()
		require.Equal(t, 2, held, "their places given back with the batch")
		h.l.exec.runAt(jobs[2], h.clock.now(), &done)
		_, held = h.l.flow.size()
		require.Equal(t, 2, held, "held with the batch")

		// The window full, a read waits for room.
		limit, held := h.l.flow.size()
		for held < limit {
			held += h.l.flow.reserve(t.Context(), partyRead, limit-held).n
		}
		got := make(chan int, 1)
		go func() { got <- h.l.flow.reserve(t.Context(), partyRead, 2).n }()
		synctest.Wait()
		require.True(t, h.l.flow.waiting.Load(), "the read waits")
		h.l.exec.runAt(jobs[3], h.clock.now(), &done)
		synctest.Wait()
		require.Equal(t, 2, <-got, "the read took the places given back as the handler ended: its own and the batch's")
		require.False(t, h.l.flow.waiting.Load())
		done.stop()
		require.Len(t, h.l.acks.queue.take(nil), 2, "the last two told when the worker stops")
		require.Zero(t, h.l.drain.unfinished.Load())
	})
}

// A batch is due after finishedMost entries, or finishedAge after its
// first.
func TestFinishedBatchDue(t *testing.T) {
	t.Parallel()
	var b finished
	b.timer = time.NewTimer(time.Hour) // its own timer is not under test here
	defer b.timer.Stop()
	require.False(t, b.due(0), "empty")
	b.add(0, 0, 10)
	require.False(t, b.due(10))
	require.True(t, b.due(10+finishedAge))
	for range finishedMost - 1 {
		b.add(0, 0, 10)
	}
	require.True(t, b.due(10), "full")
}

// add notes one entry that was not acked, its place held with the
// batch (see finish).
func (b *finished) add(wait, took, end time.Duration) {
	b.finish(&handEntry{}, false, true, 0, wait, took, end)
}

// due reports whether the batch is to be told now (a clock reading).
func (b *finished) due(now time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dueLocked(now)
}
