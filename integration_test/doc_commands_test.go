package integration_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// docCommand is one `pelwarden` command line of a document's sh block.
type docCommand struct {
	where string   // file:line
	text  string   // the line as written (continuations joined)
	env   []string // NAME=value: its block's exports, then its own assignments
	args  []string // after "pelwarden"
}

// docCommandsNotRun are the documents' command lines this test does not
// run, by a part of their text (after a NUL, a part of the file's name it
// applies to), each with the reason. One that matches no line fails the
// test, so the list cannot outlive the documents.
var docCommandsNotRun = map[string]string{
	"pelwarden demo --ui": "the demo again, serving its dashboard until it ends; TestCLIDemoUI checks that dashboard",
	"pelwarden bench ":    "a benchmark of minutes (the textbook loop over a link of 1 ms); `make bench` runs it",
	"--cacert":            "needs a TLS server and the CA's files under the page's names; TestTLS runs status and dlq list with --cacert, --cert and --key on every server of the matrix",
	"pelwarden status '{orders}' billing\x00tls": "the TLS page's status, under its REDIS_URL of rediss://redis.internal (see --cacert)",
}

// TestDocCommandsRun runs the `pelwarden` command lines of README.md and
// docs/ as written, in the order the documents give them, against a
// server of their own ($REDIS_URL, which every command defaults to)
// holding what they name: the stream {orders} with group billing, pending
// entries delivered three times, dead letters (one at the id the pages
// show), and the partitioned stream payments. Each must exit 0 with
// output (the demo, on a throwaway server of its own, only when nothing
// was lost); ui and exporter, which serve until interrupted, must answer
// on the address the page gives and stop cleanly on SIGINT.
func TestDocCommandsRun(t *testing.T) {
	t.Parallel()
	cmds := docCommands(t)
	require.GreaterOrEqual(t, len(cmds), 15, "the CLI page alone shows 17 command lines")

	srv, err := testserver.Start(t.Context(), servers[0].srv.Image, testserver.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	addr, err := srv.Addr(t.Context())
	require.NoError(t, err)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	docFixture(t, rdb)

	used := map[string]bool{}
	ran := 0
	for _, c := range cmds {
		if reason, skip := notRun(c, used); skip {
			t.Logf("%s: not run: %s (%s)", c.where, c.text, reason)
			continue
		}
		// The demo ignores $REDIS_URL and starts a throwaway server: a
		// container of $PELWARDEN_DEMO_IMAGE where no redis-server is on
		// PATH (its default, redis:8, is not pulled here).
		env := append(os.Environ(), "REDIS_URL=redis://"+addr, "PELWARDEN_DEMO_IMAGE="+servers[0].srv.Image)
		env = append(env, c.env...)
		if c.args[0] == "ui" || c.args[0] == "exporter" {
			runServing(t, c, env)
		} else {
			runToEnd(t, c, env)
		}
		ran++
	}
	for key := range docCommandsNotRun {
		if !used[key] {
			t.Errorf("docCommandsNotRun[%q] matches no command line of the documents: remove it", key)
		}
	}
	require.GreaterOrEqual(t, ran, 12)
}

// notRun reports whether c is one of docCommandsNotRun, and why.
func notRun(c docCommand, used map[string]bool) (string, bool) {
	for key, reason := range docCommandsNotRun {
		text, file, scoped := strings.Cut(key, "\x00")
		if scoped && !strings.Contains(c.where, file) {
			continue
		}
		if strings.Contains(c.text+" ", text) {
			used[key] = true
			return reason, true
		}
	}
	return "", false
}

// runToEnd runs a command that ends by itself: exit 0, something on stdout.
func runToEnd(t *testing.T, c docCommand, env []string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runPelwarden(t, c, env, &out, &errb, nil)
	require.Equal(t, exitOK, code, "%s: %s\nstdout: %s\nstderr: %s", c.where, c.text, out.String(), errb.String())
	require.NotEmpty(t, strings.TrimSpace(out.String()), "%s: %s printed nothing", c.where, c.text)
}

// runServing starts a command that serves HTTP until interrupted, fetches
// the page it serves at the address its flags (or their defaults) give,
// then interrupts it: it must exit 0.
func runServing(t *testing.T, c docCommand, env []string) {
	t.Helper()
	listen, basePath, page, want := "127.0.0.1:8080", "", "/", "{orders}"
	if c.args[0] == "exporter" {
		listen, page, want = ":9240", "/metrics", "pelwarden_"
	}
	for i, a := range c.args {
		if i+1 < len(c.args) && a == "--listen" {
			listen = c.args[i+1]
		}
		if i+1 < len(c.args) && a == "--base-path" {
			basePath = c.args[i+1]
		}
	}
	host, port, ok := strings.Cut(listen, ":")
	require.True(t, ok, "%s: listen address %q", c.where, listen)
	if host == "" {
		host = "127.0.0.1"
	}
	url := "http://" + host + ":" + port + basePath + page
	user, pass := envValue(env, "PELWARDEN_UI_USER"), envValue(env, "PELWARDEN_UI_PASSWORD")

	var out, errb bytes.Buffer
	served := make(chan string, 1)
	code := runPelwarden(t, c, env, &out, &errb, func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			if err != nil {
				served <- err.Error()
				return
			}
			if user != "" {
				req.SetBasicAuth(user, pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond) // not listening yet: a poll, not a bound
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			served <- fmt.Sprintf("%d %s", resp.StatusCode, body)
			return
		}
		served <- "nothing served at " + url + " within 30 s"
	})
	got := <-served
	require.True(t, strings.HasPrefix(got, "200 "), "%s: %s: GET %s: %.300s\nstderr: %s", c.where, c.text, url, got, errb.String())
	require.Contains(t, got, want, "%s: GET %s", c.where, url)
	require.Equal(t, exitOK, code, "%s: %s: exit after SIGINT\nstderr: %s", c.where, c.text, errb.String())
}

