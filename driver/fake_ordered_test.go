package driver

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// fakeWorld is the in-memory server of ordered mode: partitions (each a
// stream with one group, its PEL, its dead-letter stream and its lease
// hash) and the membership set, shared by several consumers, each seeing
// it through its own fakePartitionServer and fakeMembers. The lease rules
// follow lua/pelwarden.lua's lease, lease_release and lease_next; the
// server's clock is the test's (its synctest bubble's). (fakeServer is one consumer's view of
// one stream; ordered mode needs several consumers on several streams.)
type fakeWorld struct {
	clock clock

	mu      sync.Mutex
	parts   map[string]*fakePartition
	members map[string]time.Duration    // name -> heartbeat lasts until
	cut     map[string]bool             // consumers whose calls fail, as if cut off
	fails   map[string]error            // "op consumer" -> the error every such call returns
	once    map[string][]error          // "op consumer" -> the errors of its next calls, in order
	calls   map[string]int              // "op consumer stream" -> calls
	acks    map[string][]string         // "releaseLease consumer stream" -> the ack-ids it carried
	hook    func(op, consumer string)   // called with mu held
	slow    *fakeSlowCall               // see slowCall
	paused  map[string]*pelwarden.Pause // stream -> the group's pause
}

// fakeSlowCall is a call that takes time on the server (see slowCall).
type fakeSlowCall struct {
	op, consumer string
	after, takes time.Duration
	sent         time.Duration // when the slow call was sent
	done         chan struct{}
}

type fakePartition struct {
	entries map[string][]pelwarden.Field
	order   []string
	next    int // order[next:] are not delivered yet
	pel     map[string]*fakePending
	dead    []string

	owner   string
	token   int64
	expires time.Duration
}

// errCut is the error of a consumer cut off from the server.
var errCut = errors.New("dial tcp: connection refused")

func newFakeWorld(streams ...string) *fakeWorld {
	w := &fakeWorld{clock: newClock(), parts: map[string]*fakePartition{}, members: map[string]time.Duration{},
		cut: map[string]bool{}, fails: map[string]error{}, calls: map[string]int{}, acks: map[string][]string{}}
	for _, s := range streams {
		w.parts[s] = &fakePartition{entries: map[string][]pelwarden.Field{}, pel: map[string]*fakePending{}}
	}
	return w
}

// add appends n entries to stream and returns their ids.
func (w *fakeWorld) add(stream string, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[stream]
	ids := make([]string, n)
	for i := range ids {
		id := strconv.Itoa(len(p.order)+1) + "-0"
		p.entries[id] = []pelwarden.Field{{Name: "n", Value: id}}
		p.order = append(p.order, id)
		ids[i] = id
	}
	return ids
}

// deliver hands stream's next n entries to holder, as a read would: they
// are pending there, delivered once.
func (w *fakeWorld) deliver(stream, owner string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[stream]
	for range n {
		p.pel[p.order[p.next]] = &fakePending{owner: owner, deliveries: 1, at: w.clock.now()}
		p.next++
	}
}

// steal hands stream's lease to thief, as if it had expired and thief
// acquired it (the token moves on).
func (w *fakeWorld) steal(stream, thief string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[stream]
	p.owner, p.token, p.expires = thief, p.token+1, w.clock.now()+time.Hour
}

// cutOff makes every call of consumer fail (or work again).
func (w *fakeWorld) cutOff(consumer string, cut bool) {
	w.mu.Lock()
	w.cut[consumer] = cut
	w.mu.Unlock()
}

// call counts op by consumer on stream and returns its failure; mu is held.
func (w *fakeWorld) call(op, consumer, stream string) error {
	w.calls[op+" "+consumer+" "+stream]++
	if w.hook != nil {
		w.hook(op, consumer)
	}
	if w.cut[consumer] {
		return errCut
	}
	if errs := w.once[op+" "+consumer]; len(errs) > 0 {
		w.once[op+" "+consumer] = errs[1:]
		return errs[0]
	}
	return w.fails[op+" "+consumer]
}

