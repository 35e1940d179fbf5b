package driver

// A tenure: this consumer's time as the holder of one partition's lease
// in ordered mode, from the acquisition to the hand-over or loss.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden"
)

// tenure runs one partition while this consumer holds its lease: one
// entry at a time, in stream order, each handler on the tenure's own
// goroutine (leaseWatch keeps the lease meanwhile). Each lease_next hands
// out a batch (a pending entry alone, or up to orderedBatch new ones); the
// entries handled are acked by the call that fetches the next batch, and
// when a handler fails, the rest of its batch is given back by that call,
// so the failed head is tried again before anything behind it. While the
// last call found nothing pending, the next one reads the new entries
// with a plain XREADGROUP in the same transaction (LeaseNextRead) rather
// than inside the function. Only its own goroutine (own) touches its
// state, and the watch while a handler runs; the balancer and the
// shutdown only ask it to hand over.
type tenure struct {
	run *orderedRun
	p   *partition
	srv partitionServer
	log *slog.Logger

	token int64 // the lease's fencing token

	// validUntil is when, by the clock, this holder stops handling the
	// partition unless it renews first: the send time of the last call
	// that renewed the lease, plus PartitionLease less its margin.
	// renewedAt is that send time.
	validUntil, renewedAt time.Duration

	batch       []Message     // handed out by the last next call, not handled yet
	acks        []string      // handled since the last next call: acked by the next call
	giveBack    []string      // handed out as new, not handled: given back by the next call
	nonePending bool          // the last next call found nothing pending: the next one may read apart
	blocked     string        // the head reported as blocking ("" when none)
	idle        time.Duration // the current pause of an idle partition
	fenced      bool          // the server said another consumer holds the lease
	lapsed      bool          // validUntil passed without a renewal

	// ctx is the handlers' context while this holder holds the lease,
	// cancelled with ErrLostOwnership once it is lost; watch keeps the
	// lease while a handler runs.
	ctx    context.Context
	cancel context.CancelCauseFunc
	watch  leaseWatch

	handOver flag // hand the partition over at the next boundary

	// permits are Config.Limit's permits for the batch.
	permits batchPermits
}

// flag is one-way and can be waited for: raised once, for good.
type flag struct {
	once sync.Once
	ch   chan struct{}
}

func newFlag() flag { return flag{ch: make(chan struct{})} }

// raise raises the flag (again: nothing).
func (s *flag) raise() { s.once.Do(func() { close(s.ch) }) }

// raised reports whether the flag is up.
func (s *flag) raised() bool { return closedNow(s.ch) }

// newTenure returns the holder of p, holding its lease with token since a
// renewing call sent at sent.
func newTenure(r *orderedRun, p *partition, token int64, sent time.Duration) *tenure {
	o := &tenure{run: r, p: p, srv: p.srv, log: p.log.With("token", token), token: token,
		validUntil: sent + r.cfg.partitionLease - r.cfg.leaseMargin(), renewedAt: sent,
		handOver: newFlag(), permits: batchPermits{lim: r.limit}}
	o.ctx, o.cancel = context.WithCancelCause(r.handlerCtx)
	o.watch.o = o
	return o
}

// handOverSoon asks the holder to give the partition back once its
// current handler (if any) returned.
func (o *tenure) handOverSoon() { o.handOver.raise() }

