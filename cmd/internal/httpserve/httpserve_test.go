package httpserve_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden/cmd/internal/httpserve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Serve answers until its context ends, then returns nil; a listener that
// fails returns its error.
func TestServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- httpserve.Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	}()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	require.Equal(t, "ok", string(body))
	cancel()
	require.NoError(t, <-done)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	require.Error(t, httpserve.Serve(t.Context(), closed, http.NotFoundHandler()))
}
