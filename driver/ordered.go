package driver

// Ordered mode (NewOrdered): one Run of a consumer that owns
// partitions through leases and handles each one's entries in order.
//
//	balancer ──heartbeat (memberServer)──> live members ──> share
//	   │  acquire (lease fn) up to the share, hand extras over
//	   └─> one holder per partition held (tenure.go):
//	          next (lease_next fn: fence, renew, acks, give-backs, next batch)
//	          ──> handler (one place of Concurrency) ──> outcome
//	          renew (lease fn) while it waits; release (lease_release fn)
//	          with the last acks when it hands the partition over
//
// The lanes' loops (read, reclaim, lease, acker) do not run: every entry
// comes from lease_next, in stream order, and is acked by the next call.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// partition is one partition of an ordered run: its stream's scope
// (configuration, log) and its server, srv (the scope's server, as the
// partition's holder uses it).
type partition struct {
	index int
	*streamScope
	srv partitionServer
	// pause is the operator's pause of the group on the partition.
	pause pauseGate
}

// orderedRun is the state of one Run in ordered mode.
type orderedRun struct {
	*core
	clock   clock
	members memberServer
	parts   []*partition

	// Real-time periods; the tests shorten them. Every decision about a
	// lease reads clock, so they only say how often it is looked at.
	balanceEvery time.Duration // the balancer's round
	tick         time.Duration // how often a waiting holder looks at the clock
	idleMax      time.Duration // the longest pause of an idle partition between next calls

	places chan struct{} // Concurrency places for handlers: take one to run

	// balancer is the balancer's progress, for the liveness probe: a
	// round, and each acquisition in it (each a call that may time out).
	balancer *pulse

	// bg carries no cancellation: lease calls go on during the shutdown.
	bg context.Context
	// handlerCtx is the handlers' parent, cancelled at the end of the
	// shutdown's first ShutdownTimeout.
	handlerCtx context.Context

	mu         sync.Mutex
	tenures    map[int]*tenure // partitions with a running holder
	lastLive   []string        // the members the last heartbeat saw
	seen       int             // heartbeats that landed
	tenuresRun sync.WaitGroup
}

// newOrderedRun returns the state of an ordered Run of cfg (defaults
// applied): one slot per stream, on the server partitionOf returns for the
// slot's configuration, and the membership on members, reading clk.
func newOrderedRun(cfg Config, log *slog.Logger, lib loader, partitionOf func(Config) partitionServer, members memberServer, clk clock) *orderedRun {
	r := &orderedRun{
		core: newCore(cfg, log, lib, &intakeFlag{}, clk), clock: clk, members: members,
		balanceEvery: cfg.balanceInterval(),
		tick:         cfg.partitionLease / 20,
		idleMax:      min(cfg.ReadBlock/4, cfg.partitionLease/4),
		places:       make(chan struct{}, cfg.Concurrency),
		tenures:      map[int]*tenure{},
	}
	for range cfg.Concurrency {
		r.places <- struct{}{}
	}
	for i, stream := range cfg.Streams {
		sc, srv := scopeOf(r.core, stream, partitionOf)
		r.parts = append(r.parts, &partition{index: i, streamScope: sc, srv: srv})
	}
	return r
}

// serve is Run's body in ordered mode, as session.serve is otherwise: it
// returns a channel closed once handlers still running after the shutdown
// have returned (nil when none is), and Run's error.
func (r *orderedRun) serve(ctx context.Context) (lingering <-chan struct{}, err error) {
	cfg := r.cfg
	r.bg = context.WithoutCancel(ctx)
	scopes := make([]*streamScope, len(r.parts))
	for i, p := range r.parts {
		scopes[i] = p.streamScope
	}
	if ok, err := r.begin(ctx, scopes); !ok {
		return nil, err
	}
	r.log.Info("pelwarden consumer started in ordered mode", "partitions", len(r.parts), "concurrency", cfg.Concurrency,
		"partition_lease", cfg.partitionLease, "max_deliveries", cfg.MaxDeliveries, "library_mode", r.lib.Mode().String())

	// A group paused before the start: no partition takes entries until
	// the resume (their leases are taken and kept meanwhile).
	pauses := make([]*pauseSource, len(r.parts))
	for i, p := range r.parts {
		pauses[i] = &pauseSource{scope: p.streamScope, srv: p.srv, gate: &p.pause}
		r.health.watch(&p.pause)
	}
	r.checkPauses(ctx, pauses)

	loopCtx, stopLoops := r.loopContext(ctx)
	defer stopLoops()
	handlerCtx, cancelHandlers := context.WithCancel(r.bg)
	defer cancelHandlers()
	r.handlerCtx = handlerCtx
	paused := make(chan struct{})
	go func() {
		defer close(paused)
		r.pauseLoop(loopCtx, pauses)
	}()
	// The limit's loop gives the permits of ending handlers back until
	// the holders all stopped.
	limitCtx, stopLimit := context.WithCancel(r.bg)
	defer stopLimit()
	limitDone := make(chan struct{})
	go func() {
		defer close(limitDone)
		r.limit.loop(limitCtx)
	}()

	r.balancer = r.health.pulse("balancer", 3*r.balanceEvery+time.Minute)
	balanced := make(chan struct{})
	go func() {
		defer close(balanced)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
			}
			t.Reset(r.balance(loopCtx))
			r.balancer.beat()
		}
	}()
	<-loopCtx.Done()
	<-balanced
	<-paused

	// The shutdown: this consumer leaves the membership first, so that
	// the others' next round counts it out, then every holder hands its
	// partition over at the next boundary (at once when idle, after its
	// handler otherwise); handlers get ShutdownTimeout to finish, then
	// their contexts are cancelled.
	leaveCtx, cancelLeave := context.WithTimeout(r.bg, cfg.ShutdownTimeout)
	defer cancelLeave()
	if err := r.members.leave(leaveCtx); err != nil {
		r.commandError(nil, "leave membership", err, 0)
	}
	r.mu.Lock()
	for _, o := range r.tenures {
		o.handOverSoon()
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.tenuresRun.Wait(); close(done) }()
	if !waitOrTimeout(done, cfg.ShutdownTimeout) {
		r.log.Warn("shutdown timeout: cancelling handlers; their entries stay pending for the partitions' next owners", "owned", r.tenureCount())
		cancelHandlers()
		if !waitOrTimeout(done, cfg.ShutdownTimeout) {
			r.log.Error("handlers ignored their cancelled context; abandoned (their outcome is discarded, entries stay pending)", "owned", r.tenureCount())
			lingering = done
		}
	}
	stopLimit()
	<-limitDone
	finishCtx, cancelFinish := context.WithTimeout(r.bg, cfg.ShutdownTimeout)
	r.limit.finish(finishCtx) // every permit still held goes back, and the lease ends
	cancelFinish()
	return lingering, r.end()
}

