package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// chaosFault is a set of fault kinds a scenario injects. Poison entries and
// panicking handlers are part of every scenario's workload.
type chaosFault uint

const (
	// faultKill: a random consumer is SIGKILLed and restarted under a new
	// name.
	faultKill chaosFault = 1 << iota
	// faultNetwork: toxics on the proxy (latency, timeout, reset_peer,
	// slicer, limit_data), on and off.
	faultNetwork
	// faultFlush: FUNCTION FLUSH while consumers run.
	faultFlush
	// faultRestart: container stop/start with AOF on.
	faultRestart
	// faultClientKill: CLIENT KILL of every client connection.
	faultClientKill

	faultAll = faultKill | faultNetwork | faultFlush | faultRestart | faultClientKill
)

// chaosSchedule is when one fault kind's injector injects: it waits a
// random while in [lo, hi) after its previous injection ended, then
// injects, until the faults stop. name is the kind's name, the one its
// scenario has and PELWARDEN_CHAOS_DISABLE takes.
type chaosSchedule struct {
	kind   chaosFault
	name   string
	lo, hi time.Duration
}

var chaosSchedules = []chaosSchedule{
	{faultKill, "kill", 300 * time.Millisecond, 1500 * time.Millisecond},
	{faultNetwork, "network", 200 * time.Millisecond, time.Second},
	{faultFlush, "flush", 300 * time.Millisecond, 2 * time.Second},
	{faultRestart, "restart", 2 * time.Second, 4 * time.Second},
	{faultClientKill, "clientkill", 300 * time.Millisecond, 2 * time.Second},
}

func scheduleOf(kind chaosFault) chaosSchedule {
	for _, s := range chaosSchedules {
		if s.kind == kind {
			return s
		}
	}
	panic(fmt.Sprintf("chaos: no schedule for fault %d", kind))
}

// chaosDisableEnv names fault kinds the injectors leave out,
// comma-separated: kill, network, flush, restart, clientkill (the
// scenarios' names; clientkill also stops the cluster ordered chaos
// test's connection cuts). It exists to show that the fault checks work:
// a scenario that schedules a disabled kind injects none of it and fails,
// naming the faults that fell short, e.g.
//
//	PELWARDEN_CHAOS_DISABLE=flush go test -run '^TestChaos$/redis-8.0/^flush$' ./integration_test
//
// fails with "function_flush=0, want at least 2 (FUNCTION FLUSH: one
// begins less than 3s after the previous one during 10s of faults)". A run
// with it set never passes a scenario that schedules what it disables.
const chaosDisableEnv = "PELWARDEN_CHAOS_DISABLE"

// chaosDisabled returns the fault kinds chaosDisableEnv leaves out.
func chaosDisabled() (chaosFault, error) { return parseChaosDisabled(os.Getenv(chaosDisableEnv)) }

func parseChaosDisabled(v string) (chaosFault, error) {
	var off chaosFault
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		known := false
		for _, s := range chaosSchedules {
			if s.name == name {
				off |= s.kind
				known = true
			}
		}
		if !known {
			names := make([]string, len(chaosSchedules))
			for i, s := range chaosSchedules {
				names[i] = s.name
			}
			return off, fmt.Errorf("%s: unknown fault kind %q (known: %s)", chaosDisableEnv, name, strings.Join(names, ", "))
		}
	}
	return off, nil
}

// chaosCallAllowance is what the fault minimums allow one quick call of an
// injector (a command to the server, a consumer SIGKILLed and replaced, a
// proxy restarted) on a loaded machine: more than any takes.
const chaosCallAllowance = time.Second

// toxicHoldMin and toxicHoldMax bound how long a round's toxics stay on.
const (
	toxicHoldMin = 300 * time.Millisecond
	toxicHoldMax = 1500 * time.Millisecond
)

// faultMinimum is the least count of one fault (a key of the report's
// faults) a run must show, and why its schedule guarantees that many.
type faultMinimum struct {
	name string
	min  int64
	why  string
}

// periodicMinimum is the minimum of an injector that begins an injection
// less than period after the previous one began, for the faults' window:
// floor(window/period) - 1 (one less for the loop's start and its last,
// cut short, injection), and at least 1 (every scenario's fault window
// outlasts the first period).
func periodicMinimum(name string, window, period time.Duration, what string) faultMinimum {
	n := max(int64(window/period)-1, 1)
	return faultMinimum{name: name, min: n,
		why: fmt.Sprintf("%s: one begins less than %v after the previous one during %v of faults", what, period, window.Round(100*time.Millisecond))}
}