// own handles the partition until it is handed over or lost, then gives
// the lease back (acking the entries handled since the last next call and
// giving the rest of the batch back) unless another consumer holds it.
func (o *tenure) own() {
	pm, _ := o.run.m.(PartitionMetrics)
	if pm != nil {
		pm.PartitionOwned(o.p.cfg.Stream, true)
	}
	defer func() {
		o.cancel(context.Canceled)
		o.permits.giveBack()
		if !o.fenced {
			o.releaseLease()
		}
		if pm != nil {
			if o.blocked != "" {
				pm.PartitionBlocked(o.p.cfg.Stream, false)
			}
			pm.PartitionOwned(o.p.cfg.Stream, false)
		}
	}()
	for !o.handOver.raised() {
		if o.p.pause.isPaused() {
			// Paused (see pauseGate): no next call; ack what was handled at
			// once, keep the lease, and let the rest of the batch wait.
			if len(o.acks) > 0 {
				o.call("ack while paused", func(ctx context.Context) error {
					o.ackApart(ctx)
					return nil
				})
			}
			if o.hold(o.p.pause.wait(), 0, true) != holdWoken {
				return
			}
		}
		if o.hold(o.run.places, 0, true) != holdWoken {
			return
		}
		if o.p.pause.isPaused() {
			o.run.places <- struct{}{} // paused while waiting for a place
			continue
		}
		if len(o.batch) == 0 {
			res, ok := o.next()
			if !ok {
				o.run.places <- struct{}{}
				return
			}
			if len(res.Entries) == 0 {
				o.run.places <- struct{}{}
				if !o.pause(res) {
					return
				}
				continue
			}
			o.unblocked()
			o.idle = 0
			o.batch = partitionMessages(res.Entries, o.p.cfg.Stream, o.run.cfg.Group, o.run.cfg.Consumer)
		}
		// Config.Limit's permit for the head (taken for the whole batch),
		// the lease renewed while it waits.
		if o.permits.lim != nil {
			callCtx := func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(o.run.bg, max(o.validUntil-o.run.clock.now(), time.Millisecond))
			}
			if !o.permits.next(len(o.batch), callCtx, o.run.clock, func(d time.Duration) bool { return o.hold(nil, d, true) == holdTimedOut }) {
				o.run.places <- struct{}{}
				return
			}
		}
		m := &o.batch[0]
		o.batch = o.batch[1:]
		goOn, wait, settled := o.handle(m)
		o.run.limit.ended()
		o.run.places <- struct{}{}
		if !settled {
			// The head is tried again (or left to the next holder) before
			// anything behind it: the rest of its batch goes back.
			o.giveBackBatch()
		}
		if !goOn {
			return
		}
		if wait > 0 && o.hold(nil, wait, true) != holdTimedOut {
			return
		}
	}
}

// holdResult is how hold ended.
type holdResult int

const (
	holdWoken    holdResult = iota // wake delivered
	holdTimedOut                   // the wait's bound passed
	holdHandOver                   // a hand-over was asked
	holdLost                       // the lease is lost
)

