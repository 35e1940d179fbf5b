package driver

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// startServe runs h's session in the background; the returned function
// stops it and returns serve's error.
func (h *harness) startServe() func() error {
	ctx, cancel := context.WithCancel(h.t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := h.s.serve(ctx, []*lane{h.l})
		done <- err
	}()
	return func() error {
		cancel()
		return <-done
	}
}

// A pause stops the reads, the reclaim passes and the handler starts
// within a check; running handlers finish and their acks land; entries in
// hand wait under the heartbeat; the resume runs them and reads again.
func TestPauseUnordered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		open := make(chan struct{})
		var running, handled atomic.Int64
		h := newHarness(t, func(cfg *Config) {
			cfg.Concurrency = 2
			cfg.Prefetch = 3 // entries queued behind the running ones
			cfg.Handler = HandlerFunc(func(ctx context.Context, _ *Message) error {
				running.Add(1)
				defer running.Add(-1)
				select {
				case <-open:
				case <-ctx.Done():
					return ctx.Err()
				}
				handled.Add(1)
				return nil
			})
		})
		h.srv.add(10)
		stop := h.startServe()
		eventually(t, "two handlers running, more entries in hand", func() bool { return running.Load() == 2 && h.l.hand.count() > 2 })
		inHand := h.l.hand.count()

		h.srv.setPause(&pelwarden.Pause{By: "ops", Reason: "gateway down", At: time.Now()})
		advance(pauseCheckEvery)
		eventually(t, "the pause seen", func() bool { return h.m.get(EventGroupPaused) == 1 })
		require.Contains(t, h.logs.String(), "group paused by an operator")
		require.Contains(t, h.logs.String(), "gateway down")
		reads, claims := h.srv.callCount("read"), h.srv.callCount("claim")
		h.srv.add(5)
		close(open) // the running handlers finish
		eventually(t, "their acks land", func() bool { return h.m.get(EventAcked) == 2 })

		// Ten MinIdles later: no read, no pass, no handler started, and the
		// entries in hand still pending here (the heartbeat kept them).
		advance(10 * h.l.cfg.MinIdle)
		synctest.Wait()
		require.Equal(t, reads, h.srv.callCount("read"), "no read while paused")
		require.Equal(t, claims, h.srv.callCount("claim"), "no reclaim pass while paused")
		require.EqualValues(t, 2, handled.Load(), "no handler started while paused")
		require.Equal(t, inHand-2, h.l.hand.count(), "the held entries stay in hand")
		require.Len(t, h.srv.pendingIDs(), inHand-2, "the 5 added during the pause were not read")
		for _, id := range h.srv.pendingIDs() {
			require.Empty(t, h.srv.releases(id), "%s not released", id)
		}

		h.srv.setPause(nil)
		advance(pauseCheckEvery)
		eventually(t, "every entry handled and acked after the resume", func() bool { return h.m.get(EventAcked) == 15 })
		require.EqualValues(t, 15, handled.Load())
		require.Contains(t, h.logs.String(), "group resumed")
		require.NoError(t, stop())
		require.Empty(t, h.srv.pendingIDs())
	})
}

// A consumer started while its group is paused reads nothing until the
// resume; stopped while paused, it releases the entries it held.
func TestPauseAtStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int64
		h := newHarness(t, func(cfg *Config) {
			cfg.Handler = HandlerFunc(func(context.Context, *Message) error { handled.Add(1); return nil })
		})
		h.srv.add(3)
		h.srv.setPause(&pelwarden.Pause{By: "ops", At: time.Now()})
		stop := h.startServe()
		advance(5 * pauseCheckEvery)
		synctest.Wait()
		require.Zero(t, h.srv.callCount("read"), "no read while paused")
		require.Zero(t, handled.Load())
		h.srv.setPause(nil)
		advance(pauseCheckEvery)
		eventually(t, "handled after the resume", func() bool { return h.m.get(EventAcked) == 3 })
		require.NoError(t, stop())
	})
}

