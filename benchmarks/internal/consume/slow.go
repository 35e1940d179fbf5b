package consume

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/internal/measure"
)

const (
	// slowConsumers is how many consumers share PartSlow's burst.
	slowConsumers = 2
	// slowSample is how often PartSlow samples each consumer's pending
	// entries (XPENDING's summary).
	slowSample = 2 * time.Millisecond
	// waitIdle bounds the wait for PartSlow's consumers to block in
	// XREADGROUP before the burst.
	waitIdle = 30 * time.Second
)

// runSlow: PartSlow, one round. Two driver consumers with their defaults
// (handler: a sleep of SlowHandlerTime) start on an empty stream; once
// both wait in a blocked XREADGROUP, one script call adds SlowEntries
// entries. Measured from the burst until every entry is acked, with each
// consumer's pending count sampled every slowSample.
func (b *bench) runSlow(ctx context.Context, round int) (*Result, error) {
	n := b.cfg.SlowEntries
	method := fmt.Sprintf("driver defaults x %d, handler %v", slowConsumers, b.cfg.SlowHandlerTime)
	if b.cfg.Rounds > 1 {
		method += fmt.Sprintf(", round %d", round)
	}
	k := b.keys(fmt.Sprintf("slow-%d", round))
	defer b.cleanup(ctx, k)
	c := driver.DefaultConcurrency
	r := &Result{Method: method, Part: PartSlow, Sample: measure.Sample{Entries: n}, Concurrency: c,
		Ideal: time.Duration(n) * b.cfg.SlowHandlerTime / time.Duration(slowConsumers*c)}
	handler := driver.HandlerFunc(func(ctx context.Context, _ *driver.Message) error {
		if !ctxwait.Sleep(ctx, b.cfg.SlowHandlerTime) {
			return ctx.Err()
		}
		return nil
	})
	h := &hook{} // both consumers' clients
	g := newGoal(int64(n))
	var ds []*driverRun
	defer func() {
		for _, d := range ds {
			d.rdb.Close()
		}
	}()
	clientNames := make([]string, slowConsumers)
	for i := range slowConsumers {
		name := fmt.Sprintf("consumer-%c", 'a'+i)
		clientNames[i] = fmt.Sprintf("%s-%s-slow-%d-%s", b.cfg.KeyPrefix, b.runID, round, name)
		d, err := b.newDriverRun(driverSpec{k: k, clientName: clientNames[i]}, name, h, g, handler)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
		r.Consumers = append(r.Consumers, ConsumerResult{Name: name})
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErrs := make([]<-chan error, len(ds))
	for i, d := range ds {
		runErrs[i] = d.start(runCtx)
	}
	b.cfg.logf("%s: waiting for both consumers to block in XREADGROUP", method)
	if err := b.waitBlocked(ctx, clientNames); err != nil {
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}

	p, err := b.begin(ctx, h, g.settled.Load)
	if err != nil {
		return nil, err
	}
	stopSampling := b.sampleHeld(ctx, k.stream, r.Consumers)
	if _, err := b.fill(ctx, k.stream, n); err != nil {
		stopSampling()
		return nil, fmt.Errorf("consume: %s: %w", method, err)
	}
	b.cfg.logf("%s: %d entries added at once", method, n)
	timeout := time.NewTimer(b.cfg.Timeout)
	defer timeout.Stop()
	var problem error
	select {
	case <-g.done:
	case <-timeout.C:
		problem = fmt.Errorf("timeout: %d of %d entries acked after %v", g.settled.Load(), n, b.cfg.Timeout)
	case <-ctx.Done():
		problem = ctx.Err()
	}
	wall := time.Since(p.start)
	stopSampling()
	if err := p.end(ctx, r, wall); err != nil {
		return r, err
	}
	for i, d := range ds {
		d.record(r)
		r.Consumers[i].Handled = d.m.acked.Load()
	}
	cancel()
	for i, ch := range runErrs {
		if err := <-ch; err != nil && problem == nil {
			problem = fmt.Errorf("%s: Run: %w", r.Consumers[i].Name, err)
		}
		if e := ds[i].m.errs.Load(); e > 0 && problem == nil {
			problem = fmt.Errorf("%s: %d command errors, handler errors or lost ownerships", r.Consumers[i].Name, e)
		}
	}
	if problem == nil && (r.Acked != int64(n) || r.DeadLettered != 0) {
		problem = fmt.Errorf("%d entries acked and %d dead-lettered, want %d acked", r.Acked, r.DeadLettered, n)
	}
	return b.finish(ctx, r, problem, func() error { return b.checkPEL(ctx, k.stream, 0) })
}

// waitBlocked waits until a connection of each client name waits in a
// blocked XREADGROUP (CLIENT LIST: flags b, cmd xreadgroup), checked twice
// 50ms apart so that both consumers are past their start.
func (b *bench) waitBlocked(ctx context.Context, clientNames []string) error {
	deadline := time.Now().Add(waitIdle)
	for seen := 0; seen < 2; {
		list, err := b.ctl.ClientList(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLIENT LIST: %w", err)
		}
		if allBlocked(list, clientNames) {
			seen++
			if !ctxwait.Sleep(ctx, 50*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		seen = 0
		if time.Now().After(deadline) {
			return fmt.Errorf("consumers %v not all blocked in XREADGROUP after %v", clientNames, waitIdle)
		}
		if !ctxwait.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// allBlocked reports whether CLIENT LIST shows, for each name, a
// connection of that name blocked in XREADGROUP.
func allBlocked(clientList string, names []string) bool {
	blocked := map[string]bool{}
	for _, line := range strings.Split(clientList, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if f["cmd"] == "xreadgroup" && strings.Contains(f["flags"], "b") {
			blocked[f["name"]] = true
		}
	}
	for _, n := range names {
		if !blocked[n] {
			return false
		}
	}
	return true
}

// sampleHeld samples XPENDING's summary of stream every slowSample until
// the returned stop is called, recording in cs each consumer's highest
// count and the number of samples. stop may be called more than once.
func (b *bench) sampleHeld(ctx context.Context, stream string, cs []ConsumerResult) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(slowSample)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sum, err := b.ctl.XPending(ctx, stream, benchGroup).Result()
			if err != nil {
				continue // reported by the end state check if it persists
			}
			for i := range cs {
				cs[i].MaxHeld = max(cs[i].MaxHeld, sum.Consumers[cs[i].Name])
				cs[i].Samples++
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}