// faultShortfalls names every fault of mins that fell short of its minimum
// in counts, with its count, its minimum and why.
func faultShortfalls(counts map[string]int64, mins []faultMinimum) []string {
	var out []string
	for _, m := range mins {
		if got := counts[m.name]; got < m.min {
			out = append(out, fmt.Sprintf("%s=%d, want at least %d (%s)", m.name, got, m.min, m.why))
		}
	}
	return out
}

// minimumsMap is mins as the report shows them.
func minimumsMap(mins []faultMinimum) map[string]int64 {
	out := make(map[string]int64, len(mins))
	for _, m := range mins {
		out[m.name] = m.min
	}
	return out
}

// chaosStopTimeout bounds a consumer's graceful stop: Run waits up to
// ShutdownTimeout for its lingering Redis call, then for its handlers, then
// flushes its acks, each bounded by ShutdownTimeout (5s in the scenarios).
const chaosStopTimeout = 30 * time.Second

// chaosAdminName is the client name of the harness's direct connections
// (the proxy's connections are the clients under test).
const chaosAdminName = "chaos-admin"

// chaosInjector injects a scenario's faults until its context is done.
type chaosInjector struct {
	srv       *testserver.Server
	admin     *redis.Client
	proxy     *chaosProxy
	fleet     *chaosFleet
	keys      chaosKeys
	consumers int

	// serverMu: one server-level fault at a time, so a restart's
	// before/after comparison never sees a FUNCTION FLUSH or CLIENT KILL.
	serverMu sync.Mutex

	mu           sync.Mutex
	counts       map[string]int64
	errs         []string
	window       time.Duration // from run's start until its context ended
	replacements int           // consumers replaced by killConsumer
	deck         []string      // toxic types still to deal (nextToxicType)
}

func (in *chaosInjector) count(name string, n int64) {
	in.mu.Lock()
	in.counts[name] += n
	in.mu.Unlock()
}

func (in *chaosInjector) fail(format string, a ...any) {
	in.mu.Lock()
	in.errs = append(in.errs, fmt.Sprintf(format, a...))
	in.mu.Unlock()
}

// result returns the faults injected and the injector's own failures.
func (in *chaosInjector) result() (map[string]int64, []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	counts := make(map[string]int64, len(in.counts))
	for k, v := range in.counts {
		counts[k] = v
	}
	return counts, append([]string(nil), in.errs...)
}

// run injects the faults of set (but those chaosDisableEnv leaves out)
// until ctx is done, then undoes what lingers (toxics) and returns. It
// measures the faults' window, from its start until ctx ended.
func (in *chaosInjector) run(ctx context.Context, set chaosFault) {
	began := time.Now()
	off, err := chaosDisabled()
	if err != nil {
		in.fail("%v", err)
	}
	set &^= off
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		in.mu.Lock()
		in.window = time.Since(began)
		in.mu.Unlock()
	})
	inject := map[chaosFault]func(context.Context) error{
		faultKill: in.killConsumer, faultNetwork: in.toxicRound, faultFlush: in.functionFlush,
		faultRestart: in.restartServer, faultClientKill: in.clientKill,
	}
	for _, s := range chaosSchedules {
		if set&s.kind == 0 {
			continue
		}
		wg.Go(func() {
			for ctxwait.Sleep(ctx, s.lo+rand.N(s.hi-s.lo)) {
				if err := inject[s.kind](ctx); err != nil && ctx.Err() == nil {
					in.fail("%v", err)
				}
			}
		})
	}
	wg.Wait()
}

// faultWindow is how long run injected faults (once it has returned).
func (in *chaosInjector) faultWindow() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.window
}