// hold waits until wake delivers (a closed channel, or a place taken from
// the places channel; nil: never), d has passed (0: no bound) or, when
// interruptible, a hand-over is asked; meanwhile it renews the lease every
// leaseRenewal by the clock, and ends with holdLost once it cannot.
func (o *tenure) hold(wake <-chan struct{}, d time.Duration, interruptible bool) holdResult {
	// The common case first, without a ticker or a timer: a place is free.
	if !o.keep() {
		return holdLost
	}
	if interruptible && o.handOver.raised() {
		return holdHandOver
	}
	select {
	case <-wake:
		return holdWoken
	default:
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	var handOver <-chan struct{}
	if interruptible {
		handOver = o.handOver.ch
	}
	tick := time.NewTicker(o.run.tick)
	defer tick.Stop()
	// The first round's keep was the fast path's.
	for kept := true; ; kept = false {
		if !kept && !o.keep() {
			return holdLost
		}
		select {
		case <-wake:
			return holdWoken
		case <-timeout:
			return holdTimedOut
		case <-handOver:
			return holdHandOver
		case <-tick.C:
		}
	}
}

// keep renews the lease when a third of PartitionLease has passed since
// the last renewal, and reports whether the holder may still handle the
// partition. It is lost once the server says another consumer holds it
// (or holds it with another token), or once validUntil passed without a
// renewal (a call that failed, or took too long).
func (o *tenure) keep() bool {
	cfg := o.run.cfg
	sent := o.run.clock.now()
	if sent >= o.validUntil {
		o.lapse()
		return false
	}
	if sent-o.renewedAt < cfg.leaseRenewal() {
		return true
	}
	ctx, cancel := context.WithTimeout(o.run.bg, o.validUntil-sent)
	defer cancel()
	l, err := o.srv.acquire(ctx, cfg.partitionLease)
	if err != nil {
		o.run.commandError(o.p.streamScope, "renew lease", err, 0)
		o.run.callFailed(o.p, "renew lease", err)
		return true // tried again at the next tick, until validUntil
	}
	if !l.Held || l.Token != o.token {
		o.fenced = true
		o.lose(fmt.Sprintf("held by %q with token %d", l.Owner, l.Token))
		return false
	}
	o.validUntil, o.renewedAt = sent+cfg.partitionLease-cfg.leaseMargin(), sent
	return true
}

// lapse notes that the lease is lost by the clock: validUntil passed
// without a renewal.
func (o *tenure) lapse() {
	o.lapsed = true
	o.lose(errLeaseLapsed.Error())
}

// lose notes that the lease is lost, for why.
func (o *tenure) lose(why string) {
	o.run.m.Count(EventLeaseLost, 1)
	o.log.Warn("partition lease lost; the partition is left alone until acquired again", "why", why)
}

// next is the ordered step: it acks the entry handled last, renews the
// lease and fetches the partition's next entry (lease_next), retrying
// transient errors while the lease is valid. It reports false once the
// holder must stop: the lease is lost, or the call failed for good.
func (o *tenure) next() (*pelwarden.LeaseNextResult, bool) {
	cfg := o.run.cfg
	var res *pelwarden.LeaseNextResult
	var sent time.Duration
	ok := o.call("lease next", func(ctx context.Context) error {
		sent = o.run.clock.now()
		// Reading apart is in order only right behind a call that found
		// nothing pending, with nothing to give back (else the entries
		// given back come first); after a failed call the next one reads
		// inside the function.
		readApart := o.nonePending && len(o.giveBack) == 0
		o.nonePending = false
		var err error
		res, err = o.srv.next(ctx, o.token, cfg.partitionLease, o.acks, o.giveBack, readApart)
		if outOfMemory(err) && len(o.acks) > 0 {
			o.ackApart(ctx)
		}
		return err
	})
	if !ok {
		return nil, false
	}
	o.run.memoryFreed("lease next")
	if !res.Held {
		o.fenced = true
		if n := len(o.acks); n > 0 {
			o.run.m.Count(EventLostOwnership, n) // their acks were refused: they run again with the next holder
		}
		o.lose("the server answered that this consumer no longer holds it")
		return nil, false
	}
	o.validUntil, o.renewedAt = sent+cfg.partitionLease-cfg.leaseMargin(), sent
	if res.Acked > 0 {
		o.run.m.Count(EventAcked, int(res.Acked))
	}
	o.acks, o.giveBack = o.acks[:0], o.giveBack[:0]
	// A read apart that came behind a pending head (or a blocked one) took
	// entries that may not run yet: they go back with the next call.
	o.giveBack = append(o.giveBack, res.Deferred...)
	o.nonePending = res.NonePending && len(res.Deferred) == 0
	if n := len(res.DeadLettered); n > 0 {
		o.run.m.DeadLettered(pelwarden.ReasonMaxDeliveries, n)
		o.run.entryLog(o.log, true, "dead-lettered the partition's head after MaxDeliveries; the partition moves on", "ids", firstIDs(res.DeadLettered), "count", n)
	}
	if n := len(res.Deleted); n > 0 {
		o.run.m.Count(EventDeletedFromPEL, n)
	}
	read, claimed := 0, 0
	for _, e := range res.Entries {
		if e.Deliveries == 1 {
			read++ // a new entry, or one given back
		} else {
			claimed++ // a pending one: a retry, or a previous holder's
		}
	}
	if read > 0 {
		o.run.m.Count(EventRead, read)
	}
	if claimed > 0 {
		o.run.m.Count(EventClaimed, claimed)
	}
	return res, true
}

// ackApart acks the entries handled since the last next call through the
// ack function, without a next call: while the group is paused, and while
// the server is full. The ack function runs on a server at maxmemory,
// where the next call that would carry them is refused (it may dead-letter
// and read), and the core's policy is the same in both modes: while the
// server is full no new entries are taken, and those handled still
// settle. The ack is fenced by the PEL's holder: an entry the partition's
// next holder took over meanwhile is not acked. A failure leaves the acks
// to the next call.
func (o *tenure) ackApart(ctx context.Context) {
	res, err := o.srv.ack(ctx, o.acks)
	if err != nil {
		o.run.commandError(o.p.streamScope, "ack", err, 0)
		return
	}
	o.acks = o.acks[:0]
	if res.Acked > 0 {
		o.run.m.Count(EventAcked, int(res.Acked))
	}
	if lost := res.OwnedElsewhere(); len(lost) > 0 {
		o.run.m.Count(EventLostOwnership, len(lost))
	}
}

// partitionMessages returns a partition's entries as the handlers'
// messages, in one allocation (the handlers may keep them: nothing is
// reused).
func partitionMessages(entries []pelwarden.Entry, stream, group, consumer string) []Message {
	msgs := make([]Message, len(entries))
	for i, e := range entries {
		msgs[i] = Message{ID: e.ID, Fields: e.Fields, Deliveries: e.Deliveries, Stream: stream, Group: group, Consumer: consumer}
	}
	return msgs
}

// giveBackBatch moves the entries of the batch not handled yet to the
// give-back list of the next call, and gives their permits back.
func (o *tenure) giveBackBatch() {
	for _, e := range o.batch {
		o.giveBack = append(o.giveBack, e.ID)
	}
	o.batch = nil
	o.permits.giveBack()
}

// call runs op until it succeeds, each attempt bounded by the lease's
// validity. A transient failure is tried again after a backoff (retry.go's)
// during which the lease is renewed (the lease function runs on a server at
// maxmemory, which refuses lease_next and dead-letters), unless a hand-over
// is asked or the lease is lost meanwhile; an error retrying cannot fix
// goes to callFailed. It reports whether op succeeded.
func (o *tenure) call(what string, op func(context.Context) error) bool {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(o.run.bg, max(o.validUntil-o.run.clock.now(), time.Millisecond))
		err := op(ctx)
		cancel()
		if err == nil {
			return true
		}
		o.run.commandError(o.p.streamScope, what, err, attempt)
		if errors.Is(err, pelwarden.ErrNoGroup) || permanent(err) {
			o.run.callFailed(o.p, what, err)
			return false
		}
		if o.hold(nil, backoff(attempt), true) != holdTimedOut {
			return false
		}
	}
}

