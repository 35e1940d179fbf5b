package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The vendored htmx is the pinned release, byte for byte.
func TestHTMXPinned(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("static/htmx.min.js")
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	require.Equal(t, HTMXSHA256, hex.EncodeToString(sum[:]), "static/htmx.min.js changed: vendor a release and update HTMXVersion and HTMXSHA256")
	require.Contains(t, string(b), `version:"`+HTMXVersion+`"`)
	embedded, err := staticFS.ReadFile("static/htmx.min.js")
	require.NoError(t, err)
	require.Equal(t, b, embedded)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	for _, o := range []Options{
		{BasePath: "pelwarden"},
		{BasePath: "/a b"},
		{Auth: &BasicAuth{User: "u"}},
		{PageSize: MaxPageSize + 1},
	} {
		_, err := New(rdb, o)
		var ce *pelwarden.ArgumentError
		require.True(t, errors.As(err, &ce), "%+v: %v", o, err)
	}
	_, err := New(nil, Options{})
	require.Error(t, err)
}

// Every page answers, with what it is for.
func TestPages(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "pages", 30, 4)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream})

	r := get(t, ts, "/")
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, "{pages}")
	require.Contains(t, r.Body, `href="/group?group=billing&amp;stream=%7Bpages%7D"`)
	require.Contains(t, r.Body, `<td class="num pending">26</td>`)
	require.Contains(t, r.Body, `<svg class="spark"`)
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "default-src 'self'")

	r = get(t, ts, "/fragment/overview")
	require.Equal(t, http.StatusOK, r.Status)
	require.NotContains(t, r.Body, "<html")
	require.Contains(t, r.Body, "billing")

	r = get(t, ts, "/group"+q("stream", sc.Stream, "group", sc.Group, "min_idle", "0s", "count", "10"))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, "reader")
	require.Contains(t, r.Body, sc.Pending[0])
	require.NotContains(t, r.Body, sc.Pending[10], "a page of 10 rows")
	require.Contains(t, r.Body, "stalled", "min_idle 0s: the reader owns entries and is idle")
	require.Contains(t, r.Body, "after="+sc.Pending[9])

	r = get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, `<dd class="pending">26</dd>`)

	r = get(t, ts, "/entry"+q("stream", sc.Stream, "group", sc.Group, "id", sc.Pending[0]))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, "amount")
	require.Contains(t, r.Body, "104")

	r = get(t, ts, "/deadletters"+q("key", sc.DLQ))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	for _, id := range sc.DeadLettered {
		require.Contains(t, r.Body, id)
	}
	require.Contains(t, r.Body, "card declined")
	require.Contains(t, r.Body, `data-length="4"`)

	r = get(t, ts, "/deadletters"+q("key", sc.DLQ, "id", sc.DeadLettered[2]))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, sc.DeadLettered[2])
	require.NotContains(t, r.Body, `value="`+sc.DeadLettered[1]+`"`)

	r = get(t, ts, "/fragment/length"+q("key", sc.DLQ))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, `data-length="4"`)

	r = get(t, ts, "/static/htmx.min.js")
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, HTMXVersion)
	require.Equal(t, http.StatusNotFound, get(t, ts, "/static/").Status, "no directory listing")

	// Missing things answer 404 with a message, bad parameters 400.
	require.Equal(t, http.StatusNotFound, get(t, ts, "/group"+q("stream", sc.Stream, "group", "nope")).Status)
	require.Equal(t, http.StatusNotFound, get(t, ts, "/group"+q("stream", "{nope}", "group", "g")).Status)
	require.Equal(t, http.StatusNotFound, get(t, ts, "/deadletters"+q("key", sc.DLQ, "id", "1-1")).Status)
	require.Equal(t, http.StatusBadRequest, get(t, ts, "/group"+q("stream", sc.Stream)).Status)
	require.Equal(t, http.StatusBadRequest, get(t, ts, "/deadletters"+q("key", sc.DLQ, "cursor", "x")).Status)
	require.Equal(t, http.StatusNotFound, get(t, ts, "/nope").Status)
}

