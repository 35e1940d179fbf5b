package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// EnvScale runs TestScale (it builds a 1,000,000-entry PEL; about a minute).
const EnvScale = "PELWARDEN_UI_SCALE"

// Scale of TestScale.
const (
	scalePending   = 1_000_000
	scaleDead      = 100_000
	scaleConsumers = 10
	// scaleBudget is the server time every page must stay within.
	scaleBudget = 300 * time.Millisecond
)

// Every page answers within scaleBudget of server time (INFO commandstats:
// the usec the server spent in the commands of one request) on a group
// with a 1,000,000-entry PEL and a 100,000-record dead-letter stream. The
// dashboard's cache is off (Refresh 1ns): each request reads the server.
// Run with PELWARDEN_UI_SCALE=1 go test -run TestScale -v.
func TestScale(t *testing.T) {
	if os.Getenv(EnvScale) == "" {
		t.Skipf("set %s=1 to build a %d-entry PEL and measure every page's server time", EnvScale, scalePending)
	}
	ctx := context.Background()
	srv, err := testserver.Start(ctx, testImage(), testserver.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	_, err = pelwarden.Load(ctx, rdb)
	require.NoError(t, err)

	stream, group := "{big}", "billing"
	dlq := pelwarden.DeadLetterStreamFor(stream)
	started := time.Now()
	ids := buildPEL(t, rdb, stream, group)
	deadIDs := buildDeadLetters(t, rdb, stream, dlq)
	t.Logf("built a %d-entry PEL (%d consumers) and %d dead letters in %v", len(ids), scaleConsumers, len(deadIDs), time.Since(started).Round(time.Second))

	_, ts := newTest(t, rdb, Options{Refresh: time.Nanosecond})
	pages := []struct{ name, method, path string }{
		{"overview (discovery: SCAN TYPE stream)", "GET", "/"},
		{"overview", "GET", "/fragment/overview"},
		{"group: summary, consumers, first PEL page", "GET", "/group" + q("stream", stream, "group", group)},
		{"group: PEL page at entry 500,000", "GET", "/group" + q("stream", stream, "group", group, "after", ids[500_000])},
		{"group: PEL page of one consumer, from the middle", "GET", "/group" + q("stream", stream, "group", group, "consumer", "consumer-3", "from", ids[600_000])},
		{"group: live summary (polled)", "GET", "/fragment/group" + q("stream", stream, "group", group)},
		{"entry: fields and PEL row", "GET", "/entry" + q("stream", stream, "group", group, "id", ids[777_777])},
		{"dead letters: newest page", "GET", "/deadletters" + q("key", dlq)},
		{"dead letters: oldest first, from record 50,000", "GET", "/deadletters" + q("key", dlq, "order", "oldest", "cursor", deadIDs[50_000])},
		{"dead letters: reason filter (1 in 1,000 match)", "GET", "/deadletters" + q("key", dlq, "reason", "timeout")},
		{"dead letters: look up a record id", "GET", "/deadletters" + q("key", dlq, "id", deadIDs[12_345])},
		{"dead letters: live count (polled)", "GET", "/fragment/length" + q("key", dlq)},
		{"confirm poison (counts at most 50,000 PEL entries)", "POST", "/actions/poison?" + url.Values{"stream": {stream}, "group": {group}, "max_deliveries": {"2"}}.Encode()},
		{"confirm purge older than 720h (50,000 older records, counted by XRANGE pages)", "POST", "/actions/purge?" + url.Values{"dlq": {dlq}, "older_than": {"720h"}}.Encode()},
		{"confirm redrive all", "POST", "/actions/redrive?" + url.Values{"dlq": {dlq}, "all": {"1"}}.Encode()},
		{"confirm reap", "POST", "/actions/reap?" + url.Values{"stream": {stream}, "group": {group}, "idle": {"1h"}}.Encode()},
	}
	var report strings.Builder
	fmt.Fprintf(&report, "| page | server time | commands | wall time |\n|---|---:|---|---:|\n")
	// Server time in µs (commandstats' unit); wall time includes HTTP,
	// rendering and the transfer of the replies.
	for _, p := range pages {
		require.NoError(t, rdb.ConfigResetStat(ctx).Err())
		t0 := time.Now()
		var r response
		if p.method == "GET" {
			r = get(t, ts, p.path)
		} else {
			path, query, _ := strings.Cut(p.path, "?")
			form, _ := url.ParseQuery(query)
			r = post(t, ts, path, form, nil)
		}
		wall := time.Since(t0)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", p.name, r.Body)
		usec, cmds := commandStats(t, rdb)
		fmt.Fprintf(&report, "| %s | %s µs | %s | %.0f ms |\n", p.name, numfmt.Count(usec), cmds, float64(wall.Microseconds())/1000)
		// The same in Go's benchmark format on the test's output, which
		// make bench-report reads (benchmarks/internal/headline).
		fmt.Printf("BenchmarkDashboardScale/%s/%s 1 %d server-µs %.1f wall-ms\n", strings.ToLower(p.method), metricSlug(p.name), usec, float64(wall.Microseconds())/1000)
		require.Less(t, time.Duration(usec)*time.Microsecond, scaleBudget, "%s: %s", p.name, cmds)
	}
	t.Logf("server time per page, %s, PEL %d entries, %d dead letters:\n%s", testImage(), scalePending, scaleDead, report.String())
}

// buildPEL adds scalePending entries and has scaleConsumers consumers read
// them all (XREADGROUP COUNT 10,000 pages), so every entry is pending.
func buildPEL(t *testing.T, rdb *redis.Client, stream, group string) []string {
	ctx := context.Background()
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err())
	ids := make([]string, 0, scalePending)
	for start := 0; start < scalePending; start += 10_000 {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, 10_000)
		for i := start; i < start+10_000; i++ {
			cmds = append(cmds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"order", strconv.Itoa(i), "amount", "1999"}}))
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	per := scalePending / scaleConsumers
	for c := range scaleConsumers {
		for read := 0; read < per; read += 10_000 {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: fmt.Sprintf("consumer-%d", c),
				Streams: []string{stream, ">"}, Count: 10_000, Block: -1}).Result()
			require.NoError(t, err)
			require.Len(t, res[0].Messages, 10_000)
		}
	}
	require.EqualValues(t, scalePending, rdb.XPending(ctx, stream, group).Val().Count)
	return ids
}