// failNext makes the next calls of op by consumer fail with errs, in
// order.
func (w *fakeWorld) failNext(op, consumer string, errs ...error) {
	w.mu.Lock()
	if w.once == nil {
		w.once = map[string][]error{}
	}
	w.once[op+" "+consumer] = append(w.once[op+" "+consumer], errs...)
	w.mu.Unlock()
}

// failAlways makes every call of op by consumer fail with err.
func (w *fakeWorld) failAlways(op, consumer string, err error) {
	w.mu.Lock()
	w.fails[op+" "+consumer] = err
	w.mu.Unlock()
}

func (w *fakeWorld) callCount(op, consumer, stream string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[op+" "+consumer+" "+stream]
}

// ids returns stream's entry ids, in stream order.
func (w *fakeWorld) ids(stream string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.parts[stream].order)
}

// releaseAcks returns the ack-ids consumer's releases of stream carried.
func (w *fakeWorld) releaseAcks(consumer, stream string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acks["releaseLease "+consumer+" "+stream])
}

// holders returns how many partitions each consumer's lease holds now
// (expired leases count as free).
func (w *fakeWorld) owners() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, p := range w.parts {
		if p.owner != "" && p.expires > w.clock.now() {
			out[p.owner]++
		}
	}
	return out
}

// lease returns stream's lease: holder and token.
func (w *fakeWorld) lease(stream string) (string, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.parts[stream]
	return p.owner, p.token
}

// pendingOf returns stream's pending ids, in id order.
func (w *fakeWorld) pendingOf(stream string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.SortedFunc(maps.Keys(w.parts[stream].pel), compareFakeIDs)
}

func (w *fakeWorld) deadOf(stream string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.parts[stream].dead)
}

// pass moves the clock on by d, the consumers' holders renewing on their
// timers on the way.
func (w *fakeWorld) pass(d time.Duration) { advance(d) }

// fakePartitionServer is one consumer's view of one partition.
type fakePartitionServer struct {
	w                *fakeWorld
	stream, consumer string
	maxDeliveries    int
	backoff          []time.Duration
	count            int // new entries per next call at most
}

var _ partitionServer = (*fakePartitionServer)(nil)

func (s *fakePartitionServer) createGroup(context.Context, string) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.call("createGroup", s.consumer, s.stream)
}

func (s *fakePartitionServer) checkGroup(context.Context) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.call("checkGroup", s.consumer, s.stream)
}

// setPause pauses the group on stream (nil: resumes it).
func (w *fakeWorld) setPause(stream string, p *pelwarden.Pause) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused == nil {
		w.paused = map[string]*pelwarden.Pause{}
	}
	w.paused[stream] = p
}

func (s *fakePartitionServer) pauseState(context.Context) (*pelwarden.Pause, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("pauseState", s.consumer, s.stream); err != nil {
		return nil, err
	}
	return s.w.paused[s.stream], nil
}

// stale counts as a call of op "stale".
func (s *fakePartitionServer) stale(error) {
	s.w.mu.Lock()
	s.w.calls["stale "+s.consumer+" "+s.stream]++
	s.w.mu.Unlock()
}

// holds is the library's fence: the caller holds the lease with token (an
// expired lease nobody took is still held). mu is held.
func (s *fakePartitionServer) holds(p *fakePartition, token int64) bool {
	return p.owner == s.consumer && p.token == token && token > 0
}

// ackHeld is the library's ack of ids by the lease holder (fenced by the
// token, not per id): each still pending is acked. mu is held.
func (s *fakePartitionServer) ackHeld(p *fakePartition, ids []string) (acked int64) {
	for _, id := range ids {
		if _, ok := p.pel[id]; ok {
			delete(p.pel, id)
			acked++
		}
	}
	return acked
}

// giveBack is the library's fenced give-back: each id the caller owns
// gets its delivery count set back to 0. mu is held.
func (s *fakePartitionServer) giveBack(p *fakePartition, ids []string) (given int64) {
	for _, id := range ids {
		if e, ok := p.pel[id]; ok && e.owner == s.consumer {
			e.deliveries = 0
			given++
		}
	}
	return given
}

