package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// state is what an action could change: lengths, pending and consumers.
type state struct {
	Length, DLQLength, Pending int64
	Consumers                  int
}

func snapshotOf(t *testing.T, rdb redis.UniversalClient, sc *scenario) state {
	t.Helper()
	ctx := context.Background()
	var st state
	st.Length = rdb.XLen(ctx, sc.Stream).Val()
	st.DLQLength = rdb.XLen(ctx, sc.DLQ).Val()
	st.Pending = rdb.XPending(ctx, sc.Stream, sc.Group).Val().Count
	st.Consumers = len(rdb.XInfoConsumers(ctx, sc.Stream, sc.Group).Val())
	return st
}

// actionForms are a valid form for every action on sc.
func actionForms(sc *scenario) map[string]url.Values {
	return map[string]url.Values{
		"redrive": {"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}, "step": {"run"}},
		"purge":   {"dlq": {sc.DLQ}, "all": {"1"}, "step": {"run"}},
		"poison":  {"stream": {sc.Stream}, "group": {sc.Group}, "max_deliveries": {"1"}, "step": {"run"}},
		"reap":    {"stream": {sc.Stream}, "group": {sc.Group}, "idle": {"1ms"}, "step": {"run"}},
		"pause":   {"stream": {sc.Stream}, "group": {sc.Group}, "reason": {"test"}, "step": {"run"}},
		"resume":  {"stream": {sc.Stream}, "group": {sc.Group}, "step": {"run"}},
		"stop":    {"id": {"0123456789abcdef"}},
	}
}

// With ReadOnly, no page offers an action and every action is refused
// (405 for GET, 403 for POST), changing nothing.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "readonly", 10, 3)
	require.NoError(t, rdb.XGroupCreateConsumer(context.Background(), sc.Stream, sc.Group, "idle-one").Err())
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream, ReadOnly: true})
	before := snapshotOf(t, rdb, sc)
	for _, path := range []string{"/", "/group" + q("stream", sc.Stream, "group", sc.Group), "/deadletters" + q("key", sc.DLQ)} {
		r := get(t, ts, path)
		require.Equal(t, http.StatusOK, r.Status)
		require.NotContains(t, r.Body, "/actions/", path)
		require.NotContains(t, r.Body, `method="post"`, path)
		require.NotContains(t, r.Body, `type="checkbox"`, path)
		require.Contains(t, r.Body, "read-only", path)
	}
	for action, form := range actionForms(sc) {
		r := post(t, ts, "/actions/"+action, form, nil)
		require.Equal(t, http.StatusForbidden, r.Status, action)
		require.Contains(t, r.Body, "read-only")
		r = post(t, ts, "/actions/"+action, url.Values{"dlq": {sc.DLQ}}, nil) // the confirmation step too
		require.Equal(t, http.StatusForbidden, r.Status, action)
		r = get(t, ts, "/actions/"+action+"?"+form.Encode())
		require.Equal(t, http.StatusMethodNotAllowed, r.Status, action)
		require.Equal(t, "POST", r.Header.Get("Allow"))
		r = do(t, ts, http.MethodPut, "/actions/"+action, strings.NewReader(form.Encode()), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		require.Equal(t, http.StatusMethodNotAllowed, r.Status, action)
	}
	require.Equal(t, before, snapshotOf(t, rdb, sc))
}

// Actions from another site are refused and change nothing; a GET never
// runs an action.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "crossorigin", 10, 3)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream})
	before := snapshotOf(t, rdb, sc)
	for action, form := range actionForms(sc) {
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Origin": "http://evil.example"},
			{"Origin": "null"},
		} {
			r := post(t, ts, "/actions/"+action, form, h)
			require.Equal(t, http.StatusForbidden, r.Status, "%s %v", action, h)
		}
		r := get(t, ts, "/actions/"+action+"?"+form.Encode())
		require.Equal(t, http.StatusMethodNotAllowed, r.Status)
	}
	require.Equal(t, before, snapshotOf(t, rdb, sc))
	// The same request from the dashboard's own origin is accepted.
	r := post(t, ts, "/actions/redrive", url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
}

