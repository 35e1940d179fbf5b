package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// fakeServer is an in-memory laneServer: one stream with one group, its
// PEL (owner, deliveries, last delivery by the test's clock) and its
// dead-letter stream, modelled as far as the lane's rules need. Failures
// are scripted per operation with failNext.
type fakeServer struct {
	clock    clock
	consumer string

	mu       sync.Mutex
	entries  map[string][]pelwarden.Field
	order    []string // entry ids in stream order
	next     int      // order[next:] are not delivered yet
	pel      map[string]*fakePending
	dead     []string            // dead-lettered ids, in order
	deadText map[string]string   // their error texts
	released map[string][]string // id -> "delay" of each release
	failures map[string][]error  // op -> errors its next calls return
	calls    map[string]int      // op -> calls
	stales   int                 // errors passed to stale
	ownerOf  func(id string) string
	trimmed  int64
	reaped   []string
	dlqLen   int64
	noGroup  bool // every call but createGroup fails with NOGROUP
	claims   bool // reads take CLAIM (else refused)
	plain    int  // reads without CLAIM
	hook     func(op string)
	backoff  []time.Duration  // Config.Backoff, as the fail function takes it
	paused   *pelwarden.Pause // the group's pause (see setPause)
}

type fakePending struct {
	owner      string
	deliveries int64
	at         time.Duration // last delivery or extension, by the test's clock
}

func newFakeServer(clk clock, consumer string) *fakeServer {
	return &fakeServer{clock: clk, consumer: consumer, entries: map[string][]pelwarden.Field{},
		pel: map[string]*fakePending{}, deadText: map[string]string{}, released: map[string][]string{},
		failures: map[string][]error{}, calls: map[string]int{}}
}

var _ laneServer = (*fakeServer)(nil)

// replyErr is a Redis error reply.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// errNoGroup is a missing group, the way redisLane reports it.
var errNoGroup error = &pelwarden.CommandError{Command: "XREADGROUP GROUP g me", Key: "{s}", Err: replyErr("NOGROUP No such key '{s}' or consumer group 'g'")}

// add appends n entries with one field each and returns their ids.
func (f *fakeServer) add(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, n)
	for i := range ids {
		id := strconv.Itoa(len(f.order)+1) + "-0"
		f.entries[id] = []pelwarden.Field{{Name: "n", Value: id}}
		f.order = append(f.order, id)
		ids[i] = id
	}
	return ids
}

// pending puts ids in the PEL of owner, delivered deliveries times, last
// at the clock's now minus idle.
func (f *fakeServer) pending(owner string, deliveries int64, idle time.Duration, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.pel[id] = &fakePending{owner: owner, deliveries: deliveries, at: f.clock.now() - idle}
		if i := slices.Index(f.order, id); i >= f.next {
			// taken off the unread part
			f.order = append(f.order[:i:i], f.order[i+1:]...)
			f.order = append(f.order[:f.next:f.next], append([]string{id}, f.order[f.next:]...)...)
			f.next++
		}
	}
}

// failNext makes the next calls of op fail with errs, in order.
func (f *fakeServer) failNext(op string, errs ...error) {
	f.mu.Lock()
	f.failures[op] = append(f.failures[op], errs...)
	f.mu.Unlock()
}

// call counts a call of op and returns its scripted failure; mu is held.
func (f *fakeServer) call(op string) error {
	f.calls[op]++
	if f.hook != nil {
		f.hook(op)
	}
	if errs := f.failures[op]; len(errs) > 0 {
		f.failures[op] = errs[1:]
		return errs[0]
	}
	if f.noGroup && op != "createGroup" {
		return errNoGroup
	}
	return nil
}

func (f *fakeServer) callCount(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// pendingIDs returns the PEL's ids, sorted.
func (f *fakeServer) pendingIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.pel))
	for id := range f.pel {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareFakeIDs)
	return ids
}

func (f *fakeServer) deadLettered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dead)
}

func (f *fakeServer) releases(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.released[id])
}

func compareFakeIDs(a, b string) int {
	x, _ := strconv.Atoi(a[:len(a)-2])
	y, _ := strconv.Atoi(b[:len(b)-2])
	return x - y
}

