package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// The pelwarden command line, run as a binary (cli_exec_test.go)
// against the matrix servers with --redis. Most commands run on the first
// server only; the demo's invariant and status run on every server.

// cliResult is one command line run.
type cliResult struct {
	stdout, stderr string
	code           int
}

// serverURL is a redis:// URL of s.
func serverURL(t *testing.T, s *target) string {
	t.Helper()
	addr, err := s.srv.Addr(t.Context())
	require.NoError(t, err)
	return "redis://" + addr
}

// pw runs `pelwarden --redis <s> args...`.
func pw(t *testing.T, s *target, args ...string) cliResult {
	t.Helper()
	return pwRaw(t, append([]string{"--redis", serverURL(t, s)}, args...)...)
}

// pwRaw runs `pelwarden args...` as given.
func pwRaw(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	code := executeCLI(t.Context(), args, &out, &errb)
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// pwJSON runs a command with --json, requires success and decodes stdout.
func pwJSON(t *testing.T, s *target, args ...string) map[string]any {
	t.Helper()
	r := pw(t, s, append(args, "--json")...)
	require.Equal(t, exitOK, r.code, "pelwarden %v: stderr: %s", args, r.stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout: %s", r.stdout)
	return v
}

// requireError checks an error run: the exit code, one line on stderr
// naming what is wrong, nothing on stdout.
func requireError(t *testing.T, r cliResult, code int, contains string) {
	t.Helper()
	require.Equal(t, code, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, "pelwarden: "), r.stderr)
	require.Contains(t, r.stderr, contains)
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	f, ok := v.(float64)
	require.True(t, ok, "not a number: %#v", v)
	return int64(f)
}

func list(t *testing.T, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	require.True(t, ok, "not a list: %#v", v)
	return l
}

func obj(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "not an object: %#v", v)
	return m
}

// The demo plays its whole scenario on every server and its invariant
// holds: every order handled and acked or dead-lettered, PEL empty.
func TestCLIDemoInvariant(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		r := pw(t, s, "demo", "--orders", "300", "--duration", "30s", "--rate", "500", "--json")
		require.Equal(t, exitOK, r.code, "stderr:\n%s\nstdout:\n%s", r.stderr, r.stdout)
		var rep map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		inv := obj(t, rep["invariant"])
		require.Equal(t, true, inv["ok"], "invariant: %v", inv)
		require.Zero(t, num(t, inv["lost"]))
		require.Zero(t, num(t, inv["pending"]))
		require.Zero(t, num(t, inv["unsettled"]))
		require.EqualValues(t, 300, num(t, inv["produced"]))
		require.Zero(t, num(t, inv["poison_not_dead_lettered"]), "every poison order was dead-lettered")
		require.Zero(t, num(t, inv["dead_lettered_not_poison"]), "no healthy order was dead-lettered")
		require.EqualValues(t, 300, num(t, inv["handled_and_acked"])+num(t, inv["dead_lettered"]))

		dead := obj(t, rep["dead_letters"])
		require.EqualValues(t, 6, num(t, dead["total"]), "2%% of 300")
		byReason := obj(t, dead["by_reason"])
		require.EqualValues(t, 3, num(t, byReason[pelwarden.ReasonMaxDeliveries]))
		require.EqualValues(t, 3, num(t, byReason[pelwarden.ReasonHandler]))
		for _, rec := range list(t, dead["records"]) {
			rec := obj(t, rec)
			if rec["reason"] == pelwarden.ReasonHandler {
				require.Contains(t, rec["error"], "unsupported currency")
			} else {
				// The server's count when it was dead-lettered: MaxDeliveries
				// (3) from a reclaim pass, one more where a read took it over
				// first (Redis 8.4+: that delivery reached no handler).
				require.Contains(t, []int64{3, 4}, num(t, rec["deliveries"]))
				require.Contains(t, rec["last_handler_error"], "payment gateway timeout")
			}
		}

		killed := obj(t, rep["killed"])
		require.Equal(t, "consumer-b", killed["consumer"])
		require.Positive(t, num(t, killed["at_ms"]))
		pending := num(t, killed["pending"])
		require.Positive(t, pending, "the killed consumer left entries behind")
		var taken int64
		for _, n := range obj(t, killed["reclaimed_by"]) {
			taken += num(t, n)
		}
		require.Equal(t, pending, taken+num(t, killed["dead_lettered"]), "every orphan was reclaimed or dead-lettered")

		slow := obj(t, rep["slow"])
		require.EqualValues(t, 1, num(t, slow["orders"]))
		require.Zero(t, num(t, slow["taken_over"]), "the lease keeps slow orders with their consumer")
		require.Positive(t, num(t, slow["lease_extensions"]))
		require.Len(t, list(t, rep["consumers"]), 3)

		// The demo removes its keys.
		n, err := s.rdb.Exists(t.Context(), rep["stream"].(string), rep["dead_letter_stream"].(string)).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// Without --json the demo ends with a readable report.
func TestCLIDemoReport(t *testing.T) {
	t.Parallel()
	s := servers[0]
	r := pw(t, s, "demo", "--orders", "100", "--duration", "30s", "--rate", "500")
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	for _, want := range []string{"CONSUMER", "consumer-b", "killed at", "Dead-letter stream", "max_deliveries", "handler", "Invariant: 100 produced", "OK: nothing lost."} {
		require.Contains(t, r.stdout, want)
	}
	require.Contains(t, r.stderr, "killed consumer-b in the middle of its work")
	require.Contains(t, r.stderr, "every order is settled")
}

// status reports the PEL, consumers, lag and dead-letter length.
// `dlq list` on a work stream warns and names its dead-letter stream; on a
// stream of records pelwarden did not write, it asks; on a dead-letter
// stream, it says nothing.
func TestCLIDLQListWarns(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f, _ := statusFixture(t, s)
		r := pw(t, s, "dlq", "list", f.Stream)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stderr, "warning: "+f.Stream+" has consumer groups ("+f.Group+"): it is a work stream, not a dead-letter stream; its dead-letter stream is "+f.DeadLetterStream+" (1 record)")
		v := pwJSON(t, s, "dlq", "list", f.Stream)
		require.Contains(t, v["warning"], "its dead-letter stream is "+f.DeadLetterStream)

		r = pw(t, s, "dlq", "list", f.DeadLetterStream)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.NotContains(t, r.stderr, "warning")

		plain := strings.TrimSuffix(f.DeadLetterStream, ":dead") + ":plain"
		require.NoError(t, s.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: plain, Values: []string{"a", "1"}}).Err())
		t.Cleanup(func() { _ = s.rdb.Del(context.Background(), plain).Err() })
		r = pw(t, s, "dlq", "list", plain)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stderr, "warning: no record listed from "+plain+" has pelwarden's dead-letter metadata")
	})
}

