package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// renderLive renders a group page's live fragment for v, without a server.
func renderLive(t *testing.T, v *groupView) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Options{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	p := &groupPage{page: s.newPage(v.Stream+" / "+v.Group, "group"), V: v, Stuck: &stuckView{}, MinIdle: time.Minute}
	w := httptest.NewRecorder()
	s.render(w, http.StatusOK, "group", "live", p)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	return w.Body.String()
}

// overviewRow is the overview's row of stream in body.
func overviewRow(t *testing.T, body, stream string) string {
	t.Helper()
	_, row, ok := strings.Cut(body, `data-stream="`+stream+`"`)
	require.True(t, ok, "no row of %s", stream)
	row, _, _ = strings.Cut(row, "</tr>")
	return row
}

// The lease panel: absent without a lease hash; owner, token, time left
// and the blocked head (linked to its entry page) with one; "free",
// "expired", "too large"; values escaped; a note when it can't be read.
func TestRenderLeasePanel(t *testing.T) {
	t.Parallel()
	base := func() *groupView {
		return &groupView{Stream: "{p}<b>", Group: "g", DLQ: "{p}<b>:dead", LeaseKey: "{p}<b>:lease", OldestAge: -1}
	}
	v := base()
	body := renderLive(t, v)
	require.NotContains(t, body, "Partition lease")
	require.NotContains(t, body, "lease-note")

	v = base()
	v.Lease = &ops.LeaseState{Owner: "c<1>", Token: 7, Left: 12 * time.Second, Blocked: "5-1", BlockedDeliveries: 2, RetryIn: 3 * time.Second}
	body = renderLive(t, v)
	require.Contains(t, body, "Partition lease")
	require.Contains(t, body, `<dd class="lease-owner">c&lt;1&gt;</dd>`)
	require.Contains(t, body, `<dd class="lease-token">7</dd>`)
	require.Contains(t, body, `<dd class="lease-left">12s</dd>`)
	require.Contains(t, body, `<dd class="lease-blocked bad"><a href="/entry?group=g&amp;id=5-1&amp;stream=%7Bp%7D%3Cb%3E">5-1</a> <small>2 deliveries</small> · retry in 3s</dd>`)
	require.Contains(t, body, "<code>{p}&lt;b&gt;:lease</code>")
	require.NotContains(t, body, "<b>")

	v.Lease = &ops.LeaseState{Owner: "c1", Token: 7, Left: -time.Second, Blocked: "5-1", BlockedDeliveries: 9, TooLarge: true}
	body = renderLive(t, v)
	require.Contains(t, body, `<dd class="lease-owner">c1 <span class="tag bad">expired</span></dd>`)
	require.Contains(t, body, `<dd class="lease-left">expired</dd>`)
	require.Contains(t, body, "<small>9 deliveries</small> · too large: waits for an operator</dd>")

	v.Lease = &ops.LeaseState{Token: 8, Left: -time.Hour, Blocked: "5-1", BlockedDeliveries: 1, RetryIn: -time.Second}
	body = renderLive(t, v)
	require.Contains(t, body, `<dd class="lease-owner">free</dd>`)
	require.Contains(t, body, `<dd class="lease-left">-</dd>`)
	require.Contains(t, body, "· may be retried now</dd>")

	v.Lease = &ops.LeaseState{Owner: "c1", Token: 8, Left: time.Minute}
	body = renderLive(t, v)
	require.Contains(t, body, `<dd class="lease-blocked">none</dd>`)

	v = base()
	v.LeaseNote = "{p}<b>:lease is not a lease hash"
	body = renderLive(t, v)
	require.NotContains(t, body, "Partition lease")
	require.Contains(t, body, `<p class="meta lease-note">{p}&lt;b&gt;:lease is not a lease hash</p>`)
}

// Against the server: a partition whose head waits for its backoff shows
// its owner and blocked head on the group page and a "blocked" tag in the
// overview; once lease_next hands an entry out, the block is gone. A
// lease key holding another type is noted, not fatal; a stream without a
// lease hash shows no panel.
func TestLeaseOnPages(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := t.Context()
	sc := seed(t, rdb, "leasepage", 0, 0)
	plain := seed(t, rdb, "leasepage-plain", 1, 0)
	wrong := seed(t, rdb, "leasepage-wrong", 1, 0)
	require.NoError(t, rdb.Set(ctx, pelwarden.LeaseKeyFor(wrong.Stream), "x", 0).Err())
	_, ts := newTest(t, rdb, Options{Streams: "{leasepage*", Refresh: time.Millisecond})
	for range 2 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: sc.Stream, Values: []any{"k", "v"}}).Err())
	}
	lib := pelwarden.NewLibrary(rdb)
	key := pelwarden.LeaseKeyFor(sc.Stream)
	l, err := lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: sc.Stream, Lease: key, Group: sc.Group, Consumer: "owner-1", TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, l.Held)
	args := pelwarden.LeaseNextArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: sc.Stream, DeadLetterStream: sc.DLQ, Lease: key, Group: sc.Group,
		Consumer: "owner-1", Token: l.Token, TTL: time.Hour, Backoff: []time.Duration{time.Hour}}
	n, err := lib.LeaseNext(ctx, args)
	require.NoError(t, err)
	require.Len(t, n.Entries, 1)
	head := n.Entries[0].ID
	n, err = lib.LeaseNext(ctx, args) // the head failed: it waits an hour
	require.NoError(t, err)
	require.Equal(t, head, n.Blocked)

	r := get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `<dd class="lease-owner">owner-1</dd>`)
	require.Contains(t, r.Body, `<dd class="lease-token">1</dd>`)
	require.Contains(t, r.Body, `<dd class="lease-blocked bad"><a href="`)
	require.Contains(t, r.Body, "id="+head)
	require.Contains(t, r.Body, "<small>1 deliveries</small> · retry in ")
	r = get(t, ts, "/")
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, overviewRow(t, r.Body, sc.Stream), ">blocked</span>")
	require.NotContains(t, overviewRow(t, r.Body, plain.Stream), "lease-tag")

	// With no backoff the head is handed out again: the block is cleared.
	args.Backoff = nil
	n, err = lib.LeaseNext(ctx, args)
	require.NoError(t, err)
	require.Equal(t, head, n.Entries[0].ID)
	r = get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `<dd class="lease-blocked">none</dd>`)
	r = get(t, ts, "/")
	require.Contains(t, overviewRow(t, r.Body, sc.Stream), ">ordered</span>")

	r = get(t, ts, "/fragment/group"+q("stream", plain.Stream, "group", plain.Group))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.NotContains(t, r.Body, "Partition lease")
	require.NotContains(t, r.Body, "lease-note")
	r = get(t, ts, "/fragment/group"+q("stream", wrong.Stream, "group", wrong.Group))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, "is not a lease hash (it holds another type)")
}
