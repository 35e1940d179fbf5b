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

// serveUntil runs h's session until stop returns true, then cancels it and
// returns serve's results.
func (h *harness) serveUntil(what string, stop func() bool) (<-chan struct{}, error) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	defer cancel()
	type result struct {
		lingering <-chan struct{}
		err       error
	}
	res := make(chan result, 1)
	go func() {
		lingering, err := h.s.serve(ctx, []*lane{h.l})
		res <- result{lingering, err}
	}()
	eventually(h.t, what, stop)
	cancel()
	r := <-res
	return r.lingering, r.err
}

// A whole Run against the fake: entries read, handled and acked, then a
// clean shutdown.
func TestServe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int64
		h := newHarness(t, func(cfg *Config) {
			cfg.Concurrency = 4
			cfg.Handler = HandlerFunc(func(context.Context, *Message) error { handled.Add(1); return nil })
		})
		h.srv.add(50)
		lingering, err := h.serveUntil("every entry acked", func() bool { return h.m.get(EventAcked) == 50 })
		require.NoError(t, err)
		require.Nil(t, lingering)
		require.EqualValues(t, 50, handled.Load())
		require.Empty(t, h.srv.pendingIDs())
		require.Zero(t, h.l.hand.count())
		require.Contains(t, h.logs.String(), "pelwarden consumer stopped")
	})
}

// At shutdown, queued entries no handler started are released at once,
// and a handler running past ShutdownTimeout is cancelled: its entry stays
// pending.
func TestServeShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{}, 10)
		h := newHarness(t, func(cfg *Config) {
			cfg.Concurrency = 1
			cfg.Prefetch = 2
			cfg.ShutdownTimeout = 50 * time.Millisecond
			cfg.Handler = HandlerFunc(func(ctx context.Context, _ *Message) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			})
		})
		ids := h.srv.add(3)
		// A window of 3 (Prefetch 2) takes any room it has: with a larger one
		// a read waits for room worth a call (half the queue part), which the
		// claim at start may have split.
		lingering, err := h.serveUntil("one handler running, the rest queued", func() bool {
			return len(started) == 1 && h.l.hand.count() == 3
		})
		require.NoError(t, err)
		require.Nil(t, lingering)
		require.Equal(t, ids, h.srv.pendingIDs(), "nothing acked")
		for _, id := range ids[1:] {
			require.Equal(t, []string{"0s"}, h.srv.releases(id), "unstarted %s released", id)
		}
		require.Empty(t, h.srv.releases(ids[0]), "the cancelled handler's entry stays pending as it is")
		require.Contains(t, h.logs.String(), "shutdown timeout: cancelling handlers")
	})
}

// A handler that ignores its cancelled context is abandoned: serve returns
// with a channel closed once it returns.
func TestServeAbandonsStuckHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var running atomic.Bool
		h := newHarness(t, func(cfg *Config) {
			cfg.Concurrency = 1
			cfg.ShutdownTimeout = 10 * time.Millisecond
			cfg.Handler = HandlerFunc(func(context.Context, *Message) error {
				running.Store(true)
				<-release
				return nil
			})
		})
		h.srv.add(1)
		lingering, err := h.serveUntil("the handler running", running.Load)
		require.NoError(t, err)
		require.NotNil(t, lingering)
		require.Contains(t, h.logs.String(), "handlers ignored their cancelled context")
		close(release)
		<-lingering
	})
}

// A fatal error stops the Run with it.
func TestServeFatal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.failNext("read", replyErr("NOPERM this user has no permissions to run the 'xreadgroup' command"))
		lingering, err := h.s.serve(t.Context(), []*lane{h.l})
		require.Nil(t, lingering)
		require.ErrorContains(t, err, "NOPERM")
		require.Contains(t, h.logs.String(), "pelwarden consumer stopping")
	})
}

// Start: the library is loaded and every group checked first; an error
// retrying cannot fix ends Run, a stop while still starting is no failure.
func TestServeStart(t *testing.T) {
	t.Parallel()
	t.Run("library refused", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, nil)
			h.lib.errs = []error{context.DeadlineExceeded, &pelwarden.Error{Kind: pelwarden.ErrServerUnsupported}}
			_, err := h.s.serve(t.Context(), []*lane{h.l})
			require.ErrorIs(t, err, pelwarden.ErrServerUnsupported)
			require.Equal(t, 1, h.m.get(EventCommandError), "the transient failure counted")
		})
	})
	t.Run("no group", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.failNext("checkGroup", &pelwarden.Error{Kind: pelwarden.ErrNoGroup})
			_, err := h.s.serve(t.Context(), []*lane{h.l})
			require.ErrorIs(t, err, pelwarden.ErrNoGroup)
		})
	})
	t.Run("stopped while the server is unreachable", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			for _, op := range []string{"load", "checkGroup"} {
				h := newHarness(t, nil)
				ctx, cancel := context.WithCancel(t.Context())
				fail := func() error { cancel(); return context.DeadlineExceeded }
				if op == "load" {
					h.lib.errs = []error{fail()}
				} else {
					h.srv.failNext("checkGroup", fail())
				}
				lingering, err := h.s.serve(ctx, []*lane{h.l})
				require.NoError(t, err, op)
				require.Nil(t, lingering)
				require.Contains(t, h.logs.String(), "stopped before it started")
			}
		})
	})
}