// statusFixture is a group with 6 entries: 3 pending with c1, 1 delivered
// to c2 and dead-lettered, 2 not delivered, and one dead-letter record.
func statusFixture(t *testing.T, s *target) (*pelwardentest.Fixture, []string) {
	t.Helper()
	f := s.fixture(t)
	ids := f.Produce(6, order)
	f.LeavePending("c1", 3)
	f.LeavePending("c2", 1)
	dl, err := s.lib.DeadLetter(t.Context(), pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c2", IDs: ids[3:4], Error: "bad"})
	require.NoError(t, err)
	require.Len(t, dl.DeadLettered, 1)
	return f, ids
}

func TestCLIStatus(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f, ids := statusFixture(t, s)

		v := pwJSON(t, s, "status", f.Stream, f.Group, "--min-idle", "1h")
		require.Equal(t, f.Stream, v["stream"])
		require.Equal(t, f.Group, v["group"])
		require.Equal(t, f.DeadLetterStream, v["dead_letter_stream"])
		require.EqualValues(t, 3, num(t, v["pending"]))
		require.Equal(t, ids[0], v["oldest_pending_id"])
		require.Equal(t, ids[2], v["newest_pending_id"])
		require.GreaterOrEqual(t, num(t, v["oldest_pending_age_ms"]), int64(0))
		require.EqualValues(t, 2, num(t, v["lag"]), "6 entries, 4 delivered")
		require.EqualValues(t, 6, num(t, v["length"]))
		require.EqualValues(t, 1, num(t, v["dead_letter_length"]))
		require.Zero(t, num(t, v["stalled_consumers"]))
		cons := list(t, v["consumers"])
		require.Len(t, cons, 2)
		got := map[string]int64{}
		for _, c := range cons {
			c := obj(t, c)
			got[c["name"].(string)] = num(t, c["pending"])
			require.GreaterOrEqual(t, num(t, c["idle_ms"]), int64(0))
			require.Equal(t, false, c["stalled"])
		}
		require.Equal(t, map[string]int64{"c1": 3, "c2": 0}, got)

		// With --min-idle 0 the consumer owning entries is flagged.
		v = pwJSON(t, s, "status", f.Stream, f.Group, "--min-idle", "0s")
		require.EqualValues(t, 1, num(t, v["stalled_consumers"]))
		require.EqualValues(t, 3, num(t, v["stalled_pending"]))

		r := pw(t, s, "status", f.Stream, f.Group, "--min-idle", "0s")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "3 entries, oldest "+ids[0])
		require.Contains(t, r.stdout, "stalled")
		require.Contains(t, r.stdout, f.DeadLetterStream+": 1 record")
	})
}

