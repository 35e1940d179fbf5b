package integration_test

import (
	"context"
	"flag"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The model-based property test of the function library (issue 24 §1).
// rapid draws random sequences of steps by several consumers: XADD,
// XREADGROUP, the library's functions (claim, ack, deadletter, extend,
// release, reap, redrive, trim, stats), XDEL, XTRIM, foreign records in the
// dead-letter stream, and idle times set by the test (age). Each step runs
// on the server and on the reference model (model_ref_test.go); the reply
// must be the model's. After every step the server's state must be the
// model's too: the stream's entries, the PEL (ids, owners, delivery counts,
// fresh or stale), the group's last-delivered id, each consumer's pending
// count and the dead-letter records with their metadata. Then the
// invariants the library promises are checked on the server's state alone
// (modelRun.checkInvariants). A failure prints the seed and the shrunk
// sequence, each step logged with what it did and what the server answered.

// The budget: rapid test cases per server and mode, and the average number
// of steps per case. `make test` runs the CI budget; `make soak-model`
// raises it through PELWARDEN_MODEL_CHECKS (and PELWARDEN_MODEL_STEPS).
// An explicit -rapid.checks or -rapid.steps flag wins over both.
const (
	modelChecks = 100
	modelSteps  = 50
)

// Environment variables that override the budget.
const (
	envModelChecks = "PELWARDEN_MODEL_CHECKS"
	envModelSteps  = "PELWARDEN_MODEL_STEPS"
)

var modelBudgetOnce sync.Once

// setModelBudget sets rapid's -rapid.checks and -rapid.steps for this
// package (only TestLibraryModel uses rapid) unless given on the command
// line. It runs before the test goes parallel.
func setModelBudget(t *testing.T) {
	modelBudgetOnce.Do(func() {
		given := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for _, b := range []struct {
			flag, env string
			def       int
		}{{"rapid.checks", envModelChecks, modelChecks}, {"rapid.steps", envModelSteps, modelSteps}} {
			if given[b.flag] {
				continue
			}
			n := b.def
			if v := os.Getenv(b.env); v != "" {
				var err error
				n, err = strconv.Atoi(v)
				require.NoError(t, err, "%s", b.env)
			}
			require.NoError(t, flag.Set(b.flag, strconv.Itoa(n)))
		}
	})
}

// TestLibraryModel runs the model test on every server of the matrix,
// through FCALL and through the EVALSHA fallback (an ACL user refused
// FUNCTION, FCALL and FCALL_RO).
func TestLibraryModel(t *testing.T) {
	setModelBudget(t)
	eachMode(t, func(t *testing.T, s *target, lib *pelwarden.Library) {
		want := lib.Mode()
		kit := s.kit(t)
		rapid.Check(t, func(rt *rapid.T) {
			newModelRun(t.Context(), rt, kit, s.rdb, lib).repeat()
		})
		require.Equal(t, want, lib.Mode(), "the library stayed in %s mode", want)
	})
}

// modelConsumers are the consumers of a test case.
var modelConsumers = []string{"c0", "c1", "c2", "c3"}

// modelRun is one rapid test case: its own keys, the model, and what the
// checks remember between steps.
type modelRun struct {
	t   *rapid.T
	ctx context.Context
	rdb *redis.Client // the admin client: raw commands and the checks
	lib *pelwarden.Library
	f   *pelwardentest.Fixture
	m   *model

	claimCursor, redriveCursor string // a pass in progress, as a consumer keeps it
	nextN                      int    // the next entry's "n" field

	last       *modelSnapshot    // the server after the previous step
	deliveries map[string]int64  // the highest delivery count the server showed per id
	records    map[string]string // the dead-letter record id of each entry dead-lettered so far
	// untouched are the ids the step's call did not own: the check after
	// the step makes sure the call left them as they were.
	untouched []string
	// trimmed: the step deleted stream entries on the group's behalf; the
	// check makes sure none of them was still needed.
	trimmed bool
}

func newModelRun(ctx context.Context, t *rapid.T, kit *pelwardentest.Server, rdb *redis.Client, lib *pelwarden.Library) *modelRun {
	f := kit.NewFixture(t)
	t.Cleanup(func() { rdb.Del(context.Background(), f.Stream, f.DeadLetterStream) })
	return &modelRun{t: t, ctx: ctx, rdb: rdb, lib: lib, f: f, m: newModel(f.Stream, f.Group),
		claimCursor: "0-0", redriveCursor: "0-0", deliveries: map[string]int64{}, records: map[string]string{}}
}

// repeat starts the case with a few entries, then runs the steps.
func (r *modelRun) repeat() {
	r.addEntries(rapid.IntRange(0, 8).Draw(r.t, "initial entries"))
	r.t.Repeat(map[string]func(*rapid.T){
		"xadd":       r.xadd,
		"xreadgroup": r.xreadgroup,
		"age":        r.age,
		"claim":      r.claim,
		"ack":        r.ack,
		"deadletter": r.deadletter,
		"extend":     r.extend,
		"release":    r.release,
		"reap":       r.reap,
		"redrive":    r.redrive,
		"trim":       r.trim,
		"xdel":       r.xdel,
		"xtrim":      r.xtrim,
		"foreign":    r.foreign,
		"stats":      r.stats,
		"":           func(*rapid.T) { r.check() },
	})
}

// ----------------------------------------------------------------------------
// draws

func (r *modelRun) drawConsumer() string {
	return rapid.SampledFrom(modelConsumers).Draw(r.t, "consumer")
}

// nothingYet reports (and logs) that the stream never held an entry, so
// a step on ids has nothing to draw from: it does nothing, a step the
// shrinker can drop (rapid's Skip would leave its draws in the sequence).
func (r *modelRun) nothingYet(step string) bool {
	if len(r.m.state) == 0 {
		r.t.Logf("step: %s: no ids yet, nothing done", step)
		return true
	}
	return false
}

// drawIDs draws 1 to 4 distinct ids from the consumer's own pending
// entries, every pending entry, or every id the stream ever held.
func (r *modelRun) drawIDs(consumer string) []string {
	known := r.m.knownIDs()
	var mine []string
	for _, id := range r.m.pendingIDs() {
		if r.m.pel[id].owner == consumer {
			mine = append(mine, id)
		}
	}
	pools := [][]string{known, r.m.pendingIDs(), mine, mine}
	n := rapid.IntRange(1, 4).Draw(r.t, "id count")
	var ids []string
	for range n {
		pool := pools[rapid.IntRange(0, 3).Draw(r.t, "id pool (all, pending, own, own)")]
		if len(pool) == 0 {
			pool = known
		}
		id := rapid.SampledFrom(pool).Draw(r.t, "id")
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// serverMillis is the server's clock (ms), which dead-letter records carry.
func (r *modelRun) serverMillis() int64 {
	tm, err := r.rdb.Time(r.ctx).Result()
	require.NoError(r.t, err)
	return tm.UnixMilli()
}

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// sorted returns a sorted copy of ids (nil when empty), for comparing the
// id lists of replies whose order the contract does not fix.
func sorted(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.SortFunc(out, idCompare)
	return out
}

// ----------------------------------------------------------------------------
// steps

// modelPayloads are the values of an entry's "p" field.
var modelPayloads = []string{"a", "", "\x00\xff", "ünïcode", strings.Repeat("x", 40)}

func (r *modelRun) xadd(t *rapid.T) {
	r.addEntries(rapid.IntRange(1, 5).Draw(t, "entries"))
}

func (r *modelRun) addEntries(n int) {
	var ids []string
	for range n {
		fields := []string{"n", strconv.Itoa(r.nextN), "p", rapid.SampledFrom(modelPayloads).Draw(r.t, "payload")}
		r.nextN++
		id, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.f.Stream, Values: fields}).Result()
		require.NoError(r.t, err)
		require.NoError(r.t, r.m.added(id, fields))
		ids = append(ids, id)
	}
	r.t.Logf("step: XADD %d entries: %v", n, ids)
}

func (r *modelRun) xreadgroup(t *rapid.T) {
	c := r.drawConsumer()
	n := rapid.IntRange(1, 6).Draw(t, "count")
	want := r.m.readGroup(c, n)
	res, err := r.rdb.XReadGroup(r.ctx, &redis.XReadGroupArgs{Group: r.f.Group, Consumer: c,
		Streams: []string{r.f.Stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err == redis.Nil {
		res, err = nil, nil
	}
	require.NoError(t, err)
	var got []modelEntry
	for _, s := range res {
		for _, msg := range s.Messages {
			got = append(got, modelEntry{msg.ID, nil})
			wantFields := r.m.fieldsOf[msg.ID]
			require.Len(t, msg.Values, len(wantFields)/2, "XREADGROUP %s fields", msg.ID)
			for i := 0; i+1 < len(wantFields); i += 2 {
				require.Equal(t, wantFields[i+1], msg.Values[wantFields[i]], "XREADGROUP %s field %s", msg.ID, wantFields[i])
			}
		}
	}
	require.Equal(t, entryIDs(want), entryIDs(got), "XREADGROUP %s COUNT %d: ids delivered", c, n)
	t.Logf("step: XREADGROUP %s COUNT %d >: %v", c, n, entryIDs(got))
}

// orNil is es, or nil when empty, for comparing lists.
func orNil[E any](es []E) []E {
	if len(es) == 0 {
		return nil
	}
	return es
}

func entryIDs(es []modelEntry) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.id)
	}
	return ids
}

// age sets the idle time of pending entries, as the test's clock: stale
// (modelStaleIdle) or fresh (0), and may raise their delivery count, with
// XCLAIM to their own owner ... IDLE ms RETRYCOUNT n JUSTID, which keeps the
// owner. Only entries still in the stream: XCLAIM drops the others from the
// PEL.
func (r *modelRun) age(t *rapid.T) {
	var live []string
	for _, id := range r.m.pendingIDs() {
		if r.m.inStream(id) {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		t.Logf("step: age: nothing pending in the stream, nothing done")
		return
	}
	ids := rapid.SliceOfNDistinct(rapid.SampledFrom(live), 1, min(3, len(live)), rapid.ID[string]).Draw(t, "ids to age")
	stale := rapid.Bool().Draw(t, "stale (else fresh)")
	raise := rapid.Int64Range(0, 2).Draw(t, "raise the delivery count by")
	idle := int64(0)
	if stale {
		idle = modelStaleIdle
	}
	for _, id := range ids {
		p := r.m.pel[id]
		got, err := r.rdb.Do(r.ctx, "XCLAIM", r.f.Stream, r.f.Group, p.owner, 0, id,
			"IDLE", idle, "RETRYCOUNT", p.deliveries+raise, "JUSTID").StringSlice()
		require.NoError(t, err)
		require.Equal(t, []string{id}, got, "XCLAIM %s IDLE RETRYCOUNT JUSTID", id)
		p.stale = stale
		p.deliveries += raise
	}
	t.Logf("step: aged %v: idle %d ms, delivery counts raised by %d (owners kept)", ids, idle, raise)
}

// modelBackoffs are the backoff schedules a claim draws from.
var modelBackoffs = [][]int64{nil, {modelBackoff}, {0, modelBackoffXL}, {modelBackoffXL, modelBackoff}}

func (r *modelRun) claim(t *rapid.T) {
	a := modelClaimArgs{
		consumer: r.drawConsumer(),
		minIdle:  rapid.SampledFrom([]int64{0, modelMinIdle}).Draw(t, "min-idle ms"),
		cursor:   "0-0",
		count:    rapid.IntRange(1, 4).Draw(t, "count"),
		// The setting: 0 is the default limit (5), NoDeliveryLimit none.
		maxDeliveries: rapid.SampledFrom([]int{pelwarden.NoDeliveryLimit, 0, 2, 3}).Draw(t, "max-deliveries"),
		maxBytes:      rapid.SampledFrom([]int{0, 1, 30}).Draw(t, "max-bytes"),
		deleteDead:    rapid.Bool().Draw(t, "delete dead-lettered"),
		backoff:       modelBackoffs[rapid.IntRange(0, len(modelBackoffs)-1).Draw(t, "backoff schedule")],
	}
	if rapid.Bool().Draw(t, "continue the pass") {
		a.cursor = r.claimCursor
	}
	if a.maxDeliveries != pelwarden.NoDeliveryLimit {
		a.deadLetterOnly = rapid.Bool().Draw(t, "dead-letter only")
	}
	ca := pelwarden.ClaimArgs{Stream: r.f.Stream, DeadLetterStream: r.f.DeadLetterStream, Group: r.f.Group,
		Consumer: a.consumer, MinIdle: msDur(a.minIdle), Cursor: a.cursor, Count: a.count, MaxDeliveries: a.maxDeliveries,
		DeleteDeadLettered: a.deleteDead, DeadLetterOnly: a.deadLetterOnly, MaxBytes: a.maxBytes}
	for _, d := range a.backoff {
		ca.Backoff = append(ca.Backoff, msDur(d))
	}
	lo := r.serverMillis()
	page, err := r.lib.Claim(r.ctx, ca)
	require.NoError(t, err)
	hi := r.serverMillis()
	want := r.m.claim(a, lo, hi)
	t.Logf("step: claim %+v: cursor %s, live %v, dead-lettered %v, deleted %v, backed off %d", a, page.Cursor,
		claimedIDs(page.Entries), page.DeadLettered, page.Deleted, page.BackedOff)
	require.Equal(t, want.cursor, page.Cursor, "claim cursor")
	require.Equal(t, sortEntries(want.live), sortEntries(page.Entries), "claim: live entries (id, fields, deliveries)")
	require.Equal(t, sorted(want.dead), sorted(page.DeadLettered), "claim: dead-lettered")
	require.Equal(t, sorted(want.deleted), sorted(page.Deleted), "claim: deleted while pending")
	require.Equal(t, want.backedOff, page.BackedOff, "claim: backed off")
	require.Empty(t, page.TooLarge, "claim: too large")
	require.Equal(t, want.takenFrom, page.TakenFrom, "claim: taken from (the live entries' previous owners but the caller)")
	r.claimCursor = page.Cursor
}

func claimedIDs(es []pelwarden.Entry) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

func sortEntries(es []pelwarden.Entry) []pelwarden.Entry {
	if len(es) == 0 {
		return nil
	}
	out := slices.Clone(es)
	slices.SortFunc(out, func(a, b pelwarden.Entry) int { return idCompare(a.ID, b.ID) })
	return out
}

func (r *modelRun) ack(t *rapid.T) {
	if r.nothingYet("ack") {
		return
	}
	c := r.drawConsumer()
	ids := r.drawIDs(c)
	del := rapid.Bool().Draw(t, "delete")
	want := r.m.ack(c, ids, del)
	r.untouched = want.NotOwned
	res, err := r.lib.Ack(r.ctx, pelwarden.AckArgs{Stream: r.f.Stream, Group: r.f.Group, Consumer: c, IDs: slices.Clone(ids), Delete: del})
	require.NoError(t, err)
	t.Logf("step: ack %s %v delete=%v: acked %d, not owned %v, not pending %v", c, ids, del, res.Acked, res.NotOwned, res.NotPending)
	require.Equal(t, want.Acked, res.Acked, "ack: acked")
	require.Equal(t, sorted(want.NotOwned), sorted(res.NotOwned), "ack: not owned")
	require.Equal(t, sorted(want.NotPending), sorted(res.NotPending), "ack: not pending")
}

// modelErrors are the error texts a deadletter call draws from, with the
// text the record must carry (bounded to MaxErrorBytes on a UTF-8
// boundary, ending with the marker).
var modelErrors = []struct{ text, stored string }{
	{"", ""},
	{"boom", "boom"},
	{"ünïcode ☃", "ünïcode ☃"},
	{strings.Repeat("x", 5000), strings.Repeat("x", pelwarden.MaxErrorBytes-len(pelwarden.TruncatedMarker)) + pelwarden.TruncatedMarker},
	// 2-byte runes: 4082 bytes before the marker is a rune boundary.
	{strings.Repeat("é", 2100), strings.Repeat("é", (pelwarden.MaxErrorBytes-len(pelwarden.TruncatedMarker))/2) + pelwarden.TruncatedMarker},
}

func (r *modelRun) deadletter(t *rapid.T) {
	if r.nothingYet("deadletter") {
		return
	}
	c := r.drawConsumer()
	ids := r.drawIDs(c)
	del := rapid.Bool().Draw(t, "delete")
	reason := rapid.SampledFrom([]string{"", pelwarden.ReasonHandler, "poison"}).Draw(t, "reason")
	e := modelErrors[rapid.IntRange(0, len(modelErrors)-1).Draw(t, "error text")]
	storedReason := reason
	if storedReason == "" {
		storedReason = pelwarden.ReasonHandler // the wrapper's default
	}
	lo := r.serverMillis()
	res, err := r.lib.DeadLetter(r.ctx, pelwarden.DeadLetterArgs{Stream: r.f.Stream, DeadLetterStream: r.f.DeadLetterStream,
		Group: r.f.Group, Consumer: c, IDs: slices.Clone(ids), Reason: reason, Error: e.text, Delete: del})
	require.NoError(t, err)
	hi := r.serverMillis()
	want := r.m.deadLetterCall(c, ids, del, storedReason, e.stored, lo, hi)
	r.untouched = want.NotOwned
	t.Logf("step: deadletter %s %v delete=%v reason=%q error=%d bytes: dead-lettered %v, not owned %v, deleted %v, not pending %v",
		c, ids, del, reason, len(e.text), res.DeadLettered, res.NotOwned, res.Deleted, res.NotPending)
	require.Equal(t, sorted(want.DeadLettered), sorted(res.DeadLettered), "deadletter: dead-lettered")
	require.Equal(t, sorted(want.NotOwned), sorted(res.NotOwned), "deadletter: not owned")
	require.Equal(t, sorted(want.Deleted), sorted(res.Deleted), "deadletter: deleted while pending")
	require.Equal(t, sorted(want.NotPending), sorted(res.NotPending), "deadletter: not pending")
	require.Empty(t, res.TooLarge, "deadletter: too large")
}

func (r *modelRun) extend(t *rapid.T) {
	if r.nothingYet("extend") {
		return
	}
	c := r.drawConsumer()
	ids := r.drawIDs(c)
	want := r.m.retime(c, ids, 0)
	r.untouched = want.NotOwned
	res, err := r.lib.Extend(r.ctx, pelwarden.ExtendArgs{Stream: r.f.Stream, Group: r.f.Group, Consumer: c, IDs: slices.Clone(ids)})
	require.NoError(t, err)
	t.Logf("step: extend %s %v: extended %d, not owned %v, deleted %v", c, ids, res.Extended, res.NotOwned, res.Deleted)
	requireRetimed(t, "extend", want, res)
}

func requireRetimed(t *rapid.T, fn string, want pelwarden.ExtendResult, got *pelwarden.ExtendResult) {
	require.Equal(t, want.Extended, got.Extended, "%s: count", fn)
	require.Equal(t, sorted(want.NotOwned), sorted(got.NotOwned), "%s: not owned", fn)
	require.Equal(t, sorted(want.Deleted), sorted(got.Deleted), "%s: deleted while pending", fn)
}

// modelReleases are the (min-idle, delay) pairs a release draws from, in
// ms: each sets the idle time to max(0, min-idle - delay), 0 or
// modelStaleIdle.
var modelReleases = [][2]int64{
	{modelStaleIdle, 0},
	{modelStaleIdle + modelMinIdle + 1, modelMinIdle}, // the delay is sent one ms longer (see sentDelay)
	{modelMinIdle, modelMinIdle},
	{modelMinIdle, 5 * modelMinIdle}, // a delay past min-idle is cut to it
	{0, 0},
}

// sentDelay is a release's delay (ms) as the library sends it: one ms
// more, for the server's clock, which counts whole milliseconds.
func sentDelay(ms int64) int64 {
	if ms == 0 {
		return 0
	}
	return ms + 1
}

func (r *modelRun) release(t *rapid.T) {
	if r.nothingYet("release") {
		return
	}
	c := r.drawConsumer()
	ids := r.drawIDs(c)
	rel := modelReleases[rapid.IntRange(0, len(modelReleases)-1).Draw(t, "min-idle and delay")]
	want := r.m.retime(c, ids, max(0, rel[0]-sentDelay(rel[1])))
	r.untouched = want.NotOwned
	res, err := r.lib.Release(r.ctx, pelwarden.ReleaseArgs{Stream: r.f.Stream, Group: r.f.Group, Consumer: c, IDs: slices.Clone(ids),
		MinIdle: msDur(rel[0]), Delay: msDur(rel[1])})
	require.NoError(t, err)
	t.Logf("step: release %s %v min-idle=%d delay=%d: released %d, not owned %v, deleted %v", c, ids, rel[0], rel[1],
		res.Released, res.NotOwned, res.Deleted)
	requireRetimed(t, "release", want, &pelwarden.ExtendResult{Extended: res.Released, NotOwned: res.NotOwned, Deleted: res.Deleted})
}

// reap: consumer idle times are the server's clock, so the check is what
// is certain whatever they are: no consumer that owns entries, or is kept,
// is deleted; the kept ones report their true pending count; with a 1 h
// threshold (every consumer of a test case is younger) nothing is touched.
func (r *modelRun) reap(t *rapid.T) {
	idle := rapid.SampledFrom([]time.Duration{time.Millisecond, time.Hour}).Draw(t, "idle")
	var keep []string
	for _, c := range modelConsumers {
		if rapid.Bool().Draw(t, "keep "+c) {
			keep = append(keep, c)
		}
	}
	res, err := r.lib.Reap(r.ctx, pelwarden.ReapArgs{Stream: r.f.Stream, Group: r.f.Group, Idle: idle, Keep: keep})
	require.NoError(t, err)
	t.Logf("step: reap idle=%v keep=%v: deleted %v, kept %v", idle, keep, res.Deleted, res.Kept)
	pending := r.m.pendingOf()
	if idle == time.Hour {
		require.Empty(t, res.Deleted, "reap 1h: deleted")
		require.Empty(t, res.Kept, "reap 1h: kept")
	}
	existed := map[string]bool{}
	for _, c := range r.last.consumers {
		existed[c.Name] = true
	}
	for _, c := range res.Deleted {
		require.True(t, existed[c], "reap deleted %s, not a consumer", c)
		require.NotContains(t, keep, c, "reap deleted a kept consumer")
		require.Zero(t, pending[c], "reap deleted %s, which owns entries", c)
	}
	for _, c := range res.Kept {
		require.NotContains(t, keep, c.Name, "reap reported a kept consumer")
		require.Positive(t, pending[c.Name], "reap kept %s for its pending entries", c.Name)
		require.Equal(t, pending[c.Name], c.Pending, "reap: %s's pending count", c.Name)
	}
	after, err := r.rdb.XInfoConsumers(r.ctx, r.f.Stream, r.f.Group).Result()
	require.NoError(t, err)
	for _, c := range after {
		require.NotContains(t, res.Deleted, c.Name, "reap reported %s deleted", c.Name)
	}
}

func (r *modelRun) redrive(t *rapid.T) {
	cursor := "0-0"
	if rapid.Bool().Draw(t, "continue the redrive") {
		cursor = r.redriveCursor
	}
	count := rapid.IntRange(1, 3).Draw(t, "count")
	anySource := rapid.Bool().Draw(t, "any source")
	moved, foreign, other, next := r.m.redrive(cursor, count, anySource)
	page, err := r.lib.Redrive(r.ctx, pelwarden.RedriveArgs{DeadLetterStream: r.f.DeadLetterStream, Stream: r.f.Stream,
		AnySource: anySource, Cursor: cursor, Count: count})
	require.NoError(t, err)
	t.Logf("step: redrive cursor=%s count=%d any-source=%v: cursor %s, moved %v, foreign %v, other source %v",
		cursor, count, anySource, page.Cursor, page.Moved, page.Foreign, page.OtherSource)
	require.Equal(t, next, page.Cursor, "redrive cursor")
	var from []string
	for _, mv := range page.Moved {
		from = append(from, mv.From)
	}
	var want []string
	for _, rec := range moved {
		want = append(want, rec.id)
	}
	require.Equal(t, want, from, "redrive: moved records")
	require.Equal(t, sorted(foreign), sorted(page.Foreign), "redrive: foreign")
	require.Equal(t, sorted(other), sorted(page.OtherSource), "redrive: other source")
	require.Empty(t, page.TooLarge, "redrive: too large")
	for i, mv := range page.Moved {
		require.NoError(t, r.m.redriven(moved[i], mv.To), "redrive: new id of %s", mv.From)
	}
	r.redriveCursor = page.Cursor
}

func (r *modelRun) trim(t *rapid.T) {
	limit := rapid.IntRange(1, 5).Draw(t, "limit")
	dry := rapid.Bool().Draw(t, "dry run")
	want := r.m.trim(limit, dry)
	res, err := r.lib.Trim(r.ctx, pelwarden.TrimArgs{Stream: r.f.Stream, Limit: limit, DryRun: dry})
	require.NoError(t, err)
	t.Logf("step: trim limit=%d dry=%v: trimmed %d (%s..%s), bound %s, more %v, length %d", limit, dry,
		res.Trimmed, res.FirstID, res.LastID, res.Bound, res.More, res.Length)
	require.Equal(t, want, *res, "trim")
	r.trimmed = !dry
}

func (r *modelRun) xdel(t *rapid.T) {
	if len(r.m.entries) == 0 {
		t.Logf("step: XDEL: empty stream, nothing done")
		return
	}
	ids := rapid.SliceOfNDistinct(rapid.SampledFrom(entryIDs(r.m.entries)), 1, min(2, len(r.m.entries)), rapid.ID[string]).Draw(t, "ids to XDEL")
	n, err := r.rdb.XDel(r.ctx, r.f.Stream, ids...).Result()
	require.NoError(t, err)
	for _, id := range ids {
		r.m.remove(id)
	}
	t.Logf("step: XDEL %v: %d", ids, n)
	require.EqualValues(t, len(ids), n, "XDEL")
}

func (r *modelRun) xtrim(t *rapid.T) {
	if len(r.m.entries) == 0 {
		t.Logf("step: XTRIM: empty stream, nothing done")
		return
	}
	var cut []string
	var n int64
	var err error
	if rapid.Bool().Draw(t, "MAXLEN (else MINID)") {
		keep := rapid.IntRange(max(0, len(r.m.entries)-3), len(r.m.entries)-1).Draw(t, "MAXLEN")
		cut = entryIDs(r.m.entries[:len(r.m.entries)-keep])
		n, err = r.rdb.Do(r.ctx, "XTRIM", r.f.Stream, "MAXLEN", "=", keep).Int64()
		t.Logf("step: XTRIM MAXLEN = %d: %d", keep, n)
	} else {
		i := rapid.IntRange(0, min(3, len(r.m.entries)-1)).Draw(t, "MINID entry")
		minID := r.m.entries[i].id
		cut = entryIDs(r.m.entries[:i])
		n, err = r.rdb.Do(r.ctx, "XTRIM", r.f.Stream, "MINID", "=", minID).Int64()
		t.Logf("step: XTRIM MINID = %s: %d", minID, n)
	}
	require.NoError(t, err)
	for _, id := range cut {
		r.m.remove(id)
	}
	require.EqualValues(t, len(cut), n, "XTRIM")
}

// foreign adds a record pelwarden did not write (no metadata), or a
// pelwarden record from another stream, to the dead-letter stream:
// redrive must leave the first alone and move the second only with
// any-source.
func (r *modelRun) foreign(t *rapid.T) {
	rec := &modelRecord{fields: []string{"n", "x" + strconv.Itoa(r.nextN)}}
	r.nextN++
	if rapid.Bool().Draw(t, "foreign (else other source)") {
		rec.foreign = true
	} else {
		rec.originalID, rec.source, rec.consumer, rec.reason, rec.deliveries = "1-1", r.f.Stream+":other", "elsewhere", pelwarden.ReasonHandler, 1
	}
	fields := rec.serverFields(r.f.Group)
	if !rec.foreign {
		fields[len(fields)-3] = "0" // dead_lettered_at, in timeLo..timeHi = 0..0
	}
	id, err := r.rdb.XAdd(r.ctx, &redis.XAddArgs{Stream: r.f.DeadLetterStream, Values: fields}).Result()
	require.NoError(t, err)
	rec.id = id
	r.m.dead = append(r.m.dead, rec)
	t.Logf("step: XADD to the dead-letter stream %s (foreign=%v)", id, rec.foreign)
}

// stats: the read-only snapshot (FCALL_RO, or EVALSHA_RO) agrees with the
// model. Lag is left out: after deletions the servers differ on it.
func (r *modelRun) stats(t *rapid.T) {
	st, err := r.lib.Stats(r.ctx, pelwarden.StatsArgs{Stream: r.f.Stream, DeadLetterStream: r.f.DeadLetterStream, Group: r.f.Group})
	require.NoError(t, err)
	t.Logf("step: stats: pending %d (%s..%s), last delivered %s, length %d, dead letters %d", st.Pending, st.LowestID, st.HighestID,
		st.LastDeliveredID, st.Length, st.DeadLetterLength)
	ids := r.m.pendingIDs()
	lowest, highest := "", ""
	if len(ids) > 0 {
		lowest, highest = ids[0], ids[len(ids)-1]
	}
	require.Equal(t, []any{int64(len(ids)), lowest, highest, r.m.lastDelivered, int64(len(r.m.entries)), int64(len(r.m.dead))},
		[]any{st.Pending, st.LowestID, st.HighestID, st.LastDeliveredID, st.Length, st.DeadLetterLength},
		"stats: pending, lowest, highest, last delivered, length, dead-letter length")
	pending := r.m.pendingOf()
	for _, c := range st.Consumers {
		require.Equal(t, pending[c.Name], c.Pending, "stats: %s's pending count", c.Name)
	}
}

// ----------------------------------------------------------------------------
// the check after every step

// modelSnapshot is the server's state of a test case's keys.
type modelSnapshot struct {
	entries   []modelEntry
	pel       []redis.XPendingExt
	dead      []modelEntry
	group     redis.XInfoGroup
	consumers []redis.XInfoConsumer
}

func (s *modelSnapshot) pending(id string) (redis.XPendingExt, bool) {
	for _, p := range s.pel {
		if p.ID == id {
			return p, true
		}
	}
	return redis.XPendingExt{}, false
}

func (s *modelSnapshot) inStream(id string) bool {
	return slices.ContainsFunc(s.entries, func(e modelEntry) bool { return e.id == id })
}

// snapshot reads the server's state in one round trip.
func (r *modelRun) snapshot() *modelSnapshot {
	var entries, dead *redis.Cmd
	var pel *redis.XPendingExtCmd
	var groups *redis.XInfoGroupsCmd
	var consumers *redis.XInfoConsumersCmd
	_, err := r.rdb.Pipelined(r.ctx, func(p redis.Pipeliner) error {
		entries = p.Do(r.ctx, "XRANGE", r.f.Stream, "-", "+")
		pel = p.XPendingExt(r.ctx, &redis.XPendingExtArgs{Stream: r.f.Stream, Group: r.f.Group, Start: "-", End: "+", Count: 10000})
		dead = p.Do(r.ctx, "XRANGE", r.f.DeadLetterStream, "-", "+")
		groups = p.XInfoGroups(r.ctx, r.f.Stream)
		consumers = p.XInfoConsumers(r.ctx, r.f.Stream, r.f.Group)
		return nil
	})
	require.NoError(r.t, err)
	s := &modelSnapshot{entries: rawEntries(r.t, entries), pel: pel.Val(), dead: rawEntries(r.t, dead), consumers: consumers.Val()}
	g := groups.Val()
	require.Len(r.t, g, 1, "XINFO GROUPS")
	s.group = g[0]
	return s
}

// rawEntries decodes an XRANGE reply, keeping field order.
func rawEntries(t *rapid.T, c *redis.Cmd) []modelEntry {
	rows, err := c.Slice()
	require.NoError(t, err)
	var out []modelEntry
	for _, row := range rows {
		kv := row.([]any)
		e := modelEntry{id: kv[0].(string)}
		for _, f := range kv[1].([]any) {
			e.fields = append(e.fields, f.(string))
		}
		out = append(out, e)
	}
	return out
}

// check compares the server with the model, then checks the invariants
// on the server's state (and its change over the step) alone, so a model
// sharing a mistake with the library would still be caught by them.
func (r *modelRun) check() {
	t, m := r.t, r.m
	s := r.snapshot()

	// The stream's entries.
	require.Equal(t, orNil(m.entries), orNil(s.entries), "the stream's entries (what XDEL, XTRIM, trim and delete flags removed)")

	// The PEL: ids, owners, delivery counts, idle class.
	want := m.pendingIDs()
	got := make([]string, 0, len(s.pel))
	for _, p := range s.pel {
		got = append(got, p.ID)
	}
	require.Equal(t, orNil(want), orNil(got), "pending ids")
	for _, p := range s.pel {
		mp := m.pel[p.ID]
		require.Equal(t, mp.owner, p.Consumer, "owner of %s", p.ID)
		require.Equal(t, mp.deliveries, p.RetryCount, "delivery count of %s", p.ID)
		if mp.stale {
			require.GreaterOrEqual(t, p.Idle, msDur(modelStaleIdle), "%s is stale", p.ID)
		} else {
			require.Less(t, p.Idle, msDur(modelMinIdle), "%s is fresh", p.ID)
		}
	}

	// The group and its consumers.
	require.Equal(t, m.lastDelivered, s.group.LastDeliveredID, "the group's last-delivered id")
	require.EqualValues(t, len(m.pel), s.group.Pending, "the group's pending count")
	pending := m.pendingOf()
	listed := map[string]bool{}
	for _, c := range s.consumers {
		listed[c.Name] = true
		require.Equal(t, pending[c.Name], c.Pending, "consumer %s's pending count", c.Name)
	}
	for c := range pending {
		require.True(t, listed[c], "%s owns entries but is not a consumer of the group", c)
	}

	// The dead-letter records: ids learnt in order, fields and metadata.
	require.Len(t, s.dead, len(m.dead), "dead-letter records")
	for i, rec := range m.dead {
		srv := s.dead[i]
		if rec.id == "" {
			if i > 0 {
				require.True(t, idLess(m.dead[i-1].id, srv.id), "record %s after %s", srv.id, m.dead[i-1].id)
			}
			rec.id = srv.id
		}
		require.Equal(t, rec.id, srv.id, "dead-letter record %d", i)
		wantFields := rec.serverFields(m.group)
		require.Len(t, srv.fields, len(wantFields), "record %s fields: %q", rec.id, srv.fields)
		for j, w := range wantFields {
			if w == "*" {
				at, err := strconv.ParseInt(srv.fields[j], 10, 64)
				require.NoError(t, err, "record %s dead_lettered_at", rec.id)
				require.True(t, at >= rec.timeLo && at <= rec.timeHi, "record %s dead_lettered_at %d not in %d..%d", rec.id, at, rec.timeLo, rec.timeHi)
				continue
			}
			require.Equal(t, w, srv.fields[j], "record %s field %d", rec.id, j)
		}
		d, ok := pelwarden.ParseDeadLetter(toFields(srv.fields))
		require.Equal(t, !rec.foreign, ok, "ParseDeadLetter(%s) ok", rec.id)
		if ok {
			require.Equal(t, toFields(rec.fields), d.Fields, "ParseDeadLetter(%s) fields", rec.id)
			require.Equal(t, []any{rec.originalID, rec.source, m.group, rec.consumer, rec.deliveries, rec.reason, rec.errText},
				[]any{d.OriginalID, d.Stream, d.Group, d.Consumer, d.Deliveries, d.Reason, d.Error}, "ParseDeadLetter(%s) metadata", rec.id)
		}
	}

	r.checkInvariants(s)
	r.last, r.untouched, r.trimmed = s, nil, false
}

// checkInvariants checks the library's promises on the server's state.
func (r *modelRun) checkInvariants(s *modelSnapshot) {
	t, m := r.t, r.m
	// An entry is in exactly one state: pending with one owner (XPENDING
	// lists an id once), dead-lettered at most once and never while
	// pending, and the model agrees on which.
	records := map[string]int{}
	for _, e := range s.dead {
		d, ok := pelwarden.ParseDeadLetter(toFields(e.fields))
		if ok && d.Stream == m.stream {
			records[d.OriginalID]++
			// Once over the whole case: a record, once written, is the
			// only one its entry ever gets (redrive gives a new id).
			if first, seen := r.records[d.OriginalID]; seen {
				require.Equal(t, first, e.id, "%s dead-lettered twice", d.OriginalID)
			}
			r.records[d.OriginalID] = e.id
		}
	}
	for _, id := range m.knownIDs() {
		p, pending := s.pending(id)
		st := m.state[id]
		require.LessOrEqual(t, records[id], 1, "%s has %d dead-letter records", id, records[id])
		require.Equal(t, st == statePending, pending, "%s is %v in the model; pending on the server: %v", id, st, pending)
		require.Equal(t, st == stateDead, records[id] == 1, "%s is %v in the model; dead-letter records: %d", id, st, records[id])
		delivered := !idLess(s.group.LastDeliveredID, id)
		switch st {
		case stateUndelivered:
			require.True(t, !delivered && s.inStream(id), "%s undelivered: in the stream after the last-delivered id", id)
		case stateRemoved:
			require.False(t, s.inStream(id), "%s removed before delivery", id)
		default:
			require.True(t, delivered, "%s is %v but after the last-delivered id %s", id, st, s.group.LastDeliveredID)
		}
		// A delivery count never goes down.
		if pending {
			require.GreaterOrEqual(t, p.RetryCount, r.deliveries[id], "%s's delivery count went down", id)
			r.deliveries[id] = p.RetryCount
		}
	}
	if r.last == nil {
		return
	}
	// No call by a non-owner changes an entry: same owner, count and
	// presence in the stream; its idle time was not reset.
	for _, id := range r.untouched {
		before, wasPending := r.last.pending(id)
		after, isPending := s.pending(id)
		require.Equal(t, wasPending, isPending, "a non-owner's call changed whether %s is pending", id)
		require.Equal(t, r.last.inStream(id), s.inStream(id), "a non-owner's call changed whether %s is in the stream", id)
		if wasPending {
			require.Equal(t, before.Consumer, after.Consumer, "a non-owner's call changed %s's owner", id)
			require.Equal(t, before.RetryCount, after.RetryCount, "a non-owner's call changed %s's delivery count", id)
			require.GreaterOrEqual(t, after.Idle, before.Idle, "a non-owner's call reset %s's idle time", id)
		}
	}
	// Trim never removes what the group still needs: every entry it
	// deleted had been delivered and was pending nowhere.
	if r.trimmed {
		for _, e := range r.last.entries {
			if s.inStream(e.id) {
				continue
			}
			_, wasPending := r.last.pending(e.id)
			require.False(t, wasPending, "trim deleted %s, still pending", e.id)
			require.False(t, idLess(r.last.group.LastDeliveredID, e.id), "trim deleted %s, not yet delivered", e.id)
		}
	}
}
