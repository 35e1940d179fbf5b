package driver

// Health for probes: ready once a Run started, live while its loops make
// progress.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Health is what a Consumer tells a probe (Consumer.Health, HealthHandler).
type Health struct {
	// Ready: Run loaded the library and checked (or created) the groups,
	// and is not stopping. A Kubernetes readiness probe on it keeps a pod
	// out of rotation while it starts and while it drains.
	Ready bool
	// Live: none of the Run's loops is wedged: each one that should make
	// progress (the read loops, the heartbeat loops; in ordered mode the
	// balancer) completed a round within its bound. Waiting is not being
	// wedged: a read loop waiting for room while handlers run, or while
	// the group is paused, is live, and so is a loop retrying calls to a
	// server that does not answer (restarting the process would not help).
	// Live is true while the consumer is not running.
	Live bool
	// Paused: an operator has the group paused on at least one of the
	// consumer's streams (pelwarden.PauseGroup). A paused consumer is
	// ready and live.
	Paused bool
	// Reason says why it is not ready or not live ("" when it is both).
	Reason string
}

// health is one Run's answer to probes: the core sets ready, the loops
// beat their pulses.
type health struct {
	clock  clock
	ready  atomic.Bool
	why    atomic.Pointer[string] // why not ready
	mu     sync.Mutex
	pulses []*pulse
	gates  []*pauseGate
}

func newHealth(clk clock) *health {
	h := &health{clock: clk}
	h.notReady("starting: loading the library and checking the groups")
	return h
}

func (h *health) notReady(why string) {
	h.ready.Store(false)
	h.why.Store(&why)
}

// pulse registers a loop that must complete a round at least every bound
// while it is not waiting.
func (h *health) pulse(name string, bound time.Duration) *pulse {
	p := &pulse{name: name, bound: bound, clock: h.clock}
	p.beat()
	h.mu.Lock()
	h.pulses = append(h.pulses, p)
	h.mu.Unlock()
	return p
}

// watch adds a stream's pause gate to the report.
func (h *health) watch(g *pauseGate) {
	h.mu.Lock()
	h.gates = append(h.gates, g)
	h.mu.Unlock()
}

// report is the Health of the Run now.
func (h *health) report() Health {
	out := Health{Ready: h.ready.Load(), Live: true}
	var why []string
	if !out.Ready {
		why = append(why, *h.why.Load())
	}
	now := h.clock.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.pulses {
		if p.waiting.Load() {
			continue
		}
		if late := now - time.Duration(p.last.Load()); late > p.bound {
			out.Live = false
			why = append(why, fmt.Sprintf("the %s completed no round for %v (bound %v)", p.name, late.Round(time.Millisecond), p.bound))
		}
	}
	for _, g := range h.gates {
		out.Paused = out.Paused || g.isPaused()
	}
	out.Reason = strings.Join(why, "; ")
	return out
}

// pulse is one loop's progress: the clock reading of its last round, and
// whether it waits (then it is not checked).
type pulse struct {
	name    string
	bound   time.Duration
	clock   clock
	last    atomic.Int64
	waiting atomic.Bool
}

// beat records a round (or an attempt) now.
func (p *pulse) beat() {
	if p != nil {
		p.last.Store(int64(p.clock.now()))
	}
}

// wait marks the loop as waiting (true) or working again (false, with a
// beat).
func (p *pulse) wait(w bool) {
	if p == nil {
		return
	}
	if !w {
		p.beat()
	}
	p.waiting.Store(w)
}

// Health reports the consumer's health for probes (see Health). A consumer
// that is not running is live and not ready.
func (c *Consumer) Health() Health {
	h := c.health.Load()
	if h == nil {
		return Health{Live: true, Reason: "not running"}
	}
	return h.report()
}

// HealthHandler serves the health of consumers for Kubernetes probes:
// GET /livez answers 200 while every consumer is live and 503 (with the
// reasons in the body) once one is wedged; GET /readyz answers 200 while
// every consumer is ready, 503 while one starts, stops or is not running.
// Mount it where the probes look (for example at the root of a port of its
// own, or under a prefix with http.StripPrefix).
func HealthHandler(cs ...*Consumer) http.Handler {
	mux := http.NewServeMux()
	answer := func(ok func(Health) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			var bad []string
			for _, c := range cs {
				if h := c.Health(); !ok(h) {
					bad = append(bad, c.Name()+": "+h.Reason)
				}
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if len(bad) > 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintln(w, strings.Join(bad, "\n"))
				return
			}
			_, _ = fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("GET /livez", answer(func(h Health) bool { return h.Live }))
	mux.HandleFunc("GET /readyz", answer(func(h Health) bool { return h.Ready }))
	return mux
}