// An empty PEL gives nulls for the oldest entry, not zero values.
func TestCLIStatusEmpty(t *testing.T) {
	t.Parallel()
	s := servers[0]
	f := s.fixture(t)
	f.Produce(0, order)
	v := pwJSON(t, s, "status", f.Stream, f.Group)
	require.Zero(t, num(t, v["pending"]))
	require.Nil(t, v["oldest_pending_id"])
	require.Nil(t, v["oldest_pending_age_ms"])
	require.Empty(t, list(t, v["consumers"]))
	require.Zero(t, num(t, v["dead_letter_length"]))
}

// Bad input gets one clear line on stderr and an exit code, and changes
// nothing.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	ids := f.Produce(2, order)
	f.LeavePending("c1", 2)
	str := f.Stream + ":string"
	require.NoError(t, s.rdb.Set(ctx, str, "x", 0).Err())
	missing := f.Stream + ":missing"

	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"status unknown stream", []string{"status", missing, "g"}, exitBadTarget, `stream "` + missing + `" does not exist`},
		{"status unknown group", []string{"status", f.Stream, "nope"}, exitBadTarget, `group "nope" does not exist on stream "` + f.Stream + `" (its groups: ` + f.Group + `)`},
		{"status wrong type", []string{"status", str, "g"}, exitBadTarget, "holds a string, not a stream"},
		{"status dlq wrong type", []string{"status", f.Stream, f.Group, "--dlq", str}, exitBadTarget, `dead-letter stream "` + str + `" holds a string`},
		{"poison unknown group", []string{"poison", f.Stream, "nope", "--max-deliveries", "1"}, exitBadTarget, `group "nope" does not exist`},
		{"poison wrong type", []string{"poison", str, "g", "--max-deliveries", "1"}, exitBadTarget, "not a stream"},
		{"reap unknown stream", []string{"reap", missing, "g", "--idle", "1s"}, exitBadTarget, "does not exist"},
		{"dlq list unknown", []string{"dlq", "list", missing}, exitBadTarget, `dead-letter stream "` + missing + `" does not exist`},
		{"dlq list wrong type", []string{"dlq", "list", str}, exitBadTarget, "holds a string"},
		{"dlq show unknown record", []string{"dlq", "show", f.Stream, "1-1"}, exitBadTarget, "no record 1-1"},
		{"dlq redrive to unknown", []string{"dlq", "redrive", f.Stream, "--to", missing}, exitBadTarget, `--to stream "` + missing + `" does not exist`},
		{"dlq purge a work stream", []string{"dlq", "purge", f.Stream, "--yes"}, exitBadTarget, "has consumer groups (" + f.Group + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireError(t, pw(t, s, tc.args...), tc.code, tc.contains)
		})
	}
	// Nothing was changed by the refused commands.
	n, err := s.rdb.XLen(ctx, f.Stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.EqualValues(t, 2, f.PendingCount())
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "c1"})
}

