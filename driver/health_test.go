package driver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// Ready once started, not before and not while stopping; live throughout,
// paused included; Paused reported.
func TestHealthReadyLivePaused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		got := h.s.health.report()
		require.False(t, got.Ready)
		require.True(t, got.Live)
		require.Contains(t, got.Reason, "starting")
		h.srv.add(3)
		stop := h.startServe()
		eventually(t, "ready", func() bool { return h.s.health.report().Ready })
		h.srv.setPause(&pelwarden.Pause{By: "ops", At: time.Now()})
		advance(pauseCheckEvery)
		eventually(t, "paused", func() bool { return h.s.health.report().Paused })
		advance(10 * time.Minute) // the read loop waits: not wedged
		synctest.Wait()
		got = h.s.health.report()
		require.True(t, got.Ready)
		require.True(t, got.Live, got.Reason)
		require.Empty(t, got.Reason)
		require.NoError(t, stop())
		got = h.s.health.report()
		require.False(t, got.Ready)
		require.Equal(t, "stopping", got.Reason)
	})
}

// hungReads is a laneServer whose reads hang, ignoring their context, once
// armed: the read loop is wedged.
type hungReads struct {
	*fakeServer
	armed  chan struct{} // closed: reads hang
	unhang chan struct{} // closed: they return
}

func (h *hungReads) read(ctx context.Context, count int, block bool, claim time.Duration) ([]*Message, error) {
	select {
	case <-h.armed:
		<-h.unhang
		return nil, context.Canceled
	default:
	}
	return h.fakeServer.read(ctx, count, block, claim)
}

// A read loop wedged in a call that never returns makes the consumer not
// live past its bound (ReadBlock plus a minute), naming the loop; the
// handler serves 503 on /livez and 200 on /readyz meanwhile.
func TestHealthWedgedReadLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		srv := &hungReads{fakeServer: h.srv, armed: make(chan struct{}), unhang: make(chan struct{})}
		s, lanes := newSession(h.l.cfg, consumerLogger(h.l.cfg), h.lib, func(Config) laneServer { return srv }, h.clock)
		h.s, h.l = s, lanes[0]
		stop := h.startServe()
		eventually(t, "ready", func() bool { return h.s.health.report().Ready })
		close(srv.armed)
		advance(h.l.cfg.ReadBlock + 2*time.Minute)
		synctest.Wait()
		got := h.s.health.report()
		require.True(t, got.Ready)
		require.False(t, got.Live)
		require.Contains(t, got.Reason, "the read loop of {s} completed no round for")

		c := &Consumer{cfg: h.l.cfg}
		c.health.Store(h.s.health)
		hh := HealthHandler(c)
		for path, code := range map[string]int{"/livez": http.StatusServiceUnavailable, "/readyz": http.StatusOK} {
			w := httptest.NewRecorder()
			hh.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			require.Equal(t, code, w.Code, path)
			if code != http.StatusOK {
				require.Contains(t, w.Body.String(), "me: the read loop of {s}")
			}
		}
		close(srv.unhang)
		require.NoError(t, stop())
	})
}

// A Consumer that is not running is live and not ready.
func TestHealthNotRunning(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb, Config{Stream: "{s}", Group: "g", Consumer: "me", Handler: HandlerFunc(func(context.Context, *Message) error { return nil })})
	require.NoError(t, err)
	require.Equal(t, Health{Live: true, Reason: "not running"}, c.Health())
	w := httptest.NewRecorder()
	HealthHandler(c).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "me: not running\n", w.Body.String())
}