// slowCall makes the first call of op by consumer at or after the clock
// reading after take the clock's time takes first, as a slow server would;
// the returned call's done closes when it has run, and its sent is when it
// was sent.
func (w *fakeWorld) slowCall(op, consumer string, after, takes time.Duration) *fakeSlowCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slow = &fakeSlowCall{op: op, consumer: consumer, after: after, takes: takes, done: make(chan struct{})}
	return w.slow
}

// delay runs the slow call due for op by consumer, if any: it sleeps
// outside the lock, so the other goroutines of the test go on meanwhile.
func (w *fakeWorld) delay(op, consumer string) (finish func()) {
	w.mu.Lock()
	sl := w.slow
	due := sl != nil && sl.op == op && sl.consumer == consumer && w.clock.now() >= sl.after
	if due {
		w.slow = nil
		sl.sent = w.clock.now()
	}
	w.mu.Unlock()
	if !due {
		return func() {}
	}
	time.Sleep(sl.takes)
	return func() { close(sl.done) }
}

func (s *fakePartitionServer) acquire(_ context.Context, ttl time.Duration) (*pelwarden.Lease, error) {
	defer s.w.delay("acquire", s.consumer)()
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("acquire", s.consumer, s.stream); err != nil {
		return nil, err
	}
	p, now := s.w.parts[s.stream], s.w.clock.now()
	if p.owner != s.consumer && p.owner != "" && p.expires > now {
		return &pelwarden.Lease{Owner: p.owner, Token: p.token, TTL: p.expires - now}, nil
	}
	if p.owner != s.consumer || p.token == 0 {
		p.token++
	}
	p.owner, p.expires = s.consumer, now+ttl
	return &pelwarden.Lease{Held: true, Owner: s.consumer, Token: p.token, TTL: ttl}, nil
}

// fail is the library's fail with min-idle 0: the head the caller owns
// is re-timed to now, so its backoff counts from the failure (the fake
// keeps no error text).
func (s *fakePartitionServer) fail(_ context.Context, id, _ string) (*pelwarden.ReleaseResult, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("fail", s.consumer, s.stream); err != nil {
		return nil, err
	}
	res := &pelwarden.ReleaseResult{}
	if e, ok := s.w.parts[s.stream].pel[id]; ok && e.owner == s.consumer {
		e.at = s.w.clock.now()
		res.Released = 1
	} else {
		res.NotOwned = []string{id}
	}
	return res, nil
}

// ack is the library's ack function: each id the caller owns is
// acked.
func (s *fakePartitionServer) ack(_ context.Context, ids []string) (*pelwarden.AckResult, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("ack", s.consumer, s.stream); err != nil {
		return nil, err
	}
	return fakeFencedAck(s.w.parts[s.stream].pel, s.consumer, ids), nil
}

func (s *fakePartitionServer) releaseLease(_ context.Context, token int64, acks, giveBack []string) (*pelwarden.ReleaseLeaseResult, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("releaseLease", s.consumer, s.stream); err != nil {
		return nil, err
	}
	key := "releaseLease " + s.consumer + " " + s.stream
	s.w.acks[key] = append(s.w.acks[key], strings.Join(acks, ","))
	p := s.w.parts[s.stream]
	if !s.holds(p, token) {
		return &pelwarden.ReleaseLeaseResult{}, nil
	}
	res := &pelwarden.ReleaseLeaseResult{Released: true, Acked: s.ackHeld(p, acks), GivenBack: s.giveBack(p, giveBack)}
	p.owner, p.expires = "", 0
	return res, nil
}

// leaseScan is the library's LEASE_SCAN: pending heads looked at per call.
const leaseScan = 100

// next is lease_next; with readApart, LeaseNextRead: the function reads
// nothing and the read behind it (in the same transaction: under mu)
// takes up to count new entries, handed out when the function found
// nothing pending, else deferred.
func (s *fakePartitionServer) next(_ context.Context, token int64, ttl time.Duration, acks, giveBack []string, readApart bool) (*pelwarden.LeaseNextResult, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("next", s.consumer, s.stream); err != nil {
		return nil, err
	}
	if readApart {
		s.w.calls["readApart "+s.consumer+" "+s.stream]++
	}
	res := s.leaseNext(token, ttl, acks, giveBack, !readApart)
	if !readApart {
		return res, nil
	}
	read := s.readNew()
	if res.Held && res.NonePending && len(res.Entries) == 0 {
		res.Entries = read
	} else {
		for _, e := range read {
			res.Deferred = append(res.Deferred, e.ID)
		}
	}
	return res, nil
}

