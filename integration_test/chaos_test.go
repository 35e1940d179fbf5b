package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// The chaos suite runs producers and consumer subprocesses (the real driver)
// against a real server through a toxiproxy proxy while injecting faults,
// then checks the invariant (chaos_invariant_test.go). Every scenario has
// its own server. Settings, from the environment:
//
//	PELWARDEN_CHAOS_IMAGE      server images, comma-separated (default
//	                           pelwarden/redis:8.0,pelwarden/redis:8.6: the
//	                           reclaim passes, and the reads that claim)
//	PELWARDEN_CHAOS_ENTRIES    entries per scenario (default 4000)
//	PELWARDEN_CHAOS_RATE       entries produced per second (default 400)
//	PELWARDEN_CHAOS_CONSUMERS  consumer processes (default 3)
//	PELWARDEN_CHAOS_REPORT     file to append each scenario's report to (JSON lines)
//	PELWARDEN_CHAOS_LOGS       directory to keep the consumers' logs in (default: a temporary one)
//	PELWARDEN_CHAOS_DISABLE    fault kinds to leave out (kill, network, flush, restart,
//	                           clientkill): the scenarios that schedule them then fail,
//	                           which shows the fault checks work (chaosDisableEnv)
//
// Every scenario checks its faults too: each kind it schedules must have
// been injected at least as often as its schedule guarantees over the run
// (chaosInjector.minimums), and the handlers must have panicked; a
// scenario whose injector did not fire fails, naming what fell short.
//
// `make chaos` runs every scenario; `make soak` runs the mixed one with
// 200,000 entries (RELIABILITY.md).
type chaosSettings struct {
	images    []string
	entries   int
	rate      int
	consumers int
	report    string
	logs      string
}

func chaosSettingsFromEnv(t *testing.T) chaosSettings {
	s := chaosSettings{images: []string{"pelwarden/redis:8.0", "pelwarden/redis:8.6"}, entries: 4000, rate: 400, consumers: 3}
	if v := strings.TrimSpace(os.Getenv("PELWARDEN_CHAOS_IMAGE")); v != "" {
		s.images = nil
		for _, image := range strings.Split(v, ",") {
			if image = strings.TrimSpace(image); image != "" {
				s.images = append(s.images, image)
			}
		}
	}
	num := func(name string, into *int, min int) {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		require.GreaterOrEqual(t, n, min, name)
		*into = n
	}
	num("PELWARDEN_CHAOS_ENTRIES", &s.entries, 100)
	num("PELWARDEN_CHAOS_RATE", &s.rate, 10)
	num("PELWARDEN_CHAOS_CONSUMERS", &s.consumers, 1)
	s.report = os.Getenv("PELWARDEN_CHAOS_REPORT")
	s.logs = os.Getenv("PELWARDEN_CHAOS_LOGS")
	return s
}

// chaosScenarios: each fault on its own, then all of them mixed. Poison
// entries (1%) and panicking handlers (1%) are in every one.
var chaosScenarios = []struct {
	name   string
	faults chaosFault
}{
	{"handlers", 0},
	{"kill", faultKill},
	{"network", faultNetwork},
	{"flush", faultFlush},
	{"restart", faultRestart},
	{"clientkill", faultClientKill},
	{"mixed", faultAll},
}

// Chaos: under each fault, on its own and mixed, nothing acknowledged to the
// producer is lost, nothing is dead-lettered twice, the PEL drains, and the
// duplicates are counted.
//
// It runs on each image of PELWARDEN_CHAOS_IMAGE at once (by default a
// server whose reclaim is the passes and one whose reads claim), the
// scenarios of one image one after another.
func TestChaos(t *testing.T) {
	t.Parallel()
	set := chaosSettingsFromEnv(t)
	for _, image := range set.images {
		t.Run(strings.ReplaceAll(path.Base(image), ":", "-"), func(t *testing.T) {
			t.Parallel()
			for _, sc := range chaosScenarios {
				t.Run(sc.name, func(t *testing.T) {
					runChaos(t, set, image, sc.name, sc.faults)
				})
			}
		})
	}
}

