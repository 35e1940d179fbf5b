package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/driver/prommetrics"
)

// blockedPartition makes the partitioned stream name of n partitions,
// each with group "g" and two entries, and blocks partition 0: consumer
// "a" holds its lease (token 1, an hour) and its head failed once with an
// hour's backoff. It returns the partitions' keys.
func blockedPartition(t *testing.T, s *target, name string, n int) []string {
	t.Helper()
	ctx := t.Context()
	keys, err := pelwarden.Partitions(name, n)
	require.NoError(t, err)
	for _, k := range keys {
		require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, k, "g", "0").Err())
		for range 2 {
			require.NoError(t, s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"n", "1"}}).Err())
		}
		t.Cleanup(func() {
			_ = s.rdb.Del(context.Background(), k, pelwarden.LeaseKeyFor(k), pelwarden.DeadLetterStreamFor(k)).Err()
		})
	}
	p := keys[0]
	_, err = s.lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: p, Lease: pelwarden.LeaseKeyFor(p), Group: "g", Consumer: "a", TTL: time.Hour})
	require.NoError(t, err)
	next := pelwarden.LeaseNextArgs{MaxDeliveries: 5, Stream: p, DeadLetterStream: pelwarden.DeadLetterStreamFor(p), Lease: pelwarden.LeaseKeyFor(p),
		Group: "g", Consumer: "a", Token: 1, TTL: time.Hour, Count: 1, Backoff: []time.Duration{time.Hour}}
	got, err := s.lib.LeaseNext(ctx, next)
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	got, err = s.lib.LeaseNext(ctx, next) // the head was not acked: it failed
	require.NoError(t, err)
	require.NotEmpty(t, got.Blocked)
	return keys
}