// Flags and arguments are checked before connecting: with an unreachable
// server the exit code is still ExitUsage, not ExitFailure.
func TestCLIBadFlags(t *testing.T) {
	t.Parallel()
	const nowhere = "redis://127.0.0.1:1"
	for _, tc := range []struct {
		args     []string
		contains string
	}{
		{[]string{"status", "s"}, "needs 2 argument(s), STREAM GROUP"},
		{[]string{"status", "s", "g", "x"}, "needs 2 argument(s)"},
		{[]string{"status", "", "g"}, "STREAM must not be empty"},
		{[]string{"status", "s", "g", "--min-idle", "-1s"}, "--min-idle must not be negative"},
		{[]string{"status", "s", "g", "--min-idle", "soon"}, `invalid argument "soon"`},
		{[]string{"status", "s", "g", "--dlq", ""}, "--dlq must not be empty"},
		{[]string{"poison", "s", "g"}, "--max-deliveries is required"},
		{[]string{"poison", "s", "g", "--max-deliveries", "0"}, "--max-deliveries must be between 1"},
		{[]string{"poison", "s", "g", "--max-deliveries", "-3"}, "--max-deliveries must be between 1"},
		{[]string{"poison", "s", "g", "--max-deliveries", "2", "--dlq", "s"}, "--dlq must differ"},
		{[]string{"reap", "s", "g"}, "--idle is required"},
		{[]string{"reap", "s", "g", "--idle", "0s"}, "--idle must be a positive duration"},
		{[]string{"dlq", "list", "d", "--count", "0"}, "--count must be between 1 and 10000"},
		{[]string{"dlq", "list", "d", "--count", "-5"}, "--count must be between 1 and 10000"},
		{[]string{"dlq", "list", "d", "--after", "yesterday"}, "is not a stream id"},
		{[]string{"dlq", "show", "d", "abc"}, `record id "abc" is not a stream id`},
		{[]string{"dlq", "show", "d", "1-2-3"}, "is not a stream id"},
		{[]string{"dlq", "show", "d", "99999999999999999999-0"}, "out of range"},
		{[]string{"dlq", "redrive", "d", "--rate", "0"}, "--rate must be positive"},
		{[]string{"dlq", "redrive", "d", "--limit", "0"}, "--limit must be positive"},
		{[]string{"dlq", "redrive", "d", "--to", "d"}, "--to must differ"},
		{[]string{"dlq", "purge", "d"}, "refusing to delete every record of d without --yes"},
		{[]string{"dlq", "purge", "d", "--older-than", "-1h", "--yes"}, "--older-than must be a positive duration"},
		{[]string{"dlq"}, "dlq needs a subcommand"},
		{[]string{"demo", "--orders", "0"}, "--orders must be between 1"},
		{[]string{"demo", "--poison-rate", "2"}, "--poison-rate must be between 0 and 0.5"},
		{[]string{"demo", "--duration", "1s"}, "--duration must be at least 5s"},
		{[]string{"bench", "--entries", "0"}, "--entries must be between 1 and 10000000"},
		{[]string{"bench", "--methods", "magic"}, "--methods"},
		{[]string{"exporter", "--listen", "nowhere"}, `--listen "nowhere": want host:port`},
		{[]string{"exporter", "--stalled-after", "0s"}, "--stalled-after must be positive"},
		{[]string{"exporter", "--max-streams", "0"}, "--max-streams must be at least 1"},
		{[]string{"exporter", "--partitioned", "a{b"}, `--partitioned "a{b"`},
		{[]string{"pause", "s", "g", "--partitions", "5000"}, "--partitions: "},
		{[]string{"pause", "s"}, "needs 2 argument(s), STREAM GROUP"},
		{[]string{"resume", "s", "g", "--partitions", "-1"}, "--partitions: "},
		{[]string{"status", "s", "g", "--partitions", "0"}, "--partitions must be between 1 and"},
		{[]string{"status", "s*", "g", "--dlq", "d"}, "--dlq names one stream's dead-letter stream"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status", "s", "g", "--frob"}, "unknown flag: --frob"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			requireError(t, pwRaw(t, append([]string{"--redis", nowhere}, tc.args...)...), exitUsage, tc.contains)
		})
	}
	requireError(t, pwRaw(t, "--redis", nowhere, "--cluster", nowhere, "load"), exitUsage, "--redis and --cluster exclude each other")
	requireError(t, pwRaw(t, "--redis", "http://127.0.0.1:1", "load"), exitUsage, "invalid URL scheme")
}

// Passwords never appear in messages, and connection failures exit 1.
func TestCLIConnect(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()

	r := pwRaw(t, "--redis", "redis://alice:hunter2secret@127.0.0.1:1", "load")
	requireError(t, r, exitFailure, "cannot reach redis://alice:xxxxx@127.0.0.1:1")
	require.NotContains(t, r.stderr, "hunter2secret")
	r = pwRaw(t, "--redis", "redis://alice:hunter2secret@127.0.0.1:bad", "load")
	requireError(t, r, exitUsage, "redis://alice:xxxxx@127.0.0.1:bad")
	require.NotContains(t, r.stderr, "hunter2secret")

	// A user with a password, over redis:// with user:password.
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user, pass := "cli-"+hex.EncodeToString(b), "pw-"+hex.EncodeToString(b)+"-secret"
	require.NoError(t, s.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "&*", "+@all").Err())
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.rdb.Do(cctx, "ACL", "DELUSER", user)
	})
	addr, err := s.srv.Addr(ctx)
	require.NoError(t, err)
	f := s.fixture(t)
	f.Produce(1, order)
	r = pwRaw(t, "--redis", fmt.Sprintf("redis://%s:%s@%s", user, pass, addr), "status", f.Stream, f.Group)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = pwRaw(t, "--redis", fmt.Sprintf("redis://%s:wrong-%s@%s", user, pass, addr), "status", f.Stream, f.Group)
	requireError(t, r, exitFailure, "cannot reach redis://"+user+":xxxxx@")
	require.NotContains(t, r.stderr, pass)
	// A bare host:port works too.
	r = pwRaw(t, "--redis", addr, "status", f.Stream, f.Group)
	require.Equal(t, exitOK, r.code, r.stderr)
}