// Each action asks for confirmation with a count computed on the server,
// then runs through package ops and reports its outcome.
func TestActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := client(t)

	t.Run("redrive selected", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-redrive", 10, 4)
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		form := url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[1], sc.DeadLettered[3], "1-1"}}
		r := post(t, ts, "/actions/redrive", form, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, r.Body, `<strong id="touch-count">2 records (1 of the selection are no longer there)</strong>`)
		require.Equal(t, int64(4), rdb.XLen(ctx, sc.DLQ).Val(), "confirming changes nothing")
		form.Set("step", "run")
		st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/redrive", form, nil)))
		require.Empty(t, st.Err)
		require.Equal(t, int64(2), st.Changed)
		require.Contains(t, st.Message, "moved 2 records")
		require.Contains(t, st.Message, "1 selected records were gone")
		left, err := rdb.XRange(ctx, sc.DLQ, "-", "+").Result()
		require.NoError(t, err)
		require.Equal(t, []string{sc.DeadLettered[0], sc.DeadLettered[2]}, []string{left[0].ID, left[1].ID})
		require.Equal(t, int64(12), rdb.XLen(ctx, sc.Stream).Val(), "back in the source stream")
		r = get(t, ts, "/job?id="+url.QueryEscape(jobIDFrom(t, post(t, ts, "/actions/redrive", url.Values{"dlq": {sc.DLQ}, "id": {sc.DeadLettered[0]}, "step": {"run"}}, nil))))
		require.Equal(t, http.StatusOK, r.Status)
	})

	t.Run("redrive all with htmx", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-redrive-all", 10, 5)
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		hx := map[string]string{"HX-Request": "true"}
		r := post(t, ts, "/actions/redrive", url.Values{"dlq": {sc.DLQ}, "all": {"1"}, "rate": {"1000"}}, hx)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.NotContains(t, r.Body, "<html", "a fragment for the dialog")
		require.Contains(t, r.Body, "5 records (the stream&#39;s length now)")
		r = post(t, ts, "/actions/redrive", url.Values{"dlq": {sc.DLQ}, "all": {"1"}, "rate": {"1000"}, "step": {"run"}}, hx)
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, r.Body, `id="job"`)
		// The job's id, from the fragment whether the job still runs (it
		// polls /fragment/job) or already ended (five records at 1,000/s
		// can finish before the response is rendered).
		const attr = `data-job="`
		i := strings.Index(r.Body, attr)
		require.Positive(t, i, r.Body)
		id := r.Body[i+len(attr) : i+len(attr)+16]
		st := waitJob(t, s, id)
		require.Empty(t, st.Err)
		require.Equal(t, int64(5), st.Changed)
		require.Equal(t, int64(0), rdb.XLen(ctx, sc.DLQ).Val())
		r = get(t, ts, "/fragment/job?id="+id)
		require.Contains(t, r.Body, `data-done="true"`)
		require.NotContains(t, r.Body, "hx-trigger", "a finished job stops polling")
	})

	t.Run("stop a running redrive", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-stop", 40, 40)
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		id := jobIDFrom(t, post(t, ts, "/actions/redrive", url.Values{"dlq": {sc.DLQ}, "all": {"1"}, "rate": {"2"}, "step": {"run"}}, nil))
		r := post(t, ts, "/actions/stop", url.Values{"id": {id}}, map[string]string{"HX-Request": "true"})
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		st := waitJob(t, s, id)
		require.Equal(t, "anonymous", st.StoppedBy)
		require.Contains(t, st.Err, "interrupted")
		require.Less(t, st.Changed, int64(40))
		require.EqualValues(t, 40-st.Changed, rdb.XLen(ctx, sc.DLQ).Val(), "what was moved is moved, the rest stays")
		require.Contains(t, get(t, ts, "/job?id="+id).Body, "stopped by anonymous")
		require.Equal(t, http.StatusNotFound, post(t, ts, "/actions/stop", url.Values{"id": {"nope"}}, nil).Status)
	})

	t.Run("purge", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-purge", 6, 0)
		// Two records from 1970 and three from now.
		for _, id := range []string{"1000-0", "2000-0", "*", "*", "*"} {
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: sc.DLQ, ID: id, Values: deadFields(sc.Stream, "1-1", "handler", "x")}).Err())
		}
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		r := post(t, ts, "/actions/purge", url.Values{"dlq": {sc.DLQ}, "older_than": {"720h"}}, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, r.Body, `<strong id="touch-count">2 records</strong>`)
		r = post(t, ts, "/actions/purge", url.Values{"dlq": {sc.DLQ}, "all": {"1"}}, nil)
		require.Contains(t, r.Body, `<strong id="touch-count">5 records</strong>`)
		st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/purge", url.Values{"dlq": {sc.DLQ}, "older_than": {"720h"}, "step": {"run"}}, nil)))
		require.Empty(t, st.Err)
		require.Equal(t, int64(2), st.Changed)
		require.Equal(t, int64(3), rdb.XLen(ctx, sc.DLQ).Val())
		st = waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/purge", url.Values{"dlq": {sc.DLQ}, "all": {"1"}, "step": {"run"}}, nil)))
		require.Empty(t, st.Err)
		require.Equal(t, int64(3), st.Changed)
		require.Equal(t, int64(0), rdb.XLen(ctx, sc.DLQ).Val())
		// A work stream is refused.
		r = post(t, ts, "/actions/purge", url.Values{"dlq": {sc.Stream}, "all": {"1"}}, nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, r.Body, "work stream")
		require.Equal(t, http.StatusBadRequest, post(t, ts, "/actions/purge", url.Values{"dlq": {sc.DLQ}}, nil).Status)
	})

	t.Run("poison", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-poison", 8, 0)
		// Deliver the first three twice more.
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: sc.Stream, Group: sc.Group, Consumer: "other", Messages: sc.Pending[:3]}).Err())
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: sc.Stream, Group: sc.Group, Consumer: "other", Messages: sc.Pending[:3]}).Err())
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream, CountLimit: 5})
		r := post(t, ts, "/actions/poison", url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "max_deliveries": {"3"}}, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, r.Body, "3 among the first 5 of 8 pending entries")
		st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/poison", url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "max_deliveries": {"3"}, "step": {"run"}}, nil)))
		require.Empty(t, st.Err)
		require.Equal(t, int64(3), st.Changed)
		require.Equal(t, int64(5), rdb.XPending(ctx, sc.Stream, sc.Group).Val().Count)
		require.Equal(t, int64(3), rdb.XLen(ctx, sc.DLQ).Val())
		require.Equal(t, http.StatusNotFound, post(t, ts, "/actions/poison", url.Values{"stream": {sc.Stream}, "group": {"nope"}, "max_deliveries": {"3"}}, nil).Status)
		require.Equal(t, http.StatusBadRequest, post(t, ts, "/actions/poison", url.Values{"stream": {sc.Stream}, "group": {sc.Group}}, nil).Status)
	})

	t.Run("reap", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-reap", 4, 0)
		for _, c := range []string{"idle-1", "idle-2", "keep-me"} {
			require.NoError(t, rdb.XGroupCreateConsumer(ctx, sc.Stream, sc.Group, c).Err())
		}
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) { // the new consumers must be idle at least 1ms
			cs := rdb.XInfoConsumers(ctx, sc.Stream, sc.Group).Val()
			if len(cs) == 4 && cs[0].Idle >= 5*time.Millisecond && cs[1].Idle >= 5*time.Millisecond {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		form := url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "idle": {"1ms"}, "keep": {"keep-me"}}
		r := post(t, ts, "/actions/reap", form, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, r.Body, "2 consumers now: idle-1,idle-2; 1 idle consumers still own entries and are kept")
		form.Set("step", "run")
		st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/reap", form, nil)))
		require.Empty(t, st.Err)
		require.Equal(t, int64(2), st.Changed)
		var names []string
		for _, c := range rdb.XInfoConsumers(ctx, sc.Stream, sc.Group).Val() {
			names = append(names, c.Name)
		}
		require.ElementsMatch(t, []string{"keep-me", "reader"}, names)
	})

	t.Run("pause and resume", func(t *testing.T) {
		t.Parallel()
		sc := seed(t, rdb, "act-pause", 4, 0)
		t.Cleanup(func() { rdb.Del(context.Background(), pelwarden.PauseKeyFor(sc.Stream)) })
		s, ts := newTest(t, rdb, Options{Streams: sc.Stream})
		page := "/group" + q("stream", sc.Stream, "group", sc.Group)
		r := get(t, ts, page)
		require.Contains(t, r.Body, "/actions/pause")
		require.NotContains(t, r.Body, "paused-banner")
		form := url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "reason": {"gateway <down>"}}
		r = post(t, ts, "/actions/pause", form, nil)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, r.Body, "1 consumers now")
		p, err := pelwarden.ReadPause(ctx, rdb, sc.Stream, sc.Group)
		require.NoError(t, err)
		require.Nil(t, p, "confirming changes nothing")
		form.Set("step", "run")
		st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/pause", form, nil)))
		require.Empty(t, st.Err)
		p, err = pelwarden.ReadPause(ctx, rdb, sc.Stream, sc.Group)
		require.NoError(t, err)
		require.Equal(t, "dashboard:anonymous", p.By, "no authentication")
		require.Equal(t, "gateway <down>", p.Reason)

		r = get(t, ts, page)
		require.Contains(t, r.Body, `<p class="paused-banner bad"><strong>Paused</strong> by dashboard:anonymous`)
		require.Contains(t, r.Body, "gateway &lt;down&gt;")
		require.Contains(t, r.Body, "/actions/resume")
		require.NotContains(t, r.Body, "/actions/pause")
		r = get(t, ts, "/")
		require.Contains(t, overviewRow(t, r.Body, sc.Stream), `<span class="tag bad paused">paused</span>`)

		st = waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/resume", url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "step": {"run"}}, nil)))
		require.Empty(t, st.Err)
		require.Contains(t, st.Message, "resumed "+sc.Stream)
		p, err = pelwarden.ReadPause(ctx, rdb, sc.Stream, sc.Group)
		require.NoError(t, err)
		require.Nil(t, p)
		r = get(t, ts, page)
		require.NotContains(t, r.Body, "paused-banner")

		r = post(t, ts, "/actions/pause", url.Values{"stream": {sc.Stream}, "group": {"nope"}}, nil)
		require.NotEqual(t, http.StatusOK, r.Status, "no such group")
	})
}
