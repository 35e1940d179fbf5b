package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// attrRe finds every attribute that names a URL the browser or htmx loads.
var attrRe = regexp.MustCompile(`\s(href|src|action|hx-get|hx-post|hx-put|hx-delete|hx-patch)="([^"]*)"`)

// Under a base path every link, asset and action is under it.
func TestBasePath(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "basepath", 10, 3)
	const base = "/ops/pelwarden"
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream, BasePath: base + "/"})
	pages := []string{
		"/",
		"/fragment/overview",
		"/group" + q("stream", sc.Stream, "group", sc.Group),
		"/fragment/group" + q("stream", sc.Stream, "group", sc.Group),
		"/entry" + q("stream", sc.Stream, "group", sc.Group, "id", sc.Pending[0]),
		"/deadletters" + q("key", sc.DLQ),
		"/deadletters" + q("key", sc.DLQ, "count", "1"),
		"/fragment/length" + q("key", sc.DLQ),
		"/group" + q("stream", sc.Stream, "group", "nope"),
	}
	check := func(path, body string) {
		t.Helper()
		found := attrRe.FindAllStringSubmatch(body, -1)
		for _, m := range found {
			v := m[2]
			if v == "data:," { // the empty favicon: no request at all
				continue
			}
			require.True(t, strings.HasPrefix(v, base+"/"), "%s: %s=%q is not under %s", path, m[1], v, base)
		}
	}
	for _, p := range pages {
		r := get(t, ts, base+p)
		require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, r.Status, p)
		check(p, r.Body)
	}
	// The confirmation dialog, the job page and its fragment.
	r := post(t, ts, base+"/actions/redrive", url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}}, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	check("confirm", r.Body)
	r = post(t, ts, base+"/actions/redrive", url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}, "step": {"run"}}, nil)
	require.Equal(t, http.StatusSeeOther, r.Status)
	loc := r.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, base+"/job?id="), loc)
	r = get(t, ts, loc)
	check("job", r.Body)
	r = get(t, ts, strings.Replace(loc, "/job", "/fragment/job", 1))
	check("job fragment", r.Body)
	require.Equal(t, http.StatusOK, get(t, ts, base+"/static/htmx.min.js").Status)
	// Outside the base path there is nothing; the bare prefix redirects.
	require.Equal(t, http.StatusNotFound, get(t, ts, "/").Status)
	require.Equal(t, http.StatusNotFound, get(t, ts, "/static/htmx.min.js").Status)
	r = get(t, ts, base)
	require.Equal(t, http.StatusFound, r.Status)
	require.Equal(t, base+"/", r.Header.Get("Location"))
}

// Basic authentication guards every path; actions are logged with the user.
func TestAuth(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "auth", 4, 2)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	s, ts := newTest(t, rdb, Options{Streams: sc.Stream, Auth: &BasicAuth{User: "alice", Password: "s3cret"}, Logger: logger})
	for _, p := range []string{"/", "/static/htmx.min.js", "/deadletters" + q("key", sc.DLQ), "/actions/redrive"} {
		r := get(t, ts, p)
		require.Equal(t, http.StatusUnauthorized, r.Status, p)
		require.Contains(t, r.Header.Get("WWW-Authenticate"), `Basic realm="pelwarden"`)
	}
	for _, cred := range [][2]string{{"alice", "wrong"}, {"bob", "s3cret"}, {"", ""}, {"alice", "s3cret "}} {
		r := do(t, ts, http.MethodGet, "/", nil, map[string]string{"Authorization": basic(cred[0], cred[1])})
		require.Equal(t, http.StatusUnauthorized, r.Status, cred)
	}
	auth := map[string]string{"Authorization": basic("alice", "s3cret")}
	r := do(t, ts, http.MethodGet, "/", nil, auth)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "{auth}")
	form := url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}, "step": {"run"}}
	r = post(t, ts, "/actions/redrive", form, auth)
	st := waitJob(t, s, jobIDFrom(t, r))
	require.Equal(t, int64(1), st.Changed)
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	require.Contains(t, out, `msg="dashboard: action started" action=redrive user=alice`)
	require.Contains(t, out, `msg="dashboard: action finished" action=redrive user=alice`)
	require.Contains(t, out, "changed=1")
	require.Contains(t, out, "dlq={auth}:dead")
	require.NotContains(t, out, "s3cret")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func basic(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

// Ten viewers polling every view cost the server what one viewer does: one
// refresh per view per Refresh (here an hour, so exactly one), whatever
// the number of requests.
func TestSharedRefresh(t *testing.T) {
	t.Parallel()
	sc := seed(t, client(t), "shared", 20, 3)
	views := []string{
		"/fragment/overview",
		"/fragment/group" + q("stream", sc.Stream, "group", sc.Group),
		"/fragment/length" + q("key", sc.DLQ),
		"/group" + q("stream", sc.Stream, "group", sc.Group),
		"/deadletters" + q("key", sc.DLQ),
	}
	commands := func(viewers, polls int) int {
		rdb := client(t)
		c := newCounter()
		rdb.AddHook(c)
		require.NoError(t, rdb.Ping(context.Background()).Err()) // warm the pool
		base := c.total()
		_, ts := newTest(t, rdb, Options{Streams: sc.Stream, Refresh: time.Hour})
		var wg sync.WaitGroup
		errs := make(chan error, viewers*polls*len(views))
		for range viewers {
			wg.Go(func() {
				for range polls {
					for _, v := range views {
						res, err := http.Get(ts.URL + v)
						if err != nil {
							errs <- err
							continue
						}
						_ = res.Body.Close()
						if res.StatusCode != http.StatusOK {
							errs <- fmt.Errorf("%s: %d", v, res.StatusCode)
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		return c.total() - base
	}
	one := commands(1, 1)
	ten := commands(10, 5)
	t.Logf("commands sent for %d views: 1 viewer polling once: %d; 10 viewers polling 5 times each: %d", len(views), one, ten)
	require.Positive(t, one)
	require.Equal(t, one, ten, "10 viewers polling 5 times each sent %d commands, 1 viewer %d", ten, one)
}

// Start serves on an address until stopped (what `pelwarden demo --ui`
// uses).
func TestStart(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "start", 2, 1)
	addr, stop, err := Start(context.Background(), rdb, "127.0.0.1:0", Options{Streams: sc.Stream, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	res, err := http.Get("http://" + addr + "/")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NoError(t, stop())
	require.NoError(t, stop(), "stop twice")
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "stopped: nothing listens")
	_, _, err = Start(context.Background(), rdb, "127.0.0.1:99999", Options{})
	require.Error(t, err)
	var _ redis.UniversalClient = rdb
}