// poison moves only entries delivered N times, and leaves the others with
// their owners.
func TestCLIPoison(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	ids := f.Produce(6, order)
	f.LeavePending("c1", 6)
	for range 2 { // two more deliveries of the first three: 3 in all
		require.NoError(t, s.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "c1", Messages: ids[:3]}).Err())
	}

	// Entries idle less than --min-idle are spared.
	v := pwJSON(t, s, "poison", f.Stream, f.Group, "--max-deliveries", "3", "--min-idle", "1h")
	require.Zero(t, num(t, v["count"]))
	require.EqualValues(t, 6, num(t, v["pending_after"]))

	v = pwJSON(t, s, "poison", f.Stream, f.Group, "--max-deliveries", "3")
	require.EqualValues(t, 3, num(t, v["count"]))
	require.Equal(t, []any{ids[0], ids[1], ids[2]}, v["dead_lettered"])
	require.Empty(t, list(t, v["deleted"]))
	require.EqualValues(t, 3, num(t, v["pending_after"]))
	require.Equal(t, f.DeadLetterStream, v["dead_letter_stream"])
	for _, id := range ids[3:] {
		p, _ := f.PendingEntry(id)
		require.NotNil(t, p)
		require.Equal(t, "c1", p.Consumer)
		require.EqualValues(t, 1, p.RetryCount, "left untouched")
	}

	d := pwJSON(t, s, "dlq", "list", f.DeadLetterStream)
	recs := list(t, d["records"])
	require.Len(t, recs, 3)
	for i, rec := range recs {
		rec := obj(t, rec)
		require.Equal(t, ids[i], rec["original_id"])
		require.Equal(t, pelwarden.ReasonMaxDeliveries, rec["reason"])
		require.Equal(t, "c1", rec["consumer"])
		require.EqualValues(t, 3, num(t, rec["deliveries"]))
	}
	// Not a consumer of the group: dead-letter-only claims create none.
	cons, err := s.rdb.XInfoConsumers(ctx, f.Stream, f.Group).Result()
	require.NoError(t, err)
	require.Len(t, cons, 1)

	r := pw(t, s, "poison", f.Stream, f.Group, "--max-deliveries", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "moved 0 entries delivered at least 3 times")
	require.Contains(t, r.stdout, "3 entries still pending, left with their owners")
}

