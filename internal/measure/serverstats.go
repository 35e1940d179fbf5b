package measure

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// Snapshot is what INFO cpu and INFO commandstats say at one moment.
type Snapshot struct {
	// cpu is used_cpu_user + used_cpu_sys of the server process: everything
	// it did, socket reads and writes and event loop included.
	CPU time.Duration
	// cmds maps a command name ("xack", "fcall") to its counters.
	Cmds map[string]CommandStat
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	// Calls is how many times the command ran.
	Calls int64
	// Usec is the time it took in all, in microseconds.
	Usec int64
}

// TakeSnapshot reads INFO cpu and INFO commandstats.
func TakeSnapshot(ctx context.Context, rdb *redis.Client) (Snapshot, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("INFO cpu commandstats: %w", err)
	}
	return parseInfo(info)
}

// parseInfo reads the cpu and commandstats sections of an INFO reply.
func parseInfo(info string) (Snapshot, error) {
	s := Snapshot{Cmds: map[string]CommandStat{}}
	var user, sys float64
	var haveUser, haveSys bool
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return s, fmt.Errorf("INFO: used_cpu_user %q: %w", value, err)
			}
			user, haveUser = v, true
		case name == "used_cpu_sys":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return s, fmt.Errorf("INFO: used_cpu_sys %q: %w", value, err)
			}
			sys, haveSys = v, true
		case strings.HasPrefix(name, "cmdstat_"):
			var st CommandStat
			for _, kv := range strings.Split(value, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					st.Calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					st.Usec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			s.Cmds[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = st
		}
	}
	if !haveUser || !haveSys {
		return s, fmt.Errorf("INFO: no used_cpu_user/used_cpu_sys in the reply")
	}
	s.CPU = time.Duration(math.Round((user+sys)*1e6)) * time.Microsecond
	return s, nil
}

// CommandStatsUsec is the commandstats time of the commands the client sent
// between two snapshots. Commands run by a function or script are counted in
// commandstats too, and their time is already inside FCALL's, so for each
// command name only the share the client sent is taken: usec delta times
// min(1, sent / calls delta). INFO itself is left out.
func CommandStatsUsec(before, after Snapshot, sent map[string]int64) float64 {
	var total float64
	for name, a := range after.Cmds {
		if name == "info" {
			continue
		}
		b := before.Cmds[name]
		calls, usec := a.Calls-b.Calls, a.Usec-b.Usec
		n := sent[name]
		if calls <= 0 || n <= 0 {
			continue
		}
		share := math.Min(1, float64(n)/float64(calls))
		total += float64(usec) * share
	}
	return total
}

// ServerVersion describes the server, e.g. "redis 8.0.2" or "valkey 8.1.1".
func ServerVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("measure: INFO server: %w", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	name := fields["server_name"]
	if name == "" {
		name = "redis"
	}
	version := fields[name+"_version"]
	if version == "" {
		version = fields["redis_version"]
	}
	out := name + " " + version
	if t := fields["io_threads_active"]; t != "" && t != "0" {
		out += " (io threads active)"
	}
	return out, nil
}

// IdleCPU measures the server's CPU use while nothing is sent, per second
// of wall time (cron jobs, other clients).
func IdleCPU(ctx context.Context, rdb *redis.Client, over time.Duration) (time.Duration, error) {
	before, err := TakeSnapshot(ctx, rdb)
	if err != nil {
		return 0, fmt.Errorf("measure: %w", err)
	}
	start := time.Now()
	if !ctxwait.Sleep(ctx, over) {
		return 0, ctx.Err()
	}
	after, err := TakeSnapshot(ctx, rdb)
	if err != nil {
		return 0, fmt.Errorf("measure: %w", err)
	}
	wall := time.Since(start)
	return time.Duration(float64(after.CPU-before.CPU) / wall.Seconds()), nil
}

// MeasureRTT returns the median time of n PINGs.
func MeasureRTT(ctx context.Context, rdb *redis.Client, n int) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], nil
}
