package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// The commands against a server are tested end to end in integration_test
// (cli_test.go). These tests need no server.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResolve(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	a := &app{}
	e, err := a.resolve(false)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:6379", e.opts.Addr)
	require.Equal(t, "default", e.source)

	t.Setenv("REDIS_URL", "redis://env:envpass@10.0.0.1:7000/2")
	a = &app{}
	e, err = a.resolve(false)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:7000", e.opts.Addr)
	require.Equal(t, 2, e.opts.DB)
	require.Equal(t, "env", e.opts.Username)
	require.Equal(t, "redis://env:xxxxx@10.0.0.1:7000/2", e.shown)
	require.Contains(t, a.secrets, "envpass")
	e, err = a.resolve(true)
	require.NoError(t, err)
	require.Nil(t, e, "the demo ignores $REDIS_URL")

	a = &app{redisURL: "10.0.0.2:7001"}
	e, err = a.resolve(false)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.2:7001", e.opts.Addr, "the flag wins; a bare host:port is accepted")

	a = &app{redisURL: "rediss://h:6380"}
	e, err = a.resolve(false)
	require.NoError(t, err)
	require.NotNil(t, e.opts.TLSConfig)

	a = &app{clusterURL: "redis://:pw@10.0.0.3:7000?addr=10.0.0.4:7000"}
	e, err = a.resolve(false)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.3:7000", "10.0.0.4:7000"}, e.cluster.Addrs)
	require.Equal(t, "pw", e.cluster.Password)

	a = &app{redisURL: "redis://h", clusterURL: "redis://h"}
	_, err = a.resolve(false)
	require.ErrorContains(t, err, "exclude each other")
	a = &app{redisURL: "redis://h", sentinelURL: "redis-sentinel://h:1/m"}
	_, err = a.resolve(false)
	require.ErrorContains(t, err, "exclude each other")

	a = &app{sentinelURL: "redis-sentinel://u:s%40cret@10.0.0.5:26379,[::1]:26380,s3:26381/my%20master?db=3"}
	e, err = a.resolve(false)
	require.NoError(t, err)
	require.Equal(t, "--sentinel", e.source)
	require.Equal(t, []string{"10.0.0.5:26379", "[::1]:26380", "s3:26381"}, e.failover.SentinelAddrs)
	require.Equal(t, "my master", e.failover.MasterName)
	require.Equal(t, []any{"u", "s@cret", 3}, []any{e.failover.Username, e.failover.Password, e.failover.DB})
	require.Nil(t, e.failover.TLSConfig)
	require.Equal(t, "redis-sentinel://u:xxxxx@10.0.0.5:26379,[::1]:26380,s3:26381/my%20master?db=3", e.shown)
	require.Contains(t, a.secrets, "s@cret")
	// A password written without escaping is taken whole.
	e, err = (&app{sentinelURL: "redis-sentinel://u:a/b?c#d@h:1/m"}).resolve(false)
	require.NoError(t, err)
	require.Equal(t, []any{"a/b?c#d", []string{"h:1"}, "m"}, []any{e.failover.Password, e.failover.SentinelAddrs, e.failover.MasterName})
	e, err = (&app{sentinelURL: "rediss-sentinel://h:1/m"}).resolve(false)
	require.NoError(t, err)
	require.NotNil(t, e.failover.TLSConfig)
}

// Malformed --sentinel URLs are usage errors that name what is wrong,
// before anything is contacted, and never show the password.
func TestSentinelURLErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, msg string }{
		{"redis://h:1/m", "redis-sentinel://"},
		{"redis-sentinel://h:1", "master name"},
		{"redis-sentinel://h:1/", "master name"},
		{"redis-sentinel://h:1/a/b", "master name"},
		{"redis-sentinel://h/m", `"h": want host:port`},
		{"redis-sentinel://h:1,,h:2/m", `"": want host:port`},
		{"redis-sentinel://h:99999/m", "bad port"},
		{"redis-sentinel://u:topsecret@h:1/m?db=x", "db="},
		{"redis-sentinel://h:1/m?password=x", "only db=N"},
		{"redis-sentinel://u:topsecret%zz@h:1/m", "not URL-escaped"},
		{"redis-sentinel://u:topsecret@h/m", `"h": want host:port`},
		{"redis-sentinel://u:top/secret@/m", `"": want host:port`},
	} {
		out, errOut, code := run1("--sentinel", c.url, "status", "s", "g")
		require.Equal(t, ExitUsage, code, "%s: %s", c.url, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, c.msg, c.url)
		require.NotContains(t, errOut, "topsecret")
	}
}