func (f *fakeServer) read(ctx context.Context, count int, block bool, claim time.Duration) ([]*Message, error) {
	f.mu.Lock()
	if block && f.next == len(f.order) {
		// A blocked read of an idle stream: wait a little, as the server
		// would for ReadBlock (the harness's loops need not spin).
		f.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	if err := f.call("read"); err != nil {
		return nil, err
	}
	var out []*Message
	if claim == 0 {
		f.plain++
	}
	if claim > 0 {
		if !f.claims {
			return nil, &pelwarden.CommandError{Command: "XREADGROUP", Key: "{s}", Err: errReadClaimRefused}
		}
		// Idle entries first, longest idle first; entries deleted from the
		// stream are skipped and left pending, as Redis 8.6 does.
		var idle []string
		for id, p := range f.pel {
			if _, ok := f.entries[id]; ok && f.clock.now()-p.at >= claim {
				idle = append(idle, id)
			}
		}
		slices.SortFunc(idle, func(a, b string) int {
			if c := int(f.pel[a].at - f.pel[b].at); c != 0 {
				return c
			}
			return compareFakeIDs(a, b)
		})
		for _, id := range idle[:min(len(idle), count)] {
			p := f.pel[id]
			p.owner, p.at = f.consumer, f.clock.now()
			p.deliveries++
			out = append(out, &Message{ID: id, Fields: f.entries[id], Deliveries: p.deliveries})
		}
	}
	for ; f.next < len(f.order) && len(out) < count; f.next++ {
		id := f.order[f.next]
		f.pel[id] = &fakePending{owner: f.consumer, deliveries: 1, at: f.clock.now()}
		out = append(out, &Message{ID: id, Fields: f.entries[id], Deliveries: 1})
	}
	return out, nil
}

// deadLetterSpent dead-letters owned ids as the library's deadletter
// function does (reason max_deliveries: no text).
func (f *fakeServer) deadLetterSpent(_ context.Context, ids []string) (*pelwarden.DeadLetterResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("deadLetterSpent"); err != nil {
		return nil, err
	}
	res := &pelwarden.DeadLetterResult{}
	for _, id := range ids {
		f.deadLetterOne(res, id, "")
	}
	return res, nil
}

func (f *fakeServer) anyIdle(_ context.Context, minIdle time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("anyIdle"); err != nil {
		return false, err
	}
	for _, p := range f.pel {
		if f.clock.now()-p.at >= minIdle {
			return true, nil
		}
	}
	return false, nil
}

func (f *fakeServer) idlePending(_ context.Context, idle time.Duration, count int) ([]pendingEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("idlePending"); err != nil {
		return nil, err
	}
	ids := slices.SortedFunc(maps.Keys(f.pel), compareFakeIDs)
	var out []pendingEntry
	for _, id := range ids {
		p := f.pel[id]
		if d := f.clock.now() - p.at; d >= idle && len(out) < count {
			out = append(out, pendingEntry{ID: id, Consumer: p.owner, Idle: d, Deliveries: p.deliveries})
		}
	}
	return out, nil
}

func (f *fakeServer) claim(_ context.Context, a pelwarden.ClaimArgs) (*pelwarden.ClaimPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("claim"); err != nil {
		return nil, err
	}
	limit, _, err := pelwarden.DeliveryLimit("MaxDeliveries", a.MaxDeliveries)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(f.pel))
	for id := range f.pel {
		if a.Cursor == "" || a.Cursor == "0-0" || compareFakeIDs(id, a.Cursor) >= 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareFakeIDs)
	page := &pelwarden.ClaimPage{Cursor: "0-0"}
	from := map[string]int{}
	taken := 0
	for i, id := range ids {
		if taken == a.Count {
			page.Cursor = ids[i]
			break
		}
		p := f.pel[id]
		if f.clock.now()-p.at < a.MinIdle {
			continue
		}
		taken++
		fields, ok := f.entries[id]
		switch {
		case !ok:
			delete(f.pel, id)
			page.Deleted = append(page.Deleted, id)
		case limit > 0 && p.deliveries >= int64(limit):
			delete(f.pel, id)
			f.dead = append(f.dead, id)
			page.DeadLettered = append(page.DeadLettered, id)
		default:
			if p.owner != f.consumer {
				from[p.owner]++
			}
			p.owner, p.at = f.consumer, f.clock.now()
			p.deliveries++
			page.Entries = append(page.Entries, pelwarden.Entry{ID: id, Fields: fields, Deliveries: p.deliveries})
		}
	}
	for _, c := range slices.Sorted(maps.Keys(from)) {
		page.TakenFrom = append(page.TakenFrom, pelwarden.ConsumerCount{Consumer: c, Entries: from[c]})
	}
	return page, nil
}

