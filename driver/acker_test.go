package driver

import (
	"context"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The ack fence: entries no other consumer can have taken over yet go out
// in one plain XACK, the others through the fenced ack function; AckPlain
// never fences.
func TestAckerSendFence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		mode          AckMode
		heldFor       time.Duration // between delivery and ack
		otherOwner    bool          // another consumer took 1-0 over
		gone          bool          // 1-0 is no longer pending
		plain, fenced int           // calls
		acked         int64
		elsewhere     []string
		notPending    int
	}{
		{name: "acked at once: plain", heldFor: 0, plain: 1, acked: 2},
		{name: "held past the fence: fenced", heldFor: time.Second / 2, fenced: 1, acked: 2},
		{name: "fenced: taken over elsewhere is refused", heldFor: time.Second, otherOwner: true, fenced: 1, acked: 1, elsewhere: []string{"1-0"}},
		{name: "fenced: no longer pending", heldFor: time.Second, gone: true, fenced: 1, acked: 1, notPending: 1},
		{name: "plain: no longer pending", heldFor: 0, gone: true, plain: 1, acked: 1, notPending: 1},
		{name: "AckPlain never fences", mode: AckPlain, heldFor: time.Hour, otherOwner: true, plain: 1, acked: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) { cfg.AckMode = c.mode })
				ids := h.srv.add(2)
				jobs := h.read(t.Context(), 2)
				advance(c.heldFor)
				if c.otherOwner {
					h.srv.pending("other", 2, 0, ids[0])
				}
				if c.gone {
					h.srv.mu.Lock()
					delete(h.srv.pel, ids[0])
					h.srv.mu.Unlock()
				}
				batch := make([]ackItem, len(jobs))
				for i, j := range jobs {
					batch[i] = ackItem{f: j.f, ownedUntil: time.Duration(j.f.ownedUntil.Load())}
				}
				res, err := h.l.acks.send(t.Context(), batch)
				require.NoError(t, err)
				require.Equal(t, c.plain, h.srv.callCount("ack"), "plain XACK calls")
				require.Equal(t, c.fenced, h.srv.callCount("ackFenced"), "fenced calls")
				require.Equal(t, c.acked, res.acked)
				require.Equal(t, c.elsewhere, res.ownedElsewhere)
				require.Equal(t, c.notPending, res.notPending)
			})
		})
	}
}

// flush retries a failed batch, forgets a batch whose group is gone, and
// stops the consumer at an error retrying cannot fix.
func TestAckerFlush(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		createGroup bool
		errs        []error
		ok          bool // flush reports everything sent
		stopped     bool // the consumer stops
		pending     int  // entries left in the PEL
		left        int  // acks left to send
	}{
		{name: "sent", ok: true},
		{name: "a lost connection is retried", errs: []error{context.DeadlineExceeded, replyErr("LOADING Redis is loading")}, ok: true},
		{name: "the group is gone: nothing to ack", errs: []error{errNoGroup}, ok: true, stopped: true, pending: 3},
		{name: "the group is gone and created again", createGroup: true, errs: []error{errNoGroup}, ok: true, pending: 3},
		{name: "a key of the wrong type stops the consumer", errs: []error{&pelwarden.Error{Kind: pelwarden.ErrWrongType}}, stopped: true, pending: 3, left: 3},
		{name: "an ACL refusal stops the consumer", errs: []error{replyErr("NOPERM no permissions to run 'xack'")}, stopped: true, pending: 3, left: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) { cfg.CreateGroup = c.createGroup })
				h.srv.add(3)
				jobs := h.read(t.Context(), 3)
				h.srv.failNext("ack", c.errs...)
				var items []ackItem
				for _, j := range jobs {
					items = append(items, ackItem{f: j.f, ownedUntil: time.Duration(j.f.ownedUntil.Load())})
				}
				left, ok := h.l.acks.flush(t.Context(), items)
				require.Equal(t, c.ok, ok)
				require.Len(t, left, c.left)
				require.Equal(t, c.stopped, h.s.stopping())
				require.Len(t, h.srv.pendingIDs(), c.pending)
				require.Equal(t, len(c.errs), h.m.get(EventCommandError), "every failed attempt counted")
				if c.ok {
					require.Zero(t, h.l.hand.count(), "sent or dropped acks are forgotten")
				}
			})
		})
	}
}

