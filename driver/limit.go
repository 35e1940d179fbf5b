package driver

// The consumer's side of a named limit (Config.Limit): permits taken from
// the function library before entries are read or claimed, given back when
// unused or when their handlers end.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// Timings of the permits' calls.
const (
	// limitHorizon: the rate's permits that come due within this long are
	// taken in one call (each then starts at its time), so a batch costs
	// one round trip however low the limit's burst.
	limitHorizon = 100 * time.Millisecond
	// limitPollFirst and limitPollCap bound the wait between calls while
	// the cap is full (doubling from the first): permits that come back
	// (a release, an expired lease) are taken within limitPollCap.
	// limitPollMost bounds a rate's wait, so a running consumer sees a
	// changed limit within it.
	limitPollFirst = 5 * time.Millisecond
	limitPollCap   = 250 * time.Millisecond
	limitPollMost  = time.Second
	// limitRenewMost bounds the interval between renewals of the lease
	// while permits are held (a third of the limit's Lease when shorter).
	limitRenewMost = 500 * time.Millisecond
	// limitLinger is how long the permits of ended handlers wait for the
	// consumer's next acquisition to carry them back (no call of their
	// own) before a call of their own gives them back. A read waiting
	// for permits is woken at once to carry them (and take them again).
	limitLinger = 10 * time.Millisecond
	// limitWindowFloor: under a limit, the window starts at this many
	// times Concurrency (see newSession).
	limitWindowFloor = 4
)

// batchPermits are an ordered owner's permits of Config.Limit for its
// batch: taken for the whole batch in one call, one used per handler, the
// rest given back with the batch.
type batchPermits struct {
	lim   *permits // nil: no limit
	grant permitGrant
	used  int
}

// next makes sure there is a permit for the batch's head (want: the
// entries left in the batch), each call bounded by callCtx, and waits
// until it comes due. wait waits d (the owner renews its lease meanwhile)
// and reports whether the owner may go on; next reports the same.
func (b *batchPermits) next(want int, callCtx func() (context.Context, context.CancelFunc), clk clock, wait func(d time.Duration) bool) bool {
	if b.lim == nil {
		return true
	}
	var w permitWait
	var throttled time.Duration
	defer func() { b.lim.throttled(throttled) }()
	for b.used >= b.grant.n {
		ctx, cancel := callCtx()
		g, d, ok := b.lim.try(ctx, want, &w)
		cancel()
		if !ok {
			return false
		}
		if g.n > 0 {
			b.grant, b.used = g, 0
			break
		}
		throttled += d
		if !wait(d) {
			return false
		}
	}
	if d := b.grant.dueAt(b.used) - clk.now(); d > 0 && !wait(d) {
		return false
	}
	b.used++
	return true
}

// giveBack gives back the permits of the batch that no handler used.
func (b *batchPermits) giveBack() {
	b.lim.unused(b.grant.n - b.used)
	b.grant, b.used = permitGrant{}, 0
}

// LimitMetrics is an optional extension of Metrics for consumers under a
// limit (Config.Limit): a Metrics that also implements it is told how long
// the consumer waited for permits and how many of the cap's permits it
// holds. Package driver/prommetrics implements it, labelled by limit.
type LimitMetrics interface {
	// Throttled adds d to the time the consumer's reads waited for permits
	// of limit.
	Throttled(limit string, d time.Duration)
	// PermitsHeld reports the cap's permits of limit this consumer holds
	// now (its handlers running or queued, and reads under way).
	PermitsHeld(limit string, n int)
}

// limitServer is what a Run asks of its limit's server.
type limitServer interface {
	acquire(ctx context.Context, a permitAsk) (*pelwarden.Permits, error)
	release(ctx context.Context, token int64, permits, refund int, end bool) (*pelwarden.PermitRelease, error)
	read(ctx context.Context) (*pelwarden.LimitState, error)
}

// redisLimit is the limit's server through the library.
type redisLimit struct {
	lib  *pelwarden.Library
	name string
}

