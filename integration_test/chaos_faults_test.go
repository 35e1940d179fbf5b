package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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

	mu     sync.Mutex
	counts map[string]int64
	errs   []string
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

// run injects the faults of set until ctx is done, then undoes what
// lingers (toxics) and returns.
func (in *chaosInjector) run(ctx context.Context, set chaosFault) {
	var wg sync.WaitGroup
	loop := func(kind chaosFault, lo, hi time.Duration, inject func(ctx context.Context) error) {
		if set&kind == 0 {
			return
		}
		wg.Go(func() {
			for ctxwait.Sleep(ctx, lo+rand.N(hi-lo)) {
				if err := inject(ctx); err != nil && ctx.Err() == nil {
					in.fail("%v", err)
				}
			}
		})
	}
	loop(faultKill, 300*time.Millisecond, 1500*time.Millisecond, in.killConsumer)
	loop(faultNetwork, 200*time.Millisecond, time.Second, in.toxicRound)
	loop(faultFlush, 300*time.Millisecond, 2*time.Second, in.functionFlush)
	loop(faultRestart, 2*time.Second, 4*time.Second, in.restartServer)
	loop(faultClientKill, 300*time.Millisecond, 2*time.Second, in.clientKill)
	wg.Wait()
}

// killConsumer SIGKILLs a random consumer and starts a new one; one time
// in four it stops it gracefully instead (SIGTERM), which must end Run
// with nil in bounded time whatever the other faults do.
func (in *chaosInjector) killConsumer(context.Context) error {
	i := rand.N(in.consumers)
	if rand.N(4) == 0 {
		in.count("consumer_sigterm", 1)
		return in.fleet.restart(i, chaosStopTimeout)
	}
	return in.fleet.kill(i)
}

// toxicRound puts one or two random toxics on every connection for a
// random while, then takes them off (each change cuts the connections: see
// chaosProxy).
func (in *chaosInjector) toxicRound(ctx context.Context) error {
	var ts []toxic
	for i := range 1 + rand.N(2) {
		t := randomToxic(fmt.Sprintf("t%d", i))
		in.count("toxic_"+t.Type, 1)
		ts = append(ts, t)
	}
	if err := in.proxy.setToxics(ctx, ts); err != nil {
		return err
	}
	ctxwait.Sleep(ctx, 300*time.Millisecond+rand.N(1200*time.Millisecond))
	return in.proxy.setToxics(context.WithoutCancel(ctx), nil)
}

// randomToxic returns one of the toxics: slow (latency), stalled then cut
// (timeout), reset with RST (reset_peer), fragmented (slicer), or cut in the
// middle of a reply (limit_data), on some or all connections.
func randomToxic(name string) toxic {
	dir := []string{"upstream", "downstream"}[rand.N(2)]
	switch rand.N(5) {
	case 0:
		return toxic{Name: name, Type: "latency", Stream: dir, Toxicity: 1,
			Attributes: map[string]any{"latency": 10 + rand.N(90), "jitter": 10}}
	case 1:
		return toxic{Name: name, Type: "timeout", Stream: dir, Toxicity: 0.3,
			Attributes: map[string]any{"timeout": 200 + rand.N(1000)}}
	case 2:
		return toxic{Name: name, Type: "reset_peer", Stream: dir, Toxicity: 0.3,
			Attributes: map[string]any{"timeout": rand.N(50)}}
	case 3:
		return toxic{Name: name, Type: "slicer", Stream: dir, Toxicity: 1,
			Attributes: map[string]any{"average_size": 8 + rand.N(56), "size_variation": 4, "delay": 20 + rand.N(300)}}
	default:
		// Server to client, after a few replies: the server ran the call,
		// the client sees half a reply and a closed connection.
		return toxic{Name: name, Type: "limit_data", Stream: "downstream", Toxicity: 0.3,
			Attributes: map[string]any{"bytes": 64 + rand.N(4000)}}
	}
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
	// A restart is done whole: the end of the faults cancels ctx, and a
	// restart it cut short between the container's stop and its start
	// left the server down (its mapped port gone at the next lookup).
	restartCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := in.srv.Restart(restartCtx); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for in.admin.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) || !ctxwait.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("restart: server not answering after a minute")
		}
	}
	after, err := in.serverState(ctx)
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