// readNew is XREADGROUP ... COUNT count ... > (with mu held).
func (s *fakePartitionServer) readNew() []pelwarden.Entry {
	p, now := s.w.parts[s.stream], s.w.clock.now()
	var read []pelwarden.Entry
	for ; p.next < len(p.order) && len(read) < max(s.count, 1); p.next++ {
		id := p.order[p.next]
		p.pel[id] = &fakePending{owner: s.consumer, deliveries: 1, at: now}
		read = append(read, pelwarden.Entry{ID: id, Fields: p.entries[id], Deliveries: 1})
	}
	return read
}

// leaseNext is the function (with mu held); readNew: it reads the new
// entries itself when nothing is pending (count > 0).
func (s *fakePartitionServer) leaseNext(token int64, ttl time.Duration, acks, giveBack []string, readNew bool) *pelwarden.LeaseNextResult {
	p, now := s.w.parts[s.stream], s.w.clock.now()
	if !s.holds(p, token) {
		return &pelwarden.LeaseNextResult{}
	}
	p.expires = now + ttl
	res := &pelwarden.LeaseNextResult{Held: true, Acked: s.ackHeld(p, acks), GivenBack: s.giveBack(p, giveBack)}
	ids := slices.SortedFunc(maps.Keys(p.pel), compareFakeIDs)
	for _, id := range ids[:min(len(ids), leaseScan)] {
		e := p.pel[id]
		fields, exists := p.entries[id]
		if s.maxDeliveries > 0 && e.deliveries >= int64(s.maxDeliveries) {
			switch {
			case !exists:
				res.Deleted = append(res.Deleted, id)
			case len(fields) > 1 && fields[1].Name == "huge":
				res.Blocked, res.Wait, res.BlockedDeliveries = id, -1, e.deliveries
				return res
			default:
				p.dead = append(p.dead, id)
				res.DeadLettered = append(res.DeadLettered, id)
			}
			delete(p.pel, id)
			continue
		}
		if len(s.backoff) > 0 && e.deliveries > 0 {
			delay := s.backoff[min(int(e.deliveries), len(s.backoff))-1]
			if idle := now - e.at; idle < delay {
				res.Blocked, res.Wait, res.BlockedDeliveries = id, delay-idle, e.deliveries
				return res
			}
		}
		if !exists {
			delete(p.pel, id)
			res.Deleted = append(res.Deleted, id)
			continue
		}
		e.owner, e.at = s.consumer, now
		e.deliveries++
		res.Entries = []pelwarden.Entry{{ID: id, Fields: fields, Deliveries: e.deliveries}}
		return res
	}
	if len(res.DeadLettered)+len(res.Deleted) >= leaseScan {
		return res
	}
	res.NonePending = true
	if readNew {
		res.Entries = s.readNew()
	}
	return res
}

func (s *fakePartitionServer) deadLetter(_ context.Context, id, _ string) (*pelwarden.DeadLetterResult, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.call("deadLetter", s.consumer, s.stream); err != nil {
		return nil, err
	}
	p := s.w.parts[s.stream]
	res := &pelwarden.DeadLetterResult{}
	e, ok := p.pel[id]
	switch {
	case !ok:
		res.NotOwned, res.NotPending = []string{id}, []string{id}
	case e.owner != s.consumer:
		res.NotOwned = []string{id}
	default:
		delete(p.pel, id)
		p.dead = append(p.dead, id)
		res.DeadLettered = []string{id}
	}
	return res, nil
}

// fakeMembers is one consumer's view of the membership set.
type fakeMembers struct {
	w        *fakeWorld
	consumer string
}

var _ memberServer = (*fakeMembers)(nil)

