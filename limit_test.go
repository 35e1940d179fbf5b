package pelwarden

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimitKeysFor(t *testing.T) {
	t.Parallel()
	h, z := LimitKeysFor("payments")
	require.Equal(t, "{pelwarden:limit:payments}", h)
	require.Equal(t, "{pelwarden:limit:payments}:leases", z)
	require.Equal(t, Slot(h), Slot(z), "one slot")
	h2, _ := LimitKeysFor("email")
	require.NotEqual(t, Slot(h), Slot(h2), "each limit in its own slot (these two differ)")
}

// Bad settings and arguments are refused before any round trip, naming
// the field (the library has no client here: a call would fail).
func TestLimitArgumentsChecked(t *testing.T) {
	t.Parallel()
	lib := NewLibrary(nil)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit string
		s     LimitSettings
		field string
	}{
		{"no name", "", LimitSettings{Rate: 1}, "Limit"},
		{"a brace", "a}b", LimitSettings{Rate: 1}, "Limit"},
		{"too long", string(make([]byte, 201)), LimitSettings{Rate: 1}, "Limit"},
		{"neither rate nor cap", "x", LimitSettings{}, "LimitSettings"},
		{"negative rate", "x", LimitSettings{Rate: -1}, "Rate"},
		{"NaN rate", "x", LimitSettings{Rate: math.NaN()}, "Rate"},
		{"rate below resolution", "x", LimitSettings{Rate: 0.0001}, "Rate"},
		{"negative burst", "x", LimitSettings{Rate: 1, Burst: -1}, "Burst"},
		{"negative cap", "x", LimitSettings{Concurrency: -1}, "Concurrency"},
		{"short lease", "x", LimitSettings{Concurrency: 1, Lease: time.Millisecond}, "Lease"},
	} {
		_, err := lib.SetLimit(ctx, c.limit, c.s)
		require.ErrorIs(t, err, ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), c.field, c.name)
	}
	_, err := lib.AcquirePermits(ctx, LimitAcquireArgs{Limit: "x", Want: MaxCount + 1})
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = lib.AcquirePermits(ctx, LimitAcquireArgs{Limit: "x", Token: -1})
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, a := range []LimitAcquireArgs{{Limit: "x", Horizon: -time.Millisecond}, {Limit: "x", Horizon: MaxLimitHorizon + time.Millisecond},
		{Limit: "x", Release: -1}, {Limit: "x", Refund: MaxCount + 1}} {
		_, err = lib.AcquirePermits(ctx, a)
		require.ErrorIs(t, err, ErrInvalidArgument, "%+v", a)
	}
	require.ErrorIs(t, CheckLimitName("a{b"), ErrInvalidArgument)
	require.NoError(t, CheckLimitName("payments-gateway"))
	_, err = lib.ReleasePermits(ctx, LimitReleaseArgs{Limit: "x", Refund: -1})
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = lib.ReadLimit(ctx, "")
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestDecodeLimitReplies(t *testing.T) {
	t.Parallel()
	st, err := decodeLimitShow(FunctionLimitShow, "p", []any{"rate-milli", int64(2500), "burst", int64(5), "concurrency", int64(8),
		"lease-ms", int64(10000), "in-use", int64(3), "leases", int64(2), "available", int64(4), "a-later-field", int64(1)})
	require.NoError(t, err)
	require.Equal(t, &LimitState{Name: "p", Exists: true, LimitSettings: LimitSettings{Rate: 2.5, Burst: 5, Concurrency: 8, Lease: 10 * time.Second},
		InUse: 3, Leases: 2, Available: 4}, st)
	require.Equal(t, "rate 2.5/s (burst 5), concurrency 8, lease 10s", st.LimitSettings.String())
	st, err = decodeLimitShow(FunctionLimitShow, "p", []any{})
	require.NoError(t, err)
	require.False(t, st.Exists)

	p, err := decodeLimitAcquire([]any{int64(3), int64(7), int64(1), int64(-1), int64(8), int64(0), int64(0), int64(4), int64(3)})
	require.NoError(t, err)
	require.Equal(t, &Permits{Granted: 3, Token: 7, Lost: true, Wait: WaitForRelease, InUse: 8, Share: 4, Held: 3}, p)
	require.Zero(t, p.Due(2), "no rate: every permit due at once")
	p, err = decodeLimitAcquire([]any{int64(0), int64(0), int64(0), int64(250), int64(0), int64(0), int64(0), int64(0), int64(0)})
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, p.Wait)
	// A rate of 100/s (10 ms apart) whose next permit was due 15 ms ago
	// (a burst in hand): the first two are due at once, then 5 ms, 15 ms.
	p, err = decodeLimitAcquire([]any{int64(4), int64(9), int64(0), int64(0), int64(0), int64(-15000), int64(10000), int64(0), int64(0)})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 0, 5 * time.Millisecond, 15 * time.Millisecond}, []time.Duration{p.Due(0), p.Due(1), p.Due(2), p.Due(3)})

	r, err := decodeLimitRelease([]any{int64(2), int64(1)})
	require.NoError(t, err)
	require.Equal(t, &PermitRelease{Released: 2, NotHeld: 1}, r)

	for _, bad := range []any{nil, []any{int64(1)}, []any{int64(1), int64(0), int64(0), int64(0), int64(0)},
		[]any{"x", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0)}} {
		_, err := decodeLimitAcquire(bad)
		require.ErrorIs(t, err, ErrMalformedReply, "%#v", bad)
	}
	_, err = decodeLimitShow(FunctionLimitShow, "p", []any{"burst"})
	require.ErrorIs(t, err, ErrMalformedReply)
	_, err = decodeLimitRelease([]any{int64(1)})
	require.ErrorIs(t, err, ErrMalformedReply)
}
