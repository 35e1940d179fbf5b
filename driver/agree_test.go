package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// agreeWorld is one stream with group "g" as a scripted scenario sees it:
// the fake (fakeServer) or a real server (redisLane). Consumer "me" makes
// every laneServer call; "other" stands for another consumer.
type agreeWorld interface {
	// add appends n entries and returns their ids.
	add(n int) []string
	// deliver hands the next k undelivered entries to owner, delivered n
	// times, and returns their ids.
	deliver(owner string, k int, n int64) []string
	// srv is the laneServer of consumer "me".
	srv() laneServer
	// pel returns the pending entries as "id owner deliveries", by id.
	pel() []string
	// dead returns the dead-lettered entries as "id reason error", in
	// order.
	dead() []string
	// idle lets d pass on the server's clock (real time on a server).
	idle(d time.Duration)
}

// agreeScenario is a script of calls; it writes what it observes to the
// transcript (t.line), with entry ids written as the entries' names.
type agreeScenario struct {
	name string
	run  func(t *transcript, w agreeWorld)
}

// transcript records what a scenario observed, naming entries e0, e1, ...
// in the order they were added, so two worlds' transcripts compare.
type transcript struct {
	ctx   context.Context
	names map[string]string
	lines []string
}

func (t *transcript) named(ids []string) {
	for _, id := range ids {
		t.names[id] = "e" + strconv.Itoa(len(t.names))
	}
}

func (t *transcript) name(id string) string {
	if n, ok := t.names[id]; ok {
		return n
	}
	return "?" + id
}

func (t *transcript) list(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.name(id)
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}

func (t *transcript) line(format string, a ...any) {
	t.lines = append(t.lines, fmt.Sprintf(format, a...))
}

// pel names the entries of PEL rows ("id owner deliveries"), sorted.
func (t *transcript) pel(rows []string) []string {
	out := make([]string, 0, len(rows))
	for _, row := range rows {
		f := strings.Fields(row)
		out = append(out, t.name(f[0])+" "+f[1]+" "+f[2])
	}
	slices.Sort(out)
	return out
}

// state writes the PEL and the dead letters.
func (t *transcript) state(w agreeWorld) {
	pel := t.pel(w.pel())
	var dead []string
	for _, row := range w.dead() {
		id, rest, _ := strings.Cut(row, " ")
		dead = append(dead, t.name(id)+" "+rest)
	}
	t.line("pel %v; dead %v", pel, dead)
}

func (t *transcript) err(op string, err error) bool {
	if err != nil {
		t.line("%s: error %v", op, pelwarden.Classify(err))
		return true
	}
	return false
}