// pause waits after a next call that handed nothing out: for a blocking
// head, its wait (reported once); for an idle partition, a pause doubling
// up to idleMax; not at all when the call spent its scan on dead-letters.
// It reports false once the holder must stop.
func (o *tenure) pause(res *pelwarden.LeaseNextResult) bool {
	var wait time.Duration
	switch {
	case res.Blocked != "":
		if res.Blocked != o.blocked {
			if o.blocked == "" {
				if pm, ok := o.run.m.(PartitionMetrics); ok {
					pm.PartitionBlocked(o.p.cfg.Stream, true)
				}
			}
			o.blocked = res.Blocked
			o.run.m.Count(EventPartitionBlocked, 1)
			if res.Wait < 0 {
				o.log.Error("partition blocked by its head: at MaxDeliveries but too large to dead-letter; it waits for an operator",
					"id", res.Blocked, "deliveries", res.BlockedDeliveries)
			} else {
				o.log.Warn("partition blocked by its head: it failed and waits for its backoff",
					"id", res.Blocked, "deliveries", res.BlockedDeliveries, "wait", res.Wait)
			}
		}
		wait = o.run.idleMax
		if res.Wait >= 0 {
			wait = min(max(res.Wait, time.Millisecond), o.run.idleMax)
		}
	case len(res.DeadLettered)+len(res.Deleted) > 0:
		o.unblocked()
		return true
	default:
		o.unblocked()
		o.idle = min(max(2*o.idle, time.Millisecond), o.run.idleMax)
		wait = o.idle
	}
	return o.hold(nil, wait, true) == holdTimedOut
}

// unblocked notes that the head reported blocking no longer does.
func (o *tenure) unblocked() {
	if o.blocked != "" {
		o.log.Info("partition unblocked", "id", o.blocked)
		o.blocked = ""
		if pm, ok := o.run.m.(PartitionMetrics); ok {
			pm.PartitionBlocked(o.p.cfg.Stream, false)
		}
	}
}

