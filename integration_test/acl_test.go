package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The least-privilege roles of the ACL guide (docs/operations/acl.md),
// read from the guide so the documented lines are the tested ones.

// readmeStream is the stream the guide's lines are written for; its
// dead-letter stream is readmeStream + ":dead".
const readmeStream = "{orders}"

// readmeACL returns the ACL SETUSER lines of the ACL guide
// (docs/operations/acl.md) by role ("deployer", "consumer", "operator"):
// the rules after the user name.
func readmeACL(t *testing.T) map[string][]string {
	t.Helper()
	src, err := os.ReadFile("../docs/operations/acl.md")
	require.NoError(t, err)
	section := string(src)
	roles := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "ACL" || f[1] != "SETUSER" {
			continue
		}
		role, ok := strings.CutPrefix(f[2], "orders-")
		require.True(t, ok, "ACL guide user %q: want orders-<role>", f[2])
		roles[role] = f[3:]
	}
	require.Len(t, roles, 3, "ACL guide lines: %v", roles)
	return roles
}

// aclUser creates an ACL user from role's line in the ACL guide for the keys k (the
// guide's {orders} and {orders}:dead become k.Stream and k.DeadLetterStream), without
// the rules in drop and with extra rules. It returns a client logged in as
// the user, its name and its password (distinctive, with characters a URL
// must escape: see TestSecretsNeverPrinted); the client is closed and the
// user deleted at the end of the test.
func aclUser(t *testing.T, s *target, k pelwardentest.Keys, role string, drop []string, extra ...string) (*redis.Client, string, string) {
	t.Helper()
	require.Equal(t, readmeStream+":dead", strings.Replace(k.DeadLetterStream, k.Stream, readmeStream, 1), "keys must follow the guide's naming")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	user, pass := "pw-"+role+"-"+hex.EncodeToString(b), newSecret()
	rules := readmeACL(t)[role]
	require.NotEmpty(t, rules, "role %s", role)
	args := []any{"ACL", "SETUSER", user}
	dropped := 0
	for _, r := range rules {
		if contains(drop, r) {
			dropped++
			continue
		}
		if strings.HasPrefix(r, ">") {
			r = ">" + pass
		}
		args = append(args, strings.ReplaceAll(r, readmeStream, k.Stream))
	}
	require.Equal(t, len(drop), dropped, "rules to drop %v must be in the ACL guide's %s line %v", drop, role, rules)
	for _, r := range extra {
		args = append(args, strings.ReplaceAll(r, readmeStream, k.Stream))
	}
	ctx := t.Context()
	require.NoError(t, s.rdb.Do(ctx, args...).Err(), "%v", args)
	opts := s.srv.Options()
	opts.Username, opts.Password = user, pass
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		_ = rdb.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.rdb.Do(cctx, "ACL", "DELUSER", user)
	})
	return rdb, user, pass
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// userURL is a redis:// URL of s for user.
func userURL(t *testing.T, s *target, user, pass string) string {
	t.Helper()
	addr, err := s.srv.Addr(t.Context())
	require.NoError(t, err)
	return (&url.URL{Scheme: "redis", User: url.UserPassword(user, pass), Host: addr}).String()
}

// secretMarker starts every password the tests make, so a test can look
// for any of them in output.
const secretMarker = "Zq9-SECRET-"

// newSecret returns a distinctive password: the marker, random hex, and
// characters a URL must escape.
func newSecret() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return secretMarker + hex.EncodeToString(b) + "-p@ss:w/rd"
}

// aclDenials returns the server's ACL LOG entries of user as "reason
// object" strings, leaving out CLIENT SETINFO, which go-redis sends on
// every new connection and may be refused (see the ACL guide).
func aclDenials(t *testing.T, ctx context.Context, s *target, user string) []string {
	t.Helper()
	v, err := s.rdb.Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	var out []string
	for _, e := range v {
		fields := map[string]any{}
		switch e := e.(type) {
		case map[any]any: // RESP3
			for k, v := range e {
				fields[fmt.Sprint(k)] = v
			}
		case []any: // RESP2
			for i := 0; i+1 < len(e); i += 2 {
				fields[fmt.Sprint(e[i])] = e[i+1]
			}
		}
		if fields["username"] != user || fields["object"] == "client|setinfo" {
			continue
		}
		out = append(out, fmt.Sprintf("%v %v (%v)", fields["reason"], fields["object"], fields["context"]))
	}
	return out
}

