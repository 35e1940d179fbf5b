package integration_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// Passwords never reach the command line's output (stdout, stderr, --json,
// success and failure), nor the driver's logs (debug level) and errors:
// every output is searched for the password, its URL-escaped form and its
// distinctive part (secretMarker).
func TestSecretsNeverPrinted(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(3, nil)
		require.Len(t, f.LeavePending("c1", 1), 1)
		dl, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c1", IDs: ids[:1]})
		require.NoError(t, err)
		require.Len(t, dl.DeadLettered, 1)
		rec, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
		require.NoError(t, err)
		_, opUser, opPass := aclUser(t, s, f.Keys, "operator", nil)
		consumer, _, cPass := aclUser(t, s, f.Keys, "consumer", nil)
		wrong := newSecret()
		secrets := []string{opPass, cPass, wrong}
		var outputs []string
		seen := func(what string, texts ...string) {
			for _, text := range texts {
				outputs = append(outputs, what+": "+text)
			}
		}

		opURL := userURL(t, s, opUser, opPass)
		badURL := userURL(t, s, opUser, wrong)
		addr, err := s.srv.Addr(ctx)
		require.NoError(t, err)
		nowhere := strings.Replace(opURL, addr, "127.0.0.1:1", 1)
		unparsable := strings.Replace(opURL, addr, "127.0.0.1:port", 1)
		for _, c := range []struct {
			url  string
			args []string
			code int
		}{
			{opURL, []string{"status", f.Stream, f.Group}, exitOK},
			{opURL, []string{"status", f.Stream, f.Group, "--json"}, exitOK},
			{opURL, []string{"status", f.Stream, "nope", "--json"}, exitBadTarget},
			{opURL, []string{"dlq", "list", f.DeadLetterStream}, exitOK},
			{opURL, []string{"dlq", "show", f.DeadLetterStream, rec[0].ID, "--json"}, exitOK},
			{opURL, []string{"dlq", "show", f.DeadLetterStream, "1-1"}, exitBadTarget},
			{opURL, []string{"load"}, exitOK},
			{opURL, []string{"poison", f.Stream, f.Group, "--max-deliveries", "1", "--json"}, exitFailure},
			{opURL, []string{"dlq", "purge", f.DeadLetterStream, "--yes"}, exitFailure},
			{opURL, []string{"dlq", "redrive", f.DeadLetterStream}, exitFailure},
			{opURL, []string{"demo", "--orders", "10"}, exitFailure},
			{opURL, []string{"bench", "--entries", "10", "--links", "loopback", "--methods", "pelwarden"}, exitFailure},
			{badURL, []string{"status", f.Stream, f.Group}, exitFailure},
			{badURL, []string{"load", "--json"}, exitFailure},
			{nowhere, []string{"status", f.Stream, f.Group}, exitFailure},
			{unparsable, []string{"status", f.Stream, f.Group}, exitUsage},
		} {
			r := pwRaw(t, append([]string{"--redis", c.url}, c.args...)...)
			require.Equal(t, c.code, r.code, "%v: %s", c.args, r.stderr)
			seen(strings.Join(c.args, " "), r.stdout, r.stderr)
		}
		r := pwRaw(t, "--cluster", opURL, "status", f.Stream, f.Group)
		require.Equal(t, exitFailure, r.code, r.stderr)
		seen("--cluster", r.stdout, r.stderr)

		// The driver, logging everything: a run that works, a consumer
		// refused by the ACL, refused credentials.
		logs := &lockedBuffer{}
		logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg := driver.Config{Consumer: "worker", Logger: logger,
			Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })}
		run := f.WithClient(consumer).RunConsumer(cfg)
		f.Within(time.Minute).RequireAcked(ids[1:]...)
		require.NoError(t, run.Stop())
		refused, _, _ := aclUser(t, s, f.Keys, "consumer", []string{"+xack"})
		seen("driver without +xack", runUntilError(t, f.WithClient(refused), cfg).Error())
		opts, err := redis.ParseURL(userURL(t, s, "nobody", wrong))
		require.NoError(t, err)
		badClient := redis.NewClient(opts)
		t.Cleanup(func() { _ = badClient.Close() })
		err = runUntilError(t, f.WithClient(badClient), cfg)
		require.Contains(t, err.Error(), "WRONGPASS", "the refused credentials are named (without the password)")
		seen("driver with a wrong password", err.Error())
		_, err = pelwarden.Load(ctx, badClient)
		require.Error(t, err)
		seen("Load with a wrong password", err.Error())
		seen("driver logs", logs.String())

		for _, out := range outputs {
			for _, secret := range secrets {
				require.NotContains(t, out, secret)
				require.NotContains(t, out, url.QueryEscape(secret))
				require.NotContains(t, out, strings.SplitN(url.UserPassword("u", secret).String(), ":", 2)[1])
			}
			require.NotContains(t, out, secretMarker, "a password (or part of one) in the output")
		}
		require.Greater(t, len(outputs), 30)
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers (slog from the
// driver's goroutines).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