// dlq list, show, redrive (to sources, --to, --limit, missing sources) and
// purge.
func TestCLIDLQ(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	k := pelwardentest.NewKeys(t)
	other := pelwardentest.Keys{Stream: k.Stream + ":other", DeadLetterStream: k.DeadLetterStream, Group: k.Group} // same hash tag
	gone := pelwardentest.Keys{Stream: k.Stream + ":gone", DeadLetterStream: k.DeadLetterStream, Group: k.Group}
	deadLetter := func(k pelwardentest.Keys, n int) []string {
		f := s.kit(t).FixtureFor(t, k)
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, k.Stream, k.Group, "$").Err())
		ids := f.Produce(n, order)
		f.LeavePending("c1", n)
		r, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: k.Stream, DeadLetterStream: k.DeadLetterStream, Group: k.Group, Consumer: "c1", IDs: ids, Reason: "invalid_order", Error: "boom in " + k.Stream})
		require.NoError(t, err)
		require.Len(t, r.DeadLettered, n)
		return ids
	}
	ids := deadLetter(k, 3)
	deadLetter(other, 1)
	deadLetter(gone, 1)
	require.NoError(t, s.rdb.Del(ctx, gone.Stream).Err())
	require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.DeadLetterStream, Values: []string{"not", "ours"}}).Err())

	// list
	v := pwJSON(t, s, "dlq", "list", k.DeadLetterStream)
	require.Equal(t, k.DeadLetterStream, v["dead_letter_stream"])
	require.EqualValues(t, 6, num(t, v["length"]))
	recs := list(t, v["records"])
	require.Len(t, recs, 6)
	first := obj(t, recs[0])
	require.Equal(t, ids[0], first["original_id"])
	require.Equal(t, k.Stream, first["stream"])
	require.Equal(t, k.Group, first["group"])
	require.Equal(t, "c1", first["consumer"])
	require.EqualValues(t, 1, num(t, first["deliveries"]))
	require.Equal(t, "invalid_order", first["reason"])
	require.Equal(t, "boom in "+k.Stream, first["error"])
	require.Equal(t, false, first["foreign"])
	require.NotEmpty(t, first["dead_lettered_at"])
	require.Positive(t, num(t, first["dead_lettered_at_ms"]))
	require.Equal(t, []any{map[string]any{"name": "n", "value": "0"}, map[string]any{"name": "payload", "value": "order-0"}}, first["fields"])
	require.Equal(t, true, obj(t, recs[5])["foreign"])

	page := list(t, pwJSON(t, s, "dlq", "list", k.DeadLetterStream, "--count", "2")["records"])
	require.Len(t, page, 2)
	rest := list(t, pwJSON(t, s, "dlq", "list", k.DeadLetterStream, "--after", obj(t, page[1])["id"].(string))["records"])
	require.Len(t, rest, 4)
	require.Equal(t, recs[2], rest[0])

	r := pw(t, s, "dlq", "list", k.DeadLetterStream)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "boom in "+k.Stream)
	require.Contains(t, r.stdout, "(no pelwarden metadata)")
	require.Contains(t, r.stdout, "6 of 6 records")

	// show
	id := first["id"].(string)
	require.Equal(t, first, pwJSON(t, s, "dlq", "show", k.DeadLetterStream, id))
	r = pw(t, s, "dlq", "show", k.DeadLetterStream, id)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "original id       "+ids[0])
	require.Contains(t, r.stdout, "error:\n  boom in "+k.Stream)
	require.Contains(t, r.stdout, "payload  order-0")

	// redrive to the source streams, two records at a time.
	v = pwJSON(t, s, "dlq", "redrive", k.DeadLetterStream, "--limit", "2")
	require.EqualValues(t, 2, num(t, v["moved"]))
	require.Equal(t, false, v["complete"])
	require.EqualValues(t, 4, num(t, v["remaining"]))
	v = pwJSON(t, s, "dlq", "redrive", k.DeadLetterStream)
	require.EqualValues(t, 2, num(t, v["moved"]))
	require.Equal(t, true, v["complete"])
	require.Equal(t, map[string]any{k.Stream: float64(1), other.Stream: float64(1)}, v["by_stream"])
	require.Len(t, list(t, v["foreign"]), 1)
	skipped := list(t, v["skipped"])
	require.Len(t, skipped, 1)
	require.Equal(t, gone.Stream, obj(t, skipped[0])["stream"])
	require.Contains(t, obj(t, skipped[0])["reason"], "does not exist")
	require.EqualValues(t, 2, num(t, v["remaining"]))

	// The moved entries are back with their fields and a redrive count.
	back, err := s.rdb.XRange(ctx, k.Stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, back, 6)
	for i, m := range back[3:] {
		require.Equal(t, map[string]any{"n": fmt.Sprint(i), "payload": fmt.Sprintf("order-%d", i), pelwarden.FieldRedrives: "1"}, m.Values)
	}
	n, err := s.rdb.XLen(ctx, other.Stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	// --to moves records whatever their source; foreign ones stay.
	target := k.Stream + ":retry"
	require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: target, Values: []string{"seed", "1"}}).Err())
	r = pw(t, s, "dlq", "redrive", k.DeadLetterStream, "--to", target, "--rate", "1000")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "moved 1 record from "+k.DeadLetterStream+" to "+target+" (1)")
	require.Contains(t, r.stdout, "left 1 record without pelwarden metadata")
	require.Contains(t, r.stdout, "1 record left in "+k.DeadLetterStream)

	// purge: refused without --yes (nothing deleted), then by age, then all.
	require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.DeadLetterStream, Values: []string{"another", "one"}}).Err())
	requireError(t, pw(t, s, "dlq", "purge", k.DeadLetterStream), exitUsage, "without --yes")
	n, err = s.rdb.XLen(ctx, k.DeadLetterStream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	v = pwJSON(t, s, "dlq", "purge", k.DeadLetterStream, "--older-than", "1h", "--yes")
	require.Zero(t, num(t, v["deleted"]))
	require.EqualValues(t, 2, num(t, v["remaining"]))
	v = pwJSON(t, s, "dlq", "purge", k.DeadLetterStream, "--yes")
	require.EqualValues(t, 2, num(t, v["deleted"]))
	require.Zero(t, num(t, v["remaining"]))
}

// purge --older-than deletes by the record id's time.
func TestCLIDLQPurgeOlderThan(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	k := pelwardentest.NewKeys(t)
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	for i := range 3 {
		require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.DeadLetterStream, ID: fmt.Sprintf("%d-%d", old, i), Values: []string{"a", "b"}}).Err())
	}
	require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.DeadLetterStream, Values: []string{"a", "b"}}).Err())
	r := pw(t, s, "dlq", "purge", k.DeadLetterStream, "--older-than", "1h", "--yes")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "deleted 3 records from "+k.DeadLetterStream+"; 1 left\n", r.stdout)
}