// chaosMinFaultWindow is the least time a scenario injects faults: longer
// than any injector's first injection takes to begin (a restart's, within
// 4 s), so every scheduled fault is injected at least once whatever the
// entries and the rate. The default sizes produce for 10 s anyway.
const chaosMinFaultWindow = 10 * time.Second

// chaosConsumerBase is the configuration of the consumer subprocesses: the
// driver's timings are short, so reclaiming and dead-lettering happen within
// seconds.
func chaosConsumerBase(addr string, k chaosKeys) chaosConsumerConfig {
	return chaosConsumerConfig{
		Addr: addr, Keys: k,
		Concurrency: 16, MaxDeliveries: 6,
		MinIdle: time.Second, ReclaimInterval: 250 * time.Millisecond, ReadBlock: 500 * time.Millisecond,
		ReapIdle: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
		MaxWork: 2 * time.Millisecond, SlowWork: 1500 * time.Millisecond,
	}
}

func runChaos(t *testing.T, set chaosSettings, image, name string, faults chaosFault) {
	began := time.Now()
	// The whole scenario's bound: production, faults, drain and check.
	limit := 5*time.Minute + time.Duration(set.entries/set.rate)*time.Second*3
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	opts := testserver.Options{}
	if faults&faultRestart != 0 {
		opts.Args = []string{"--appendonly", "yes", "--appendfsync", "always", "--dir", "/tmp"}
	}
	srv, err := testserver.Start(ctx, image, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	adminOpts := srv.Options()
	adminOpts.ClientName = chaosAdminName
	admin := redis.NewClient(adminOpts)
	t.Cleanup(func() { _ = admin.Close() })

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	k := newChaosKeys("chaos." + name + "." + hex.EncodeToString(b))
	require.NoError(t, admin.XGroupCreateMkStream(ctx, k.Stream, k.Group, "0").Err())

	proxy, err := newChaosProxy(ctx, srv)
	require.NoError(t, err)
	t.Cleanup(proxy.close)

	logs := t.TempDir()
	if set.logs != "" {
		logs = filepath.Join(set.logs, name)
		require.NoError(t, os.MkdirAll(logs, 0o755))
	}
	fleet, err := newChaosFleet(logs, chaosConsumerBase(proxy.Addr(), k), set.consumers)
	if fleet != nil {
		t.Cleanup(fleet.close) // also the consumers started before an error
	}
	require.NoError(t, err)

	prodRDB := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 2 * time.Second,
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = prodRDB.Close() })
	prod := &chaosProducer{rdb: prodRDB, keys: k, n: set.entries, rate: set.rate}
	prodErr := make(chan error, 1)
	go func() { prodErr <- prod.run(ctx) }()

	in := &chaosInjector{srv: srv, admin: admin, proxy: proxy, fleet: fleet, keys: k, consumers: set.consumers, counts: map[string]int64{}}
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	faultsFrom := time.Now()
	injected := make(chan struct{})
	go func() { defer close(injected); in.run(faultCtx, faults) }()

	// Faults last while entries are produced, at least chaosMinFaultWindow,
	// and until the consumers have read everything (at most a minute more);
	// then the drain runs without.
	var produceErr error
	select {
	case produceErr = <-prodErr:
	case <-ctx.Done():
		produceErr = <-prodErr
	}
	caughtUp := time.Now().Add(time.Minute)
	for time.Now().Before(caughtUp) {
		if st, err := chaosProgress(ctx, admin, k); err == nil && st.delivered {
			break
		}
		if !ctxwait.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	if faults != 0 {
		ctxwait.Sleep(ctx, time.Until(faultsFrom.Add(chaosMinFaultWindow)))
	}
	stopFaults()
	select {
	case <-injected:
	case <-time.After(2 * time.Minute):
		// Fail here rather than hang until go test's timeout.
		require.FailNow(t, "the fault injector did not stop within 2 minutes of being told to")
	}

	// Drain: every entry delivered and the PEL empty.
	var last chaosStatus
	drained := false
	drainBy := time.Now().Add(3*time.Minute + time.Duration(set.entries/1000)*time.Second)
	for time.Now().Before(drainBy) && ctx.Err() == nil {
		st, err := chaosProgress(ctx, admin, k)
		if err == nil {
			last = st
			if st.delivered && st.pending == 0 {
				drained = true
				break
			}
		}
		ctxwait.Sleep(ctx, 200*time.Millisecond)
	}
	// The library comes back by itself after a FUNCTION FLUSH: the
	// consumers' next call loads it (a reclaim pass runs every 250ms).
	var library string
	var libErr error
	libraryBy := time.Now().Add(time.Minute)
	for {
		library, libErr = chaosLibraryVersion(ctx, admin)
		if library == pelwarden.LibraryVersion || time.Now().After(libraryBy) || !ctxwait.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	var stacks []string
	if !drained {
		stacks = fleet.dumpStacks(20 * time.Second)
	}
	stopFailures := fleet.stop(chaosStopTimeout)

	ids, xaddErrors := prod.result()
	rep, err := checkChaosInvariant(ctx, admin, k, ids)
	require.NoError(t, err)
	rep.Scenario = name
	rep.Image = image
	rep.XAddErrors = xaddErrors
	rep.Faults, _ = in.result()
	started, _ := fleet.counts()
	rep.Faults["consumer_processes"] = int64(started)
	rep.Faults["handler_panic"] = rep.Panics
	rep.Faults["poison_entries"] = int64(rep.PoisonEntries)
	// What the scenario's schedule guarantees, and its workload: every
	// hundredth seq is poison (kindOf), and one entry in a hundred panics
	// on its first delivery (so at least one panics whatever the faults).
	mins := append(in.minimums(faults),
		faultMinimum{"handler_panic", 1, fmt.Sprintf("%d entries panic on their first delivery", (set.entries+62)/100)},
		faultMinimum{"poison_entries", int64((set.entries + 99) / 100), "every seq divisible by 100 is poison"})
	rep.FaultMinimums = minimumsMap(mins)
	rep.Driver = fleet.metrics()
	rep.Seconds = time.Since(began).Seconds()
	t.Log("\n" + rep.String())
	if set.report != "" {
		appendChaosReport(t, set.report, rep)
	}

	_, injectorErrs := in.result()
	problems := append(rep.violations(), injectorErrs...)
	problems = append(problems, fleet.failures()...)
	problems = append(problems, stopFailures...)
	if produceErr != nil {
		problems = append(problems, produceErr.Error())
	}
	if !drained {
		problems = append(problems, fmt.Sprintf("not drained in time: %+v", last))
		problems = append(problems, stacks...)
	}
	if libErr != nil || library != pelwarden.LibraryVersion {
		problems = append(problems, fmt.Sprintf("library not back at the end: version %q, %v", library, libErr))
	}
	if short := faultShortfalls(rep.Faults, mins); len(short) > 0 {
		// Reported, and the invariant checked too.
		t.Errorf("chaos %s injected fewer faults than its schedule guarantees:\n  %s", name, strings.Join(short, "\n  "))
	}
	require.Empty(t, problems, "chaos %s broke the invariant", name)
}

// chaosStatus is a scenario's progress.
type chaosStatus struct {
	delivered     bool // the group has read every entry once
	pending       int64
	lastGenerated string
	lastDelivered string
}

func chaosProgress(ctx context.Context, admin *redis.Client, k chaosKeys) (chaosStatus, error) {
	var st chaosStatus
	xs, err := admin.XInfoStream(ctx, k.Stream).Result()
	if err != nil {
		return st, err
	}
	groups, err := admin.XInfoGroups(ctx, k.Stream).Result()
	if err != nil {
		return st, err
	}
	st.lastGenerated = xs.LastGeneratedID
	for _, g := range groups {
		if g.Name == k.Group {
			st.pending, st.lastDelivered = g.Pending, g.LastDeliveredID
		}
	}
	st.delivered = st.lastDelivered == st.lastGenerated
	return st, nil
}

func appendChaosReport(t *testing.T, path string, rep *chaosReport) {
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	require.NoError(t, err)
}
