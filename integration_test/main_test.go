// Package integration_test runs pelwarden against real servers in
// containers: every test runs on each server of the matrix (Redis 7.0,
// Redis 8.0, Redis 8.6, Valkey 8.1, Valkey 9.1 by default; see
// internal/testserver).
//
// Run it with `make test` (which builds the images first), or:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test ./integration_test/
package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/testserver"
	"github.com/pelwarden/pelwarden/pelwardentest"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if testserver.SkipWithoutDocker(ctx, "integration_test") {
		return 0
	}
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

// keys are one test's own key names, under one hash tag.
type keys struct {
	Stream, DLQ, Group string
}

func newKeys(t *testing.T) keys {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tag := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + hex.EncodeToString(b)
	return keys{Stream: "{" + tag + "}", DLQ: "{" + tag + "}:dead", Group: "g"}
}

// fixture returns a pelwardentest fixture on the matrix server s (its own
// hash-tagged stream, dead-letter stream and group, created at "0"), and
// the same names as keys.
func fixture(t *testing.T, s *target) (*pelwardentest.Fixture, keys) {
	t.Helper()
	f := pelwardentest.Use(t, s.rdb).NewFixture(t)
	return f, keys{Stream: f.Stream, DLQ: f.DeadLetterStream, Group: f.Group}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup creates the stream and group and adds n entries with fields
// n=<i>, payload=<i>; it returns their ids in order.
func setup(t *testing.T, ctx context.Context, rdb redis.Cmdable, k keys, n int) []string {
	t.Helper()
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, k.Stream, k.Group, "$").Err())
	return produce(t, ctx, rdb, k, n)
}

func produce(t *testing.T, ctx context.Context, rdb redis.Cmdable, k keys, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	const batch = 1000
	for start := 0; start < n; start += batch {
		p := rdb.Pipeline()
		var cmds []*redis.StringCmd
		for i := start; i < n && i < start+batch; i++ {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []string{"n", fmt.Sprint(i), "payload", fmt.Sprintf("order-%d", i)}}))
		}
		_, err := p.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	return ids
}

// deliver reads up to n new entries as consumer (one delivery each).
func deliver(t *testing.T, ctx context.Context, rdb redis.Cmdable, k keys, consumer string, n int) []redis.XMessage {
	t.Helper()
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: k.Group, Consumer: consumer, Streams: []string{k.Stream, ">"}, Count: int64(n), Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0].Messages
}

// pendingOf returns the PEL entry of id, or nil.
func pendingOf(t *testing.T, ctx context.Context, rdb redis.Cmdable, k keys, id string) *redis.XPendingExt {
	t.Helper()
	p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Stream, Group: k.Group, Start: id, End: id, Count: 1}).Result()
	require.NoError(t, err)
	if len(p) == 0 {
		return nil
	}
	return &p[0]
}

func pelSize(t *testing.T, ctx context.Context, rdb redis.Cmdable, k keys) int64 {
	t.Helper()
	p, err := rdb.XPending(ctx, k.Stream, k.Group).Result()
	require.NoError(t, err)
	return p.Count
}

// fieldMap turns ordered fields into a map (last value wins).
func fieldMap(fs []pelwarden.Field) map[string]string {
	m := map[string]string{}
	for _, f := range fs {
		m[f.Name] = f.Value
	}
	return m
}

// walk runs a whole reclaim pass, page by page, and merges the pages.
func walk(t *testing.T, ctx context.Context, lib *pelwarden.Library, a pelwarden.ClaimArgs) (pelwarden.ClaimPage, int) {
	t.Helper()
	var all pelwarden.ClaimPage
	calls := 0
	a.Cursor = "0-0"
	for {
		p, err := lib.Claim(ctx, a)
		require.NoError(t, err)
		calls++
		all.Entries = append(all.Entries, p.Entries...)
		all.DeadLettered = append(all.DeadLettered, p.DeadLettered...)
		all.Deleted = append(all.Deleted, p.Deleted...)
		all.BackedOff += p.BackedOff
		if p.Done() {
			return all, calls
		}
		require.NotEqual(t, a.Cursor, p.Cursor, "cursor must advance")
		a.Cursor = p.Cursor
	}
}
