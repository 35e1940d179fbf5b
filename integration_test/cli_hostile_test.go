package integration_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// Hostile input for every command of the command line (issue 5 section 3):
// bad names, counts, durations, ids and cursors, keys of the wrong type,
// missing streams and groups, dead-letter streams of foreign entries. Each
// gets one clear line on stderr and its documented exit code, and the
// server's state is the same before and after.

// hostileKeys are one case's keys: k.Stream (group "group", three entries, two
// pending with "a", one dead-lettered to k.DeadLetterStream) and keys of other shapes
// under the same hash tag.
type hostileKeys struct {
	pelwardentest.Keys
	Missing, Str, Hash, Foreign string
	// Record is the id of k.DeadLetterStream's dead-letter record; ForeignID of the
	// first entry of Foreign.
	Record, ForeignID string
}

func (h hostileKeys) all() []string { return []string{h.Missing, h.Str, h.Hash, h.Foreign} }

func arrangeHostile(t *testing.T, ctx context.Context, s *target) hostileKeys {
	t.Helper()
	f := s.fixture(t)
	h := hostileKeys{Keys: f.Keys, Missing: f.Stream + ":missing", Str: f.Stream + ":str", Hash: f.Stream + ":hash", Foreign: f.Stream + ":foreign"}
	ids := f.Produce(3, order)
	f.LeavePending("a", 3)
	dl, err := s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a", IDs: ids[2:], Error: "boom"})
	require.NoError(t, err)
	require.Len(t, dl.DeadLettered, 1)
	rec, err := s.rdb.XRange(ctx, f.DeadLetterStream, "-", "+").Result()
	require.NoError(t, err)
	h.Record = rec[0].ID
	require.NoError(t, s.rdb.Set(ctx, h.Str, "x", 0).Err())
	require.NoError(t, s.rdb.HSet(ctx, h.Hash, "f", "v").Err())
	for _, fields := range [][]string{
		{"plain", "entry"},
		{"a", "b", pelwarden.FieldMetaCount, "2"},                                  // a count taking in a foreign field
		{pelwarden.FieldStream, f.Stream, "x", "y"},                                // metadata, but not at the end
		{"a", "b", pelwarden.FieldStream, f.Stream, pelwarden.FieldMetaCount, "x"}, // not a number
	} {
		id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: h.Foreign, Values: fields}).Result()
		require.NoError(t, err)
		if h.ForeignID == "" {
			h.ForeignID = id
		}
	}
	return h
}

type cliHostileCase struct {
	args func(h hostileKeys) []string
	code int
	says string // part of the one-line error
}