// The ACL guide's lines are what the sections around them promise: only the
// deployer may load the library, the consumer has no FUNCTION and no
// wildcard keys, the operator reads only.
func TestACLReadmeRoles(t *testing.T) {
	t.Parallel()
	roles := readmeACL(t)
	for role, rules := range roles {
		require.Equal(t, []string{"reset", "on"}, rules[:2], "%s: reset first, then on", role)
		require.True(t, strings.HasPrefix(rules[2], ">"), "%s: a password third", role)
		for _, r := range rules[3:] {
			require.NotContains(t, r, "@", "%s: no command categories, only named commands: %s", role, r)
			require.NotContains(t, r, "*", "%s: no wildcards: %s", role, r)
			if r == "+function|load" {
				require.Equal(t, "deployer", role, "only the deployer loads the library")
			}
		}
	}
	for _, r := range roles["operator"][3:] {
		if strings.Contains(r, "~") {
			require.True(t, strings.HasPrefix(r, "%R~"), "operator pelwardentest.Keys are read-only: %s", r)
		}
		for _, w := range []string{"+fcall", "+xadd", "+xack", "+xclaim", "+xdel", "+xtrim", "+xgroup"} {
			require.False(t, r == w || strings.HasPrefix(r, w+"|"), "operator may not write: %s", r)
		}
	}
	require.Empty(t, keyRules(roles["deployer"]), "the deployer touches no key")
	require.ElementsMatch(t, []string{"~" + readmeStream, "~" + readmeStream + ":dead", "~" + readmeStream + ":errors", "%R~" + readmeStream + ":paused"}, keyRules(roles["consumer"]))
	require.Equal(t, pelwarden.PauseKeyFor(readmeStream), readmeStream+":paused", "the ACL guide names the pause key")
	require.Equal(t, pelwarden.LastErrorsKeyFor(readmeStream), readmeStream+":errors", "the ACL guide names the last-errors key")
}

func keyRules(rules []string) []string {
	var out []string
	for _, r := range rules {
		if strings.Contains(r, "~") {
			out = append(out, r)
		}
	}
	return out
}

// The consumer role runs the driver end to end: new entries handled and
// acked, entries of a crashed consumer reclaimed, poison entries
// dead-lettered; the server refused nothing it asked.
func TestACLConsumer(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		orphans := f.Produce(5, nil)
		require.Len(t, f.LeavePending("crashed", 5), 5)
		healthy := f.Produce(20, nil)
		poison := []string{f.AddPoison("n", "p1"), f.AddPoison("n", "p2")}
		rdb, user, _ := aclUser(t, s, f.Keys, "consumer", nil)

		handled := &pelwardentest.Calls{}
		cfg := driver.Config{
			Consumer: "worker", MaxDeliveries: 3,
			Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
				if pelwardentest.IsPoison(m.Fields) {
					return errors.New("cannot handle this one")
				}
				handled.Add(m.ID)
				return nil
			}),
		}
		r := f.WithClient(rdb).RunConsumer(cfg)
		for _, id := range poison {
			f.Within(time.Minute).RequireDeadLettered(id, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
		}
		f.Within(time.Minute).RequirePELEmpty()
		f.RequireAcked(append(orphans, healthy...)...)
		for _, id := range append(orphans, healthy...) {
			require.Positive(t, handled.Count(id), "entry %s handled", id)
		}
		require.NoError(t, r.Stop())
		require.Empty(t, aclDenials(t, ctx, s, user), "the consumer's line covers every command the driver runs")
	})
}

// The operator role reads (status, dlq list, dlq show, load of a current
// library) and every command that would change something is refused,
// with the refusal in the message and nothing changed.
func TestACLOperator(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(4, order)
		f.LeavePending("c1", 4)
		dl, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c1", IDs: ids[:1], Error: "bad"})
		require.NoError(t, err)
		require.Len(t, dl.DeadLettered, 1)
		_, user, pass := aclUser(t, s, f.Keys, "operator", nil)
		url := userURL(t, s, user, pass)
		op := func(args ...string) cliResult { return pwRaw(t, append([]string{"--redis", url}, args...)...) }
		before := snap(t, ctx, s.rdb, f.Keys)

		r := op("status", f.Stream, f.Group, "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `"pending": 3`)
		require.Contains(t, r.stdout, `"dead_letter_length": 1`)
		require.Contains(t, r.stdout, `"library_version": "`+pelwarden.LibraryVersion+`"`)
		r = op("dlq", "list", f.DeadLetterStream, "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, ids[0])
		var recID string
		for _, line := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"id": "`); ok {
				recID = strings.TrimSuffix(v, `",`)
				break
			}
		}
		require.NotEmpty(t, recID)
		r = op("dlq", "show", f.DeadLetterStream, recID)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "original id       "+ids[0])
		r = op("load", "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `"action": "current"`)

		for _, c := range []struct {
			args []string
			says string // the refused command, in the server's or the library's words
		}{
			{[]string{"poison", f.Stream, f.Group, "--max-deliveries", "1"}, "'fcall'"},
			{[]string{"reap", f.Stream, f.Group, "--idle", "1ms"}, "'fcall'"},
			{[]string{"dlq", "redrive", f.DeadLetterStream}, "'fcall'"},
			{[]string{"dlq", "redrive", f.DeadLetterStream, "--to", f.Stream}, "'fcall'"},
			{[]string{"dlq", "purge", f.DeadLetterStream, "--yes"}, "'xtrim'"},
			{[]string{"dlq", "purge", f.DeadLetterStream, "--older-than", "1ms", "--yes"}, "'xtrim'"},
		} {
			r := op(c.args...)
			requireError(t, r, exitFailure, "NOPERM")
			require.Contains(t, r.stderr, c.says, "%v", c.args)
		}
		require.Equal(t, before, snap(t, ctx, s.rdb, f.Keys), "the operator changed nothing")
	})
}