// buildDeadLetters adds scaleDead records as the library writes them, the
// first half with ids of 2001 (for a purge by age); one in 1,000 has the
// reason "timeout", the others max_deliveries.
func buildDeadLetters(t *testing.T, rdb *redis.Client, stream, dlq string) []string {
	ctx := context.Background()
	ids := make([]string, 0, scaleDead)
	for start := 0; start < scaleDead; start += 5_000 {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, 5_000)
		for i := start; i < start+5_000; i++ {
			reason := pelwarden.ReasonMaxDeliveries
			if i%1000 == 999 {
				reason = "timeout"
			}
			id := "*"
			if i < scaleDead/2 {
				id = fmt.Sprintf("1000000000000-%d", i) // dead-lettered in 2001
			}
			cmds = append(cmds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: dlq, ID: id,
				Values: deadFields(stream, fmt.Sprintf("1700000000000-%d", i), reason, "card declined: insufficient funds")}))
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			ids = append(ids, c.Val())
		}
	}
	return ids
}

// commandStats sums the usec the server spent since CONFIG RESETSTAT, and
// names the commands (with their calls), leaving out INFO and CONFIG.
func commandStats(t *testing.T, rdb *redis.Client) (int64, string) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var total int64
	var names []string
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var calls, usec int64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
		total += usec
		names = append(names, fmt.Sprintf("%s×%d", strings.ToUpper(strings.ReplaceAll(name, "|", " ")), calls))
	}
	sort.Strings(names)
	return total, strings.Join(names, ", ")
}

// metricSlug turns a page's name into one word of a benchmark name: letters
// and digits kept, every other run of characters one "-".
func metricSlug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}