func cliHostileCases() map[string]cliHostileCase {
	big := strings.Repeat("k", pelwarden.MaxNameBytes+1)
	a := func(args ...string) func(hostileKeys) []string {
		return func(hostileKeys) []string { return args }
	}
	usage := func(says string, args func(hostileKeys) []string) cliHostileCase {
		return cliHostileCase{args: args, code: exitUsage, says: says}
	}
	target := func(says string, args func(hostileKeys) []string) cliHostileCase {
		return cliHostileCase{args: args, code: exitBadTarget, says: says}
	}
	const maxID = "18446744073709551615-18446744073709551615"
	return map[string]cliHostileCase{
		// pending
		"pending/empty consumer":          usage("--consumer must not be empty", a("pending", "s", "g", "--consumer", "")),
		"pending/negative min-idle":       usage("--min-idle must not be negative", a("pending", "s", "g", "--min-idle", "-1s")),
		"pending/negative min-deliveries": usage("--min-deliveries must not be negative", a("pending", "s", "g", "--min-deliveries", "-1")),
		"pending/zero limit":              usage("--limit must be between 1 and 10000", a("pending", "s", "g", "--limit", "0")),
		"pending/huge scan":               usage("--scan must be between 1 and 10000000", a("pending", "s", "g", "--scan", "10000001")),
		"pending/extra argument":          usage("needs 2 argument(s)", a("pending", "s", "g", "h")),
		"pending/missing group": target(`group "nope" does not exist`, func(h hostileKeys) []string {
			return []string{"pending", h.Stream, "nope"}
		}),
		"pending/stream is a string": target("holds a string, not a stream", func(h hostileKeys) []string {
			return []string{"pending", h.Str, h.Group}
		}),
		// status
		"status/empty stream":        usage("STREAM must not be empty", a("status", "", "g")),
		"status/empty group":         usage("GROUP must not be empty", a("status", "s", "")),
		"status/oversized stream":    usage("STREAM must be at most 1024 bytes", a("status", big, "g")),
		"status/oversized group":     usage("GROUP must be at most 1024 bytes", a("status", "s", big)),
		"status/extra argument":      usage("needs 2 argument(s)", a("status", "s", "g", "h")),
		"status/negative min-idle":   usage("--min-idle must not be negative", a("status", "s", "g", "--min-idle", "-1ms")),
		"status/absurd min-idle":     usage("--min-idle", a("status", "s", "g", "--min-idle", "99999999999h")),
		"status/min-idle not a time": usage("--min-idle", a("status", "s", "g", "--min-idle", "1fortnight")),
		"status/empty dlq":           usage("--dlq must not be empty", a("status", "s", "g", "--dlq", "")),
		"status/oversized dlq":       usage("--dlq must be at most 1024 bytes", a("status", "s", "g", "--dlq", big)),
		"status/missing stream": target("does not exist", func(h hostileKeys) []string {
			return []string{"status", h.Missing, h.Group}
		}),
		"status/missing group": target(`group "nope" does not exist`, func(h hostileKeys) []string {
			return []string{"status", h.Stream, "nope"}
		}),
		"status/stream is a string": target("holds a string, not a stream", func(h hostileKeys) []string {
			return []string{"status", h.Str, h.Group}
		}),
		"status/stream is a hash": target("holds a hash, not a stream", func(h hostileKeys) []string {
			return []string{"status", h.Hash, h.Group}
		}),
		"status/dlq is a hash": target("holds a hash, not a stream", func(h hostileKeys) []string {
			return []string{"status", h.Stream, h.Group, "--dlq", h.Hash}
		}),
		"status/group of another stream": target("has no consumer groups", func(h hostileKeys) []string {
			return []string{"status", h.Foreign, h.Group}
		}),

		// poison
		"poison/no max-deliveries":       usage("--max-deliveries is required", a("poison", "s", "g")),
		"poison/zero max-deliveries":     usage("--max-deliveries must be between 1", a("poison", "s", "g", "--max-deliveries", "0")),
		"poison/negative max-deliveries": usage("--max-deliveries must be between 1", a("poison", "s", "g", "--max-deliveries", "-1")),
		"poison/absurd max-deliveries":   usage("--max-deliveries must be between 1", a("poison", "s", "g", "--max-deliveries", "2147483648")),
		"poison/overflowing max-deliveries": usage("--max-deliveries",
			a("poison", "s", "g", "--max-deliveries", "99999999999999999999")),
		"poison/max-deliveries not a number": usage("--max-deliveries", a("poison", "s", "g", "--max-deliveries", "five")),
		"poison/negative min-idle":           usage("--min-idle must not be negative", a("poison", "s", "g", "--max-deliveries", "1", "--min-idle", "-1s")),
		"poison/dlq is the stream":           usage("--dlq must differ", a("poison", "s", "g", "--max-deliveries", "1", "--dlq", "s")),
		"poison/empty dlq":                   usage("--dlq must not be empty", a("poison", "s", "g", "--max-deliveries", "1", "--dlq", "")),
		"poison/oversized stream":            usage("STREAM must be at most", a("poison", big, "g", "--max-deliveries", "1")),
		"poison/missing stream": target("does not exist", func(h hostileKeys) []string {
			return []string{"poison", h.Missing, h.Group, "--max-deliveries", "1"}
		}),
		"poison/missing group": target(`group "nope" does not exist`, func(h hostileKeys) []string {
			return []string{"poison", h.Stream, "nope", "--max-deliveries", "1"}
		}),
		"poison/stream is a string": target("holds a string", func(h hostileKeys) []string {
			return []string{"poison", h.Str, h.Group, "--max-deliveries", "1"}
		}),
		"poison/dlq is a string": target("holds a string", func(h hostileKeys) []string {
			return []string{"poison", h.Stream, h.Group, "--max-deliveries", "1", "--dlq", h.Str}
		}),

		// dlq list
		"dlq list/zero count":          usage("--count must be between 1 and 10000", a("dlq", "list", "d", "--count", "0")),
		"dlq list/negative count":      usage("--count must be between 1 and 10000", a("dlq", "list", "d", "--count", "-1")),
		"dlq list/absurd count":        usage("--count must be between 1 and 10000", a("dlq", "list", "d", "--count", "10001")),
		"dlq list/overflowing count":   usage("--count", a("dlq", "list", "d", "--count", "99999999999999999999")),
		"dlq list/empty after":         usage("is not a stream id", a("dlq", "list", "d", "--after", "")),
		"dlq list/after not an id":     usage("is not a stream id", a("dlq", "list", "d", "--after", "yesterday")),
		"dlq list/after incomplete":    usage("is not a stream id", a("dlq", "list", "d", "--after", "1-")),
		"dlq list/after exclusive":     usage("is not a stream id", a("dlq", "list", "d", "--after", "(1-0")),
		"dlq list/after special":       usage("is not a stream id", a("dlq", "list", "d", "--after", "+")),
		"dlq list/after three parts":   usage("is not a stream id", a("dlq", "list", "d", "--after", "1-2-3")),
		"dlq list/after past uint64":   usage("out of range", a("dlq", "list", "d", "--after", "18446744073709551616-0")),
		"dlq list/after seq too large": usage("out of range", a("dlq", "list", "d", "--after", "1-18446744073709551616")),
		"dlq list/empty key":           usage("DLQ must not be empty", a("dlq", "list", "")),
		"dlq list/oversized key":       usage("DLQ must be at most", a("dlq", "list", big)),
		"dlq list/missing": target("does not exist", func(h hostileKeys) []string {
			return []string{"dlq", "list", h.Missing}
		}),
		"dlq list/a hash": target("holds a hash, not a stream", func(h hostileKeys) []string {
			return []string{"dlq", "list", h.Hash}
		}),

		// dlq show
		"dlq show/id not an id":  usage("is not a stream id", a("dlq", "show", "d", "abc")),
		"dlq show/empty id":      usage("ID must not be empty", a("dlq", "show", "d", "")),
		"dlq show/bare number":   usage("is not a stream id", a("dlq", "show", "d", "1700000000000")),
		"dlq show/id past max":   usage("out of range", a("dlq", "show", "d", "99999999999999999999-0")),
		"dlq show/missing id":    usage("needs 2 argument(s)", a("dlq", "show", "d")),
		"dlq show/oversized key": usage("DLQ must be at most", a("dlq", "show", big, "1-0")),
		"dlq show/missing key": target("does not exist", func(h hostileKeys) []string {
			return []string{"dlq", "show", h.Missing, h.Record}
		}),
		"dlq show/a string": target("holds a string", func(h hostileKeys) []string {
			return []string{"dlq", "show", h.Str, h.Record}
		}),
		"dlq show/no such record": target("no record 1-1", func(h hostileKeys) []string {
			return []string{"dlq", "show", h.DeadLetterStream, "1-1"}
		}),
		"dlq show/largest id": target("no record "+maxID, func(h hostileKeys) []string {
			return []string{"dlq", "show", h.DeadLetterStream, maxID}
		}),

		// dlq redrive
		"dlq redrive/zero rate":      usage("--rate must be positive", a("dlq", "redrive", "d", "--rate", "0")),
		"dlq redrive/negative rate":  usage("--rate must be positive", a("dlq", "redrive", "d", "--rate", "-5")),
		"dlq redrive/NaN rate":       usage("--rate must be positive", a("dlq", "redrive", "d", "--rate", "NaN")),
		"dlq redrive/infinite rate":  usage("--rate must be positive", a("dlq", "redrive", "d", "--rate", "+Inf")),
		"dlq redrive/absurd rate":    usage("--rate must be positive", a("dlq", "redrive", "d", "--rate", "1e12")),
		"dlq redrive/rate not a num": usage("--rate", a("dlq", "redrive", "d", "--rate", "fast")),
		"dlq redrive/zero limit":     usage("--limit must be positive", a("dlq", "redrive", "d", "--limit", "0")),
		"dlq redrive/negative limit": usage("--limit must be positive", a("dlq", "redrive", "d", "--limit", "-1")),
		"dlq redrive/empty to":       usage("--to must not be empty", a("dlq", "redrive", "d", "--to", "")),
		"dlq redrive/oversized to":   usage("--to must be at most", a("dlq", "redrive", "d", "--to", big)),
		"dlq redrive/to itself":      usage("--to must differ", a("dlq", "redrive", "d", "--to", "d")),
		"dlq redrive/missing dlq": target("does not exist", func(h hostileKeys) []string {
			return []string{"dlq", "redrive", h.Missing}
		}),
		"dlq redrive/dlq is a hash": target("holds a hash", func(h hostileKeys) []string {
			return []string{"dlq", "redrive", h.Hash}
		}),
		"dlq redrive/missing to": target(`--to stream "`, func(h hostileKeys) []string {
			return []string{"dlq", "redrive", h.DeadLetterStream, "--to", h.Missing}
		}),
		"dlq redrive/to is a string": target("holds a string", func(h hostileKeys) []string {
			return []string{"dlq", "redrive", h.DeadLetterStream, "--to", h.Str}
		}),

		// dlq purge
		"dlq purge/without yes":         usage("without --yes", a("dlq", "purge", "d")),
		"dlq purge/zero older-than":     usage("--older-than must be a positive duration", a("dlq", "purge", "d", "--older-than", "0s", "--yes")),
		"dlq purge/negative older-than": usage("--older-than must be a positive duration", a("dlq", "purge", "d", "--older-than", "-1h", "--yes")),
		"dlq purge/older-than garbage":  usage("--older-than", a("dlq", "purge", "d", "--older-than", "old", "--yes")),
		"dlq purge/missing": target("does not exist", func(h hostileKeys) []string {
			return []string{"dlq", "purge", h.Missing, "--yes"}
		}),
		"dlq purge/a hash": target("holds a hash", func(h hostileKeys) []string {
			return []string{"dlq", "purge", h.Hash, "--yes"}
		}),
		"dlq purge/a work stream": target("has consumer groups ("+pelwardentest.DefaultGroup+")", func(h hostileKeys) []string {
			return []string{"dlq", "purge", h.Stream, "--yes"}
		}),

		// reap
		"reap/no idle":         usage("--idle is required", a("reap", "s", "g")),
		"reap/zero idle":       usage("--idle must be a positive duration", a("reap", "s", "g", "--idle", "0s")),
		"reap/negative idle":   usage("--idle must be a positive duration", a("reap", "s", "g", "--idle", "-1h")),
		"reap/idle under 1ms":  usage("--idle must be at least 1ms", a("reap", "s", "g", "--idle", "500us")),
		"reap/empty keep":      usage("--keep must not be empty", a("reap", "s", "g", "--idle", "1h", "--keep", "")),
		"reap/oversized keep":  usage("--keep must be at most", a("reap", "s", "g", "--idle", "1h", "--keep", big)),
		"reap/oversized group": usage("GROUP must be at most", a("reap", "s", big, "--idle", "1h")),
		"reap/missing stream": target("does not exist", func(h hostileKeys) []string {
			return []string{"reap", h.Missing, h.Group, "--idle", "1h"}
		}),
		"reap/missing group": target(`group "nope" does not exist`, func(h hostileKeys) []string {
			return []string{"reap", h.Stream, "nope", "--idle", "1h"}
		}),
		"reap/stream is a hash": target("holds a hash", func(h hostileKeys) []string {
			return []string{"reap", h.Hash, h.Group, "--idle", "1h"}
		}),

		// load
		"load/an argument": usage(`unknown command "x"`, a("load", "x")),

		// bench (checked before any server is started or touched)
		"bench/zero entries":     usage("--entries must be", a("bench", "--entries", "0")),
		"bench/negative entries": usage("--entries must be", a("bench", "--entries", "-1")),
		"bench/absurd entries":   usage("--entries must be", a("bench", "--entries", "2000000000")),
		"bench/zero proxied":     usage("--proxied-entries must be", a("bench", "--proxied-entries", "0")),
		"bench/absurd proxied":   usage("--proxied-entries must be", a("bench", "--proxied-entries", "2000000000")),
		"bench/zero page size":   usage("--page-size must be between 1 and 10000", a("bench", "--page-size", "0")),
		"bench/absurd page size": usage("--page-size must be between 1 and 10000", a("bench", "--page-size", "10001")),
		"bench/zero latency":     usage("--latency must be a positive duration", a("bench", "--latency", "0s")),
		"bench/negative latency": usage("--latency must be a positive duration", a("bench", "--latency", "-1ms")),
		"bench/unknown method":   usage("--methods", a("bench", "--methods", "magic")),
		"bench/empty methods":    usage("--methods", a("bench", "--methods", "")),
		"bench/unknown link":     usage("--links", a("bench", "--links", "carrier-pigeon")),
		"bench/an argument":      usage(`unknown command "x"`, a("bench", "x")),
		"bench/on a cluster":     usage("--cluster is not supported", a("--cluster", "redis://127.0.0.1:1", "bench")),

		// demo (checked before any server is started or touched)
		"demo/zero orders":                        usage("--orders must be between 1", a("demo", "--orders", "0")),
		"demo/ui on every interface without auth": usage("refusing to serve the dashboard on 0.0.0.0:1 without authentication", a("demo", "--ui", "0.0.0.0:1")),
		"demo/ui without a port":                  usage("--listen", a("demo", "--ui", "localhost")),
		"demo/negative orders":                    usage("--orders must be between 1", a("demo", "--orders", "-1")),
		"demo/absurd orders":                      usage("--orders must be between 1", a("demo", "--orders", "1000001")),
		"demo/negative poison":                    usage("--poison-rate must be between 0 and 0.5", a("demo", "--poison-rate", "-0.1")),
		"demo/too much poison":                    usage("--poison-rate must be between 0 and 0.5", a("demo", "--poison-rate", "0.6")),
		"demo/NaN poison":                         usage("--poison-rate must be between 0 and 0.5", a("demo", "--poison-rate", "NaN")),
		"demo/short duration":                     usage("--duration must be at least 5s", a("demo", "--duration", "1s")),
		"demo/negative duration":                  usage("--duration must be at least 5s", a("demo", "--duration", "-1m")),
		"demo/zero rate":                          usage("--rate must be between 1", a("demo", "--rate", "0")),
		"demo/absurd rate":                        usage("--rate must be between 1", a("demo", "--rate", "1000001")),
		"demo/keep without redis":                 usage("--keep needs --redis or --cluster", a("--json", "demo", "--keep")),

		// connecting
		"global/empty redis":        usage("--redis must not be empty", a("--redis", "", "status", "s", "g")),
		"global/empty cluster":      usage("--cluster must not be empty", a("--cluster", "", "status", "s", "g")),
		"global/redis not a URL":    usage("invalid URL escape", a("--redis", "redis://127.0.0.1:1/%zz", "status", "s", "g")),
		"global/wrong scheme":       usage("invalid URL scheme", a("--redis", "http://127.0.0.1:1", "status", "s", "g")),
		"global/redis and cluster":  usage("exclude each other", a("--redis", "redis://127.0.0.1:1", "--cluster", "redis://127.0.0.1:1", "load")),
		"global/cacert without TLS": usage("--cacert needs a rediss:// URL", a("--redis", "redis://127.0.0.1:1", "--cacert", "/nonexistent", "load")),
		"global/cacert missing":     usage("--cacert: open /nonexistent", a("--redis", "rediss://127.0.0.1:1", "--cacert", "/nonexistent", "load")),
	}
}

