package driver

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// policyRig is one Run of either runtime on its fake, with what the
// error-policy table injects and observes. The table (TestErrorPolicy)
// runs every row on both, so the policy has one meaning in both modes.
type policyRig struct {
	m    *countingMetrics
	logs *syncBuffer

	// add appends n new entries and returns their ids.
	add func(n int) []string
	// failTaking makes the next calls that take entries (unordered: the
	// read; ordered: the owner's next call) fail with errs, in order.
	failTaking func(errs ...error)
	// refuseWrites makes every call a server at maxmemory refuses (the
	// ones that may write: claims, dead-letters, the ordered next call)
	// fail with err, until called with nil.
	refuseWrites func(err error)
	// provokeClaim gives the runtime a reason to make such a call: an
	// entry of a dead consumer, idle long enough to be claimed.
	provokeClaim func()
	// pending returns the group's pending ids.
	pending func() []string
	// stales and creates count the topology refreshes and the group
	// creations asked of the server.
	stales, creates func() int
	// serve runs the Run until ctx ends.
	serve func(ctx context.Context) error
}

// policyHandler records the entries handled and can hold the handlers
// back.
type policyHandler struct {
	mu      sync.Mutex
	handled []string
	gate    chan struct{} // nil: handlers return at once
	started chan string
}

func (h *policyHandler) Handle(ctx context.Context, m *Message) error {
	h.mu.Lock()
	h.handled = append(h.handled, m.ID)
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		h.started <- m.ID
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (h *policyHandler) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.handled)
}

// holdBack makes the handlers started from now on wait for release.
func (h *policyHandler) holdBack() (release func()) {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.started = make(chan string, 100)
	gate := h.gate
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.gate = nil
		h.mu.Unlock()
		close(gate)
	}
}

// policyConfig is the Config both rigs share.
func policyConfig(cfg *Config, h Handler, createGroup bool) {
	cfg.Handler = h
	cfg.CreateGroup = createGroup
	cfg.MinIdle = time.Second
	cfg.ReclaimInterval = 5 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
}

func unorderedRig(t *testing.T, h Handler, createGroup bool) *policyRig {
	hs := newHarness(t, func(cfg *Config) {
		policyConfig(cfg, h, createGroup)
		cfg.StallAfter = NoStallCheck
	})
	srv := hs.srv
	var refusedMu sync.Mutex
	var refused error
	srv.hook = func(op string) { // mu is held
		refusedMu.Lock()
		err := refused
		refusedMu.Unlock()
		switch op {
		case "claim", "deadLetter", "deadLetterSpent":
			if err != nil {
				srv.failures[op] = append([]error{err}, srv.failures[op]...)
			}
		}
	}
	return &policyRig{
		m: hs.m, logs: hs.logs,
		add:        srv.add,
		failTaking: func(errs ...error) { srv.failNext("read", errs...) },
		refuseWrites: func(err error) {
			refusedMu.Lock()
			refused = err
			refusedMu.Unlock()
		},
		provokeClaim: func() { srv.pending("dead", 1, 2*time.Second, srv.add(1)...) },
		pending:      srv.pendingIDs,
		stales: func() int {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			return srv.stales
		},
		creates: func() int { return srv.callCount("createGroup") },
		serve: func(ctx context.Context) error {
			_, err := hs.s.serve(ctx, []*lane{hs.l})
			return err
		},
	}
}

func orderedRig(t *testing.T, h Handler, createGroup bool) *policyRig {
	const stream, me = "{p}", "me"
	w := newFakeWorld(stream)
	m, logs := &countingMetrics{}, &syncBuffer{}
	cfg := Config{Stream: stream, Group: "g", Consumer: me, ordered: true, partitionLease: testPartitionLease,
		Metrics: m, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	policyConfig(&cfg, h, createGroup)
	cfg = cfg.withDefaults()
	require.NoError(t, cfg.validate())
	partitionOf := func(pcfg Config) partitionServer {
		return &fakePartitionServer{w: w, stream: pcfg.Stream, consumer: me, maxDeliveries: pcfg.deliveryLimit(), count: orderedBatch}
	}
	run := newOrderedRun(cfg, consumerLogger(cfg), &fakeLoader{}, partitionOf, &fakeMembers{w: w, consumer: me}, w.clock)
	run.balanceEvery, run.tick, run.idleMax = 2*time.Millisecond, time.Millisecond, 2*time.Millisecond
	return &policyRig{
		m: m, logs: logs,
		add:        func(n int) []string { return w.add(stream, n) },
		failTaking: func(errs ...error) { w.failNext("next", me, errs...) },
		refuseWrites: func(err error) {
			w.failAlways("next", me, err)
			w.failAlways("deadLetter", me, err)
		},
		// The owner's next call, behind the handler in hand, is the call.
		provokeClaim: func() {},
		pending:      func() []string { return w.pendingOf(stream) },
		stales:       func() int { return w.callCount("stale", me, stream) },
		creates:      func() int { return w.callCount("createGroup", me, stream) },
		serve: func(ctx context.Context) error {
			_, err := run.serve(ctx)
			return err
		},
	}
}

// runRig starts r's Run; stop cancels it and returns Run's error.
func runRig(t *testing.T, r *policyRig) (done <-chan error, stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan error, 1)
	go func() { ch <- r.serve(ctx) }()
	return ch, func() error {
		cancel()
		select {
		case err := <-ch:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}
}

// waitErr waits for Run to return on its own.
func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
		return nil
	}
}

