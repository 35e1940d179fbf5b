package pelwardenwatermill_test

// The tests of this package run on every server of pelwarden's test matrix
// (PELWARDEN_IMAGES, else the images scripts/images.sh builds; see
// pelwardentest/testserver), one container per image started in TestMain. The
// containers persist to an append-only file, so that TestReconnectRestartsServer
// can restart one without losing the streams, the groups and the function
// library.
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 go test ./...

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// servers is the matrix, started in TestMain.
var servers []*server

// server is one container of the matrix.
type server struct {
	image, name string
	srv         *testserver.Server
	rdb         *redis.Client // shared by helper code; tests open their own for pub/subs
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if testserver.SkipWithoutDocker(ctx, "pelwardenwatermill") {
		return 0
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for _, image := range testserver.Images() {
		wg.Go(func() {
			s, err := startServer(ctx, image)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			servers = append(servers, s)
		})
	}
	wg.Wait()
	defer func() {
		for _, s := range servers {
			_ = s.rdb.Close()
			if err := s.srv.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "pelwardenwatermill:", err)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "pelwardenwatermill:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			// The Docker client's idle HTTP connections.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			// watermill-redisstream's Subscriber.Close does not wait for
			// its read goroutine, which sleeps 500ms after a read error
			// (the benchmarks and the cross-marshaller test run it).
			goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).read"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "pelwardenwatermill: goroutine leak:", err)
			return 1
		}
	}
	return code
}

// startServer runs image with an append-only file and loads the library.
func startServer(ctx context.Context, image string) (*server, error) {
	srv, err := testserver.Start(ctx, image, testserver.Options{Args: []string{"--appendonly", "yes"}})
	if err != nil {
		return nil, err
	}
	s := &server{image: image, name: srv.Name, srv: srv}
	s.rdb = s.client()
	if _, err := pelwarden.NewLibrary(s.rdb).Load(ctx); err != nil {
		_ = s.rdb.Close()
		_ = srv.Close()
		return nil, fmt.Errorf("load the library on %s: %w", image, err)
	}
	return s, nil
}

// options returns client options whose dialer follows the container across
// restarts (testserver's: the address is looked up on every dial).
func (s *server) options() *redis.Options {
	o := s.srv.Options()
	// Each subscription holds a connection in a blocking read; the suite
	// runs up to 20 subscriptions on one client.
	o.PoolSize = 64
	return o
}

func (s *server) client() *redis.Client { return redis.NewClient(s.options()) }

// each runs fn as a subtest on every server of the matrix, one after the
// other (the suite is heavy; its own tests run in parallel).
func each(t *testing.T, fn func(t *testing.T, s *server)) {
	t.Helper()
	eachOf(t, servers, fn)
}

// eachOf runs fn as a subtest on each of some servers, one after another.
func eachOf(t *testing.T, some []*server, fn func(t *testing.T, s *server)) {
	t.Helper()
	for _, s := range some {
		t.Run(s.name, func(t *testing.T) { fn(t, s) })
	}
}

// eachParallel runs fn as a parallel subtest on every server.
func eachParallel(t *testing.T, fn func(t *testing.T, s *server)) {
	t.Helper()
	t.Parallel()
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fn(t, s)
		})
	}
}

// testLogger logs warnings and errors of the code under test to stderr.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()}))
}

func testLogLevel() slog.Level {
	if os.Getenv("PELWARDEN_WATERMILL_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}
