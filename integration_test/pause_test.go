package integration_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// handledLog records which entries a test's handlers handled, how often,
// and how many run now.
type handledLog struct {
	mu      sync.Mutex
	times   map[string]int
	by      map[string]int // consumer -> handled
	running atomic.Int64
}

func (h *handledLog) handler(d time.Duration) driver.Handler {
	return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		h.running.Add(1)
		defer h.running.Add(-1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		h.mu.Lock()
		h.times[m.Stream+" "+m.ID]++
		if h.by == nil {
			h.by = map[string]int{}
		}
		h.by[m.Consumer]++
		h.mu.Unlock()
		return nil
	})
}

// of is how many entries consumer handled.
func (h *handledLog) of(consumer string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[consumer]
}

func (h *handledLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.times)
}

// requireOnce fails unless every id was handled exactly once.
func (h *handledLog) requireOnce(t *testing.T, ids []string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.times, len(ids))
	for _, id := range ids {
		require.Equal(t, 1, h.times[id], "%s handled once", id)
	}
}

// `pelwarden pause` under load: two consumers with the defaults stop
// starting handlers, their running handlers' acks land, and the entries
// they hold stay theirs; a consumer started while the group is paused
// waits; status and the exporter's metrics show the pause; `pelwarden
// resume` lets everything run: every entry produced is handled exactly
// once (a pause redelivers nothing) and acked.
func TestPauseResumeUnderLoad(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		log := &handledLog{times: map[string]int{}}
		ms := []*trMetrics{{}, {}, {}}
		for i := range 2 {
			// MinIdle 2 s, not the kit's 300 ms: a heartbeat or ack delayed
			// that long on a loaded machine would let the other consumer
			// take an entry over and run it a second time.
			f.RunConsumer(driver.Config{Consumer: "c" + itoa(i), Handler: log.handler(2 * time.Millisecond), Metrics: ms[i], MinIdle: 2 * time.Second})
		}
		var ids []string
		var idsMu sync.Mutex
		produce := func(n int) {
			for range n {
				id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.Stream, Values: []string{"n", "1"}}).Result()
				require.NoError(t, err)
				idsMu.Lock()
				ids = append(ids, f.Stream+" "+id)
				idsMu.Unlock()
			}
		}
		produce(300)
		f.Eventually("some handled", func() bool { return log.count() >= 50 })

		r := pw(t, s, "pause", f.Stream, f.Group, "--reason", "gateway down", "--by", "oncall")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "paused group "+f.Group+" on "+f.Stream+" (by oncall")
		f.Eventually("both consumers paused", func() bool { return ms[0].get(driver.EventGroupPaused) == 1 && ms[1].get(driver.EventGroupPaused) == 1 })
		f.Eventually("running handlers finished", func() bool { return log.running.Load() == 0 })
		handled := log.count()
		f.Eventually("their acks landed: what is pending is what they hold", func() bool {
			return f.PendingCount() == int64(len(ids)-handled)
		})

		// A consumer started now waits.
		f.RunConsumer(driver.Config{Consumer: "late", Handler: log.handler(2 * time.Millisecond), Metrics: ms[2], MinIdle: 2 * time.Second})
		f.Eventually("the late consumer saw the pause", func() bool { return ms[2].get(driver.EventGroupPaused) == 1 })
		produce(100)

		st := pwJSON(t, s, "status", f.Stream, f.Group)
		paused := obj(t, st["paused"])
		require.Equal(t, "oncall", paused["by"])
		require.Equal(t, "gateway down", paused["reason"])
		require.GreaterOrEqual(t, num(t, paused["for_ms"]), int64(0))
		require.Equal(t, handled, log.count(), "no handler started while paused")
		require.Zero(t, ms[2].get(driver.EventRead), "the late consumer read nothing")

		r = pw(t, s, "resume", f.Stream, f.Group)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "resumed group "+f.Group)
		produce(100)
		f.Eventually("every entry handled and acked", func() bool { return log.count() == len(ids) && f.PendingCount() == 0 })
		idsMu.Lock()
		defer idsMu.Unlock()
		log.requireOnce(t, ids)
		require.Empty(t, f.DeadLetters())
		r = pw(t, s, "resume", f.Stream, f.Group)
		require.Contains(t, r.stdout, "was not paused")
	})
}