// A flushed batch is forgotten by the hand: the acked entries as gone
// from the PEL (a claim under way that returns them has a stale copy),
// the ones another consumer owns as only forgotten (still pending).
func TestAckerFlushForgetsAcked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ids := h.srv.add(2)
		jobs := h.read(t.Context(), 2)
		advance(time.Second) // past the fence: the fenced ack tells who owns what
		h.srv.pending("other", 2, 0, ids[0])
		claim := h.l.hand.claims.begin()
		var items []ackItem
		for _, j := range jobs {
			items = append(items, ackItem{f: j.f, ownedUntil: time.Duration(j.f.ownedUntil.Load())})
		}
		left, ok := h.l.acks.flush(t.Context(), items)
		require.True(t, ok)
		require.Empty(t, left)
		require.Zero(t, h.l.hand.count())
		h.l.hand.mu.Lock()
		require.Equal(t, []string{ids[1]}, slices.Collect(maps.Keys(h.l.hand.claims.goneAt)), "only the acked one")
		h.l.hand.mu.Unlock()
		h.l.hand.claims.end(claim)
	})
}

// The loop sends a full batch at once, the rest at the interval or when
// the lane drained, and flushes at stop.
func TestAckerLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.AckBatch = 4; cfg.AckInterval = time.Hour })
		ids := h.srv.add(10)
		h.read(t.Context(), 10)
		h.l.acks.start(t.Context())
		for _, id := range ids[:4] {
			require.True(t, h.l.acks.add(h.held(id), time.Hour, h.l.clock.now()))
		}
		eventually(t, "a full batch acked", func() bool { return len(h.srv.pendingIDs()) == 6 })
		require.True(t, h.l.acks.add(h.held(ids[4]), time.Hour, h.l.clock.now()))
		h.l.acks.drained()
		eventually(t, "acked once drained", func() bool { return len(h.srv.pendingIDs()) == 5 })
		for _, id := range ids[5:8] {
			require.True(t, h.l.acks.add(h.held(id), time.Hour, h.l.clock.now()))
		}
		h.l.acks.stop()
		<-h.l.acks.done()
		require.Equal(t, ids[8:], h.srv.pendingIDs(), "the final flush sent the rest")
		require.False(t, h.l.acks.add(h.held(ids[8]), time.Hour, h.l.clock.now()), "no acks after stop")
		require.Equal(t, 8, h.m.get(EventAcked))
		require.Equal(t, 2, h.l.hand.count(), "the two never acked are still held")
	})
}

// Without a full batch, acks go out after the interval.
func TestAckerLoopInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.AckInterval = time.Millisecond })
		ids := h.srv.add(2)
		h.read(t.Context(), 2)
		h.l.acks.start(t.Context())
		h.l.acks.add(h.held(ids[0]), time.Hour, h.l.clock.now())
		eventually(t, "acked after the interval", func() bool { return len(h.srv.pendingIDs()) == 1 })
		h.l.acks.stop()
		<-h.l.acks.done()
	})
}

// An ack whose fence comes before the interval goes out in time to be
// plain, without waiting for the interval or a full batch; one already
// past its fence waits for the interval (it is fenced whenever it goes).
func TestAckerLoopBeforeFence(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MinIdle = time.Hour; cfg.AckInterval = time.Minute })
		ids := h.srv.add(3)
		h.read(t.Context(), 3)
		h.l.acks.start(t.Context())
		now := h.clock.now()
		require.True(t, h.l.acks.add(h.held(ids[0]), now-time.Millisecond, now), "past its fence")
		require.True(t, h.l.acks.add(h.held(ids[1]), now+time.Hour, now), "fenced after the interval")
		require.True(t, h.l.acks.add(h.held(ids[2]), now+20*time.Millisecond, now), "fenced before the interval")
		eventually(t, "all acked before the fence of the last", func() bool { return len(h.srv.pendingIDs()) == 0 })
		require.Equal(t, 1, h.srv.callCount("ack"), "one plain call for the two whose fence had not passed")
		require.Equal(t, 1, h.srv.callCount("ackFenced"), "and a fenced one for the other")
		h.l.acks.stop()
		<-h.l.acks.done()
		require.Equal(t, 3, h.m.get(EventAcked))
	})
}

