package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// killVictimEnv carries the configuration (JSON) of a victim subprocess of
// BenchmarkKillRecovery: a driver consumer whose handlers never return, so
// it holds what it takes (under its lease heartbeat) until it is killed.
const killVictimEnv = "PELWARDEN_KILL_VICTIM"

type killVictimConfig struct {
	Addr, Stream, Group string
	MinIdle             time.Duration
}

// killVictimMain runs the victim described by killVictimEnv until it is
// killed.
func killVictimMain() int {
	var cfg killVictimConfig
	if err := json.Unmarshal([]byte(os.Getenv(killVictimEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	c, err := driver.New(rdb, driver.Config{Stream: cfg.Stream, Group: cfg.Group, Consumer: "victim",
		MinIdle: cfg.MinIdle,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Handler: driver.HandlerFunc(func(ctx context.Context, _ *driver.Message) error {
			<-ctx.Done()
			return ctx.Err()
		}), Tuning: driver.Tuning{ReclaimInterval: cfg.MinIdle}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 2
	}
	if err := c.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	return 0
}

// BenchmarkKillRecovery (issue 25 §3): the time from a consumer's SIGKILL
// until the entries it held are handled by another, a real process killed
// mid-work, side by side: "read-claim" (ReadClaimAuto: where the server
// has XREADGROUP ... CLAIM, the rescuer's reads take the entries over) and
// "pass" (ReadClaimOff: the reclaim passes do). Both consumers run the
// defaults but for MinIdle and ReclaimInterval (500 ms each). The victim,
// a subprocess of this test binary whose handlers never return, takes
// entries until its window is full; the rescuer starts, handles what is
// left unread, and then the victim is SIGKILLed. Its entries become idle
// MinIdle after its last lease extension (at most MinIdle/3 before the
// kill), so no consumer can take them sooner than about 2/3 MinIdle after
// the kill; the kill comes at a random moment of the rescuer's reclaim
// schedule. Reported, from the SIGKILL:
//   - first-ms: until the first of the victim's entries was handled again;
//   - all-ms: until the last of them was;
//
// with how many the victim held. Run on Redis 8.6:
//
//	PELWARDEN_IMAGES=pelwarden/redis:8.6 go test -run '^$' -bench KillRecovery -benchtime 1x -count 5 ./integration_test/
func BenchmarkKillRecovery(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	const minIdle = 500 * time.Millisecond
	modes := []struct {
		name string
		mode driver.ReadClaimMode
	}{{"read-claim", driver.ReadClaimAuto}, {"pass", driver.ReadClaimOff}}
	for i := range b.N {
		for _, m := range modes {
			stream := fmt.Sprintf("{bench-kill-%s-%d-%d}", m.name, i, time.Now().UnixNano())
			r, err := killAndRecover(ctx, s, stream, minIdle, m.mode)
			s.rdb.Del(ctx, stream, pelwarden.DeadLetterStreamFor(stream))
			if err != nil {
				b.Fatalf("%s: %v", m.name, err)
			}
			b.Logf("%-10s victim held %d entries (idle up to %3.0f ms at the kill); after its SIGKILL the first was handled again in %4.0f ms, all of them in %4.0f ms (MinIdle %v)",
				m.name, r.held, ms(r.idleAtKill), ms(r.first), ms(r.all), minIdle)
			b.ReportMetric(ms(r.first), m.name+"-first-ms")
			b.ReportMetric(ms(r.all), m.name+"-all-ms")
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type killRecovery struct {
	held       int
	idleAtKill time.Duration // the victim's longest idle entry just before the kill
	first, all time.Duration
}

// killAndRecover runs one side of BenchmarkKillRecovery on stream.
func killAndRecover(ctx context.Context, s *target, stream string, minIdle time.Duration, mode driver.ReadClaimMode) (killRecovery, error) {
	var r killRecovery
	if err := s.rdb.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		return r, err
	}
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	addr, err := s.srv.Addr(ctx)
	if err != nil {
		return r, err
	}
	cfg, err := json.Marshal(killVictimConfig{Addr: addr, Stream: stream, Group: "g", MinIdle: minIdle})
	if err != nil {
		return r, err
	}
	victim := exec.Command(exe)
	victim.Env = append(os.Environ(), killVictimEnv+"="+string(cfg))
	victim.Stderr = os.Stderr
	if err := victim.Start(); err != nil {
		return r, err
	}
	reaped := make(chan struct{})
	go func() { _ = victim.Wait(); close(reaped) }()
	defer func() { _ = victim.Process.Kill(); <-reaped }()

	// Produce until the victim stops taking: its window is full.
	held, err := fillVictim(ctx, s.rdb, stream)
	if err != nil {
		return r, err
	}
	r.held = len(held)
	isHeld := make(map[string]bool, len(held))
	for _, id := range held {
		isHeld[id] = true
	}

	var mu sync.Mutex
	var killedAt, firstAt, lastAt time.Time
	left := len(held)
	c, err := driver.New(s.rdb, driver.Config{Stream: stream, Group: "g", Consumer: "rescuer",
		MinIdle: minIdle, Logger: slog.New(slog.DiscardHandler),
		Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
			if !isHeld[msg.ID] {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if firstAt.IsZero() {
				firstAt = time.Now()
			}
			if left--; left == 0 {
				lastAt = time.Now()
			}
			return nil
		}), Tuning: driver.Tuning{ReclaimInterval: minIdle, ReadClaim: mode}})
	if err != nil {
		return r, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	// The rescuer handles what the victim left unread first.
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		info, err := s.rdb.XInfoGroups(ctx, stream).Result()
		if err != nil || len(info) == 0 {
			return false, err
		}
		return info[0].Lag == 0 && info[0].Pending == int64(len(held)), nil
	}); err != nil {
		return r, fmt.Errorf("the unread entries: %w", err)
	}

	// The kill comes at a random moment of the rescuer's reclaim schedule
	// (its passes start with it, one every ReclaimInterval), as a crash
	// would.
	time.Sleep(rand.N(minIdle))
	ext, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: int64(len(held))}).Result()
	if err != nil {
		return r, err
	}
	for _, p := range ext {
		r.idleAtKill = max(r.idleAtKill, p.Idle)
	}
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		return r, err
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return !lastAt.IsZero(), nil
	}); err != nil {
		return r, fmt.Errorf("the victim's entries: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	r.first, r.all = firstAt.Sub(killedAt), lastAt.Sub(killedAt)
	return r, nil
}

// fillVictim produces entries in batches of 100 until the victim's pending
// count has stopped growing for a second with entries left unread, and
// returns the ids it holds.
func fillVictim(ctx context.Context, rdb *redis.Client, stream string) ([]string, error) {
	var last int64 = -1
	stable := time.Time{}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		info, err := rdb.XInfoGroups(ctx, stream).Result()
		if err != nil {
			return nil, err
		}
		if len(info) == 0 {
			return nil, fmt.Errorf("group gone")
		}
		if info[0].Lag < 100 {
			p := rdb.Pipeline()
			for j := range 100 {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"n", fmt.Sprint(j)}})
			}
			if _, err := p.Exec(ctx); err != nil {
				return nil, err
			}
		}
		switch pending := info[0].Pending; {
		case pending != last:
			last, stable = pending, time.Now()
		case pending > 0 && time.Since(stable) > time.Second:
			ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+",
				Count: pending, Consumer: "victim"}).Result()
			if err != nil {
				return nil, err
			}
			ids := make([]string, len(ext))
			for i, p := range ext {
				ids[i] = p.ID
			}
			return ids, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("the victim's pending count did not settle within a minute (last %d)", last)
}

// waitFor polls cond every millisecond until it holds, fails, or limit
// passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("not within %v", limit)
}