// The PEL and the dead letters are read a page at a time, by cursor.
func TestPaging(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "paging", 120, 0)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream, PageSize: 50})
	base := "/group" + q("stream", sc.Stream, "group", sc.Group)
	r := get(t, ts, base)
	require.Contains(t, r.Body, sc.Pending[49])
	require.NotContains(t, r.Body, sc.Pending[50])
	r = get(t, ts, base+"&after="+sc.Pending[49])
	require.Contains(t, r.Body, sc.Pending[50])
	require.Contains(t, r.Body, sc.Pending[99])
	require.NotContains(t, r.Body, ">"+sc.Pending[49]+"<")
	r = get(t, ts, base+"&after="+sc.Pending[99])
	require.Contains(t, r.Body, sc.Pending[119])
	require.NotContains(t, r.Body, "Next page")
	r = get(t, ts, base+"&from="+sc.Pending[70])
	require.Contains(t, r.Body, ">"+sc.Pending[70]+"<")
	require.NotContains(t, r.Body, ">"+sc.Pending[69]+"<")

	// Dead letters: 60 records, 10 of them with another reason; newest first.
	ctx := context.Background()
	dlq := "{paging}:dead"
	var ids []string
	for i := range 60 {
		reason := pelwarden.ReasonMaxDeliveries
		if i%6 == 0 {
			reason = "timeout"
		}
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: deadFields(sc.Stream, fmt.Sprintf("1-%d", i), reason, "x")}).Result()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	r = get(t, ts, "/deadletters"+q("key", dlq, "count", "20"))
	require.Contains(t, r.Body, ids[59])
	require.Contains(t, r.Body, ids[40])
	require.NotContains(t, r.Body, ">"+ids[39]+"<")
	require.Contains(t, r.Body, "cursor="+ids[40])
	r = get(t, ts, "/deadletters"+q("key", dlq, "count", "20", "order", "oldest", "cursor", ids[19]))
	require.Contains(t, r.Body, ">"+ids[20]+"<")
	require.NotContains(t, r.Body, ">"+ids[19]+"<")

	// A reason filter scans bounded pages and says how far it went.
	_, ts2 := newTest(t, rdb, Options{Streams: sc.Stream, FilterScan: 30})
	r = get(t, ts2, "/deadletters"+q("key", dlq, "reason", "timeout", "count", "50"))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "scanned 30 records")
	require.Contains(t, r.Body, "its bound")
	require.Contains(t, r.Body, ">"+ids[54]+"<")
	require.Contains(t, r.Body, ">"+ids[30]+"<")
	require.NotContains(t, r.Body, ">"+ids[59]+"<", "another reason")
	require.NotContains(t, r.Body, ">"+ids[24]+"<", "past the scan bound")
	require.Contains(t, r.Body, "cursor="+ids[30])

	// Search by the entry's original id.
	r = get(t, ts, "/deadletters"+q("key", dlq, "original_id", "1-7"))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, ">"+ids[7]+"<")
	require.NotContains(t, r.Body, ">"+ids[8]+"<")
	require.Contains(t, r.Body, "scanned 60 records")
}

// deadFields are the fields of a dead-letter record as the library writes
// them.
func deadFields(stream, originalID, reason, errText string) []any {
	return []any{"order", "42",
		pelwarden.FieldOriginalID, originalID, pelwarden.FieldStream, stream, pelwarden.FieldGroup, "billing",
		pelwarden.FieldConsumer, "c1", pelwarden.FieldDeliveries, "5", pelwarden.FieldReason, reason,
		pelwarden.FieldError, errText, pelwarden.FieldDeadLetteredAt, "1700000000000", pelwarden.FieldMetaCount, "9"}
}

// Hostile field names and values are escaped and long ones truncated.
func TestHostileValues(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	stream, dlq := "{hostile}", "{hostile}:dead"
	const script = `<script>alert(1)</script>`
	const attr = `"><img src=x onerror=alert(2)>`
	long := strings.Repeat("A", 100_000)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, script, "$").Err())
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{script, attr, "long", long, "bin", "\xff\xfe"}}).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: script, Consumer: attr, Streams: []string{stream, ">"}, Block: -1}).Err())
	fields := deadFields(stream, id, script, attr+long)
	fields[0], fields[1] = script, attr
	rec, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: fields}).Result()
	require.NoError(t, err)
	_, ts := newTest(t, rdb, Options{Streams: stream})
	for _, path := range []string{
		"/",
		"/group" + q("stream", stream, "group", script),
		"/fragment/group" + q("stream", stream, "group", script),
		"/entry" + q("stream", stream, "group", script, "id", id),
		"/deadletters" + q("key", dlq),
		"/deadletters" + q("key", dlq, "id", rec),
		"/deadletters" + q("key", dlq, "reason", script),
	} {
		r := get(t, ts, path)
		require.Equal(t, http.StatusOK, r.Status, path)
		require.NotContains(t, r.Body, script, path)
		require.NotContains(t, r.Body, "<img", path)
		require.NotContains(t, r.Body, long, path)
		require.NotContains(t, r.Body, "\xff", path)
		require.Regexp(t, `&lt;(script|img)`, r.Body, path)
		if strings.Contains(path, "entry") || strings.Contains(path, "deadletters") {
			require.Contains(t, r.Body, "[truncated: 100,", path)
		}
	}
}

// A group page lists at most maxConsumersShown consumers, stalled first.
func TestManyConsumers(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "many", 1, 0)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range maxConsumersShown + 50 {
		pipe.XGroupCreateConsumer(ctx, sc.Stream, sc.Group, fmt.Sprintf("idle-%03d", i))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream})
	r := get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group, "min_idle", "0s"))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "and 51 more consumers")
	require.Less(t, strings.Index(r.Body, ">reader<"), strings.Index(r.Body, ">idle-000<"), "the stalled consumer comes first")
	require.Contains(t, r.Body, "<dd>251, <span class=\"bad\">1 stalled</span></dd>")
}