// reap deletes idle consumers that own nothing and lists the others.
func TestCLIReap(t *testing.T) {
	t.Parallel()
	s := servers[0]
	ctx := t.Context()
	f := s.fixture(t)
	f.Produce(2, order)
	f.LeavePending("busy", 2)
	for _, c := range []string{"idle", "protected"} {
		require.NoError(t, s.rdb.XGroupCreateConsumer(ctx, f.Stream, f.Group, c).Err())
	}
	require.Eventually(t, func() bool {
		cons, err := s.rdb.XInfoConsumers(ctx, f.Stream, f.Group).Result()
		if err != nil {
			return false
		}
		for _, c := range cons {
			if c.Idle < 100*time.Millisecond {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "consumers idle for 100ms")
	v := pwJSON(t, s, "reap", f.Stream, f.Group, "--idle", "50ms", "--keep", "protected")
	require.Equal(t, []any{"idle"}, v["deleted"])
	require.Equal(t, []any{map[string]any{"name": "busy", "pending": float64(2)}}, v["kept"])
	cons, err := s.rdb.XInfoConsumers(ctx, f.Stream, f.Group).Result()
	require.NoError(t, err)
	var names []string
	for _, c := range cons {
		names = append(names, c.Name)
	}
	require.ElementsMatch(t, []string{"busy", "protected"}, names)

	r := pw(t, s, "reap", f.Stream, f.Group, "--idle", "50ms", "--keep", "protected")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "deleted 0 consumers")
	require.Contains(t, r.stdout, "kept 1 consumer idle that long that still own entries")
	require.Contains(t, r.stdout, "busy")
}

// load reports the version before and after on the server.
func TestCLILoad(t *testing.T) {
	t.Parallel()
	s := servers[0]
	v := pwJSON(t, s, "load")
	require.Equal(t, pelwarden.LibraryVersion, v["embedded_version"])
	require.Equal(t, "function", v["mode"])
	nodes := list(t, v["nodes"])
	require.Len(t, nodes, 1)
	node := obj(t, nodes[0])
	require.Equal(t, pelwarden.LibraryVersion, node["before"], "TestMain loaded it")
	require.Equal(t, pelwarden.LibraryVersion, node["after"])
	require.Equal(t, string(pelwarden.ActionCurrent), node["action"])
	require.NotEmpty(t, node["addr"])

	r := pw(t, s, "load")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "SERVER")
	require.Contains(t, r.stdout, pelwarden.LibraryVersion)
	require.Contains(t, r.stdout, "mode: function")
}

// bench runs the reclaim comparison on the given server and prints its
// table.
func TestCLIBench(t *testing.T) {
	t.Parallel()
	s := servers[0]
	r := pw(t, s, "bench", "--entries", "300", "--links", "loopback", "--methods", "pelwarden,textbook", "--page-size", "100")
	require.Equal(t, exitOK, r.code, "stderr: %s\nstdout: %s", r.stderr, r.stdout)
	require.Contains(t, r.stdout, "pelwarden vs textbook")
	require.NotContains(t, r.stdout, "FAILED")
}

// testCLICluster runs the command line against the package's Redis Cluster
// through one seed node (a phase of TestCluster, which owns the cluster's
// library state): load reports every primary, status and poison work on
// hash-tagged keys, keys in different slots are refused before any change.
func testCLICluster(t *testing.T, ctx context.Context, c *testserver.Cluster, rdb *redis.ClusterClient) {
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	seed := "redis://" + c.Addrs()[0]
	run := func(args ...string) cliResult { return pwRaw(t, append([]string{"--cluster", seed}, args...)...) }

	r := run("load", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	nodes := list(t, v["nodes"])
	require.Len(t, nodes, len(shards), "one line per primary")
	var addrs []string
	for _, n := range nodes {
		n := obj(t, n)
		require.Equal(t, pelwarden.LibraryVersion, n["after"])
		addrs = append(addrs, n["addr"].(string))
	}
	var want []string
	for _, s := range shards {
		want = append(want, s.Primary.Addr())
	}
	require.ElementsMatch(t, want, addrs)

	f := clusterFixture(t, rdb, func(slot int) bool { return !newPrimarySlots.Contains(slot) })
	ids := f.Produce(3, order)
	f.LeavePending("c1", 3)
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "c1", Messages: ids[:1]}).Err())
	r = run("status", f.Stream, f.Group, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.EqualValues(t, 3, num(t, v["pending"]))

	other := clusterKeys(t, func(slot int) bool { return slot != pelwarden.Slot(f.Stream) && !newPrimarySlots.Contains(slot) })
	requireError(t, run("poison", f.Stream, f.Group, "--max-deliveries", "2", "--dlq", other.DeadLetterStream), exitUsage, "hash tag")
	require.EqualValues(t, 3, f.PendingCount(), "nothing changed")

	r = run("poison", f.Stream, f.Group, "--max-deliveries", "2", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Equal(t, []any{ids[0]}, v["dead_lettered"])
}

// `pelwarden version`: the binary's versions; with --redis, the library on
// the server, or that none is loaded there (version never loads it).
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	r := pwRaw(t, "version", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var v struct {
		Version, Module, Core, Library, Go string
		Server                             *struct {
			Library string
			Nodes   []struct{ Addr, Library string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	// The main module's version as the Go command stamped it on this build
	// from the checkout: "(devel)", or the version it reads from git (a
	// pseudo-version of the commit; it does so with -trimpath, which `make`
	// sets).
	bin, err := pelwardenBinary()
	require.NoError(t, err)
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	require.Equal(t, info.Main.Version, v.Version, "the binary's own build information")
	require.Regexp(t, `^(\(devel\)|v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+dirty)?)$`, v.Version, "built from the checkout")
	require.Equal(t, "github.com/pelwarden/pelwarden/cmd", v.Module)
	require.Equal(t, pelwarden.LibraryVersion, v.Library)
	require.True(t, strings.HasPrefix(v.Go, "go1."), v.Go)
	require.Nil(t, v.Server, "no connection flag: no server")

	r = pwRaw(t, "--version")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "pelwarden "+v.Version+" (library "+pelwarden.LibraryVersion+", "+v.Go+" "), r.stdout)

	s := servers[0]
	r = pw(t, s, "version", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	require.NotNil(t, v.Server)
	require.Equal(t, pelwarden.LibraryVersion, v.Server.Library)
	require.Len(t, v.Server.Nodes, 1)

	// A server of its own with no library: version says so and leaves it so.
	fresh, err := testserver.Start(t.Context(), s.srv.Image, testserver.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fresh.Close()) })
	addr, err := fresh.Addr(t.Context())
	require.NoError(t, err)
	r = pwRaw(t, "--redis", "redis://"+addr, "version")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "server "+addr+": no pelwarden library loaded (pelwarden load installs "+pelwarden.LibraryVersion+")")
	rdb := fresh.Client()
	defer rdb.Close()
	loaded, err := pelwarden.LoadedVersion(t.Context(), rdb)
	require.NoError(t, err)
	require.Empty(t, loaded, "version loaded nothing")
}