func run1(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := ExecuteContext(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestUsageBeforeConnecting(t *testing.T) {
	t.Parallel()
	// An unreachable server: a usage error must come first.
	for _, args := range [][]string{
		{"status", "s"},
		{"poison", "s", "g", "--max-deliveries", "0"},
		{"dlq", "show", "d", "nope"},
		{"dlq", "purge", "d"},
		{"reap", "s", "g", "--idle", "-1s"},
	} {
		out, errOut, code := run1(append([]string{"--redis", "redis://127.0.0.1:1"}, args...)...)
		require.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	_, errOut, code := run1("--redis", "redis://u:topsecret@127.0.0.1:1", "load")
	require.Equal(t, ExitFailure, code)
	require.NotContains(t, errOut, "topsecret")
	require.Contains(t, errOut, "redis://u:xxxxx@127.0.0.1:1")
	_, errOut, code = run1("--redis", "redis://u:topsecret@127.0.0.1:notaport", "load")
	require.Equal(t, ExitUsage, code)
	require.NotContains(t, errOut, "topsecret")
}

// A password written without URL escaping makes the URL unparsable, or
// parsable in odd places; the message about it shows no piece of it.
func TestPasswordInBadURL(t *testing.T) {
	t.Parallel()
	// Every piece of these passwords holds a Q, which the messages do not.
	for _, c := range []struct{ url, pass string }{
		{"redis://u:Qa/Qss-wQ@127.0.0.1:1", "Qa/Qss-wQ"},
		{"redis://u:123Q/abQcdef@127.0.0.1:1", "123Q/abQcdef"},
		{"redis://u:6379/Qab@127.0.0.1:1", "6379/Qab"},
		{"redis://u:sQe#crQet@127.0.0.1:1", "sQe#crQet"},
		{"redis://u:Qp%zzQsecret@127.0.0.1:1", "Qp%zzQsecret"},
		{"redis://u:98Q?oQpt=vQal@127.0.0.1:1", "98Q?oQpt=vQal"},
		{"redis://u:Qa:bQ:Qsecret@127.0.0.1:1", "Qa:bQ:Qsecret"},
		{"redis://u:twoQ wQords@127.0.0.1:1", "twoQ wQords"},
		{"redis://u:pQ@sQs@wQord@127.0.0.1:1", "pQ@sQs@wQord"},
		{"redis://:onlyQ-pass@127.0.0.1:bad", "onlyQ-pass"},
	} {
		out, errOut, code := run1("--redis", c.url, "status", "s", "g")
		require.NotEqual(t, ExitOK, code, c.url)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		require.Contains(t, errOut, "xxxxx", "%s: %s", c.url, errOut)
		require.NotContains(t, errOut, "Q", "%s: a piece of the password in %q", c.url, errOut)
	}
}

// TLS files: flags win over variables, need a rediss:// URL, and bad files
// are usage errors before connecting.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := dir + "/not.pem"
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, c := range []struct {
		args     []string
		contains string
	}{
		{[]string{"--redis", "redis://127.0.0.1:1", "--cacert", notPEM}, "--cacert needs a rediss:// URL"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--cacert", dir + "/missing.pem"}, "--cacert: open " + dir + "/missing.pem"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--cacert", notPEM}, "no PEM certificate in the file"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--cert", notPEM}, "needs its private key too"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--key", notPEM}, "needs a client certificate too"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--cert", notPEM, "--key", notPEM}, "--cert " + notPEM},
		{[]string{"--redis", ""}, "--redis must not be empty"},
		{[]string{"--cluster", ""}, "--cluster must not be empty"},
		{[]string{"--redis", "rediss://127.0.0.1:1", "--cacert", ""}, "--cacert must not be empty"},
	} {
		out, errOut, code := run1(append(c.args, "status", "s", "g")...)
		require.Equal(t, ExitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, c.contains)
	}
	_, errOut, code := run1("--cacert", notPEM, "demo")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "--cacert needs --redis or --cluster with a rediss:// URL")

	// Variables apply to rediss:// URLs and are ignored for redis:// ones.
	t.Setenv(envCACert, notPEM)
	a := &app{redisURL: "redis://127.0.0.1:1"}
	_, err := a.resolve(false)
	require.NoError(t, err)
	a = &app{redisURL: "rediss://127.0.0.1:1"}
	_, err = a.resolve(false)
	require.ErrorContains(t, err, "$"+envCACert+" "+notPEM+": no PEM certificate")
}