// The deployer loads the library (here: finds it current) and touches no
// key.
func TestACLDeployer(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(1, order)
		_, user, pass := aclUser(t, s, f.Keys, "deployer", nil)
		url := userURL(t, s, user, pass)
		r := pwRaw(t, "--redis", url, "load", "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `"after": "`+pelwarden.LibraryVersion+`"`)
		r = pwRaw(t, "--redis", url, "status", f.Stream, f.Group)
		requireError(t, r, exitFailure, "may not access key "+f.Stream+" (FCALL_RO needs read access")
		for _, d := range aclDenials(t, ctx, s, user) {
			require.True(t, strings.HasPrefix(d, "key "), "only pelwardentest.Keys were refused: %v", d)
		}
	})
}

// Each permission of the consumer role is needed: without it the driver
// stops (Run returns) with an error matching pelwarden.ErrNoPermission that
// names what is missing, and nothing is lost or half done.
func TestACLConsumerMissingPermission(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for _, rule := range readmeACL(t)["consumer"] {
			if rule == "reset" || rule == "on" || strings.HasPrefix(rule, ">") || lastErrorsRules[rule] || rule == pauseRule {
				continue // optional: TestACLConsumerWithoutLastErrors, TestACLConsumerWithoutPauseKey
			}
			t.Run(rule, func(t *testing.T) {
				t.Parallel()
				f := s.fixture(t)
				poison := f.Add("n", "poison")
				require.Equal(t, []string{poison}, f.LeavePending("crashed", 1))
				f.SetDeliveries(3, poison) // the first reclaim pass dead-letters it
				ids := append(f.Produce(10, nil), poison)
				rdb, _, _ := aclUser(t, s, f.Keys, "consumer", []string{rule})
				r := runUntilError(t, f.WithClient(rdb), driver.Config{Consumer: "worker", MaxDeliveries: 3,
					MinIdle: 10 * time.Millisecond, // the poison entry is taken at once
					Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
				t.Logf("without %s, Run returned: %v", rule, r)
				require.ErrorIs(t, r, pelwarden.ErrNoPermission, "%v", r)
				requireNames(t, r.Error(), rule, f.Keys)
				requireNothingLost(t, f, f.Keys, ids)
			})
		}
	})
}

// The consumer's optional permissions: CreateGroup needs +xgroup|create,
// ReapIdle +xgroup|delconsumer; without them Run says so, with them the
// driver works.
func TestACLConsumerOptionalPermissions(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for _, c := range []struct {
			rule string
			cfg  func(*driver.Config)
		}{
			{"+xgroup|create", func(c *driver.Config) { c.CreateGroup = true }},
			{"+xgroup|delconsumer", func(c *driver.Config) { c.ReapIdle = 100 * time.Millisecond }},
		} {
			t.Run(c.rule, func(t *testing.T) {
				t.Parallel()
				f := s.fixture(t)
				ids := f.Produce(5, nil)
				cfg := driver.Config{Consumer: "worker", MinIdle: 100 * time.Millisecond,
					Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })}
				c.cfg(&cfg)

				without, _, _ := aclUser(t, s, f.Keys, "consumer", nil)
				err := runUntilError(t, f.WithClient(without), cfg)
				require.ErrorIs(t, err, pelwarden.ErrNoPermission)
				requireNames(t, err.Error(), c.rule, f.Keys)

				with, _, _ := aclUser(t, s, f.Keys, "consumer", nil, c.rule)
				require.NoError(t, f.Client().XGroupCreateConsumer(f.Context(), f.Stream, f.Group, "idle").Err())
				r := f.WithClient(with).RunConsumer(cfg)
				f.Within(time.Minute).RequireAcked(ids...)
				if cfg.ReapIdle > 0 {
					f.Within(time.Minute).Eventually("the idle consumer reaped", func() bool {
						cons, err := f.Client().XInfoConsumers(f.Context(), f.Stream, f.Group).Result()
						return err == nil && len(cons) == 1 && cons[0].Name == "worker"
					})
				}
				require.NoError(t, r.Stop())
			})
		}
	})
}