// handle runs the handler on m, on the holder's goroutine, and applies its
// outcome. It reports whether the holder goes on, how long the partition
// waits first (a RetryAfter), and whether m is settled (acked with the
// next call, or dead-lettered), so that the entries behind it may run. A
// lease lost while the handler runs cancels its context with
// ErrLostOwnership, and its outcome is dropped.
func (o *tenure) handle(m *Message) (goOn bool, wait time.Duration, settled bool) {
	r := o.run
	start := r.clock.now()
	o.watch.arm()
	err, panicked := runHandler(o.ctx, r.cfg.Handler, m, r.m, r.entryLogs, o.log)
	if o.watch.disarm() {
		r.m.Count(EventLostOwnership, 1)
		o.run.entryLog(o.log, true, "partition lease lost while a handler ran: its context was cancelled and its outcome dropped", "id", m.ID, "err", err)
		return false, 0, false
	}
	r.m.HandlerDuration(r.clock.now() - start)
	out := OutcomeOf(err, r.cfg.MinIdle)
	if out.Action == ActionAck {
		r.m.Count(EventHandled, 1)
		o.acks = append(o.acks, m.ID)
		return true, 0, true
	}
	r.m.Count(EventHandlerError, 1)
	switch {
	case r.handlerCtx.Err() != nil:
		o.run.entryLog(o.log, true, "handler cancelled by shutdown; entry stays pending for the partition's next owner", "id", m.ID, "err", err)
		return false, 0, false
	case out.Action == ActionDeadLetter:
		goOn, dead := o.deadLetter(m, out.ErrText)
		return goOn, 0, dead
	case out.Retry:
		o.run.entryLog(o.log, false, "handler asked for a retry; the partition waits", "id", m.ID, "deliveries", m.Deliveries, "after", out.Delay, "err", err)
	case !panicked:
		o.run.entryLog(o.log, true, "handler failed; the partition tries its head again", "id", m.ID, "deliveries", m.Deliveries, "err", err)
	}
	// The failure is recorded (its Backoff counts from now, its error kept
	// for a dead letter at MaxDeliveries) before the partition moves on.
	if !o.keep() || !o.call("release", func(ctx context.Context) error {
		_, err := o.srv.fail(ctx, m.ID, out.ErrText)
		return err
	}) {
		return false, 0, false
	}
	if out.Retry {
		return true, out.Delay, false
	}
	return true, 0, false
}

// deadLetter moves the entry just handled to the dead-letter stream on
// its handler's request (fenced by ownership of the entry), while the
// lease is valid. It reports whether the holder goes on, and whether the
// entry is dead-lettered (or gone from the stream) so the entries behind
// it may run.
func (o *tenure) deadLetter(m *Message, text string) (goOn, settled bool) {
	r := o.run
	var res *pelwarden.DeadLetterResult
	if !o.keep() {
		return false, false
	}
	ok := o.call("dead-letter", func(ctx context.Context) error {
		var err error
		res, err = o.srv.deadLetter(ctx, m.ID, text)
		return err
	})
	if !ok {
		return false, false // it stays pending: the partition's next call hands it out again
	}
	if n := len(res.DeadLettered); n > 0 {
		r.m.DeadLettered(pelwarden.ReasonHandler, n)
		o.run.entryLog(o.log, true, "dead-lettered entry on handler request", "id", m.ID, "err", text)
	}
	if n := len(res.Deleted); n > 0 {
		r.m.Count(EventDeletedFromPEL, n)
	}
	if n := len(res.TooLarge); n > 0 {
		r.m.Count(EventTooLarge, n)
		o.log.Error("entry has too many fields to dead-letter atomically; it stays pending at the partition's head", "id", m.ID, "err", text)
		return true, false
	}
	if n := len(res.OwnedElsewhere()); n > 0 {
		r.m.Count(EventLostOwnership, n)
		return false, false
	}
	return true, true
}

// releaseLease gives the lease back for a graceful hand-over, acking the
// entries handled since the last next call and giving back the rest of
// the batch in the same call, retrying transient errors for up
// to ShutdownTimeout; once the lease lapsed (the server was out of reach
// for most of a PartitionLease) it tries once: the lease expires by
// itself soon, and a holder stuck in retries would keep this consumer
// from acquiring the partition again.
func (o *tenure) releaseLease() {
	r := o.run
	o.giveBackBatch()
	deadline := time.Now().Add(r.cfg.ShutdownTimeout)
	var res *pelwarden.ReleaseLeaseResult
	stop := func(err error, _ int) bool {
		return o.lapsed || errors.Is(err, pelwarden.ErrNoGroup) || permanent(err) || time.Now().After(deadline)
	}
	err := retry(r.bg, stop, func(err error, attempt int) { r.commandError(o.p.streamScope, "release lease", err, attempt) },
		func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, r.cfg.ShutdownTimeout)
			defer cancel()
			var err error
			res, err = o.srv.releaseLease(ctx, o.token, o.acks, o.giveBack)
			return err
		})
	if err != nil {
		o.log.Error("release lease gave up; the partition frees when its lease expires", "err", err)
		return
	}
	if res.Acked > 0 {
		r.m.Count(EventAcked, int(res.Acked))
	}
	if !res.Released {
		if n := len(o.acks); n > 0 {
			r.m.Count(EventLostOwnership, n)
		}
		o.log.Warn("partition lease already held by another consumer at hand-over; the last entries' acks were refused", "acks", len(o.acks))
		return
	}
	r.m.Count(EventLeaseReleased, 1)
	o.log.Info("partition handed over", "acked", res.Acked, "given_back", res.GivenBack)
}