// The overview can be ordered by a column and filtered; the live table
// keeps both.
func TestOverviewSortFilter(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	seed(t, rdb, "sortf-a", 3, 0)
	seed(t, rdb, "sortf-b", 9, 0)
	seed(t, rdb, "sortf-c", 5, 0)
	_, ts := newTest(t, rdb, Options{Streams: "{sortf-*"})
	order := func(body string) []string {
		var out []string
		for _, n := range []string{"{sortf-a}", "{sortf-b}", "{sortf-c}"} {
			if i := strings.Index(body, `data-stream="`+n+`"`); i >= 0 {
				out = append(out, fmt.Sprintf("%08d%s", i, n))
			}
		}
		slices.Sort(out)
		for i := range out {
			out[i] = out[i][8:]
		}
		return out
	}
	r := get(t, ts, "/")
	require.Equal(t, []string{"{sortf-a}", "{sortf-b}", "{sortf-c}"}, order(r.Body))
	r = get(t, ts, "/?sort=pending")
	require.Equal(t, []string{"{sortf-b}", "{sortf-c}", "{sortf-a}"}, order(r.Body))
	require.Contains(t, r.Body, `hx-get="/fragment/overview?sort=pending"`)
	r = get(t, ts, "/fragment/overview?sort=pending&q=sortf-c")
	require.Equal(t, []string{"{sortf-c}"}, order(r.Body))
	r = get(t, ts, "/?sort=nonsense&q=nothing-matches")
	require.Contains(t, r.Body, "matching the filter")
	require.Contains(t, r.Body, `hx-get="/fragment/overview?q=nothing-matches"`)
}

// The group page lists the entries idle past stuck_after (the driver's
// stall threshold) as stuck, with their owners, and none below it.
func TestStuckEntries(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "stuck", 30, 4)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream})
	ctx := t.Context()
	// Two of the reader's entries idle for an hour, owned by "gone".
	for _, id := range sc.Pending[:2] {
		require.NoError(t, rdb.Do(ctx, "XCLAIM", sc.Stream, sc.Group, "gone", 0, id, "IDLE", time.Hour.Milliseconds(), "JUSTID").Err())
	}

	r := get(t, ts, "/group"+q("stream", sc.Stream, "group", sc.Group, "stuck_after", "30m"))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `<dd class="stuck bad">2</dd>`)
	require.Contains(t, r.Body, "Stuck entries")
	require.Contains(t, r.Body, `name="stuck_after" value="30m"`)
	stuck := r.Body[strings.Index(r.Body, `<table class="stuck-table">`):]
	stuck = stuck[:strings.Index(stuck, "</table>")]
	require.Contains(t, stuck, sc.Pending[0])
	require.Contains(t, stuck, sc.Pending[1])
	require.NotContains(t, stuck, sc.Pending[2])
	require.Contains(t, stuck, "gone")

	r = get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group, "stuck_after", "2h"))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, `<dd class="stuck">0</dd>`)
	require.NotContains(t, r.Body, "Stuck entries")

	require.Equal(t, http.StatusBadRequest, get(t, ts, "/group"+q("stream", sc.Stream, "group", sc.Group, "stuck_after", "0s")).Status)
	require.Equal(t, http.StatusBadRequest, get(t, ts, "/group"+q("stream", sc.Stream, "group", sc.Group, "stuck_after", "soon")).Status)
}

// The overview shows each limit on the server: its rate and burst, the
// rate's permits available, its cap and the permits in use, the holders;
// a full cap is flagged. On a database of its own, so the other tests'
// overviews do not show its limits.
func TestLimitsShown(t *testing.T) {
	t.Parallel()
	o := *client(t).Options()
	o.DB = 1
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	lib := pelwarden.NewLibrary(rdb)
	names := []string{"dash-limits-rate", "dash-limits-cap"}
	t.Cleanup(func() {
		for _, n := range names {
			h, z := pelwarden.LimitKeysFor(n)
			rdb.Del(context.Background(), h, z)
		}
	})
	_, err := lib.SetLimit(ctx, names[0], pelwarden.LimitSettings{Rate: 2.5, Burst: 4})
	require.NoError(t, err)
	_, err = lib.SetLimit(ctx, names[1], pelwarden.LimitSettings{Concurrency: 3, Lease: time.Minute})
	require.NoError(t, err)
	p, err := lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: names[1], Want: 3})
	require.NoError(t, err)
	require.Equal(t, 3, p.Granted)
	_, ts := newTest(t, rdb, Options{Streams: "{dash-limits-none-*"})
	r := get(t, ts, "/")
	row := func(name string) string {
		i := strings.Index(r.Body, `data-limit="`+name+`"`)
		require.GreaterOrEqual(t, i, 0, "a row for %s", name)
		j := strings.Index(r.Body[i:], "</tr>")
		return r.Body[i : i+j]
	}
	rate := row(names[0])
	require.Contains(t, rate, "2.5/s")
	require.Contains(t, rate, ">4<", "the burst, and as many available")
	cap := row(names[1])
	require.Contains(t, cap, "3 of 3")
	require.Contains(t, cap, `class="warn"`, "a full cap is flagged")
	require.Contains(t, cap, ">1<", "one holder")
}