// runUntilError runs a consumer on f (a view with the client under test)
// that must fail on its own, within a minute, and returns Run's error.
func runUntilError(t *testing.T, f *pelwardentest.Fixture, cfg driver.Config) error {
	t.Helper()
	c := f.RunConsumer(cfg)
	f.Within(time.Minute).Eventually("Run to fail on its own", func() bool {
		select {
		case <-c.Done():
			return true
		default:
			return false
		}
	})
	err := c.Err()
	require.Error(t, err, "Run must fail")
	return err
}

// requireNames checks that msg names what rule grants: the command (in the
// server's words, 'xreadgroup', or the library's, "the xack command") or
// the key (with the test's keys for the ACL guide's).
func requireNames(t *testing.T, msg, rule string, k pelwardentest.Keys) {
	t.Helper()
	if key, ok := strings.CutPrefix(rule, "~"); ok {
		key = strings.ReplaceAll(key, readmeStream, k.Stream)
		require.Contains(t, msg, "may not access key "+key+" (", "the error names the key")
		return
	}
	cmd := strings.TrimPrefix(rule, "+")
	require.True(t, strings.Contains(msg, "'"+cmd+"'") || strings.Contains(msg, "the "+cmd+" command"),
		"the error names %s: %s", cmd, msg)
}

// requireNothingLost checks that every entry is still in the stream and
// that no dead-letter record's entry is still pending (a half-done
// dead-lettering would leave both).
func requireNothingLost(t *testing.T, f *pelwardentest.Fixture, k pelwardentest.Keys, ids []string) {
	t.Helper()
	ctx := f.Context()
	n, err := f.Client().XLen(ctx, k.Stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n, "no entry lost from the stream")
	pending := map[string]bool{}
	for _, p := range f.PendingEntries() {
		pending[p.ID] = true
	}
	for _, d := range f.DeadLetters() {
		require.False(t, pending[d.OriginalID], "%s dead-lettered and still pending", d.OriginalID)
	}
}

// lastErrorsRules are the ACL guide consumer's rules for the last-errors hash
// (library 1.3.0), which a consumer can run without.
var lastErrorsRules = map[string]bool{"~" + readmeStream + ":errors": true, "+exists": true, "+hget": true, "+hset": true, "+hdel": true, "+hrandfield": true}

// A consumer whose ACL user lacks one of the last-errors rules (a user
// set up before library 1.3.0) keeps running: it handles, retries and
// dead-letters as before, its max_deliveries records without an error,
// and it warns once.
func TestACLConsumerWithoutLastErrors(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for rule := range lastErrorsRules {
			t.Run(rule, func(t *testing.T) {
				t.Parallel()
				f := s.fixture(t).Within(time.Minute)
				ids := f.Produce(5, nil)
				poison := ids[2]
				rdb, _, _ := aclUser(t, s, f.Keys, "consumer", []string{rule})
				logs := &warnLog{}
				cfg := f.ConsumerConfig(driver.Config{Consumer: "worker", MaxDeliveries: 2,
					Handler: driver.HandlerFunc(func(_ context.Context, m *driver.Message) error {
						if m.ID == poison {
							return errors.New("always fails")
						}
						return nil
					})})
				cfg.Logger = slog.New(logs)
				c := f.WithClient(rdb).RunConsumer(cfg)
				f.RequireDeadLetterIDs(poison)
				f.RequireAcked(ids[0], ids[1], ids[3], ids[4])
				require.NoError(t, c.Stop())
				f.RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
				require.Equal(t, 1, logs.count("the server refuses this ACL user the last-errors key"), "warned once")
			})
		}
	})
}

// pauseRule is the ACL guide consumer's read access to the pause hash, which
// a consumer can run without.
const pauseRule = "%R~" + readmeStream + ":paused"

// A consumer whose ACL user may not read the pause hash (a user set up
// before pauses existed) runs on: it handles and acks everything, says
// once that pauses are not applied, and is not paused.
func TestACLConsumerWithoutPauseKey(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t).Within(time.Minute)
		require.NoError(t, pelwarden.PauseGroup(ctx, s.rdb, f.Stream, f.Group, pelwarden.Pause{By: "ops"}))
		ids := f.Produce(5, nil)
		rdb, _, _ := aclUser(t, s, f.Keys, "consumer", []string{pauseRule})
		logs := &warnLog{}
		cfg := f.ConsumerConfig(driver.Config{Consumer: "worker", Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
		cfg.Logger = slog.New(logs)
		c := f.WithClient(rdb).RunConsumer(cfg)
		f.RequireAcked(ids...)
		require.NoError(t, c.Stop())
		require.Equal(t, 1, logs.count("cannot read the group's pause key"), "warned once")
	})
}

// warnLog counts log records at level WARN or above by message prefix.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnLog) WithGroup(string) slog.Handler      { return h }

func (h *warnLog) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}