// The scripted scenarios of the unit tests' fake, checked against a real
// server: every call the fake answers, it answers as the server does.
var agreeScenarios = []agreeScenario{
	{"read, ack, fenced ack", func(t *transcript, w agreeWorld) {
		ctx, s := t.ctx, w.srv()
		t.named(w.add(4))
		msgs, err := s.read(ctx, 2, false, 0)
		if !t.err("read", err) {
			var got []string
			for _, m := range msgs {
				got = append(got, fmt.Sprintf("%s/%d/%s", t.name(m.ID), m.Deliveries, m.Fields[0].Value))
			}
			t.line("read %v", got)
		}
		ids := []string{msgs[0].ID, msgs[1].ID}
		n, err := s.ack(ctx, ids[:1])
		if !t.err("ack", err) {
			t.line("ack %d", n)
		}
		n, err = s.ack(ctx, ids[:1])
		if !t.err("ack again", err) {
			t.line("ack again %d", n)
		}
		other := w.deliver("other", 1, 1)
		res, err := s.ackFenced(ctx, slices.Concat(ids, other))
		if !t.err("ackFenced", err) {
			t.line("ackFenced acked %d not owned %s not pending %s", res.Acked, t.list(res.NotOwned), t.list(res.NotPending))
		}
		t.state(w)
	}},
	{"extend, release, give back", func(t *transcript, w agreeWorld) {
		ctx, s := t.ctx, w.srv()
		t.named(w.add(3))
		msgs, err := s.read(ctx, 2, false, 0)
		if t.err("read", err) {
			return
		}
		mine := []string{msgs[0].ID, msgs[1].ID}
		other := w.deliver("other", 1, 3)
		ext, err := s.extend(ctx, slices.Concat(mine, other))
		if !t.err("extend", err) {
			t.line("extend %d not owned %s deleted %s", ext.Extended, t.list(ext.NotOwned), t.list(ext.Deleted))
		}
		rel, err := s.release(ctx, slices.Concat(mine[:1], other), time.Minute, time.Second)
		if !t.err("release", err) {
			t.line("release %d not owned %s", rel.Released, t.list(rel.NotOwned))
		}
		gb, err := s.giveBack(ctx, mine[1:], time.Minute)
		if !t.err("giveBack", err) {
			t.line("giveBack %d not owned %s", gb.Released, t.list(gb.NotOwned))
		}
		idle, err := s.anyIdle(ctx, 0)
		if !t.err("anyIdle", err) {
			t.line("anyIdle(0) %v", idle)
		}
		t.state(w)
	}},
	{"claim and dead letters", func(t *transcript, w agreeWorld) {
		ctx, s := t.ctx, w.srv()
		t.named(w.add(4))
		w.deliver("other", 1, 1)
		w.deliver("other", 1, 5)
		w.deliver("other", 1, 2)
		page, err := s.claim(ctx, pelwarden.ClaimArgs{MinIdle: 0, Count: 10, MaxDeliveries: 3})
		if !t.err("claim", err) {
			var got []string
			for _, e := range page.Entries {
				got = append(got, fmt.Sprintf("%s/%d", t.name(e.ID), e.Deliveries))
			}
			slices.Sort(got)
			t.line("claim %v dead-lettered %s done %v taken from %v", got, t.list(page.DeadLettered), page.Done(), page.TakenFrom)
		}
		t.state(w)
		page, err = s.claim(ctx, pelwarden.ClaimArgs{MinIdle: 0, Count: 10, MaxDeliveries: pelwarden.NoDeliveryLimit})
		if !t.err("claim without a limit", err) {
			t.line("claim without a limit: %d entries, dead-lettered %s", len(page.Entries), t.list(page.DeadLettered))
		}
		msgs, err := s.read(ctx, 1, false, 0)
		if t.err("read", err) || len(msgs) != 1 {
			t.line("read %d", len(msgs))
			return
		}
		dl, err := s.deadLetter(ctx, msgs[0].ID, "boom")
		if !t.err("deadLetter", err) {
			t.line("deadLetter %s not owned %s", t.list(dl.DeadLettered), t.list(dl.NotOwned))
		}
		dl, err = s.deadLetter(ctx, msgs[0].ID, "again")
		if !t.err("deadLetter again", err) {
			t.line("deadLetter again %s not owned %s not pending %s", t.list(dl.DeadLettered), t.list(dl.NotOwned), t.list(dl.NotPending))
		}
		t.state(w)
	}},
	{"reads that claim", func(t *transcript, w agreeWorld) {
		ctx, s := t.ctx, w.srv()
		t.named(w.add(4))
		w.deliver("other", 1, 4)
		w.idle(5 * time.Millisecond)
		w.deliver("other", 1, 1)
		w.idle(5 * time.Millisecond)
		msgs, err := s.read(ctx, 3, false, 2*time.Millisecond)
		switch {
		case errors.Is(err, errReadClaimRefused):
			t.line("read with CLAIM refused")
		case !t.err("read with CLAIM", err):
			var got []string
			for _, m := range msgs {
				got = append(got, fmt.Sprintf("%s/%d", t.name(m.ID), m.Deliveries))
			}
			t.line("read with CLAIM %v", got) // longest idle first, then new ones
		}
		t.state(w)
	}},
	{"trim", func(t *transcript, w agreeWorld) {
		ctx, s := t.ctx, w.srv()
		t.named(w.add(5))
		msgs, err := s.read(ctx, 3, false, 0)
		if t.err("read", err) {
			return
		}
		if _, err := s.ack(ctx, []string{msgs[0].ID, msgs[1].ID}); t.err("ack", err) {
			return
		}
		res, err := s.trim(ctx, 1)
		if !t.err("trim", err) {
			t.line("trim %d more %v", res.Trimmed, res.More)
		}
		res, err = s.trim(ctx, 10)
		if !t.err("trim again", err) {
			t.line("trim again %d more %v", res.Trimmed, res.More)
		}
		t.state(w)
	}},
}