func (r *redisLimit) acquire(ctx context.Context, a permitAsk) (*pelwarden.Permits, error) {
	return r.lib.AcquirePermits(ctx, pelwarden.LimitAcquireArgs{Limit: r.name, Want: a.want, Token: a.token,
		Horizon: a.horizon, Release: a.release, Refund: a.refund})
}

// permitAsk is one acquisition: want permits under token's lease, those
// due within horizon, giving release and refund back first.
type permitAsk struct {
	want            int
	token           int64
	horizon         time.Duration
	release, refund int
}

func (r *redisLimit) release(ctx context.Context, token int64, permits, refund int, end bool) (*pelwarden.PermitRelease, error) {
	return r.lib.ReleasePermits(ctx, pelwarden.LimitReleaseArgs{Limit: r.name, Token: token, Permits: permits, Refund: refund, End: end})
}

func (r *redisLimit) read(ctx context.Context) (*pelwarden.LimitState, error) {
	return r.lib.ReadLimit(ctx, r.name)
}

// permitGrant is what permits.take took: n permits, the rate's k-th of
// them due at due[k] (a clock reading; nil when all are due at once).
type permitGrant struct {
	n   int
	due []time.Duration
}

// dueAt returns when the grant's permit k comes due (a clock reading; 0:
// at once).
func (g permitGrant) dueAt(k int) time.Duration {
	if k < len(g.due) {
		return g.due[k]
	}
	return 0
}

// permits is a Run's side of its limit: it takes permits for reads and
// claims (take), gives back those a read did not use (unused) and the
// cap's permits of ended handlers (ended), renews its lease while it holds
// permits, and ends the lease at the stop. Every holder under the limit
// takes a fair share (the library's rule), so the consumer never holds
// entries waiting for a permit: it reads only as many entries as it has
// permits for. A nil *permits is no limit: every method is a no-op.
type permits struct {
	srv   limitServer
	name  string
	clock clock
	log   *slog.Logger
	m     LimitMetrics // nil: not reported
	run   *core        // the error policy

	// join serializes the calls made without a token (the first, and the
	// first after a lost lease), so the Run makes one lease, not one per
	// loop asking at once.
	join sync.Mutex

	mu     sync.Mutex
	token  int64
	capped bool // the limit had a cap at the last call
	// out is the cap's permits granted to the Run's loops and not given
	// back yet (handlers queued or running, reads under way); done is
	// those given back and not yet sent to the server.
	out, done int
	// lost is permits that went out under a lease that expired: they came
	// back to the limit then, so the first lost handlers to end give
	// nothing back (never more than the lease holds).
	lost   int
	refund int // the rate's permits taken and unused, to give back
	// banked is permits taken ahead, due now, for the next read (counted
	// in out); unbound: the last acquisition got all it asked for, none
	// paced, so the limit does not bind and a take asks for its next
	// read's permits too (see take).
	banked  int
	unbound bool
	// calls is the number of calls under way, started the number of
	// calls begun: the lease's count in a reply is compared with
	// out+done only for a call no other call overlapped (see granted).
	calls, started int
	renew          time.Duration
	called         time.Duration // the last call's clock reading
	asked          time.Duration // the last acquisition's clock reading
	// flush wakes the loop to give permits back at once, linger after
	// limitLinger unless an acquisition carried them meanwhile; freed
	// wakes a take waiting for permits when a handler ended.
	flush, linger, freed chan struct{}
}

// newPermits returns the Run's side of the limit cfg.Limit, on srv; nil
// without a limit.
func newPermits(srv limitServer, run *core, clk clock) *permits {
	if run.cfg.Limit == "" {
		return nil
	}
	lm, _ := run.m.(LimitMetrics)
	return &permits{srv: srv, name: run.cfg.Limit, clock: clk, log: run.log.With("limit", run.cfg.Limit), m: lm, run: run,
		renew: limitRenewMost, flush: make(chan struct{}, 1), linger: make(chan struct{}, 1),
		freed: make(chan struct{}, 1)}
}