func (f *fakeServer) ack(_ context.Context, ids []string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ack"); err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		if _, ok := f.pel[id]; ok {
			delete(f.pel, id)
			n++
		}
	}
	return n, nil
}

func (f *fakeServer) ackFenced(_ context.Context, ids []string) (*pelwarden.AckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ackFenced"); err != nil {
		return nil, err
	}
	return fakeFencedAck(f.pel, f.consumer, ids), nil
}

// fakeFencedAck is the library's ack function on a fake PEL: each id
// consumer owns is acked; the others are reported not owned, and not
// pending when no consumer holds them.
func fakeFencedAck(pel map[string]*fakePending, consumer string, ids []string) *pelwarden.AckResult {
	res := &pelwarden.AckResult{}
	for _, id := range ids {
		p, ok := pel[id]
		switch {
		case !ok:
			res.NotOwned = append(res.NotOwned, id)
			res.NotPending = append(res.NotPending, id)
		case p.owner != consumer:
			res.NotOwned = append(res.NotOwned, id)
		default:
			delete(pel, id)
			res.Acked++
		}
	}
	return res
}

func (f *fakeServer) extend(_ context.Context, ids []string) (*pelwarden.ExtendResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("extend"); err != nil {
		return nil, err
	}
	res := &pelwarden.ExtendResult{}
	for _, id := range ids {
		p, ok := f.pel[id]
		switch {
		case !ok || p.owner != f.consumer:
			res.NotOwned = append(res.NotOwned, id)
		case f.entries[id] == nil:
			delete(f.pel, id)
			res.Deleted = append(res.Deleted, id)
		default:
			p.at = f.clock.now()
			res.Extended++
		}
	}
	return res, nil
}

func (f *fakeServer) release(_ context.Context, ids []string, minIdle, delay time.Duration) (*pelwarden.ReleaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("release"); err != nil {
		return nil, err
	}
	res := &pelwarden.ReleaseResult{}
	for _, id := range ids {
		p, ok := f.pel[id]
		if !ok || p.owner != f.consumer {
			res.NotOwned = append(res.NotOwned, id)
			continue
		}
		p.at = f.clock.now() - max(minIdle-delay, 0)
		f.released[id] = append(f.released[id], delay.String())
		res.Released++
	}
	return res, nil
}

// fail is the fail function: a release after max(delay, the backoff of
// the entry's delivery count); the fake keeps no error text.
func (f *fakeServer) fail(ctx context.Context, id string, minIdle, delay time.Duration, _ string) (*pelwarden.ReleaseResult, error) {
	f.mu.Lock()
	if p, ok := f.pel[id]; ok && len(f.backoff) > 0 && p.deliveries > 0 {
		delay = max(delay, f.backoff[min(int(p.deliveries), len(f.backoff))-1])
	}
	f.mu.Unlock()
	return f.release(ctx, []string{id}, minIdle, delay)
}

// giveBack is the giveback function: a release at once, with the delivery
// that handed the entries out taken back.
func (f *fakeServer) giveBack(ctx context.Context, ids []string, minIdle time.Duration) (*pelwarden.ReleaseResult, error) {
	res, err := f.release(ctx, ids, minIdle, 0)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if p, ok := f.pel[id]; ok && p.owner == f.consumer && p.deliveries > 0 {
			p.deliveries--
		}
	}
	return res, nil
}

func (f *fakeServer) deadLetter(_ context.Context, id, text string) (*pelwarden.DeadLetterResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("deadLetter"); err != nil {
		return nil, err
	}
	res := &pelwarden.DeadLetterResult{}
	f.deadLetterOne(res, id, text)
	return res, nil
}

// deadLetterOne is the deadletter function's step for one id; mu is held.
func (f *fakeServer) deadLetterOne(res *pelwarden.DeadLetterResult, id, text string) {
	p, ok := f.pel[id]
	switch {
	case !ok:
		res.NotOwned, res.NotPending = append(res.NotOwned, id), append(res.NotPending, id)
	case p.owner != f.consumer:
		res.NotOwned = append(res.NotOwned, id)
	case f.entries[id] == nil:
		delete(f.pel, id)
		res.Deleted = append(res.Deleted, id)
	case len(f.entries[id]) > 1 && f.entries[id][1].Name == "huge":
		res.TooLarge = append(res.TooLarge, id)
	default:
		delete(f.pel, id)
		f.dead = append(f.dead, id)
		f.deadText[id] = text
		res.DeadLettered = append(res.DeadLettered, id)
	}
}