// A real Prometheus (Debian's package) scrapes `pelwarden exporter` and a
// consumer's own counters, with the shipped alert rules loaded: queries
// return the group's real values, every rule loads and evaluates, and
// every query of the shipped Grafana dashboard parses, returns series, and
// names only metrics and labels that were scraped.
func TestPrometheusScrapesTheExporter(t *testing.T) {
	t.Parallel()
	promBin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "this test runs Debian's prometheus: apt-get install --no-install-recommends prometheus (make test does)")
	s := servers[0]
	ctx := t.Context()
	f, _ := statusFixture(t, s)
	name := "prom-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	parts := blockedPartition(t, s, name, 2)

	// A consumer with its counters, one entry dead-lettered by its handler.
	cf := s.fixture(t)
	cids := cf.Produce(5, order)
	m := prommetrics.New(prommetrics.Options{})
	cf.RunConsumer(driver.Config{Metrics: m, Handler: driver.HandlerFunc(func(_ context.Context, msg *driver.Message) error {
		if msg.ID == cids[0] {
			return driver.DeadLetter(errors.New("not a valid order"))
		}
		return nil
	})})
	cf.Eventually("the consumer handled every entry", func() bool { return cf.PendingCount() == 0 && len(cf.DeadLetters()) == 1 })
	consumerReg := prometheus.NewRegistry()
	consumerReg.MustRegister(m)
	consumerSrv := httptest.NewServer(promhttp.HandlerFor(consumerReg, promhttp.HandlerOpts{}))
	t.Cleanup(consumerSrv.Close)

	// The exporter, as a user runs it.
	exporterAddr := freeAddr(t)
	runCtx, cancel := context.WithCancel(ctx)
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- executeCLI(runCtx, []string{"--redis", serverURL(t, s), "exporter", "--listen", exporterAddr,
			"--stream", f.Stream, "--stream", cf.Stream, "--partitioned", name, "--stalled-after", "1h"}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		requireStopped(t, "exporter", done, &errb)
	})

	// Prometheus, scraping both every second, with the alert rules.
	rules, err := filepath.Abs("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: pelwarden
    static_configs: [{targets: [%q]}]
  - job_name: consumer
    static_configs: [{targets: [%q]}]
`, rules, exporterAddr, strings.TrimPrefix(consumerSrv.URL, "http://"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600))
	promAddr := freeAddr(t)
	var promLog lockedBuffer
	prom := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	prom.Stdout, prom.Stderr = &promLog, &promLog
	require.NoError(t, prom.Start())
	t.Cleanup(func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
	})
	api := promAPI{t: t, base: "http://" + promAddr}

	grp := fmt.Sprintf(`{stream=%q,group=%q}`, f.Stream, f.Group)
	require.Eventually(t, func() bool {
		v, ok := api.scalar("pelwarden_group_pending" + grp)
		return ok && v == 3
	}, 60*time.Second, 100*time.Millisecond, "Prometheus scrapes the group's pending count; prometheus log: %s; exporter: %s", &promLog, &errb)
	want := map[string]float64{
		"pelwarden_group_lag" + grp:                                                     2,
		"pelwarden_group_consumers" + grp:                                               2,
		"pelwarden_group_active_consumers" + grp:                                        2,
		"pelwarden_group_stalled" + grp:                                                 0,
		fmt.Sprintf(`pelwarden_stream_length{stream=%q}`, f.Stream):                     6,
		fmt.Sprintf(`pelwarden_dead_letter_entries{stream=%q}`, f.Stream):               1,
		fmt.Sprintf(`pelwarden_dead_letter_entries{stream=%q}`, cf.Stream):              1,
		fmt.Sprintf(`pelwarden_partition_head_blocked{stream=%q}`, parts[0]):            1,
		fmt.Sprintf(`pelwarden_partition_lease_owner{partition_of=%q,owner="a"}`, name): 1,
		`sum(pelwarden_events_total{event="acked"})`:                                    4,
		`sum(pelwarden_dead_lettered_total{reason="handler"})`:                          1,
	}
	requireSettles(t, 30*time.Second, "Prometheus has the real values", func() (wrong []string) {
		for q, w := range want {
			if v, ok := api.scalar(q); !ok || v != w {
				wrong = append(wrong, fmt.Sprintf("%s = %v (%v), want %v", q, v, ok, w))
			}
		}
		return wrong
	})

	// Every alert rule loaded and evaluates without error.
	rulesText, err := os.ReadFile(rules)
	require.NoError(t, err)
	nRules := strings.Count(string(rulesText), "- alert: ")
	require.Eventually(t, func() bool { return api.rulesHealthy() == nRules }, 30*time.Second, 100*time.Millisecond,
		"%d healthy rules; prometheus log: %s", nRules, &promLog)

	// The dashboard: every query returns series once two scrapes are in
	// (rate needs two samples), and names only scraped metrics and labels.
	queries := dashboardQueries(t)
	require.NotEmpty(t, queries)
	requireSettles(t, 60*time.Second, "every dashboard query returns series", func() (empty []string) {
		for _, q := range queries {
			if !api.hasSeries(q) {
				empty = append(empty, q)
			}
		}
		return empty
	})
	labels := api.labelsByMetric()
	for _, q := range queries {
		requireKnownNames(t, q, labels)
	}
}

// requireSettles calls check every 100 ms until it reports no problem, and
// fails with the last problems it reported if that takes longer than
// timeout.
func requireSettles(t *testing.T, timeout time.Duration, what string, check func() []string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		problems := check()
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, timeout, strings.Join(problems, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// promAPI queries a Prometheus server's HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

// get decodes the data of a successful API call into v; false when the
// server is not answering yet. A query Prometheus refuses fails the test.
func (p promAPI) get(path string, params url.Values, v any) bool {
	res, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return false
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(p.t, err)
	if res.StatusCode == http.StatusServiceUnavailable {
		return false // still starting
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(p.t, json.Unmarshal(body, &r), "%s: %s", path, body)
	require.Equal(p.t, "success", r.Status, "%s %v: %s", path, params, r.Error)
	require.NoError(p.t, json.Unmarshal(r.Data, v))
	return true
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query; false when the server is not up yet.
func (p promAPI) query(q string) ([]promSample, bool) {
	var data struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	if !p.get("/api/v1/query", url.Values{"query": {q}}, &data) {
		return nil, false
	}
	return data.Result, true
}

// scalar is the value of a query that returns one series.
func (p promAPI) scalar(q string) (float64, bool) {
	r, ok := p.query(q)
	if !ok || len(r) != 1 {
		return 0, false
	}
	s, _ := r[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(p.t, err)
	return v, true
}

// hasSeries: q returns at least one series.
func (p promAPI) hasSeries(q string) bool {
	r, ok := p.query(q)
	return ok && len(r) > 0
}

// rulesHealthy counts the loaded rules that evaluated without error.
func (p promAPI) rulesHealthy() int {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if !p.get("/api/v1/rules", nil, &data) {
		return 0
	}
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			require.Empty(p.t, r.LastError, r.Name)
			if r.Health == "ok" {
				n++
			}
		}
	}
	return n
}

// labelsByMetric is every scraped metric name with its label names.
func (p promAPI) labelsByMetric() map[string][]string {
	var series []map[string]string
	require.True(p.t, p.get("/api/v1/series", url.Values{"match[]": {`{__name__=~"pelwarden_.+"}`}}, &series))
	out := map[string][]string{}
	for _, s := range series {
		name := s["__name__"]
		for l := range s {
			if !slices.Contains(out[name], l) {
				out[name] = append(out[name], l)
			}
		}
	}
	return out
}

// dashboardQueries are the shipped dashboard's queries, with its variables
// set to "all" and its rate interval to one minute.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/pelwarden.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	r := strings.NewReplacer(`"$stream"`, `".*"`, `"$group"`, `".*"`, "$__rate_interval", "1m")
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has a target without a query", p.Title)
			require.NotContains(t, r.Replace(tg.Expr), "$", "panel %q uses a variable the test does not set", p.Title)
			out = append(out, r.Replace(tg.Expr))
		}
	}
	return out
}

var (
	metricName   = regexp.MustCompile(`\bpelwarden_[a-z_]+\b`)
	labelMatcher = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	groupingBy   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// requireKnownNames fails when q names a metric that was not scraped, or a
// label that none of its metrics has ("le" of a histogram's buckets
// included).
func requireKnownNames(t *testing.T, q string, labels map[string][]string) {
	t.Helper()
	known := map[string]bool{}
	for _, name := range metricName.FindAllString(q, -1) {
		ls, ok := labels[name]
		require.True(t, ok, "%s names %s, which nobody exports", q, name)
		for _, l := range ls {
			known[l] = true
		}
	}
	var used []string
	for _, m := range labelMatcher.FindAllStringSubmatch(q, -1) {
		used = append(used, m[1])
	}
	for _, m := range groupingBy.FindAllStringSubmatch(q, -1) {
		for _, l := range strings.Split(m[1], ",") {
			used = append(used, strings.TrimSpace(l))
		}
	}
	for _, l := range used {
		require.True(t, known[l], "%s uses label %q, which its metrics do not have", q, l)
	}
}
