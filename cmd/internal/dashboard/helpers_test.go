package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// client returns a client of the package's server, closed at the test's end.
func client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := server.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// scenario is a seeded stream: a group with consumers, pending entries and
// dead letters.
type scenario struct {
	Stream, Group, DLQ string
	// Pending ids (read by Reader, not acked), DeadLettered record ids.
	Pending, DeadLettered []string
	Reader                string
}

// seed builds a scenario on stream "{name}": entries entries, all read by
// consumer "reader" (so pending), then the first dead of them dead-lettered
// by the library (reason handler, error "card declined").
func seed(t testing.TB, rdb redis.UniversalClient, name string, entries, dead int) *scenario {
	t.Helper()
	ctx := context.Background()
	sc := &scenario{Stream: "{" + name + "}", Group: "billing", Reader: "reader"}
	sc.DLQ = pelwarden.DeadLetterStreamFor(sc.Stream)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, sc.Stream, sc.Group, "$").Err())
	pipe := rdb.Pipeline()
	for i := range entries {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: sc.Stream, Values: []any{"order", fmt.Sprint(i), "amount", fmt.Sprint(100 + i)}})
	}
	if entries > 0 {
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: sc.Group, Consumer: sc.Reader, Streams: []string{sc.Stream, ">"}, Count: int64(entries), Block: -1}).Result()
		require.NoError(t, err)
		for _, m := range res[0].Messages {
			sc.Pending = append(sc.Pending, m.ID)
		}
	}
	if dead > 0 {
		lib := pelwarden.NewLibrary(rdb)
		r, err := lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: sc.Stream, DeadLetterStream: sc.DLQ, Group: sc.Group,
			Consumer: sc.Reader, IDs: sc.Pending[:dead], Error: "card declined"})
		require.NoError(t, err)
		require.Len(t, r.DeadLettered, dead)
		sc.Pending = sc.Pending[dead:]
		recs, err := rdb.XRange(ctx, sc.DLQ, "-", "+").Result()
		require.NoError(t, err)
		for _, m := range recs {
			sc.DeadLettered = append(sc.DeadLettered, m.ID)
		}
	}
	return sc
}

// newTest starts a dashboard over rdb behind an httptest server. Streams
// defaults to the given glob so that tests running in parallel do not see
// each other's streams.
func newTest(t testing.TB, rdb redis.UniversalClient, o Options) (*Server, *httptest.Server) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(rdb, o)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts
}

// response is a fetched page.
type response struct {
	Status int
	Body   string
	Header http.Header
}

// get fetches path from ts.
func get(t testing.TB, ts *httptest.Server, path string) response {
	t.Helper()
	return do(t, ts, http.MethodGet, path, nil, nil)
}

// post posts form to path as a same-origin browser would (Origin header).
func post(t testing.TB, ts *httptest.Server, path string, form url.Values, header map[string]string) response {
	t.Helper()
	h := map[string]string{"Origin": ts.URL, "Content-Type": "application/x-www-form-urlencoded"}
	for k, v := range header {
		h[k] = v
	}
	return do(t, ts, http.MethodPost, path, strings.NewReader(form.Encode()), h)
}

func do(t testing.TB, ts *httptest.Server, method, path string, body io.Reader, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{Status: res.StatusCode, Body: string(b), Header: res.Header}
}

// q builds a query string from name, value pairs.
func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return "?" + v.Encode()
}

// waitJob polls a job until it is done (bounded) and returns its state.
func waitJob(t testing.TB, s *Server, id string) jobState {
	t.Helper()
	j := s.jobs.get(id)
	require.NotNil(t, j, "job %s", id)
	select {
	case <-j.finished:
	case <-time.After(time.Minute):
		t.Fatalf("job %s did not finish within a minute", id)
	}
	return j.snapshot()
}

// jobIDFrom reads the job id from a 303 to /job?id=...
func jobIDFrom(t testing.TB, r response) string {
	t.Helper()
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	u, err := url.Parse(r.Header.Get("Location"))
	require.NoError(t, err)
	return u.Query().Get("id")
}

// counter counts the commands a client sends (a go-redis hook), pipelines
// included.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) add(cmd redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[strings.ToLower(cmd.FullName())]++
}

// total is the number of commands counted.
func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}