func TestHelp(t *testing.T) {
	t.Parallel()
	out, _, code := run1("--help")
	require.Equal(t, ExitOK, code)
	for _, c := range []string{"demo", "status", "poison", "dlq", "reap", "load", "bench", "Exit codes"} {
		require.Contains(t, out, c)
	}
	out, _, code = run1("dlq", "--help")
	require.Equal(t, ExitOK, code)
	for _, c := range []string{"list", "show", "redrive", "purge"} {
		require.Contains(t, out, c)
	}
}

func TestParseDeadRecord(t *testing.T) {
	t.Parallel()
	f := func(kv ...string) []pelwarden.Field {
		var out []pelwarden.Field
		for i := 0; i < len(kv); i += 2 {
			out = append(out, pelwarden.Field{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	r := parseDeadRecord(rawEntry{ID: "5-0", Fields: f(
		"n", "1", "n", "2", pelwarden.FieldRedrives, "2",
		pelwarden.FieldOriginalID, "1-0", pelwarden.FieldStream, "{o}", pelwarden.FieldGroup, "g",
		pelwarden.FieldConsumer, "c", pelwarden.FieldDeliveries, "5", pelwarden.FieldReason, "max_deliveries",
		pelwarden.FieldError, "", pelwarden.FieldDeadLetteredAt, "1700000000123", pelwarden.FieldMetaCount, "9")})
	require.False(t, r.Foreign)
	require.Equal(t, "1-0", r.OriginalID)
	require.Equal(t, "{o}", r.Stream)
	require.EqualValues(t, 5, r.Deliveries)
	require.EqualValues(t, 2, r.Redrives)
	require.Equal(t, "2023-11-14T22:13:20.123Z", r.DeadLetteredAt)
	require.Equal(t, []fieldJSON{{"n", "1"}, {"n", "2"}, {pelwarden.FieldRedrives, "2"}}, r.Fields)

	r = parseDeadRecord(rawEntry{ID: "6-0", Fields: f("a", "b")})
	require.True(t, r.Foreign)
	require.Equal(t, []fieldJSON{{"a", "b"}}, r.Fields)
	r = parseDeadRecord(rawEntry{ID: "7-0", Fields: f("a", "b", pelwarden.FieldMetaCount, "7")})
	require.True(t, r.Foreign, "a meta count larger than the record")
}

func TestDecodeEntries(t *testing.T) {
	t.Parallel()
	got, err := decodeEntries([]any{[]any{"1-0", []any{"a", "1", "a", "2"}}, []any{"2-0", nil}})
	require.NoError(t, err)
	require.Equal(t, []rawEntry{{ID: "1-0", Fields: []pelwarden.Field{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}}}, {ID: "2-0"}}, got)
	_, err = decodeEntries("nope")
	require.Error(t, err)
}

func TestFormat(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1,234,567", fmtCount(1234567))
	require.Equal(t, "-1,000", fmtCount(-1000))
	require.Equal(t, "12", fmtCount(12))
	require.Equal(t, "850ms", fmtDuration(850*time.Millisecond))
	require.Equal(t, "4.2s", fmtDuration(4210*time.Millisecond))
	require.Equal(t, "3m12s", fmtDuration(192*time.Second))
	require.Equal(t, "5h3m", fmtDuration(5*time.Hour+3*time.Minute+10*time.Second))
	require.Equal(t, "ab…", clipText("abcdef", 3))
	require.Equal(t, "a b", clipText("a\n b", 10))
	require.Equal(t, "1 entry", plural(1, "entry", "entries"))
	require.Equal(t, "2 entries", plural(2, "entry", "entries"))
	txt := progress.Text("redriving", 50, 100, time.Now(), "moved 50")
	require.Contains(t, txt, "[############............]  50% 50/100")
	require.Contains(t, txt, "moved 50")
}

func TestLiveLinePlain(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	l := progress.New(&b, time.Hour)
	l.Set("one", false)
	l.Set("two", false) // within plainEvery: dropped
	l.Event("event")
	l.Set("three", true)
	l.Close()
	require.Equal(t, "one\nevent\nthree\n", b.String())

	b.Reset()
	p := progress.NewQuiet(&b)
	p.Set("quick", true)
	p.Close()
	require.Empty(t, b.String(), "operations under a second print no progress")
}