// The fake the unit tests run on agrees with real servers: each scripted
// scenario leaves the same transcript on both. Where it is set,
// PELWARDEN_TEST_REDIS_URL names the server (`make unit` runs this test
// on every server of the matrix); without it the test is skipped.
func TestFakeAgreesWithServer(t *testing.T) {
	rdb, lib := agreeServer(t)
	// The fake's reads claim where the server's do (Redis 8.4+): the
	// driver's own read, on a scratch stream, asks the server.
	probe := newRealAgree(t, rdb, lib, fmt.Sprintf("{pwagree-probe-%d}", time.Now().UnixNano()))
	_, err := probe.lane.read(t.Context(), 1, false, time.Second)
	claims := err == nil
	if !errors.Is(err, errReadClaimRefused) {
		require.NoError(t, err)
	}
	t.Logf("server reads claim: %v", claims)
	for i, sc := range agreeScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var fake *transcript
			synctest.Test(t, func(t *testing.T) {
				fake = &transcript{ctx: t.Context(), names: map[string]string{}}
				sc.run(fake, newFakeAgree(claims))
			})
			real := &transcript{ctx: t.Context(), names: map[string]string{}}
			stream := fmt.Sprintf("{pwagree-%d-%d}", time.Now().UnixNano(), i)
			sc.run(real, newRealAgree(t, rdb, lib, stream))
			require.Equal(t, real.lines, fake.lines, "the fake's transcript (actual) against the server's (expected)")
			t.Logf("transcript:\n%s", strings.Join(real.lines, "\n"))
		})
	}
}

// agreeServer returns a client of the server PELWARDEN_TEST_REDIS_URL
// names, with the library loaded, or skips the test without it.
func agreeServer(t *testing.T) (*redis.Client, *pelwarden.Library) {
	t.Helper()
	url := os.Getenv("PELWARDEN_TEST_REDIS_URL")
	if url == "" {
		t.Skip("set PELWARDEN_TEST_REDIS_URL=redis://host:port (make test does)")
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	lib := pelwarden.NewLibrary(rdb)
	_, err = lib.Load(t.Context())
	require.NoError(t, err)
	return rdb, lib
}

// fakeAgree is the fake's world.
type fakeAgree struct{ f *fakeServer }

func newFakeAgree(claims bool) *fakeAgree {
	f := newFakeServer(newClock(), "me")
	f.claims = claims
	return &fakeAgree{f: f}
}

func (w *fakeAgree) idle(d time.Duration) { advance(d) } // in a synctest bubble

func (w *fakeAgree) add(n int) []string { return w.f.add(n) }
func (w *fakeAgree) srv() laneServer    { return w.f }

func (w *fakeAgree) deliver(owner string, k int, n int64) []string {
	w.f.mu.Lock()
	ids := slices.Clone(w.f.order[w.f.next:min(w.f.next+k, len(w.f.order))])
	w.f.mu.Unlock()
	w.f.pending(owner, n, 0, ids...)
	return ids
}

func (w *fakeAgree) pel() []string {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	var out []string
	for id, p := range w.f.pel {
		out = append(out, fmt.Sprintf("%s %s %d", id, p.owner, p.deliveries))
	}
	return out
}

func (w *fakeAgree) dead() []string {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	var out []string
	for _, id := range w.f.dead {
		reason, text := pelwarden.ReasonHandler, w.f.deadText[id]
		if text == "" {
			reason = pelwarden.ReasonMaxDeliveries
		}
		out = append(out, fmt.Sprintf("%s %s %q", id, reason, text))
	}
	return out
}

// realAgree is a real server's world: stream with group "g".
type realAgree struct {
	t      *testing.T
	rdb    *redis.Client
	stream string
	lane   *redisLane
	n      int
}

func newRealAgree(t *testing.T, rdb *redis.Client, lib *pelwarden.Library, stream string) *realAgree {
	ctx := t.Context()
	dlq := pelwarden.DeadLetterStreamFor(stream)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err())
	t.Cleanup(func() { rdb.Del(context.WithoutCancel(ctx), stream, dlq, pelwarden.LastErrorsKeyFor(stream)) })
	return &realAgree{t: t, rdb: rdb, stream: stream, lane: newRedisLane(&redisStream{rdb: rdb, lib: lib, stream: stream,
		deadLetterStream: dlq, lastErrors: newLastErrors(stream, slog.New(slog.DiscardHandler)), group: "g", consumer: "me",
		readBlock: time.Second})}
}