func (m *fakeMembers) heartbeat(_ context.Context, ttl time.Duration) ([]string, error) {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if err := m.w.call("heartbeat", m.consumer, ""); err != nil {
		return nil, err
	}
	now := m.w.clock.now()
	m.w.members[m.consumer] = now + ttl
	var live []string
	for name, until := range m.w.members {
		if until < now {
			delete(m.w.members, name)
			continue
		}
		live = append(live, name)
	}
	slices.Sort(live)
	return live, nil
}

func (m *fakeMembers) leave(context.Context) error {
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if err := m.w.call("leave", m.consumer, ""); err != nil {
		return err
	}
	delete(m.w.members, m.consumer)
	return nil
}

// orderedConsumer is one consumer of an ordered test: its run on the
// world, its metrics and logs, and how to stop it.
type orderedConsumer struct {
	name string
	run  *orderedRun
	m    *partitionGauges
	logs *syncBuffer

	cancel context.CancelFunc
	done   chan error
}

// testPartitionLease is the lease of the ordered tests, by the fake
// clock: renewed every 10s, given up 22.5s after a renewing call was sent.
const testPartitionLease = 30 * time.Second

// start runs consumer name in ordered mode on the world's streams until
// stopped; change adjusts its Config (the handler, say).
func (w *fakeWorld) start(t *testing.T, streams []string, name string, change func(*Config)) *orderedConsumer {
	t.Helper()
	c := &orderedConsumer{name: name, m: &partitionGauges{}, logs: &syncBuffer{}, done: make(chan error, 1)}
	cfg := Config{Streams: streams, Group: "g", Consumer: name, ordered: true, partitionLease: testPartitionLease,
		Handler: nopHandler(), ShutdownTimeout: 5 * time.Second,
		Metrics: c.m, Logger: slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if change != nil {
		change(&cfg)
	}
	cfg = cfg.withDefaults()
	require.NoError(t, cfg.validate())
	partitionOf := func(pcfg Config) partitionServer {
		return &fakePartitionServer{w: w, stream: pcfg.Stream, consumer: name, maxDeliveries: pcfg.deliveryLimit(), backoff: pcfg.Backoff, count: orderedBatch}
	}
	c.run = newOrderedRun(cfg, consumerLogger(cfg), &fakeLoader{}, partitionOf, &fakeMembers{w: w, consumer: name}, w.clock)
	ctx, cancel := context.WithCancel(t.Context())
	c.cancel = cancel
	go func() {
		_, err := c.run.serve(ctx)
		c.done <- err
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop stops the consumer gracefully (a cancelled Run context) and waits
// for Run to return nil; a second stop does nothing.
func (c *orderedConsumer) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	if c.done == nil {
		return
	}
	select {
	case err := <-c.done:
		require.NoError(t, err, "consumer %s", c.name)
	case <-time.After(20 * time.Second):
		t.Fatalf("consumer %s did not stop", c.name)
	}
	c.done = nil
}

// handlings records handler calls per stream, and fails the test when two
// handlers of one partition ever run at once.
type handlings struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string]int
	ids     map[string][]string // stream -> ids, in the order handlers started
	by      map[string][]string // stream -> consumers, alongside ids
}

func newHandlings(t *testing.T) *handlings {
	return &handlings{t: t, running: map[string]int{}, ids: map[string][]string{}, by: map[string][]string{}}
}

// wrap returns a handler that records each call, then runs h.
func (hs *handlings) wrap(h func(ctx context.Context, m *Message) error) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		hs.mu.Lock()
		hs.running[m.Stream]++
		if hs.running[m.Stream] > 1 {
			hs.t.Errorf("two handlers of partition %s at once (%s on %s)", m.Stream, m.ID, m.Consumer)
		}
		hs.ids[m.Stream] = append(hs.ids[m.Stream], m.ID)
		hs.by[m.Stream] = append(hs.by[m.Stream], m.Consumer)
		hs.mu.Unlock()
		defer func() {
			hs.mu.Lock()
			hs.running[m.Stream]--
			hs.mu.Unlock()
		}()
		return h(ctx, m)
	})
}

func (hs *handlings) of(stream string) []string {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.ids[stream])
}

func (hs *handlings) count() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	n := 0
	for _, ids := range hs.ids {
		n += len(ids)
	}
	return n
}