// runPelwarden runs the binary with c's arguments and env. With probe, it
// calls probe once the process started and interrupts the process when
// probe returns; without, it waits for the process to end. The three
// minutes are a guard against a hang, not a measure: the longest command,
// the demo, ends within its own --duration bound (55 s by default).
func runPelwarden(t *testing.T, c docCommand, env []string, stdout, stderr io.Writer, probe func()) int {
	t.Helper()
	bin, err := pelwardenBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, c.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, stderr
	cmd.Dir = t.TempDir()
	require.NoError(t, cmd.Start(), c.where)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if probe != nil {
		probe()
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
	}
	var err2 error
	select {
	case err2 = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Signal(os.Interrupt)
		err2 = <-done
		t.Errorf("%s: %s still running after three minutes: interrupted", c.where, c.text)
	}
	var ee *exec.ExitError
	if errors.As(err2, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err2)
	return 0
}

func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val // the last one wins, as in exec
		}
	}
	return v
}

// docFixture writes what the documents' commands name.
func docFixture(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := t.Context()
	lib := pelwarden.NewLibrary(rdb)
	_, err := lib.Load(ctx)
	require.NoError(t, err)
	const stream, group = "{orders}", "billing"
	dead := pelwarden.DeadLetterStreamFor(stream)
	require.Equal(t, "{orders}:dead", dead, "the pages' dead-letter stream")
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err())
	for i := range 12 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"order", fmt.Sprint(i), "amount", "12.50"}}).Err())
	}
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "billing-1", Streams: []string{stream, ">"}, Count: 10}).Result()
	require.NoError(t, err)
	var ids []string
	for _, m := range got[0].Messages {
		ids = append(ids, m.ID)
	}
	// Four delivered three times (pending --min-deliveries 3 lists them).
	require.NoError(t, rdb.Do(ctx, append([]any{"XCLAIM", stream, group, "billing-1", 0}, append(toAny(ids[:4]), "RETRYCOUNT", 3, "JUSTID")...)...).Err())
	// Two dead-lettered, then rewritten at the ids the pages show.
	_, err = lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: stream, DeadLetterStream: dead, Group: group, Consumer: "billing-1",
		IDs: ids[8:10], Reason: "handler", Error: "card declined"})
	require.NoError(t, err)
	// XRANGE through Do keeps the fields' order (go-redis's XMessage is a map).
	raw, err := rdb.Do(ctx, "XRANGE", dead, "-", "+").Slice()
	require.NoError(t, err)
	require.Len(t, raw, 2)
	require.NoError(t, rdb.Del(ctx, dead).Err())
	for i, rec := range raw {
		pair, ok := rec.([]any)
		require.True(t, ok && len(pair) == 2, "record %#v", rec)
		fields, ok := pair[1].([]any)
		require.True(t, ok, "fields %#v", pair[1])
		args := append([]any{"XADD", dead, fmt.Sprintf("170000000012%d-0", 3+i)}, fields...)
		require.NoError(t, rdb.Do(ctx, args...).Err(), "record %d", i)
	}
	// payments, 16 partitions, each with the group.
	parts, err := pelwarden.Partitions("payments", 16)
	require.NoError(t, err)
	for _, p := range parts {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, p, group, "$").Err())
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// docCommands returns the `pelwarden` command lines of the sh blocks of
// README.md and docs/, in order: a line ending in a backslash continues
// on the next; `export NAME=value` lines hold for the rest of their
// block, NAME=value words before the command for their line.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	docs := []string{"README.md"}
	require.NoError(t, filepath.WalkDir("../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, strings.TrimPrefix(path, "../"))
		}
		return err
	}))
	var out []docCommand
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join("..", doc))
		require.NoError(t, err)
		lines := strings.Split(string(b), "\n")
		inSh := false
		var blockEnv []string
		for i := 0; i < len(lines); i++ {
			trimmed := strings.TrimSpace(lines[i])
			if strings.HasPrefix(trimmed, "```") {
				inSh = !inSh && (trimmed == "```sh" || trimmed == "```bash" || trimmed == "```shell")
				blockEnv = nil
				continue
			}
			if !inSh {
				continue
			}
			start, line := i+1, lines[i]
			for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
			}
			words, text, err := shellWords(line)
			require.NoError(t, err, "%s:%d", doc, start)
			if len(words) == 0 {
				continue
			}
			if words[0] == "export" {
				blockEnv = append(blockEnv, words[1:]...)
				continue
			}
			env := append([]string(nil), blockEnv...)
			for len(words) > 0 && isAssignment(words[0]) {
				env = append(env, words[0])
				words = words[1:]
			}
			if len(words) < 2 || words[0] != "pelwarden" {
				continue
			}
			out = append(out, docCommand{where: fmt.Sprintf("%s:%d", doc, start), text: text, env: env, args: words[1:]})
		}
	}
	return out
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for _, r := range name {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// shellWords splits a command line as a POSIX shell does for the forms
// the documents use: single and double quotes (no expansion inside),
// backslash escapes, and a # comment from the start of a word. It also
// returns the line without its comment, trimmed.
func shellWords(line string) (words []string, text string, err error) {
	var cur strings.Builder
	inWord, end := false, len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			end = i
			i = len(line)
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, "", fmt.Errorf("unclosed quote %c in %q", c, line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			i++
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, strings.TrimSpace(line[:end]), nil
}