// minimums is what the schedules of set guarantee over the faults' window
// run measured (call it once run has returned). The window outlasts the
// start of every kind's first injection (the latest, a restart's, begins
// within 4 s; the chaos scenarios' faults last at least
// chaosMinFaultWindow, the ordered ones' at least 12 s), so each kind is
// at least 1; kinds whose injections are quick and wait for nothing else
// are held to periodicMinimum. The minimums follow from set, whatever
// chaosDisableEnv leaves out: a disabled kind falls short.
func (in *chaosInjector) minimums(set chaosFault) []faultMinimum {
	w := in.faultWindow()
	var out []faultMinimum
	if set&faultKill != 0 {
		// The first replacement is a SIGKILL and begins within 1.5 s; the
		// second, a graceful stop, within 1.5 s of the first's end (a
		// SIGKILL and a process started). Graceful stops can last seconds
		// (handlers finishing): no more is certain.
		out = append(out,
			faultMinimum{"consumer_sigkill", 1, "the first consumer replacement is a SIGKILL, begun within 1.5s"},
			faultMinimum{"consumer_sigterm", 1, "the second consumer replacement is a graceful stop, begun within 3s and a SIGKILL"})
	}
	if set&faultNetwork != 0 {
		// A round: a wait, the toxics on (the proxy restarted), a hold,
		// the toxics off (restarted again). It is counted when it begins.
		s := scheduleOf(faultNetwork)
		rounds := periodicMinimum("toxic_round", w, s.hi+toxicHoldMax+4*chaosCallAllowance, "toxic rounds")
		out = append(out, rounds)
		if rounds.min >= int64(len(toxicTypes)) {
			// Every round has a toxic, and the first len(toxicTypes)
			// toxics dealt are one of each type.
			for _, typ := range toxicTypes {
				out = append(out, faultMinimum{"toxic_" + typ, 1,
					fmt.Sprintf("the types are dealt from a deck of %d and at least %d rounds of at least one toxic are certain", len(toxicTypes), rounds.min)})
			}
		}
	}
	// FUNCTION FLUSH and CLIENT KILL are one command each, but wait for a
	// restart (serverMu) when one is scheduled too: then only the first is
	// certain (it waits at most for one restart, during which the proxy is
	// suspended and the producer, hence the faults, cannot end).
	for _, f := range []struct {
		kind        chaosFault
		name, label string
	}{{faultFlush, "function_flush", "FUNCTION FLUSH"}, {faultClientKill, "client_kill", "CLIENT KILL"}} {
		if set&f.kind == 0 {
			continue
		}
		s := scheduleOf(f.kind)
		if set&faultRestart != 0 {
			out = append(out, faultMinimum{f.name, 1, fmt.Sprintf("the first begins within %v, after at most one server restart", s.hi)})
		} else {
			out = append(out, periodicMinimum(f.name, w, s.hi+chaosCallAllowance, f.label))
		}
	}
	if set&faultClientKill != 0 {
		out = append(out, faultMinimum{"client_kill_connections", 1, "the producer holds a connection while it produces, and CLIENT KILL cuts it"})
	}
	if set&faultRestart != 0 {
		out = append(out, faultMinimum{"server_restart", 1, "the first begins within 4s and, once begun, is done whole"})
	}
	return out
}

// killConsumer SIGKILLs a random consumer and starts a new one; one time
// in four (the second replacement, then every fourth: the sixth, the
// tenth...) it stops it gracefully instead (SIGTERM), which must end Run
// with nil in bounded time whatever the other faults do.
func (in *chaosInjector) killConsumer(context.Context) error {
	i := rand.N(in.consumers)
	in.mu.Lock()
	n := in.replacements
	in.replacements++
	in.mu.Unlock()
	if n%4 == 1 {
		in.count("consumer_sigterm", 1)
		return in.fleet.restart(i, chaosStopTimeout)
	}
	in.count("consumer_sigkill", 1)
	return in.fleet.kill(i)
}

// toxicRound puts one or two random toxics on every connection for a
// random while, then takes them off (each change cuts the connections: see
// chaosProxy).
func (in *chaosInjector) toxicRound(ctx context.Context) error {
	in.count("toxic_round", 1)
	var ts []toxic
	for i := range 1 + rand.N(2) {
		t := randomToxic(fmt.Sprintf("t%d", i), in.nextToxicType())
		in.count("toxic_"+t.Type, 1)
		ts = append(ts, t)
	}
	if err := in.proxy.setToxics(ctx, ts); err != nil {
		return err
	}
	ctxwait.Sleep(ctx, toxicHoldMin+rand.N(toxicHoldMax-toxicHoldMin))
	return in.proxy.setToxics(context.WithoutCancel(ctx), nil)
}

// toxicTypes are the toxics a round deals from.
var toxicTypes = []string{"latency", "timeout", "reset_peer", "slicer", "limit_data"}

// nextToxicType deals the toxic types from a shuffled deck, shuffled anew
// once dealt out: the order is random, and the first len(toxicTypes)
// toxics of a run are one of each type.
func (in *chaosInjector) nextToxicType() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.deck) == 0 {
		in.deck = slices.Clone(toxicTypes)
		rand.Shuffle(len(in.deck), func(i, j int) { in.deck[i], in.deck[j] = in.deck[j], in.deck[i] })
	}
	typ := in.deck[0]
	in.deck = in.deck[1:]
	return typ
}