func (w *realAgree) srv() laneServer { return w.lane }

func (w *realAgree) idle(d time.Duration) { time.Sleep(d) } // the server's clock is real time

// add writes entries with the fake's one field, n = the entry's number.
func (w *realAgree) add(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		w.n++
		id, err := w.rdb.XAdd(w.t.Context(), &redis.XAddArgs{Stream: w.stream, Values: []string{"n", strconv.Itoa(w.n) + "-0"}}).Result()
		require.NoError(w.t, err)
		ids[i] = id
	}
	return ids
}

func (w *realAgree) deliver(owner string, k int, n int64) []string {
	ctx := w.t.Context()
	res, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: owner, Streams: []string{w.stream, ">"}, Count: int64(k)}).Result()
	require.NoError(w.t, err)
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	args := []any{"XCLAIM", w.stream, "g", owner, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	require.NoError(w.t, w.rdb.Do(ctx, append(args, "RETRYCOUNT", n, "JUSTID")...).Err())
	return ids
}

func (w *realAgree) pel() []string {
	ps, err := w.rdb.XPendingExt(w.t.Context(), &redis.XPendingExtArgs{Stream: w.stream, Group: "g", Start: "-", End: "+", Count: 100}).Result()
	require.NoError(w.t, err)
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %s %d", p.ID, p.Consumer, p.RetryCount))
	}
	return out
}

func (w *realAgree) dead() []string {
	msgs, err := w.rdb.XRange(w.t.Context(), pelwarden.DeadLetterStreamFor(w.stream), "-", "+").Result()
	require.NoError(w.t, err)
	var out []string
	for _, m := range msgs {
		d, ok := pelwarden.ParseDeadLetterMessage(m)
		require.True(w.t, ok)
		out = append(out, fmt.Sprintf("%s %s %q", d.OriginalID, d.Reason, d.Error))
	}
	return out
}

// orderedAgreeWorld is one partition with group "g" in ordered mode as a
// scripted scenario sees it: the fake world (fakeWorld) or a real server
// (redisPartition), for consumers "me" and "other".
type orderedAgreeWorld interface {
	add(n int) []string
	srv(consumer string) partitionServer
	// pel returns the pending entries as "id owner deliveries"; dead the
	// dead-lettered ids, in order.
	pel() []string
	dead() []string
}

// The ordered step, scripted: the fake world's lease, lease_next, fail,
// dead-letter and lease_release calls answer as the library's do.
func orderedAgreeScenario(t *transcript, w orderedAgreeWorld) {
	ctx := t.ctx
	me, other := w.srv("me"), w.srv("other")
	t.named(w.add(3))
	l, err := me.acquire(ctx, 10*time.Second)
	if t.err("acquire", err) {
		return
	}
	t.line("acquire held %v token %d", l.Held, l.Token)
	token := l.Token
	lo, err := other.acquire(ctx, 10*time.Second)
	if !t.err("acquire by other", err) {
		t.line("acquire by other held %v owner %s token %d", lo.Held, lo.Owner, lo.Token)
	}
	step := func(what string, acks, giveBack []string) []pelwarden.Entry {
		res, err := me.next(ctx, token, 10*time.Second, acks, giveBack, false)
		if t.err(what, err) {
			return nil
		}
		var got []string
		for _, e := range res.Entries {
			got = append(got, fmt.Sprintf("%s/%d", t.name(e.ID), e.Deliveries))
		}
		t.line("%s: held %v acked %d given back %d entries %v dead-lettered %s none pending %v", what, res.Held, res.Acked,
			res.GivenBack, got, t.list(res.DeadLettered), res.NonePending)
		return res.Entries
	}
	batch := step("next", nil, nil)
	if len(batch) != 3 {
		return
	}
	head := step("next, the first acked, the rest given back", []string{batch[0].ID}, []string{batch[1].ID, batch[2].ID})
	if len(head) != 1 {
		return
	}
	rel, err := me.fail(ctx, head[0].ID, "failed")
	if !t.err("fail", err) {
		t.line("fail released %d not owned %s", rel.Released, t.list(rel.NotOwned))
	}
	again := step("next after the failure", nil, nil)
	if len(again) != 1 {
		return
	}
	if _, err := me.fail(ctx, again[0].ID, "failed again"); t.err("fail again", err) {
		return
	}
	// At MaxDeliveries (2) the head is dead-lettered by the next call.
	last := step("next at MaxDeliveries", nil, nil)
	if len(last) == 1 {
		dl, err := me.deadLetter(ctx, last[0].ID, "poison")
		if !t.err("deadLetter", err) {
			t.line("deadLetter %s", t.list(dl.DeadLettered))
		}
	}
	step("next after the dead letters", nil, nil)
	res, err := other.next(ctx, token, 10*time.Second, nil, nil, false)
	if !t.err("next by other", err) {
		t.line("next by other held %v", res.Held)
	}
	rl, err := me.releaseLease(ctx, token, nil, nil)
	if !t.err("releaseLease", err) {
		t.line("releaseLease released %v", rl.Released)
	}
	lo, err = other.acquire(ctx, 10*time.Second)
	if !t.err("acquire by other after the release", err) {
		t.line("acquire by other after the release held %v token %d", lo.Held, lo.Token)
	}
	pel := t.pel(w.pel())
	var dead []string
	for _, id := range w.dead() {
		dead = append(dead, t.name(id))
	}
	t.line("pel %v; dead %v", pel, dead)
}