// balance is one round of the balancer: a heartbeat, then this consumer's
// share of the partitions among the live members (shareOf); holders beyond
// it hand their partitions over, and free partitions are acquired up to
// it, the search starting at this consumer's rank's part of the list.
// Nothing is acquired before the second heartbeat landed. It returns
// when the next round is due: balanceEvery, or sooner when a partition
// this consumer wants is held under a lease that expires before that (a
// crashed holder's): just after the expiry, so the partition runs again
// PartitionLease after its holder's last renewal, not up to a round later.
func (r *orderedRun) balance(ctx context.Context) (next time.Duration) {
	next = r.balanceEvery
	hctx, cancel := context.WithTimeout(ctx, r.cfg.partitionLease)
	live, err := r.members.heartbeat(hctx, r.cfg.partitionLease)
	cancel()
	if err != nil {
		r.commandError(nil, "membership heartbeat", err, 0)
	}
	r.mu.Lock()
	switch {
	case err == nil:
		r.lastLive = live
		r.seen++
	case r.lastLive == nil:
		// No view yet: acquiring blind could take every partition.
		r.mu.Unlock()
		return
	default:
		live = r.lastLive // a failed heartbeat keeps the last view
	}
	if r.seen < 2 {
		// One round first: consumers started together see each other's
		// heartbeats before they acquire, rather than each taking what it
		// can and handing most of it over a round later.
		r.mu.Unlock()
		return
	}
	self := r.cfg.Consumer
	n := len(r.parts)
	share := shareOf(live, self, n)
	kept := 0
	for i := n - 1; i >= 0; i-- {
		o := r.tenures[i]
		if o == nil || o.handOver.raised() {
			continue
		}
		if kept < share {
			kept++
			continue
		}
		o.log.Info("handing the partition over: this consumer holds more than its share", "share", share, "members", len(live))
		o.handOverSoon()
	}
	var free []*partition
	if kept < share {
		start := rankOf(live, self) * n / max(len(live), 1)
		for k := range n {
			p := r.parts[(start+k)%n]
			if r.tenures[p.index] == nil {
				free = append(free, p)
			}
		}
	}
	r.mu.Unlock()
	for _, p := range free {
		if kept >= share || ctx.Err() != nil {
			return next
		}
		r.balancer.beat()
		held, left := r.acquire(ctx, p)
		switch {
		case held:
			kept++
		case left > 0:
			next = min(next, left+expirySlack)
		}
	}
	return next
}

// expirySlack is how long after a refused lease's reported expiry the
// balancer asks again: the reply's time left was measured on the server
// before the reply travelled back, so the lease has expired by then.
const expirySlack = 2 * time.Millisecond

// acquire tries to take p's lease and, when it is taken, starts its
// holder. It reports whether it did and, when another consumer holds the
// lease, the time its lease has left.
func (r *orderedRun) acquire(ctx context.Context, p *partition) (held bool, left time.Duration) {
	ttl := r.cfg.partitionLease
	actx, cancel := context.WithTimeout(ctx, ttl-r.cfg.leaseMargin())
	defer cancel()
	sent := r.clock.now()
	l, err := p.srv.acquire(actx, ttl)
	if err != nil {
		if ctx.Err() == nil {
			r.commandError(p.streamScope, "acquire lease", err, 0)
		}
		return false, 0
	}
	if !l.Held {
		return false, l.TTL
	}
	o := newTenure(r, p, l.Token, sent)
	r.mu.Lock()
	if closedNow(ctx.Done()) {
		r.mu.Unlock()
		o.releaseLease() // the shutdown began: give it back at once
		return false, 0
	}
	r.tenures[p.index] = o
	r.tenuresRun.Add(1)
	r.mu.Unlock()
	r.m.Count(EventLeaseAcquired, 1)
	p.log.Info("partition acquired", "token", l.Token)
	go func() {
		defer r.tenuresRun.Done()
		o.own()
		r.mu.Lock()
		delete(r.tenures, p.index)
		r.mu.Unlock()
	}()
	return true, 0
}

// tenureCount is how many partitions have a running holder.
func (r *orderedRun) tenureCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tenures)
}

// errLeaseLapsed: the holder could not renew its lease before PartitionLease
// less its margin had passed since it sent its last renewal.
var errLeaseLapsed = errors.New("partition lease not renewed in time")

// callFailed handles a call of p's holder that failed for good (see
// core.failedForGood); a lease that lapsed meanwhile only ends the holder.
func (r *orderedRun) callFailed(p *partition, what string, err error) {
	if !errors.Is(err, errLeaseLapsed) {
		r.failedForGood(r.bg, p.streamScope, what, err)
	}
}