// Ordered mode: a partitioned stream paused as one (`--partitions`), its
// owners keep their leases, hand nothing more to handlers, and after the
// resume every entry is handled once, in order per partition.
func TestPauseOrdered(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	name := "pause-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	keys, err := pelwarden.Partitions(name, 4)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, k := range keys {
			_ = s.rdb.Del(context.Background(), k, pelwarden.LeaseKeyFor(k), pelwarden.PauseKeyFor(k), pelwarden.DeadLetterStreamFor(k)).Err()
		}
	})
	f := s.fixture(t)
	log := &handledLog{times: map[string]int{}}
	m := &trMetrics{}
	f.RunOrderedConsumer(driver.OrderedConfig{Streams: keys, Group: "g", CreateGroup: true, Handler: log.handler(time.Millisecond), Metrics: m})
	var ids []string
	produce := func(n int) {
		for i := range n {
			k := keys[i%len(keys)]
			id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"n", "1"}}).Result()
			require.NoError(t, err)
			ids = append(ids, k+" "+id)
		}
	}
	produce(40)
	f.Eventually("some handled", func() bool { return log.count() >= 10 })
	r := pw(t, s, "pause", name, "g", "--partitions", "4")
	require.Equal(t, exitOK, r.code, r.stderr)
	f.Eventually("every partition paused", func() bool { return m.get(driver.EventGroupPaused) == 4 })
	f.Eventually("running handlers finished", func() bool { return log.running.Load() == 0 })
	handled := log.count()
	produce(40)
	lost := m.get(driver.EventLeaseLost)
	require.Equal(t, handled, log.count(), "no handler started while paused")
	r = pw(t, s, "resume", name, "g", "--partitions", "4")
	require.Equal(t, exitOK, r.code, r.stderr)
	f.Eventually("every entry handled after the resume", func() bool { return log.count() == len(ids) })
	log.requireOnce(t, ids)
	require.Equal(t, lost, m.get(driver.EventLeaseLost), "no lease lost while paused")
	for _, k := range keys {
		n, err := s.rdb.XPending(ctx, k, "g").Result()
		require.NoError(t, err)
		require.Zero(t, n.Count, "%s: everything acked", k)
	}
}

// The probes on real servers: /readyz answers 503 until the consumer
// started and 200 then, /livez 200 throughout, paused included; a stopped
// consumer is not ready. Ordered mode too.
func TestHealthProbes(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(5, order)
		get := func(h http.Handler, path string) (int, string) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
			return w.Code, w.Body.String()
		}
		c := f.RunConsumer(driver.Config{Consumer: "probe", Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
		keys, err := pelwarden.Partitions("probe-"+strconv.FormatInt(time.Now().UnixNano(), 36), 2)
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, k := range keys {
				_ = s.rdb.Del(context.Background(), k, pelwarden.LeaseKeyFor(k)).Err()
			}
		})
		o := f.RunOrderedConsumer(driver.OrderedConfig{Streams: keys, Group: "g", CreateGroup: true, Consumer: "probe-ordered",
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
		h := driver.HealthHandler(c.Consumer, o.Consumer)
		f.Eventually("both ready", func() bool { code, _ := get(h, "/readyz"); return code == http.StatusOK })
		code, body := get(h, "/livez")
		require.Equal(t, http.StatusOK, code, body)

		require.NoError(t, pelwarden.PauseGroup(ctx, s.rdb, f.Stream, f.Group, pelwarden.Pause{By: "ops"}))
		f.Eventually("the consumer reports the pause", func() bool { return c.Health().Paused })
		require.True(t, c.Health().Live)
		require.True(t, c.Health().Ready)
		require.False(t, o.Health().Paused, "another group")

		require.NoError(t, c.Stop())
		code, body = get(h, "/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "probe: not running\n", body)
		code, _ = get(h, "/livez")
		require.Equal(t, http.StatusOK, code, "a stopped consumer is not wedged")
	})
}