// The ordered fake agrees with real servers (see TestFakeAgreesWithServer).
func TestOrderedFakeAgreesWithServer(t *testing.T) {
	rdb, lib := agreeServer(t)

	var fake *transcript
	synctest.Test(t, func(t *testing.T) {
		fake = &transcript{ctx: t.Context(), names: map[string]string{}}
		orderedAgreeScenario(fake, &fakeOrderedAgree{w: newFakeWorld("{p}"), stream: "{p}"})
	})
	real := &transcript{ctx: t.Context(), names: map[string]string{}}
	stream := fmt.Sprintf("{pwagree-%d}", time.Now().UnixNano())
	require.NoError(t, rdb.XGroupCreateMkStream(t.Context(), stream, "g", "0").Err())
	t.Cleanup(func() {
		rdb.Del(context.WithoutCancel(t.Context()), stream, pelwarden.DeadLetterStreamFor(stream), pelwarden.LeaseKeyFor(stream),
			pelwarden.LastErrorsKeyFor(stream))
	})
	orderedAgreeScenario(real, &realOrderedAgree{realAgree: &realAgree{t: t, rdb: rdb, stream: stream}, lib: lib})
	require.Equal(t, real.lines, fake.lines, "the fake's transcript (actual) against the server's (expected)")
	t.Logf("transcript:\n%s", strings.Join(real.lines, "\n"))
}

// fakeOrderedAgree is the fake world's partition; MaxDeliveries is 2.
type fakeOrderedAgree struct {
	w      *fakeWorld
	stream string
}

func (a *fakeOrderedAgree) add(n int) []string { return a.w.add(a.stream, n) }
func (a *fakeOrderedAgree) srv(consumer string) partitionServer {
	return &fakePartitionServer{w: a.w, stream: a.stream, consumer: consumer, maxDeliveries: 2, count: orderedBatch}
}

func (a *fakeOrderedAgree) pel() []string {
	a.w.mu.Lock()
	defer a.w.mu.Unlock()
	var out []string
	for id, p := range a.w.parts[a.stream].pel {
		out = append(out, fmt.Sprintf("%s %s %d", id, p.owner, p.deliveries))
	}
	return out
}

func (a *fakeOrderedAgree) dead() []string { return a.w.deadOf(a.stream) }

// realOrderedAgree is a real server's partition; MaxDeliveries is 2.
type realOrderedAgree struct {
	*realAgree
	lib *pelwarden.Library
}

func (a *realOrderedAgree) srv(consumer string) partitionServer {
	log := slog.New(slog.DiscardHandler)
	return &redisPartition{rdb: a.rdb, lib: a.lib, tx: &txProbe{rdb: a.rdb, log: log}, stream: a.stream,
		deadLetterStream: pelwarden.DeadLetterStreamFor(a.stream), lease: pelwarden.LeaseKeyFor(a.stream),
		lastErrors: newLastErrors(a.stream, log), group: "g", consumer: consumer, maxDeliveries: 2}
}

func (a *realOrderedAgree) dead() []string {
	var out []string
	for _, row := range a.realAgree.dead() {
		id, _, _ := strings.Cut(row, " ")
		out = append(out, id)
	}
	return out
}
