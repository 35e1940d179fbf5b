package dashboard

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The group page shows the stream's idempotent publishing where the server
// reports it (Redis 8.6 and newer: PELWARDEN_TEST_IMAGE=pelwarden/redis:8.6),
// and nothing of it elsewhere.
func TestGroupIdempotency(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	sc := seed(t, rdb, "idmp", 2, 0)
	info, err := rdb.XInfoStream(ctx, sc.Stream).Result()
	require.NoError(t, err)
	reported := info.IDMPMaxSize > 0
	if reported {
		// One entry, then two retries the server drops.
		for range 3 {
			require.NoError(t, rdb.Do(ctx, "XADD", sc.Stream, "IDMP", "orders-api-1", "order-1", "*", "n", "1").Err())
		}
	}
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream})
	r := get(t, ts, "/fragment/group"+q("stream", sc.Stream, "group", sc.Group))
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	if !reported {
		require.NotContains(t, r.Body, "Idempotent duplicates")
		return
	}
	require.Contains(t, r.Body, "<dt>Idempotent duplicates</dt>")
	require.Contains(t, r.Body, "2 <small>dropped, 1 added · keeps 100 ids per producer for 1m40s</small>", "the server's defaults")
}
