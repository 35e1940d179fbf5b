package integration_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `pelwarden ui` serves the dashboard on every interface with basic
// authentication, under a base path, until interrupted (exit 0); its
// actions are logged on stderr with the user, and the password never shows.
func TestCLIUI(t *testing.T) {
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	f.Produce(3, nil)
	f.LeavePending("c1", 3)
	t.Setenv("PELWARDEN_UI_USER", "ops")
	t.Setenv("PELWARDEN_UI_PASSWORD", "ui-pass-7f3a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	listen := net.JoinHostPort("0.0.0.0", itoa(port))

	runCtx, cancel := context.WithCancel(ctx)
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- executeCLI(runCtx, []string{"--redis", serverURL(t, s), "ui", "--listen", listen, "--base-path", "/pw",
			"--streams", f.Stream}, &out, &errb)
	}()
	base := "http://127.0.0.1:" + itoa(port) + "/pw"
	fetch := func(method, path string, form url.Values, auth bool) (int, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", "http://127.0.0.1:"+itoa(port))
		}
		if auth {
			req.SetBasicAuth("ops", "ui-pass-7f3a")
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := fetch(http.MethodGet, "/", nil, true); return code == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "the dashboard answers; stderr: %s", errb.String())
	code, _ := fetch(http.MethodGet, "/", nil, false)
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := fetch(http.MethodGet, "/", nil, true)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, f.Group)
	require.Contains(t, body, `href="/pw/group?`)
	code, _ = fetch(http.MethodPost, "/actions/poison", url.Values{"stream": {f.Stream}, "group": {f.Group}, "max_deliveries": {"1"}, "step": {"run"}}, true)
	require.Equal(t, http.StatusSeeOther, code)
	require.Eventually(t, func() bool {
		return strings.Contains(errb.String(), `msg="dashboard: action finished" action=poison user=ops`)
	},
		30*time.Second, 50*time.Millisecond, "stderr: %s", errb.String())
	require.EqualValues(t, 3, s.rdb.XLen(ctx, f.DeadLetterStream).Val())

	cancel()
	requireStopped(t, "ui", done, &errb)
	require.Contains(t, errb.String(), "pelwarden ui: serving")
	require.Contains(t, errb.String(), "basic authentication as ops")
	require.NotContains(t, errb.String()+out.String(), "ui-pass-7f3a")
}

func itoa(n int) string { return strconv.Itoa(n) }

// requireStopped waits for a long-running command, interrupted, to exit 0.
func requireStopped(t *testing.T, name string, done <-chan int, errb *lockedBuffer) {
	t.Helper()
	select {
	case c := <-done:
		require.Equal(t, exitOK, c, "stderr: %s", errb.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of its interruption", name)
	}
}

// `pelwarden demo --ui` serves the read-only dashboard on the demo's stream
// while the demo runs, and the demo still ends with its invariant.
func TestCLIDemoUI(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- executeCLI(ctx, []string{"--redis", serverURL(t, s), "demo", "--orders", "400", "--rate", "100",
			"--duration", "60s", "--ui", "127.0.0.1:0"}, &out, &errb)
	}()
	var url string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(errb.String(), "dashboard: http://")
		if ok {
			url = "http://" + strings.Fields(rest)[0]
		}
		return ok
	}, 60*time.Second, 50*time.Millisecond, "the demo announces its dashboard; stderr: %s", errb.String())
	res, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "billing", "the overview shows the demo's group")
	require.Contains(t, string(body), "demo-orders-")
	require.Contains(t, string(body), "read-only")
	require.NotContains(t, strings.ToLower(string(body)), `method="post"`, "read-only: no actions")
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "stderr: %s", errb.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not end")
	}
	require.Contains(t, out.String(), "OK: nothing lost.")
	_, err = http.Get(url)
	require.Error(t, err, "the dashboard stops with the demo")
}
