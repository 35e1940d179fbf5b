// Package integration_test runs pelwarden against real servers in
// containers: every test runs on each server of the matrix (Redis 7.0,
// Redis 8.0, Redis 8.6, Valkey 8.1, Valkey 9.1 by default; see
// pelwardentest/testserver). Tests use the public test kit, pelwardentest, as users do: a fixture per
// test (s.fixture, or FixtureFor on keys the test chose), its arrange, act
// and assert helpers, and its test timings.
//
// Run it with `make test` (which builds the images first), or, in this
// module's directory:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test ./...
//
// Without Docker the package is skipped with one message saying how to run
// it; PELWARDEN_REQUIRE_DOCKER=1 (set by the Makefile) makes it fail
// instead.
package integration_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// servers is the matrix, one shared server per image, started in TestMain.
var servers []*target

type target struct {
	srv *testserver.Server
	rdb *redis.Client
	lib *pelwarden.Library
}

func TestMain(m *testing.M) {
	if os.Getenv(chaosConsumerEnv) != "" {
		// A consumer subprocess of the chaos suite (chaos_consumer_test.go).
		os.Exit(chaosConsumerMain())
	}
	if os.Getenv(killVictimEnv) != "" {
		// A victim subprocess of BenchmarkKillRecovery (kill_bench_test.go).
		os.Exit(killVictimMain())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if testserver.SkipWithoutDocker(ctx, "integration_test") {
		return 0
	}
	defer removeCLIBinary() // cli_exec_test.go
	srvs, err := testserver.StartAll(ctx, testserver.Images())
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration_test:", err)
		return 1
	}
	// The servers are removed however run ends (there is no reaper here),
	// before the leak check below.
	var closeOnce sync.Once
	closeServers := func() {
		closeOnce.Do(func() {
			for _, s := range srvs {
				if err := s.Close(); err != nil {
					fmt.Fprintln(os.Stderr, "integration_test:", err)
				}
			}
		})
	}
	defer closeServers()
	for _, s := range srvs {
		rdb := s.Client()
		lib := pelwarden.NewLibrary(rdb)
		servers = append(servers, &target{srv: s, rdb: rdb, lib: lib})
		if _, err := lib.Load(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "integration_test: load on %s: %v\n", s.Name, err)
			return 1
		}
	}
	code := m.Run()
	for _, t := range servers {
		_ = t.rdb.Close()
	}
	closeServers()
	if err := closeCluster(); err != nil { // cluster_test.go
		fmt.Fprintln(os.Stderr, "integration_test:", err)
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "integration_test: goroutine leak:", err)
			return 1
		}
	}
	return code
}

func leakOptions() []goleak.Option {
	return []goleak.Option{
		// The Docker client's idle HTTP connections.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// toxiproxy v2.5.0 (the chaos suite's proxy) leaves a link's
		// goroutines blocked on a channel send when a connection closes with
		// bytes still in its toxic chain; they hold nothing but buffers.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
	}
}

// each runs fn as a parallel subtest on every server of the matrix.
func each(t *testing.T, fn func(t *testing.T, s *target)) {
	t.Helper()
	t.Parallel()
	for _, s := range servers {
		t.Run(s.srv.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, s)
		})
	}
}

// eachAlone runs fn as a subtest on every server of the matrix, in
// parallel with each other but not with the rest of the suite: the test
// is not parallel, so it runs before every parallel test starts. It is
// for measures of consumers' throughput over time (a limit's rate, its
// fair shares): a consumer starved of CPU by the suite's other tests on
// two cores does not have the capacity such a measure presumes.
func eachAlone(t *testing.T, fn func(t *testing.T, s *target)) {
	t.Helper()
	for _, s := range servers {
		t.Run(s.srv.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, s)
		})
	}
}

// eachMode runs fn on every server of the matrix through FCALL and through
// the EVALSHA fallback (an ACL user refused FUNCTION, FCALL and FCALL_RO).
func eachMode(t *testing.T, fn func(t *testing.T, s *target, lib *pelwarden.Library)) {
	t.Helper()
	each(t, func(t *testing.T, s *target) {
		for _, mode := range []string{"fcall", "evalsha"} {
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				lib := s.lib
				if mode == "evalsha" {
					tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
					rdb := restrictedClient(t, t.Context(), s, "mode-"+tag, "-function", "-fcall", "-fcall_ro")
					lib = pelwarden.NewLibrary(rdb)
					res, err := lib.Load(t.Context())
					require.NoError(t, err)
					require.Equal(t, pelwarden.ModeEval, res.Mode)
				}
				fn(t, s, lib)
			})
		}
	})
}

// kit returns the pelwardentest server on s, for fixtures on keys a test
// chose (FixtureFor).
func (s *target) kit(t *testing.T) *pelwardentest.Server {
	t.Helper()
	return pelwardentest.Use(t, s.rdb)
}

// fixture returns a pelwardentest fixture on s: the test's own hash-tagged
// stream, dead-letter stream and group, created at "0".
func (s *target) fixture(t *testing.T) *pelwardentest.Fixture {
	t.Helper()
	return s.kit(t).NewFixture(t)
}

// order is the fields of the i-th entry the tests produce (Fixture.Produce):
// two fields, so tests see that order and values survive.
func order(i int) []string {
	return []string{"n", strconv.Itoa(i), "payload", "order-" + strconv.Itoa(i)}
}