// check reads the limit at the start: a limit that is not set is an
// error matching pelwarden.ErrNoLimit, which Run returns.
func (p *permits) check(ctx context.Context) error {
	if p == nil {
		return nil
	}
	st, err := p.srv.read(ctx)
	if err != nil {
		return err
	}
	if !st.Exists {
		return fmt.Errorf("pelwarden/driver: limit %q: %w (set it first: `pelwarden limit set`, or Library.SetLimit)", p.name, pelwarden.ErrNoLimit)
	}
	p.mu.Lock()
	p.renew = min(limitRenewMost, st.Lease/3)
	p.mu.Unlock()
	p.log.Info("consuming under a limit", "settings", st.LimitSettings.String())
	return nil
}

// take takes up to want permits, waiting until at least one is granted.
// It reports false when ctx ended or the consumer stopped first. A limit
// removed while running (pelwarden.ErrNoLimit) and failed calls are logged
// and retried: the consumer takes nothing meanwhile, and its entries stay
// in the stream.
func (p *permits) take(ctx context.Context, want int) (permitGrant, bool) {
	if p == nil {
		return permitGrant{n: want}, true
	}
	if n := p.fromBank(want); n > 0 {
		return permitGrant{n: n}, true
	}
	var throttled time.Duration
	defer func() { p.throttled(throttled) }()
	var w permitWait
	for {
		ask := want
		p.mu.Lock()
		if p.unbound {
			// While the limit does not bind, one acquisition serves two
			// reads: the half this read does not take waits in the bank
			// (given back if no read takes it within limitLinger).
			ask = min(2*want, pelwarden.MaxCount)
		}
		p.mu.Unlock()
		g, wait, ok := p.try(ctx, ask, &w)
		if ok && g.n > want {
			if g.due == nil {
				p.mu.Lock()
				p.banked += g.n - want
				p.mu.Unlock()
				signal(p.linger) // given back unless a read takes them
			} else {
				// Paced (the rate binds now): the extra goes back.
				p.unused(g.n - want)
				g.due = g.due[:want]
			}
			g.n = want
		}
		if !ok || g.n > 0 {
			return g, ok
		}
		began := p.clock.now()
		if !sleepOrWake(ctx, wait, p.freed) {
			return permitGrant{}, false
		}
		throttled += p.clock.now() - began
	}
}

// fromBank takes up to want permits from the bank.
func (p *permits) fromBank(want int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(want, p.banked)
	p.banked -= n
	if n > 0 {
		p.asked = p.clock.now()
	}
	return n
}

// sleepOrWake waits d, or until wake receives (a handler ended: its
// permit can be taken again at once), or ctx ends (then it reports false).
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// throttled reports time spent waiting for permits.
func (p *permits) throttled(d time.Duration) {
	if d > 0 && p.m != nil {
		p.m.Throttled(p.name, d)
	}
}

// permitWait is the state of one caller's wait for permits: its failed
// calls in a row, its refusals in a row (by the rate or a full cap), and
// its next poll of a full cap.
type permitWait struct {
	failures int
	refused  int
	poll     time.Duration
}