// randomToxic returns a toxic of type typ with random attributes: slow
// (latency), stalled then cut (timeout), reset with RST (reset_peer),
// fragmented (slicer), or cut in the middle of a reply (limit_data), on
// some or all connections.
func randomToxic(name, typ string) toxic {
	dir := []string{"upstream", "downstream"}[rand.N(2)]
	switch typ {
	case "latency":
		return toxic{Name: name, Type: "latency", Stream: dir, Toxicity: 1,
			Attributes: map[string]any{"latency": 10 + rand.N(90), "jitter": 10}}
	case "timeout":
		return toxic{Name: name, Type: "timeout", Stream: dir, Toxicity: 0.3,
			Attributes: map[string]any{"timeout": 200 + rand.N(1000)}}
	case "reset_peer":
		return toxic{Name: name, Type: "reset_peer", Stream: dir, Toxicity: 0.3,
			Attributes: map[string]any{"timeout": rand.N(50)}}
	case "slicer":
		return toxic{Name: name, Type: "slicer", Stream: dir, Toxicity: 1,
			Attributes: map[string]any{"average_size": 8 + rand.N(56), "size_variation": 4, "delay": 20 + rand.N(300)}}
	case "limit_data":
		// Server to client, after a few replies: the server ran the call,
		// the client sees half a reply and a closed connection.
		return toxic{Name: name, Type: "limit_data", Stream: "downstream", Toxicity: 0.3,
			Attributes: map[string]any{"bytes": 64 + rand.N(4000)}}
	}
	panic("chaos: unknown toxic type " + typ)
}

func (in *chaosInjector) functionFlush(ctx context.Context) error {
	in.serverMu.Lock()
	defer in.serverMu.Unlock()
	mode := []string{"SYNC", "ASYNC"}[rand.N(2)]
	if err := in.admin.Do(ctx, "FUNCTION", "FLUSH", mode).Err(); err != nil {
		return fmt.Errorf("FUNCTION FLUSH %s: %w", mode, err)
	}
	in.count("function_flush", 1)
	return nil
}

func (in *chaosInjector) clientKill(ctx context.Context) error {
	in.serverMu.Lock()
	defer in.serverMu.Unlock()
	n, err := in.admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int64()
	if err != nil {
		return fmt.Errorf("CLIENT KILL: %w", err)
	}
	in.count("client_kill", 1)
	in.count("client_kill_connections", n)
	return nil
}

// chaosServerState is what a server restart must not change.
type chaosServerState struct {
	StreamLen, DeadLetters, Pending, Runs, OK int64
	LastDelivered                             string
	Library                                   string
}

func (in *chaosInjector) serverState(ctx context.Context) (chaosServerState, error) {
	var s chaosServerState
	var err error
	k := in.keys
	if s.StreamLen, err = in.admin.XLen(ctx, k.Stream).Result(); err != nil {
		return s, err
	}
	if s.DeadLetters, err = in.admin.XLen(ctx, k.DLQ).Result(); err != nil {
		return s, err
	}
	if s.Runs, err = in.admin.HLen(ctx, k.Runs).Result(); err != nil {
		return s, err
	}
	if s.OK, err = in.admin.HLen(ctx, k.OK).Result(); err != nil {
		return s, err
	}
	groups, err := in.admin.XInfoGroups(ctx, k.Stream).Result()
	if err != nil {
		return s, err
	}
	for _, g := range groups {
		if g.Name == k.Group {
			s.Pending, s.LastDelivered = g.Pending, g.LastDeliveredID
		}
	}
	s.Library, err = chaosLibraryVersion(ctx, in.admin)
	return s, err
}