// Every command, given bad input, fails with one line and its exit code,
// and changes nothing.
func TestCLIHostileInput(t *testing.T) {
	// A usage error is refused before the CLI dials: each runs once, its
	// --redis an address where nothing listens, which proves it (a CLI that
	// dialed first would fail to connect instead). The errors that come
	// from the server's state run on every server.
	t.Run("usage", func(t *testing.T) {
		for name, c := range cliHostileCases() {
			if c.code != exitUsage {
				continue
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				args := c.args(hostileKeys{})
				if !strings.HasPrefix(args[0], "--") { // else the case chooses
					args = append([]string{"--redis", "redis://127.0.0.1:1"}, args...)
				}
				r := pwRaw(t, args...)
				requireError(t, r, c.code, c.says)
				require.Equal(t, r, pwRaw(t, append(args, "--json")...), "--json changes nothing about an error")
			})
		}
	})
	each(t, func(t *testing.T, s *target) {
		url := serverURL(t, s)
		for name, c := range cliHostileCases() {
			if c.code == exitUsage {
				continue // above
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				h := arrangeHostile(t, ctx, s)
				before := snap(t, ctx, s.rdb, h.Keys, h.all()...)
				args := c.args(h)
				if !strings.HasPrefix(args[0], "--") { // else the case chooses
					args = append([]string{"--redis", url}, args...)
				}
				r := pwRaw(t, args...)
				requireError(t, r, c.code, c.says)
				rj := pwRaw(t, append(args, "--json")...)
				require.Equal(t, r, rj, "--json changes nothing about an error")
				require.Equal(t, before, snap(t, ctx, s.rdb, h.Keys, h.all()...), "state changed")
			})
		}
	})
}