// pending lists the PEL oldest id first with owner, idle time and
// deliveries; its filters narrow the list on the server (IDLE, the
// consumer) and here (deliveries); --limit and --scan bound it and say
// when more may match; a missing group is a target error.
func TestCLIPending(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		f := s.fixture(t)
		ids := f.Produce(30, order)
		f.LeavePending("a", 20)
		f.LeavePending("b", 10)
		f.SetDeliveries(4, ids[3], ids[25])

		v := pwJSON(t, s, "pending", f.Stream, f.Group)
		entries := list(t, v["entries"])
		require.Len(t, entries, 30)
		require.Equal(t, true, v["complete"])
		require.EqualValues(t, 30, v["pending"])
		first := entries[0].(map[string]any)
		require.Equal(t, ids[0], first["id"], "oldest id first")
		require.Equal(t, "a", first["consumer"])
		require.EqualValues(t, 1, first["deliveries"])

		v = pwJSON(t, s, "pending", f.Stream, f.Group, "--min-deliveries", "3")
		var got []string
		for _, e := range list(t, v["entries"]) {
			got = append(got, e.(map[string]any)["id"].(string))
		}
		require.Equal(t, []string{ids[3], ids[25]}, got)
		require.Equal(t, true, v["complete"])

		v = pwJSON(t, s, "pending", f.Stream, f.Group, "--consumer", "b")
		require.Len(t, list(t, v["entries"]), 10)
		require.EqualValues(t, 10, v["pending"])
		for _, e := range list(t, v["entries"]) {
			require.Equal(t, "b", e.(map[string]any)["consumer"])
		}

		v = pwJSON(t, s, "pending", f.Stream, f.Group, "--min-idle", "1h")
		require.Empty(t, list(t, v["entries"]), "nothing idle that long")
		require.Equal(t, true, v["complete"])

		v = pwJSON(t, s, "pending", f.Stream, f.Group, "--limit", "5")
		require.Len(t, list(t, v["entries"]), 5)
		require.Equal(t, false, v["complete"], "more may match")
		v = pwJSON(t, s, "pending", f.Stream, f.Group, "--min-deliveries", "3", "--scan", "10")
		require.Len(t, list(t, v["entries"]), 1, "only the first 10 examined")
		require.EqualValues(t, 10, v["scanned"])
		require.Equal(t, false, v["complete"])

		r := pw(t, s, "pending", f.Stream, f.Group, "--limit", "2")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "2 entries listed of 30 pending, 2 examined; more may match")
		require.Contains(t, r.stdout, ids[1])

		r = pw(t, s, "pending", f.Stream, "nope")
		requireError(t, r, exitBadTarget, `group "nope" does not exist`)
	})
}
