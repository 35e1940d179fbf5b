package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `pelwarden ui` refuses to serve on anything but loopback without
// credentials, and checks its flags, all before connecting.
func TestUIRefusals(t *testing.T) {
	t.Setenv(envUIUser, "")
	t.Setenv(envUIPassword, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ui", "--listen", ":8080"}, "refusing to serve the dashboard on :8080 without authentication"},
		{[]string{"ui", "--listen", "0.0.0.0:8080"}, "set $PELWARDEN_UI_USER and $PELWARDEN_UI_PASSWORD"},
		{[]string{"ui", "--listen", "[::]:8080"}, "without authentication"},
		{[]string{"ui", "--listen", "192.168.1.10:8080"}, "without authentication"},
		{[]string{"ui", "--listen", "dashboard.example:8080"}, "without authentication"},
		{[]string{"ui", "--listen", "8080"}, "want host:port"},
		{[]string{"ui", "--base-path", "pelwarden"}, "--base-path must start with /"},
		{[]string{"ui", "--base-path", "/a b"}, "BasePath"},
		{[]string{"ui", "--refresh", "1ms"}, "--refresh"},
		{[]string{"ui", "--streams", ""}, "--streams must not be empty"},
		{[]string{"ui", "extra"}, "unknown command"},
	} {
		out, errOut, code := run1(append([]string{"--redis", "redis://127.0.0.1:1"}, c.args...)...)
		require.Equal(t, ExitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, c.want, c.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
	// Half the credentials is a mistake too, and the password never shows.
	t.Setenv(envUIPassword, "hunter2-secret")
	_, errOut, code := run1("--redis", "redis://127.0.0.1:1", "ui", "--listen", ":8080")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "set both $PELWARDEN_UI_USER and $PELWARDEN_UI_PASSWORD")
	require.NotContains(t, errOut, "hunter2")
	// With both, a non-loopback address passes the checks and the command
	// goes on to connect (here: to nothing, exit 1).
	t.Setenv(envUIUser, "ops")
	_, errOut, code = run1("--redis", "redis://127.0.0.1:1", "ui", "--listen", ":0")
	require.Equal(t, ExitFailure, code, errOut)
	require.Contains(t, errOut, "cannot reach")
	require.NotContains(t, errOut, "hunter2")
	// Loopback needs no credentials.
	t.Setenv(envUIUser, "")
	t.Setenv(envUIPassword, "")
	for _, l := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		_, errOut, code = run1("--redis", "redis://127.0.0.1:1", "ui", "--listen", l)
		require.Equal(t, ExitFailure, code, "%s: %s", l, errOut)
		require.Contains(t, errOut, "cannot reach")
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true, "localhost": true, "LOCALHOST": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		require.Equal(t, want, isLoopback(host), host)
	}
}
