// Package headline regenerates the headline table of BENCHMARKS.md from one
// run of the current code: every figure's job (a benchmark command) runs
// Rounds times, the jobs interleaved round by round, and each figure is the
// median, least and most of its per-round values, beside its target, the
// commit, the date and the command that reproduces it (make bench-report;
// benchmarks/cmd/bench-report).
package headline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/benchmarks/internal/consume"
)

// Metric is one measured value of one job's round: a name (a benchmark's,
// or a suite's part and method) and its unit, as in Go's benchmark format.
type Metric struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// Metrics is what one round of a job measured.
type Metrics []Metric

// get returns the value of the first metric whose name matches the regular
// expression name (anchored at both ends) and whose unit is unit.
func (ms Metrics) get(name, unit string) (float64, error) {
	vs, err := ms.matching(name, unit, "")
	if err != nil {
		return 0, err
	}
	return vs[0], nil
}

// matching returns the values, in order, of the metrics whose name matches
// the regular expression name (anchored at both ends) and does not contain
// except (when not empty), and whose unit is unit; an error when none does.
func (ms Metrics) matching(name, unit, except string) ([]float64, error) {
	re, err := regexp.Compile("^(?:" + name + ")$")
	if err != nil {
		return nil, fmt.Errorf("metric pattern %q: %w", name, err)
	}
	var vs []float64
	for _, m := range ms {
		if m.Unit == unit && re.MatchString(m.Name) && (except == "" || !strings.Contains(m.Name, except)) {
			vs = append(vs, m.Value)
		}
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("no metric %q in %s", name+" "+unit, ms.units())
	}
	return vs, nil
}

// units names a few of the metrics present, for an error message.
func (ms Metrics) units() string {
	if len(ms) == 0 {
		return "the job's output (it reported none)"
	}
	var names []string
	for i, m := range ms {
		if i == 6 {
			names = append(names, fmt.Sprintf("… %d in all", len(ms)))
			break
		}
		names = append(names, m.Name+" "+m.Unit)
	}
	return "[" + strings.Join(names, "; ") + "]"
}

func (ms *Metrics) add(name, unit string, v float64) {
	*ms = append(*ms, Metric{Name: name, Unit: unit, Value: v})
}

// parseGoBench reads the result lines of `go test -bench` output:
// "BenchmarkName-2  <N>  <value> <unit>  <value> <unit> ...". The
// GOMAXPROCS suffix is dropped from the name, and N is kept as unit "N".
func parseGoBench(out []byte) (Metrics, error) {
	var ms Metrics
	procs := regexp.MustCompile(`-\d+$`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := procs.ReplaceAllString(f[0], "")
		ms.add(name, "N", float64(n))
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: value %q: %w", sc.Text(), f[i], err)
			}
			ms.add(name, f[i+1], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ms, nil
}

// reclaimReport is the part of `pelwarden bench --json` the report reads.
type reclaimReport struct {
	Server string `json:"server"`
	Links  []struct {
		Link    string
		Entries int
		RTT     time.Duration
		Results []struct {
			Method     string
			Entries    int
			Wall       time.Duration
			RoundTrips int64
			ServerCPU  time.Duration
			Verified   bool
			Problem    string
		}
	} `json:"links"`
}

// fromReclaim turns `pelwarden bench --json` output into metrics named
// "reclaim/<link>/<method>", and "reclaim/<link>" for the link's RTT.
func fromReclaim(out []byte) (Metrics, string, error) {
	var rep reclaimReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, "", fmt.Errorf("reading pelwarden bench --json: %w", err)
	}
	var ms Metrics
	for _, l := range rep.Links {
		ms.add("reclaim/"+l.Link, "rtt-ms", float64(l.RTT)/float64(time.Millisecond))
		for _, r := range l.Results {
			name := "reclaim/" + l.Link + "/" + r.Method
			if !r.Verified || r.Problem != "" {
				return nil, "", fmt.Errorf("%s: end state wrong: %s", name, r.Problem)
			}
			if r.Wall <= 0 || r.Entries == 0 {
				return nil, "", fmt.Errorf("%s: nothing measured", name)
			}
			ms.add(name, "entries/s", float64(r.Entries)/r.Wall.Seconds())
			ms.add(name, "server-µs/entry", float64(r.ServerCPU)/float64(time.Microsecond)/float64(r.Entries))
			ms.add(name, "round-trips/entry", float64(r.RoundTrips)/float64(r.Entries))
		}
	}
	return ms, rep.Server, nil
}

// fromConsume turns a consume report into metrics named
// "<part>/<method>" (main/driver defaults, reclaim/Claim+Ack loop, page 500,
// ack/XACK, ...).
func fromConsume(rep consume.Report) (Metrics, error) {
	var ms Metrics
	parts := []struct {
		name string
		rs   []consume.Result
	}{{"main", rep.Main}, {"reclaim", rep.Reclaim}, {"pel", rep.PEL}, {"ack", rep.Ack}, {"slow", rep.Slow}, {"large", rep.Large}}
	const mib = 1 << 20
	for _, p := range parts {
		for i := range p.rs {
			r := &p.rs[i]
			name := p.name + "/" + r.Method
			if !r.Verified || r.Problem != "" {
				return nil, fmt.Errorf("%s: end state wrong: %s", name, r.Problem)
			}
			ms.add(name, "entries/s", r.EntriesPerSecond())
			ms.add(name, "server-µs/entry", r.CPUPerEntry())
			ms.add(name, "client-µs/entry", r.ClientCPUPerEntry())
			ms.add(name, "round-trips/entry", r.RoundTripsPerEntry())
			ms.add(name, "round-trips", float64(r.RoundTrips))
			ms.add(name, "log-records", float64(r.LogRecords))
			ms.add(name, "lease-extensions", float64(r.LeaseExtensions))
			ms.add(name, "claim-calls", float64(r.Claims))
			ms.add(name, "peak-heap-MiB", float64(r.PeakHeapInuse)/mib)
			if g := r.HeapGrowth(); g > 0 {
				ms.add(name, "heap-growth", g)
			}
			if len(r.Consumers) > 0 && r.Entries > 0 {
				least, most := 1.0, int64(0)
				for _, c := range r.Consumers {
					least = min(least, float64(c.Handled)/float64(r.Entries))
					most = max(most, c.MaxHeld)
				}
				ms.add(name, "least-share", least)
				ms.add(name, "most-held", float64(most))
			}
			if r.Ideal > 0 {
				ms.add(name, "drain/ideal", float64(r.Wall)/float64(r.Ideal))
			}
			if sl := r.SlowLog; sl != nil && len(sl.Slowest) > 0 {
				ms.add(name, "longest-command-ms", float64(sl.Slowest[0].Duration)/float64(time.Millisecond))
				ms.add(name, "commands-over-100ms", float64(sl.OverLimit))
			}
		}
	}
	return ms, nil
}