func (f *fakeServer) trim(_ context.Context, limit int) (*pelwarden.TrimResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("trim"); err != nil {
		return nil, err
	}
	// Trims delivered entries no longer pending, limit at a time.
	res := &pelwarden.TrimResult{Bound: "0-0"}
	kept := f.order[:0:0]
	for i, id := range f.order {
		if _, pending := f.pel[id]; i < f.next && !pending && res.Trimmed < int64(limit) {
			delete(f.entries, id)
			res.Trimmed++
			continue
		} else if i < f.next && !pending {
			res.More = true
		}
		kept = append(kept, id)
	}
	f.next -= int(res.Trimmed)
	f.order = kept
	f.trimmed += res.Trimmed
	res.Length = int64(len(f.order))
	return res, nil
}

func (f *fakeServer) reap(_ context.Context, _ time.Duration) (*pelwarden.ReapResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("reap"); err != nil {
		return nil, err
	}
	res := &pelwarden.ReapResult{Deleted: f.reaped}
	f.reaped = nil
	for _, p := range f.pel {
		if p.owner != f.consumer {
			res.Kept = append(res.Kept, pelwarden.ConsumerPending{Name: p.owner, Pending: 1})
		}
	}
	return res, nil
}

func (f *fakeServer) time(context.Context) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("time"); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(10_000_000), nil
}

func (f *fakeServer) trimDeadLetters(_ context.Context, minID string, maxLen int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	op := "trimDeadLetters maxlen"
	if minID != "" {
		op = "trimDeadLetters minid " + minID
	}
	if err := f.call(op); err != nil {
		return 0, err
	}
	if minID != "" {
		return 1, nil
	}
	n := max(f.dlqLen-maxLen, 0)
	f.dlqLen -= n
	return n, nil
}

func (f *fakeServer) createGroup(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.call("createGroup")
	if err == nil {
		f.noGroup = false
	}
	return err
}

func (f *fakeServer) checkGroup(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("checkGroup")
}

// setPause pauses the group (nil: resumes it).
func (f *fakeServer) setPause(p *pelwarden.Pause) {
	f.mu.Lock()
	f.paused = p
	f.mu.Unlock()
}

func (f *fakeServer) pauseState(context.Context) (*pelwarden.Pause, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("pauseState"); err != nil {
		return nil, err
	}
	return f.paused, nil
}

func (f *fakeServer) stale(error) {
	f.mu.Lock()
	f.stales++
	f.mu.Unlock()
}

// advance moves the test's clock on by d. The tests that read time run
// in testing/synctest bubbles, where sleeping moves the fake clock as soon
// as every goroutine of the test waits, timers and tickers firing on the
// way; outside a bubble it would really sleep, so it refuses to (a
// bubble's clock starts at midnight UTC, 2000-01-01).
func advance(d time.Duration) {
	if time.Now().Year() != 2000 {
		panic("advance outside a synctest bubble")
	}
	time.Sleep(d)
}

// fakeLoader is a library that loads at once, or fails with its errors.
type fakeLoader struct {
	mu   sync.Mutex
	errs []error
}

func (l *fakeLoader) Load(context.Context) (*pelwarden.LoadResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	return &pelwarden.LoadResult{}, nil
}

func (*fakeLoader) Mode() pelwarden.Mode { return pelwarden.ModeFunction }

// countingMetrics counts events.
type countingMetrics struct {
	mu     sync.Mutex
	counts map[Event]int
	dead   map[string]int
}

func (m *countingMetrics) Count(e Event, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[Event]int{}
	}
	m.counts[e] += n
}

func (m *countingMetrics) DeadLettered(reason string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead == nil {
		m.dead = map[string]int{}
	}
	m.dead[reason] += n
}

func (*countingMetrics) HandlerDuration(time.Duration) {}

// partitionGauges is a countingMetrics that also records PartitionMetrics:
// the current owned and blocked state per stream, and every change.
type partitionGauges struct {
	countingMetrics
	gmu     sync.Mutex
	owned   map[string]bool
	blocked map[string]bool
	changes []string // "owned s true", "blocked s false", ...
}

func (g *partitionGauges) PartitionOwned(stream string, owned bool) {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	if g.owned == nil {
		g.owned = map[string]bool{}
	}
	g.owned[stream] = owned
	g.changes = append(g.changes, fmt.Sprintf("owned %s %v", stream, owned))
}