// try makes one call for up to want permits. With none granted, it
// returns how long to wait before the next try (w keeps the waiting
// caller's state across tries). It reports false when ctx ended or the
// consumer stopped.
func (p *permits) try(ctx context.Context, want int, w *permitWait) (g permitGrant, wait time.Duration, ok bool) {
	a, mark := p.begin(want)
	if a.token == 0 {
		p.end()
		p.join.Lock()
		if a, mark = p.begin(want); a.token != 0 {
			p.join.Unlock()
		} else {
			defer p.join.Unlock()
		}
	}
	sent := p.clock.now()
	r, err := p.srv.acquire(ctx, a)
	now := p.clock.now()
	if err != nil {
		p.failed(a, err)
		if ctx.Err() != nil {
			return g, 0, false
		}
		p.run.commandError(nil, "take permits", err, w.failures)
		if permanent(err) {
			p.run.stop(fmt.Errorf("pelwarden/driver: take permits of limit %q: %w", p.name, err))
			return g, 0, false
		}
		wait = backoff(w.failures)
		w.failures++
		return g, wait, true
	}
	if w.failures > 0 {
		p.run.memoryFreed("take permits")
		w.failures = 0
	}
	p.granted(r, sent, mark, a.want, true)
	if r.Granted > 0 {
		g.n = r.Granted
		if r.Due(r.Granted-1) > 0 {
			g.due = make([]time.Duration, r.Granted)
			for k := range g.due {
				if d := r.Due(k); d > 0 {
					g.due[k] = now + d
				}
			}
		}
		w.poll = 0
		return g, 0, true
	}
	wait = r.Wait
	if wait == pelwarden.WaitForRelease {
		w.poll = min(max(2*w.poll, limitPollFirst), limitPollCap)
		wait = w.poll
	}
	wait = min(wait, limitPollMost)
	// The holders' calls are spread by a random delay. The rate's next
	// share goes to the first holder to call once it is due, so a holder
	// refused more times in a row draws from a shorter spread: the one
	// that waited longest tends to come first, and the shares go round
	// instead of by lot.
	w.refused++
	wait += time.Duration(rand.Int64N(int64(wait)/int64(5*w.refused) + 1))
	return g, wait, true
}

// callMark is a call's place among the calls: whether it was alone when
// it began, and the count of calls begun then.
type callMark struct {
	alone   bool
	started int
}

// begin counts a call under way and returns the acquisition to make
// (with the token, carrying what waits to be given back) and its mark.
func (p *permits) begin(want int) (permitAsk, callMark) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.started++
	a := permitAsk{want: want, token: p.token, horizon: limitHorizon}
	p.asked = p.clock.now()
	if a.token != 0 {
		a.release, a.refund = p.done, p.refund
		p.done, p.refund = 0, 0
	}
	return a, callMark{alone: p.calls == 1, started: p.started}
}

// failed ends the count of acquisition a that failed with err. What it
// carried back is kept for the next call when the server refused it (an
// error reply: the function changed nothing); after no reply it may have
// been given back already, so it is not sent again blindly (see send).
func (p *permits) failed(a permitAsk, err error) {
	var reply redis.Error
	p.mu.Lock()
	p.calls--
	if errors.As(err, &reply) {
		p.done += a.release
		p.refund += a.refund
	}
	p.mu.Unlock()
}

// end counts a call done.
func (p *permits) end() {
	p.mu.Lock()
	p.calls--
	p.mu.Unlock()
}

// granted records the reply of an acquire marked mark, sent at sent (a
// clock reading); out says its permits go out to the caller (not for a
// renewal, which takes none). It ends the call's count (see begin).
func (p *permits) granted(r *pelwarden.Permits, sent time.Duration, mark callMark, asked int, out bool) {
	p.mu.Lock()
	p.calls--
	// No other call under way from its start to its reply: the lease's
	// count in the reply is the one that went out and waits to go back.
	quiet := mark.alone && p.started == mark.started
	if r.Lost {
		p.log.Warn("the limit's lease expired before it was renewed; its permits went back to the limit", "out", p.out)
		p.lost += p.out - p.banked // the bank's are in no one's hands
		p.out, p.banked = 0, 0
	}
	p.token, p.capped, p.called = r.Token, r.Share > 0, max(p.called, sent)
	if out {
		p.unbound = r.Granted == asked && r.Due(max(r.Granted-1, 0)) == 0
	}
	if p.capped && out {
		p.out += r.Granted
	}
	// Then the lease holds what went out and what waits to be sent back;
	// more means a call whose reply was lost (a timeout) took permits
	// unknowingly: they go back now.
	leaked := 0
	if quiet && p.capped && !r.Lost {
		leaked = r.Held - p.out - p.done
		if leaked > 0 {
			p.done += leaked
		}
	}
	n := p.out
	p.mu.Unlock()
	if leaked > 0 {
		p.log.Warn("gives back permits a call whose reply was lost had taken", "permits", leaked)
		signal(p.flush)
	}
	if p.m != nil {
		p.m.PermitsHeld(p.name, n)
	}
}

