package driver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// fakeLimit is a cap of permits kept as the library keeps it: per lease,
// a lease that can be made to expire, and a reply that can be lost after
// the call took effect. (The real function is tested against real servers
// in integration_test/limit_driver_test.go; this fake checks the driver's
// accounting in the cases a real server cannot be made to produce on cue.)
type fakeLimit struct {
	mu    sync.Mutex
	cap   int
	held  map[int64]int
	inUse int
	next  int64
	// expire makes the next call find its lease expired (its permits back
	// to the limit); dropReply makes the next acquire take effect but
	// answer with an error that is no reply.
	expire, dropReply bool
	// rateWait, when set, refuses every acquisition that wants permits
	// as a rate does: none granted, the next share due in rateWait.
	rateWait time.Duration
	asks     []permitAsk
}

func newFakeLimit(cap int) *fakeLimit { return &fakeLimit{cap: cap, held: map[int64]int{}} }

func (f *fakeLimit) acquire(_ context.Context, a permitAsk) (*pelwarden.Permits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks = append(f.asks, a)
	token, lost := a.token, false
	if token != 0 && f.expire {
		f.inUse -= f.held[token]
		delete(f.held, token)
		f.expire = false
	}
	if _, ok := f.held[token]; token != 0 && !ok {
		token, lost = 0, true
	}
	if token != 0 {
		back := min(f.held[token], a.release)
		f.held[token] -= back
		f.inUse -= back
	}
	if token == 0 && a.want > 0 {
		f.next++
		token = f.next
		f.held[token] = 0
	}
	n := min(a.want, f.cap-f.inUse)
	if f.rateWait > 0 && a.want > 0 {
		return &pelwarden.Permits{Token: token, Lost: lost, Wait: f.rateWait, Share: f.cap, Held: f.held[token], InUse: f.inUse}, nil
	}
	f.held[token] += n
	f.inUse += n
	p := &pelwarden.Permits{Granted: n, Token: token, Lost: lost, Share: f.cap, Held: f.held[token], InUse: f.inUse}
	if n < a.want {
		p.Wait = pelwarden.WaitForRelease
	}
	if f.dropReply {
		f.dropReply = false
		return nil, errors.New("read tcp: i/o timeout")
	}
	return p, nil
}

func (f *fakeLimit) release(_ context.Context, token int64, permits, _ int, end bool) (*pelwarden.PermitRelease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	back := min(f.held[token], permits)
	if end {
		back = f.held[token]
		delete(f.held, token)
	} else {
		f.held[token] -= back
	}
	f.inUse -= back
	return &pelwarden.PermitRelease{Released: back, NotHeld: max(0, permits-back)}, nil
}

func (f *fakeLimit) read(context.Context) (*pelwarden.LimitState, error) {
	return &pelwarden.LimitState{Exists: true, LimitSettings: pelwarden.LimitSettings{Concurrency: f.cap, Lease: pelwarden.DefaultLimitLease}}, nil
}

func (f *fakeLimit) state() (inUse int, asks []permitAsk) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inUse, append([]permitAsk(nil), f.asks...)
}

