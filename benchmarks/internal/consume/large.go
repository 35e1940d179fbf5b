package consume

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// slowLogRead is the COUNT of PartLarge's SLOWLOG GET, and the
// slowlog-max-len it sets so that the log keeps that many.
const slowLogRead = 100_000

// slowestKept is how many of the longest commands a SlowLogResult keeps.
const slowestKept = 5

// runLarge: PartLarge. A stream of LargeEntries entries with a payload of
// LargeEntryBytes each: the first half pending at the dead consumer (idle
// past MinIdle), the second half new. One driver with its defaults but
// MinIdle and ReclaimInterval (10ms each, so its reclaim takes the dead
// consumer's half) consumes all of them while the server's slow log
// records every command (slowlog-log-slower-than 0; the settings are
// restored afterwards).
func (b *bench) runLarge(ctx context.Context) (*Result, error) {
	n, size := b.cfg.LargeEntries, b.cfg.LargeEntryBytes
	old := n / 2
	method := fmt.Sprintf("driver defaults, MinIdle %v, ReclaimInterval %v", reclaimMinIdle, reclaimInterval)
	k := b.keys("large")
	defer b.cleanup(ctx, k)
	b.cfg.logf("%s: preparing %d entries of %s (%d pending at a dead consumer)", method, n, fmtBytes(uint64(size)), old)
	if err := b.ctl.XGroupCreateMkStream(ctx, k.stream, benchGroup, "$").Err(); err != nil {
		return nil, fmt.Errorf("consume: %s: XGROUP CREATE: %w", method, err)
	}
	if _, err := b.fillWith(ctx, k.stream, 0, old, size); err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	if err := b.deliverToDead(ctx, k.stream, old, max(1, fillBytes/size)); err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	last, err := b.fillWith(ctx, k.stream, old, n-old, size)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	if !ctxwait.Sleep(ctx, reclaimMinIdle+10*time.Millisecond) {
		return nil, ctx.Err()
	}

	restore, err := b.slowLogEverything(ctx)
	if err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	defer restore()
	name := fmt.Sprintf("%s-%s-large", b.cfg.KeyPrefix, b.runID)
	b.cfg.logf("%s: consuming", method)
	r, err := b.measureDriver(ctx, driverSpec{method: method, part: PartLarge, k: k, clientName: name,
		minIdle: reclaimMinIdle, reclaimInterval: reclaimInterval, target: int64(n)})
	sl, slErr := b.readSlowLog(ctx, name)
	if rerr := restore(); slErr == nil {
		slErr = rerr
	}
	if r != nil {
		r.PEL = old
		r.SlowLog = sl
	}
	if err == nil {
		err = slErr
	}
	return b.finish(ctx, r, err, func() error { return b.checkConsumed(ctx, k.stream, last) })
}

// slowLogEverything makes the server's slow log record every command
// (slowlog-log-slower-than 0, slowlog-max-len slowLogRead) and empties it.
// The returned func restores both settings and empties the log again; it
// may be called more than once (later calls do nothing).
func (b *bench) slowLogEverything(ctx context.Context) (func() error, error) {
	saved := map[string]string{}
	for _, p := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
		v, err := b.ctl.ConfigGet(ctx, p).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", p, err)
		}
		if _, ok := v[p]; !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no value", p)
		}
		saved[p] = v[p]
	}
	done := false
	restore := func() error {
		if done {
			return nil
		}
		done = true
		ctx := context.WithoutCancel(ctx)
		var errs []error
		for p, v := range saved {
			if err := b.ctl.ConfigSet(ctx, p, v).Err(); err != nil {
				errs = append(errs, fmt.Errorf("restore %s %s: %w", p, v, err))
			}
		}
		if err := b.ctl.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			errs = append(errs, fmt.Errorf("SLOWLOG RESET: %w", err))
		}
		if len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		return nil
	}
	for _, set := range [][2]string{{"slowlog-max-len", fmt.Sprint(slowLogRead)}, {"slowlog-log-slower-than", "0"}} {
		if err := b.ctl.ConfigSet(ctx, set[0], set[1]).Err(); err != nil {
			_ = restore()
			return nil, fmt.Errorf("CONFIG SET %s %s: %w", set[0], set[1], err)
		}
	}
	if err := b.ctl.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		_ = restore()
		return nil, fmt.Errorf("SLOWLOG RESET: %w", err)
	}
	return restore, nil
}

// readSlowLog sums up the slow log entries of the connections named
// clientName.
func (b *bench) readSlowLog(ctx context.Context, clientName string) (*SlowLogResult, error) {
	entries, err := b.ctl.SlowLogGet(ctx, slowLogRead).Result()
	if err != nil {
		return nil, fmt.Errorf("SLOWLOG GET: %w", err)
	}
	res := &SlowLogResult{}
	for _, l := range entries {
		if l.ClientName != clientName || len(l.Args) == 0 {
			continue
		}
		res.Commands++
		if l.Duration >= TargetLargeCommand {
			res.OverLimit++
		}
		res.Slowest = append(res.Slowest, SlowCommand{Name: commandName(l), Duration: l.Duration})
	}
	slices.SortStableFunc(res.Slowest, func(a, b SlowCommand) int { return cmp.Compare(b.Duration, a.Duration) })
	res.Slowest = res.Slowest[:min(len(res.Slowest), slowestKept)]
	return res, nil
}

// commandName names a slow log entry's command: "XREADGROUP", or for FCALL
// the function too, "FCALL pelwarden_v1_claim".
func commandName(l redis.SlowLog) string {
	name := strings.ToUpper(l.Args[0])
	if (name == "FCALL" || name == "FCALL_RO") && len(l.Args) > 1 {
		name += " " + l.Args[1]
	}
	return name
}