// The error policy, one table for both runtimes: what a failed call of
// each class does to a running consumer.
func TestErrorPolicy(t *testing.T) {
	t.Parallel()
	noPerm := &pelwarden.CommandError{Command: "XREADGROUP", Key: "{s}", Err: replyErr("NOPERM this user has no permissions to access the key")}
	wrongType := &pelwarden.CommandError{Command: "XREADGROUP", Key: "{s}", Err: replyErr("WRONGTYPE Operation against a key holding the wrong kind of value")}
	oom := replyErr("OOM command not allowed when used memory > 'maxmemory'.")

	rigs := map[string]func(*testing.T, Handler, bool) *policyRig{"unordered": unorderedRig, "ordered": orderedRig}
	for mode, newRig := range rigs {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()

			// Errors that stop a running consumer, wherever they happen: Run
			// returns them.
			for _, c := range []struct {
				name  string
				err   error
				check func(t *testing.T, err error)
			}{
				// The ACL refuses a command: fatal.
				{"fatal stops", noPerm, func(t *testing.T, err error) { require.ErrorIs(t, err, pelwarden.ErrNoPermission) }},
				// A key of the wrong type: retrying cannot fix it.
				{"permanent stops", wrongType, func(t *testing.T, err error) {
					require.Equal(t, pelwarden.ClassPermanent, pelwarden.Classify(err), "%v", err)
					require.Contains(t, err.Error(), "on stream")
				}},
				// The group was deleted, and CreateGroup is not set.
				{"group missing stops", errNoGroup, func(t *testing.T, err error) { require.ErrorIs(t, err, pelwarden.ErrNoGroup) }},
			} {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					synctest.Test(t, func(t *testing.T) {
						r := newRig(t, &policyHandler{}, false)
						r.add(1)
						r.failTaking(c.err)
						done, _ := runRig(t, r)
						c.check(t, waitErr(t, done))
					})
				})
			}

			// With CreateGroup it is created again, and the consumer goes
			// on.
			t.Run("group missing recreated", func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					h := &policyHandler{}
					r := newRig(t, h, true)
					ids := r.add(3)
					r.failTaking(errNoGroup)
					_, stop := runRig(t, r)
					eventually(t, "entries handled after the group came back", func() bool { return len(h.ids()) == len(ids) })
					require.NoError(t, stop())
					require.Equal(t, 2, r.creates(), "created at the start and again")
					require.Contains(t, r.logs.String(), "consumer group disappeared; creating it again")
				})
			})

			// A call that got no reply refreshes the cluster's slot map and is
			// tried again.
			t.Run("stale topology retried", func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					h := &policyHandler{}
					r := newRig(t, h, false)
					ids := r.add(3)
					r.failTaking(errCut, errCut)
					_, stop := runRig(t, r)
					eventually(t, "entries handled after the failures", func() bool { return len(h.ids()) == len(ids) })
					require.NoError(t, stop())
					require.GreaterOrEqual(t, r.stales(), 2)
					require.Equal(t, 2, r.m.get(EventCommandError))
				})
			})

			// A server out of memory pauses the taking of new entries, once,
			// while the entries in hand are still handled and acked; a call
			// that succeeds again ends the pause.
			t.Run("out of memory pauses", func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					h := &policyHandler{}
					r := newRig(t, h, false)
					release := h.holdBack()
					first := r.add(1)
					_, stop := runRig(t, r)
					select {
					case <-h.started:
					case <-time.After(10 * time.Second):
						t.Fatal("no handler started")
					}
					r.refuseWrites(oom)
					r.provokeClaim()
					release()
					eventually(t, "paused (counted and logged), and the entry in hand acked while the server refuses writes", func() bool {
						return r.m.get(EventPaused) == 1 && countOf(r.logs.String(), "server out of memory") > 0 &&
							!slices.Contains(r.pending(), first[0])
					})
					require.Equal(t, 1, r.m.get(EventPaused), "one pause")
					require.Equal(t, 1, countOf(r.logs.String(), "server out of memory"), "logged once")

					r.refuseWrites(nil)
					later := r.add(2)
					eventually(t, "entries taken again", func() bool {
						got := h.ids()
						return slices.Contains(got, later[0]) && slices.Contains(got, later[1])
					})
					require.NoError(t, stop())
					require.Contains(t, r.logs.String(), "server accepts writes again")
				})
			})
		})
	}
}

// countOf counts the lines of logs that contain s.
func countOf(logs, s string) int {
	n := 0
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