func (g *partitionGauges) PartitionBlocked(stream string, blocked bool) {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	if g.blocked == nil {
		g.blocked = map[string]bool{}
	}
	g.blocked[stream] = blocked
	g.changes = append(g.changes, fmt.Sprintf("blocked %s %v", stream, blocked))
}

func (g *partitionGauges) state(stream string) (owned, blocked bool) {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	return g.owned[stream], g.blocked[stream]
}

func (m *countingMetrics) get(e Event) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[e]
}

func (m *countingMetrics) deadLettered(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead[reason]
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Reset empties the sink.
func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a session of one lane on a fakeServer, on the clock of the
// test's synctest bubble.
type harness struct {
	t     *testing.T
	clock clock
	srv   *fakeServer
	m     *countingMetrics
	logs  *syncBuffer
	lib   *fakeLoader
	s     *session
	l     *lane
}

// testConfig is a valid Config with defaults applied after change.
func testConfig(t *testing.T, change func(*Config)) Config {
	t.Helper()
	cfg := Config{Stream: "{s}", Group: "g", Consumer: "me", MinIdle: time.Second,
		Handler: HandlerFunc(func(context.Context, *Message) error { return nil })}
	if change != nil {
		change(&cfg)
	}
	cfg = cfg.withDefaults()
	require.NoError(t, cfg.validate())
	return cfg
}

func newHarness(t *testing.T, change func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, clock: newClock(), m: &countingMetrics{}, logs: &syncBuffer{}, lib: &fakeLoader{}}
	h.srv = newFakeServer(h.clock, "me")
	cfg := testConfig(t, func(c *Config) {
		c.Metrics = h.m
		c.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if change != nil {
			change(c)
		}
	})
	h.s, h.l = h.session(cfg)
	return h
}

// session builds a session of cfg whose every lane is on h.srv.
func (h *harness) session(cfg Config) (*session, *lane) {
	s, lanes := newSession(cfg, consumerLogger(cfg), h.lib, func(Config) laneServer { return h.srv }, h.clock)
	return s, lanes[0]
}

// dispatched hands msgs to the lane as a read of them would, and returns
// their jobs from the job queue.
func (h *harness) dispatched(handlerCtx context.Context, msgs ...*Message) []job {
	h.t.Helper()
	res := h.l.flow.reserve(h.t.Context(), partyRead, len(msgs))
	require.Equal(h.t, len(msgs), res.n, "room for the entries")
	h.l.dispatch(handlerCtx, msgs, res, h.clock.now(), time.Millisecond, false, 0, permitGrant{})
	jobs := h.s.jobs.drain()
	require.Len(h.t, jobs, len(msgs))
	return jobs
}

// read reads n entries from the fake as the read loop would, and returns
// their jobs.
func (h *harness) read(handlerCtx context.Context, n int) []job {
	h.t.Helper()
	msgs, err := h.srv.read(h.t.Context(), n, false, 0)
	require.NoError(h.t, err)
	require.Len(h.t, msgs, n)
	return h.dispatched(handlerCtx, msgs...)
}

// loopUntil runs loop until cond holds, then cancels it and waits for it
// to return.
func loopUntil(t *testing.T, what string, loop func(ctx context.Context), cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); loop(ctx) }()
	eventually(t, what, cond)
	cancel()
	<-done
}

// eventually waits up to 10s (of the bubble's clock) for cond, looking
// each time every goroutine of the test waits: first at once, then after
// each millisecond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for waited := time.Duration(0); ; waited += time.Millisecond {
		synctest.Wait()
		if cond() {
			return
		}
		if waited >= 10*time.Second {
			t.Fatalf("%s: not within %v", what, waited)
		}
		advance(time.Millisecond)
	}
}

var errHandler = errors.New("handler failed")

// held returns the entry in hand for id (the test's to ack, say); it fails
// the test when there is none.
func (h *harness) held(id string) *handEntry {
	h.t.Helper()
	h.l.hand.mu.Lock()
	defer h.l.hand.mu.Unlock()
	f := h.l.hand.held.find(id)
	require.NotNil(h.t, f, "%s in hand", id)
	return f
}

// heldIDs returns the ids of the entries in hand, sorted.
func heldIDs(t *hand) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []string
	for f := range t.held.all() {
		ids = append(ids, f.id)
	}
	slices.SortFunc(ids, pelwarden.CompareIDs)
	return ids
}