func newTestPermits(t *testing.T, f *fakeLimit) *permits {
	t.Helper()
	cfg := Config{Limit: "l", Metrics: noMetrics{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := newCore(cfg, log, nil, &intakeFlag{}, newClock())
	c.run = context.Background()
	p := newPermits(f, c, newClock())
	require.NoError(t, p.check(t.Context()))
	return p
}

// The permits of ended handlers ride on the next acquisition (no call of
// their own); the consumer's own count and the server's agree throughout.
func TestPermitsCarriedBack(t *testing.T) {
	t.Parallel()
	f := newFakeLimit(4)
	p := newTestPermits(t, f)
	ctx := t.Context()
	g, ok := p.take(ctx, 4)
	require.True(t, ok)
	require.Equal(t, 4, g.n)
	for range 4 {
		p.ended()
	}
	g, ok = p.take(ctx, 4)
	require.True(t, ok)
	require.Equal(t, 4, g.n)
	inUse, asks := f.state()
	require.Equal(t, 4, asks[1].release, "the ended handlers' permits carried by the acquisition")
	require.Equal(t, 4, inUse)
	require.Equal(t, 4, p.out)
	require.Zero(t, p.done)
}

// A lease that expired: its permits came back to the limit, so the
// handlers that held them give nothing back when they end; the permits
// of the new lease are given back only by their own handlers.
func TestPermitsOfALostLease(t *testing.T) {
	t.Parallel()
	f := newFakeLimit(4)
	p := newTestPermits(t, f)
	ctx := t.Context()
	_, ok := p.take(ctx, 4)
	require.True(t, ok)
	p.ended()
	p.ended() // two of the four ended; two still run
	f.mu.Lock()
	f.expire = true
	f.mu.Unlock()
	g, ok := p.take(ctx, 2)
	require.True(t, ok)
	require.Equal(t, 2, g.n, "under a new lease")
	inUse, _ := f.state()
	require.Equal(t, 4, inUse, "the expired lease's permits came back; the new lease holds 2, and 2 in the bank (the limit did not bind)")
	require.Equal(t, 2, p.banked)
	p.ended()
	p.ended() // the old lease's two still running end: nothing to give back
	require.Zero(t, p.done, "nothing of the new lease given back for the old one's handlers")
	require.Equal(t, 4, p.out)
	p.ended()
	p.ended() // the new ones end
	require.Equal(t, 2, p.done)
	p.finish(ctx)
	inUse, _ = f.state()
	require.Zero(t, inUse)
}

// An acquisition that took effect but whose reply was lost: the next
// acquisition, alone, finds the lease holding more than went out and
// gives the difference back.
func TestPermitsLostReplyGivenBack(t *testing.T) {
	t.Parallel()
	f := newFakeLimit(10)
	p := newTestPermits(t, f)
	ctx := t.Context()
	_, ok := p.take(ctx, 1) // makes the lease
	require.True(t, ok)
	p.ended()
	f.mu.Lock()
	f.dropReply = true
	f.mu.Unlock()
	// The limit did not bind: the take asks for two reads' worth, 6. The
	// first try takes 6 unknowingly, the retry the 4 left.
	g, ok := p.take(ctx, 3)
	require.True(t, ok)
	require.Equal(t, 3, g.n)
	inUse, _ := f.state()
	require.Equal(t, 10, inUse, "the lost reply's 6 and the retry's 4")
	require.Equal(t, 4, p.out, "3 in hand, 1 in the bank")
	require.Equal(t, 6, p.done, "the 6 taken unknowingly go back")
	p.send(ctx, false)
	inUse, _ = f.state()
	require.Equal(t, 4, inUse)
}

// A caller the rate refuses waits until the next share is due plus a
// random spread, which narrows with each refusal in a row (a fifth of
// the wait, then a tenth, ...): the holder that waited longest tends to
// call first once a share is due, so the shares go round.
func TestPermitsRefusedCallSooner(t *testing.T) {
	t.Parallel()
	f := newFakeLimit(4)
	f.rateWait = 100 * time.Millisecond
	p := newTestPermits(t, f)
	var w permitWait
	for r := 1; r <= 50; r++ {
		g, wait, ok := p.try(t.Context(), 1, &w)
		require.True(t, ok)
		require.Zero(t, g.n)
		require.GreaterOrEqual(t, wait, f.rateWait, "never before the share is due")
		require.LessOrEqual(t, wait, f.rateWait+f.rateWait/time.Duration(5*r)+time.Nanosecond, "refusal %d: at most 1/%d of the wait later", r, 5*r)
	}
	require.Equal(t, 50, w.refused)

	var spread time.Duration
	for range 20 {
		var first permitWait
		_, wait, ok := p.try(t.Context(), 1, &first)
		require.True(t, ok)
		spread = max(spread, wait-f.rateWait)
	}
	require.Positive(t, spread, "first refusals are spread")
}