// The loop's lead on the fence: the time left less the mean ack call,
// never for a fence already past or beyond the interval.
func TestAckerBeforeFence(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.MinIdle = time.Hour; cfg.AckInterval = time.Second })
		a := h.l.acks
		now := h.clock.now()
		for _, c := range []struct {
			ownedUntil, sendTime, want time.Duration
			ok                         bool
		}{
			{ownedUntil: now - 1},
			{ownedUntil: now},
			{ownedUntil: now + time.Second + 1},
			{ownedUntil: now + time.Second, want: time.Second, ok: true},
			{ownedUntil: now + 10*time.Millisecond, sendTime: 3 * time.Millisecond, want: 7 * time.Millisecond, ok: true},
			{ownedUntil: now + 10*time.Millisecond, sendTime: 30 * time.Millisecond, want: 0, ok: true},
		} {
			a.sendTime = c.sendTime
			got, ok := a.beforeFence(c.ownedUntil)
			require.Equal(t, c.ok, ok, "%+v", c)
			require.Equal(t, c.want, got, "%+v", c)
		}
	})
}

// When the shutdown bound ends first, what was not sent stays pending, and
// is logged; a final flush at a permanent error gives up at once.
func TestAckerLoopAbandons(t *testing.T) {
	t.Parallel()
	t.Run("bound ended", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.AckInterval = time.Hour })
			ids := h.srv.add(1)
			h.read(t.Context(), 1)
			ctx, cancel := context.WithCancel(t.Context())
			h.l.acks.start(ctx)
			h.l.acks.add(h.held(ids[0]), time.Hour, h.l.clock.now())
			cancel()
			<-h.l.acks.done()
			require.Equal(t, ids, h.srv.pendingIDs())
			require.Zero(t, h.l.hand.count())
			require.Contains(t, h.logs.String(), "acks not sent")
		})
	})
	t.Run("permanent error at the final flush", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.AckInterval = time.Hour })
			ids := h.srv.add(1)
			h.read(t.Context(), 1)
			h.srv.failNext("ack", &pelwarden.Error{Kind: pelwarden.ErrWrongType})
			h.l.acks.start(t.Context())
			h.l.acks.add(h.held(ids[0]), time.Hour, h.l.clock.now())
			h.l.acks.stop()
			<-h.l.acks.done()
			require.True(t, h.s.stopping())
			require.Equal(t, ids, h.srv.pendingIDs())
			require.Contains(t, h.logs.String(), "acks not sent")
		})
	})
}

// hungAcks is a laneServer whose ack calls hang the way go-redis's do on
// a server that stopped answering (with ContextTimeoutEnabled): they end
// at their context's deadline, not when it is cancelled.
type hungAcks struct {
	*fakeServer
	hang    chan struct{} // closed: the server answers again
	entered chan struct{} // gets a token per call
}

func (h *hungAcks) ack(ctx context.Context, ids []string) (int64, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	var deadline <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = time.After(time.Until(d))
	}
	select {
	case <-deadline:
		return 0, context.DeadlineExceeded
	case <-h.hang:
		return h.fakeServer.ack(ctx, ids)
	}
}

// A stop while an ack call hangs (the server stopped answering after the
// lane drained) is not held up by it: each attempt is bounded by
// ShutdownTimeout, so the loop gives way to the final, bounded flush and
// exits, the entries left pending. (TestDriverShutdownBoundedWhenServerHangs
// took the client's ReadTimeout, 10 s, to return.)
func TestAckerStopWhileAnAckHangs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.AckInterval = time.Hour; cfg.ShutdownTimeout = 50 * time.Millisecond })
		srv := &hungAcks{fakeServer: h.srv, hang: make(chan struct{}), entered: make(chan struct{}, 1)}
		t.Cleanup(func() { close(srv.hang) })
		s, lanes := newSession(h.l.cfg, consumerLogger(h.l.cfg), h.lib, func(Config) laneServer { return srv }, h.clock)
		h.s, h.l = s, lanes[0]
		ids := h.srv.add(1)
		h.read(t.Context(), 1)
		h.l.acks.start(t.Context())
		h.l.acks.add(h.held(ids[0]), time.Hour, h.l.clock.now())
		h.l.acks.drained() // the lane has nothing else in hand: flush now
		<-srv.entered      // the ack call is under way
		began := time.Now()
		h.l.acks.stop()
		select {
		case <-h.l.acks.done():
		case <-time.After(5 * time.Second):
			t.Fatal("the ack loop did not exit within 5s of stop")
		}
		require.Less(t, time.Since(began), time.Second, "stop waited for the hung call")
		require.Equal(t, ids, h.srv.pendingIDs())
		require.Contains(t, h.logs.String(), "acks not sent")
	})
}
