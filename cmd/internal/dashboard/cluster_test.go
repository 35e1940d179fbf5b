package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// On a Redis Cluster the overview finds the streams of every primary, the
// pages read across slots, and a redrive moves records within a hash tag
// and leaves, with the reason, those whose source is in another slot.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testserver.StartCluster(ctx, testImage(), testserver.ClusterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	_, err = pelwarden.Load(ctx, rdb)
	require.NoError(t, err)

	// Streams on every primary: plain names spread by CRC16.
	names := []string{"alpha", "beta", "gamma", "delta", "epsilon", "{shop}"}
	primaries := map[string]bool{}
	for _, n := range names {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, n, "g", "$").Err())
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: n, Values: []any{"k", "v"}}).Err())
		require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{n, ">"}, Block: -1}).Err())
		m, err := rdb.MasterForKey(ctx, n)
		require.NoError(t, err)
		primaries[m.Options().Addr] = true
	}
	require.Len(t, primaries, 3, "the streams span every primary")

	// {shop}: dead letters redriven within the tag; alpha:dead holds a
	// record whose source (alpha) is in another slot.
	lib := pelwarden.NewLibrary(rdb)
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "{shop}", Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	_, err = lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: "{shop}", DeadLetterStream: "{shop}:dead", Group: "g", Consumer: "c", IDs: []string{pend[0].ID}, Error: "boom"})
	require.NoError(t, err)
	shopRec, err := rdb.XRange(ctx, "{shop}:dead", "-", "+").Result()
	require.NoError(t, err)
	alphaRec, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "alpha:dead", Values: deadFields("alpha", "1-1", "handler", "x")}).Result()
	require.NoError(t, err)

	s, ts := newTest(t, rdb, Options{})
	r := get(t, ts, "/")
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	for _, n := range names {
		require.Contains(t, r.Body, `data-stream="`+n+`"`, "overview lists %s", n)
	}
	require.Contains(t, r.Body, "6 streams with consumer groups")
	require.Equal(t, http.StatusOK, get(t, ts, "/group"+q("stream", "alpha", "group", "g")).Status)
	r = get(t, ts, "/deadletters"+q("key", "{shop}:dead"))
	require.Contains(t, r.Body, shopRec[0].ID)

	run := func(form url.Values) jobState {
		form.Set("step", "run")
		return waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/redrive", form, nil)))
	}
	st := run(url.Values{"dlq": {"{shop}:dead"}, "id": {shopRec[0].ID}})
	require.Empty(t, st.Err)
	require.Equal(t, int64(1), st.Changed)
	require.EqualValues(t, 2, rdb.XLen(ctx, "{shop}").Val())
	st = run(url.Values{"dlq": {"alpha:dead"}, "id": {alphaRec}})
	require.Empty(t, st.Err)
	require.Zero(t, st.Changed)
	require.Contains(t, st.Message, "in another cluster slot")
	st = run(url.Values{"dlq": {"alpha:dead"}, "all": {"1"}})
	require.Empty(t, st.Err)
	require.Zero(t, st.Changed)
	require.Contains(t, st.Message, "in another cluster slot")
	require.EqualValues(t, 1, rdb.XLen(ctx, "alpha:dead").Val())
}