// restartServer stops and starts the server's container (AOF on, fsync
// always). The proxy is suspended around it, so no client under test
// reaches the server between the two snapshots: the stream, the PEL, the
// dead-letter stream, the handlers' records and the library must survive
// exactly. Clients then reconnect through the proxy by themselves.
func (in *chaosInjector) restartServer(ctx context.Context) error {
	in.serverMu.Lock()
	defer in.serverMu.Unlock()
	in.proxy.suspend()
	defer func() {
		if err := in.proxy.resume(context.WithoutCancel(ctx)); err != nil {
			in.fail("resume the proxy after a restart: %v", err)
		}
	}()
	// Commands the proxy had passed on may still be in the server's
	// buffers: wait until every connection but the harness's is gone.
	if err := in.waitAdminOnly(ctx); err != nil {
		return err
	}
	before, err := in.serverState(ctx)
	if err != nil {
		return fmt.Errorf("restart: state before: %w", err)
	}
	// A restart is done whole, the check of the data included: the end of
	// the faults cancels ctx, and a restart it cut short between the
	// container's stop and its start left the server down (its mapped port
	// gone at the next lookup); one cut short after the start went
	// unchecked and uncounted.
	restartCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := in.srv.Restart(restartCtx); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for in.admin.Ping(restartCtx).Err() != nil {
		if time.Now().After(deadline) || !ctxwait.Sleep(restartCtx, 100*time.Millisecond) {
			return fmt.Errorf("restart: server not answering after a minute")
		}
	}
	after, err := in.serverState(restartCtx)
	if err != nil {
		return fmt.Errorf("restart: state after: %w", err)
	}
	if before != after {
		in.fail("server restart changed the data: before %+v, after %+v", before, after)
	}
	in.count("server_restart", 1)
	return nil
}

// waitAdminOnly waits until the server has no client connection but the
// harness's own.
func (in *chaosInjector) waitAdminOnly(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := in.admin.Do(ctx, "CLIENT", "LIST", "TYPE", "normal").Text()
		if err != nil {
			return fmt.Errorf("CLIENT LIST: %w", err)
		}
		others := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.TrimSpace(line) != "" && !strings.Contains(line, " name="+chaosAdminName+" ") {
				others++
			}
		}
		if others == 0 {
			return nil
		}
		if time.Now().After(deadline) || !ctxwait.Sleep(ctx, 20*time.Millisecond) {
			return fmt.Errorf("restart: %d client connections still open 30s after the proxy closed them:\n%s", others, list)
		}
	}
}

// chaosLibraryVersion returns the version the library answers with, "" when
// it is not loaded (flushed and not loaded again yet).
func chaosLibraryVersion(ctx context.Context, rdb redis.Cmdable) (string, error) {
	v, err := rdb.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	if redis.HasErrorPrefix(err, "Function not found") {
		return "", nil
	}
	return v, err
}

// The fault checks' arithmetic and wording, the toxic deck and the
// disabling variable, without a server.
func TestChaosFaultMinimums(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, 2, periodicMinimum("function_flush", 10*time.Second, 3*time.Second, "flushes").min)
	require.EqualValues(t, 1, periodicMinimum("function_flush", 4*time.Second, 3*time.Second, "flushes").min)
	require.EqualValues(t, 1, periodicMinimum("function_flush", time.Second, 3*time.Second, "flushes").min)

	mins := []faultMinimum{{"consumer_sigkill", 1, "a"}, {"function_flush", 3, "b"}, {"toxic_round", 1, "c"}}
	require.Empty(t, faultShortfalls(map[string]int64{"consumer_sigkill": 1, "function_flush": 5, "toxic_round": 2}, mins))
	require.Equal(t, []string{"consumer_sigkill=0, want at least 1 (a)", "function_flush=2, want at least 3 (b)"},
		faultShortfalls(map[string]int64{"function_flush": 2, "toxic_round": 1}, mins))

	in := &chaosInjector{counts: map[string]int64{}}
	for range 3 {
		var dealt []string
		for range len(toxicTypes) {
			dealt = append(dealt, in.nextToxicType())
		}
		require.ElementsMatch(t, toxicTypes, dealt, "each deck deals every type once")
	}

	off, err := parseChaosDisabled(" flush, clientkill ")
	require.NoError(t, err)
	require.Equal(t, faultFlush|faultClientKill, off)
	off, err = parseChaosDisabled("")
	require.NoError(t, err)
	require.Zero(t, off)
	_, err = parseChaosDisabled("flush,bogus")
	require.ErrorContains(t, err, `unknown fault kind "bogus"`)

	// Every kind a scenario schedules has a minimum, and a disabled one
	// falls short.
	in = &chaosInjector{counts: map[string]int64{}, window: 10 * time.Second}
	names := map[string]bool{}
	for _, m := range in.minimums(faultAll) {
		names[m.name] = true
	}
	for _, want := range []string{"consumer_sigkill", "consumer_sigterm", "toxic_round", "function_flush", "server_restart", "client_kill", "client_kill_connections"} {
		require.True(t, names[want], "no minimum for %s", want)
	}
}