// unused gives back n permits of a grant that no handler will use (a read
// returned fewer entries, an entry was dead-lettered or skipped), at once.
func (p *permits) unused(n int) {
	if p == nil || n <= 0 {
		return
	}
	p.mu.Lock()
	p.refund += n
	if p.capped {
		p.giveBackLocked(n)
	}
	p.mu.Unlock()
	signal(p.flush)
}

// giveBackLocked moves n permits that went out to those to send back,
// less those of a lost lease. p.mu is held.
func (p *permits) giveBackLocked(n int) {
	gone := min(n, p.lost)
	p.lost -= gone
	n = min(n-gone, p.out)
	p.out -= n
	p.done += n
}

// ended gives back the cap's permit of a handler that ended: the
// consumer's next acquisition carries it, or a call of its own after
// limitLinger; a take waiting for permits is woken to carry it at once.
func (p *permits) ended() {
	if p == nil {
		return
	}
	p.mu.Lock()
	capped := p.capped
	if capped {
		p.giveBackLocked(1)
	}
	p.mu.Unlock()
	if capped {
		signal(p.linger)
		signal(p.freed)
	}
}

// loop gives permits back as they come (see unused and ended) and renews
// the lease while permits are held, until ctx ends.
func (p *permits) loop(ctx context.Context) {
	if p == nil {
		return
	}
	t := time.NewTimer(p.renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.flush:
		case <-p.linger:
			// While the reads go on, their acquisitions carry the
			// permits back; once none went out for limitLinger, a call
			// of their own does.
			for {
				if !ctxwait.Sleep(ctx, limitLinger) {
					return
				}
				p.mu.Lock()
				quiet := p.clock.now()-p.asked >= limitLinger
				if quiet && p.banked > 0 {
					// No read took them: they go back.
					p.refund += p.banked
					if p.capped {
						p.giveBackLocked(p.banked)
					}
					p.banked = 0
				}
				p.mu.Unlock()
				if quiet {
					break
				}
			}
		case <-t.C:
		}
		p.send(ctx, false)
		p.mu.Lock()
		t.Reset(p.renew)
		p.mu.Unlock()
	}
}

// send gives back what gathered, or renews the lease when it is due and
// permits are out; with end it ends the lease (the stop). What a failed
// call was to give back is not sent again blindly (it may have been
// given back already, its reply lost): the next acquire finds the
// lease's count above what went out and gives the difference back (see
// granted), or the lease expires.
func (p *permits) send(ctx context.Context, end bool) {
	p.mu.Lock()
	token, done, refund := p.token, p.done, p.refund
	renewDue := p.out > 0 && p.clock.now()-p.called >= p.renew
	if token == 0 && refund == 0 {
		p.mu.Unlock()
		return
	}
	if !(done > 0 || refund > 0 || (end && token != 0)) && !renewDue {
		p.mu.Unlock()
		return
	}
	p.done, p.refund = 0, 0
	p.calls++
	p.started++
	mark := callMark{alone: p.calls == 1, started: p.started}
	p.mu.Unlock()
	sent := p.clock.now()
	var err error
	if done > 0 || refund > 0 || end {
		_, err = p.srv.release(ctx, token, done, refund, end)
		if err == nil {
			p.mu.Lock()
			p.calls--
			if end {
				p.token, p.out, p.banked = 0, 0, 0
			}
			p.called = max(p.called, sent)
			n := p.out
			p.mu.Unlock()
			if p.m != nil {
				p.m.PermitsHeld(p.name, n)
			}
			return
		}
	} else {
		var r *pelwarden.Permits
		if r, err = p.srv.acquire(ctx, permitAsk{token: token}); err == nil {
			p.granted(r, sent, mark, 0, false)
			return
		}
	}
	if ctx.Err() == nil {
		p.run.commandError(nil, "give permits back", err, 0)
	}
	p.end()
}

// finish ends the lease at the stop, once no handler runs: every permit
// still held goes back to the limit (bounded by ctx; a lease left behind
// expires within the limit's Lease).
func (p *permits) finish(ctx context.Context) {
	if p == nil {
		return
	}
	p.send(ctx, true)
}