// Foreign entries (no pelwarden metadata) in a dead-letter stream, and
// absurd but valid values: the commands succeed, show foreign entries as
// such, never move or change them.
func TestCLIHostileValid(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		h := arrangeHostile(t, ctx, s)
		run := func(args ...string) map[string]any {
			t.Helper()
			before := snap(t, ctx, s.rdb, h.Keys, h.all()...)
			v := pwJSON(t, s, args...)
			require.Equal(t, before, snap(t, ctx, s.rdb, h.Keys, h.all()...), "%v changed the state", args)
			return v
		}
		const maxID = "18446744073709551615-18446744073709551615"

		v := run("dlq", "list", h.Foreign)
		recs := list(t, v["records"])
		require.Len(t, recs, 4)
		for _, r := range recs {
			require.Equal(t, true, obj(t, r)["foreign"], "%v", r)
		}
		require.Equal(t, true, run("dlq", "show", h.Foreign, h.ForeignID)["foreign"])
		require.Empty(t, list(t, run("dlq", "list", h.DeadLetterStream, "--after", maxID)["records"]))
		require.Empty(t, list(t, run("dlq", "list", h.DeadLetterStream, "--after", h.Record)["records"]))

		v = run("dlq", "redrive", h.Foreign)
		require.Zero(t, num(t, v["moved"]))
		require.Len(t, list(t, v["foreign"]), 4)
		v = run("dlq", "redrive", h.Foreign, "--to", h.Stream)
		require.Zero(t, num(t, v["moved"]))
		require.Len(t, list(t, v["foreign"]), 4)

		v = run("status", h.Stream, h.Group, "--dlq", h.Foreign, "--min-idle", "2562047h")
		require.EqualValues(t, 4, num(t, v["dead_letter_length"]))
		require.Zero(t, num(t, v["stalled_consumers"]))
		v = run("poison", h.Stream, h.Group, "--max-deliveries", "2147483647", "--dlq", h.Foreign)
		require.Zero(t, num(t, v["count"]))
		v = run("poison", h.Stream, h.Group, "--max-deliveries", "1", "--min-idle", "2562047h")
		require.Zero(t, num(t, v["count"]))
		v = run("reap", h.Stream, h.Group, "--idle", "2562047h")
		require.Empty(t, list(t, v["deleted"]))
		v = run("dlq", "purge", h.Foreign, "--older-than", "2562047h", "--yes")
		require.Zero(t, num(t, v["deleted"]))

		// The one genuine record moves into the stream of foreign entries,
		// which keeps them unchanged.
		foreignBefore, err := s.rdb.Do(ctx, "XRANGE", h.Foreign, "-", "+").Slice()
		require.NoError(t, err)
		v = pwJSON(t, s, "dlq", "redrive", h.DeadLetterStream, "--limit", "2147483647", "--rate", "1000000", "--to", h.Foreign)
		require.EqualValues(t, 1, num(t, v["moved"]))
		foreignAfter, err := s.rdb.Do(ctx, "XRANGE", h.Foreign, "-", "+").Slice()
		require.NoError(t, err)
		require.Len(t, foreignAfter, 5)
		require.Equal(t, foreignBefore, foreignAfter[:4])
	})
}
