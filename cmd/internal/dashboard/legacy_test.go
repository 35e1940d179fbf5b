package dashboard

import (
	"context"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// A stream without a hash tag: the group page counts the dead letters of
// pelwarden.DeadLetterStreamFor ("{s}:dead"), and shows the records an
// older version wrote under the former name ("s:dead") with what to do.
func TestGroupPageFormerDeadLetters(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	stream, group := "legacy-dlq-stream", "billing"
	dlq := pelwarden.DeadLetterStreamFor(stream)
	require.Equal(t, "{"+stream+"}:dead", dlq)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []string{"order", "new"}}).Err())
	_, ts := newTest(t, rdb, Options{Streams: stream})

	r := get(t, ts, "/fragment/group"+q("stream", stream, "group", group))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "1 in "+dlq)
	require.NotContains(t, r.Body, "Former dead letters")

	legacy := stream + ":dead"
	for range 3 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: legacy, Values: []string{"order", "old"}}).Err())
	}
	_, ts = newTest(t, rdb, Options{Streams: stream}) // a fresh snapshot cache
	r = get(t, ts, "/group"+q("stream", stream, "group", group))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "Former dead letters")
	require.Contains(t, r.Body, "3 in "+legacy)
	require.Contains(t, r.Body, "pelwarden dlq redrive")
}
