package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// dashboardRules are what a read-only dashboard needs besides the ACL guide's
// operator line (docs/operations/acl.md; docs/operations/dashboard.md names them).
var dashboardRules = []string{"+scan", "+xrevrange", "+xinfo|stream"}

// The ACL guide's operator user, plus dashboardRules, reads every page of
// a read-only dashboard; an action it may not run fails with the server's
// refusal on its page, and nothing changes.
func TestOperatorACL(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../../docs/operations/acl.md")
	require.NoError(t, err)
	var rules []string
	for _, line := range strings.Split(string(src), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "ACL" && f[2] == "orders-operator" {
			rules = f[3:]
		}
	}
	require.NotEmpty(t, rules, "the ACL guide has no orders-operator ACL line")
	dash, err := os.ReadFile("../../../docs/operations/dashboard.md")
	require.NoError(t, err)
	for _, r := range dashboardRules {
		require.Contains(t, string(dash), r, "the dashboard guide names %s", r)
	}

	admin := client(t)
	sc := seed(t, admin, "aclop", 12, 3)
	ctx := context.Background()
	const user, pass = "dashboard-operator-test", "op-pass-9c1e"
	args := []any{"ACL", "SETUSER", user}
	for _, r := range append(rules, dashboardRules...) {
		r = strings.ReplaceAll(r, "{orders}", sc.Stream)
		if strings.HasPrefix(r, ">") {
			r = ">" + pass
		}
		args = append(args, r)
	}
	require.NoError(t, admin.Do(ctx, args...).Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	o := server.Options()
	o.Username, o.Password = user, pass
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })

	_, ts := newTest(t, rdb, Options{Streams: "{aclop}*", ReadOnly: true})
	for _, p := range []string{
		"/",
		"/group" + q("stream", sc.Stream, "group", sc.Group),
		"/fragment/group" + q("stream", sc.Stream, "group", sc.Group),
		"/entry" + q("stream", sc.Stream, "group", sc.Group, "id", sc.Pending[0]),
		"/deadletters" + q("key", sc.DLQ),
		"/deadletters" + q("key", sc.DLQ, "reason", "handler"),
		"/deadletters" + q("key", sc.DLQ, "id", sc.DeadLettered[0]),
		"/fragment/length" + q("key", sc.DLQ),
	} {
		r := get(t, ts, p)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", p, r.Body)
		require.NotContains(t, r.Body, "NOPERM", p)
	}
	r := get(t, ts, "/")
	require.Contains(t, r.Body, `data-stream="{aclop}"`)
	require.Contains(t, r.Body, `<td class="num pending">9</td>`)

	// Without ReadOnly the same user may look at an action's confirmation,
	// but running it is refused by the server and changes nothing.
	s, ts := newTest(t, rdb, Options{Streams: "{aclop}*"})
	form := url.Values{"stream": {sc.Stream}, "group": {sc.Group}, "max_deliveries": {"1"}}
	r = post(t, ts, "/actions/poison", form, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, "9 of the 9 pending entries")
	form.Set("step", "run")
	st := waitJob(t, s, jobIDFrom(t, post(t, ts, "/actions/poison", form, nil)))
	require.Contains(t, st.Err, "refused by the server's ACL")
	require.Zero(t, st.Changed)
	require.EqualValues(t, 9, admin.XPending(ctx, sc.Stream, sc.Group).Val().Count)
	require.EqualValues(t, 3, admin.XLen(ctx, sc.DLQ).Val())
}