// Entries held by a pause when the consumer stops are released at once
// for the next consumer, as unstarted entries are.
func TestPauseShutdownReleasesHeld(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		open := make(chan struct{})
		var running atomic.Int64
		h := newHarness(t, func(cfg *Config) {
			cfg.Concurrency = 1
			cfg.Prefetch = 3
			cfg.Handler = HandlerFunc(func(context.Context, *Message) error {
				running.Add(1)
				<-open
				return nil
			})
		})
		ids := h.srv.add(4)
		stop := h.startServe()
		eventually(t, "one running, the rest in hand", func() bool { return running.Load() == 1 && h.l.hand.count() == 4 })
		h.srv.setPause(&pelwarden.Pause{By: "ops", At: time.Now()})
		advance(pauseCheckEvery)
		eventually(t, "the pause seen", func() bool { return h.m.get(EventGroupPaused) == 1 })
		close(open)
		eventually(t, "the running one acked, the next held", func() bool {
			return h.m.get(EventAcked) == 1 && len(h.l.pause.held) > 0
		})
		require.NoError(t, stop())
		for _, id := range ids[1:] {
			require.Equal(t, []string{"0s"}, h.srv.releases(id), "held %s released at shutdown", id)
		}
	})
}

// An ACL user that may not read the pause key runs on, unpaused, and says
// so once.
func TestPauseKeyRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.failNext("pauseState", &pelwarden.CommandError{Command: "HGET", Key: "{s}:paused", Err: replyErr("NOPERM no permissions to access the key")})
		h.srv.add(3)
		stop := h.startServe()
		eventually(t, "handled", func() bool { return h.m.get(EventAcked) == 3 })
		advance(3 * pauseCheckEvery)
		synctest.Wait()
		require.NoError(t, stop())
		require.Equal(t, 1, h.srv.callCount("pauseState"), "not read again")
		require.Contains(t, h.logs.String(), "cannot read the group's pause key")
	})
}

// In ordered mode a paused partition's owner makes no next call: the
// handler running finishes and its ack lands at once (an ack apart), the
// rest of its batch waits, the lease is kept; the resume goes on in order.
func TestPauseOrdered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		streams := testPartitions(t, 1)
		p := streams[0]
		w := newFakeWorld(streams...)
		w.add(p, 4)
		started, release := make(chan struct{}, 10), make(chan struct{})
		hs := newHandlings(t)
		a := w.start(t, streams, "a", func(c *Config) {
			c.Handler = hs.wrap(func(context.Context, *Message) error {
				started <- struct{}{}
				<-release
				return nil
			})
		})
		<-started // the first entry's handler runs
		w.setPause(p, &pelwarden.Pause{By: "ops", At: time.Now()})
		advance(pauseCheckEvery)
		eventually(t, "the pause seen", func() bool { return a.m.get(EventGroupPaused) == 1 })
		nexts := w.callCount("next", "a", p)
		close(release)
		eventually(t, "its ack lands apart", func() bool { return a.m.get(EventAcked) == 1 })
		w.add(p, 2)
		advance(10 * time.Second) // past the lease's 10 s: it must be renewed meanwhile
		synctest.Wait()
		require.Equal(t, nexts, w.callCount("next", "a", p), "no next call while paused")
		require.Equal(t, 1, hs.count(), "no handler started while paused")
		owner, _ := w.lease(p)
		require.Equal(t, "a", owner, "the lease kept")
		require.Zero(t, a.m.get(EventLeaseLost))

		w.setPause(p, nil)
		advance(pauseCheckEvery)
		eventually(t, "every entry handled after the resume", func() bool { return hs.count() == 6 })
		require.Equal(t, w.ids(p), hs.of(p), "in stream order, each once")
		a.stop(t)
		require.Empty(t, w.pendingOf(p))
	})
}
