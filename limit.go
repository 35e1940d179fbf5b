package pelwarden

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Limits (library 1.4.0): a rate and a concurrency cap shared by every
// consumer, group and stream that names the limit, enforced by the function
// library on the server's clock, so they hold across processes and clock
// skew. The rate is a GCRA (a token bucket kept in one timestamp). The cap
// is leased permits: a lease not renewed within its Lease expires and its
// permits come back, so a consumer that crashed leaks nothing for longer
// than that. Each limit lives in its own cluster slot (LimitKeysFor).

// Bounds of a limit's settings.
const (
	// MaxLimitRate is the highest rate, in permits per second.
	MaxLimitRate = 1e9
	// MaxLimitBurst and MaxLimitConcurrency bound Burst and Concurrency.
	MaxLimitBurst       = 1_000_000_000
	MaxLimitConcurrency = 1_000_000_000
	// MinLimitLease and MaxLimitLease bound LimitSettings.Lease.
	MinLimitLease = 100 * time.Millisecond
	MaxLimitLease = 24 * time.Hour
	// DefaultLimitLease is LimitSettings.Lease when zero.
	DefaultLimitLease = 10 * time.Second
	// maxLimitName bounds a limit's name (it is part of its keys).
	maxLimitName = 200
)

// WaitForRelease is Permits.Wait when the cap is full: more permits come
// when a holder releases some or its lease expires, not at a known time.
const WaitForRelease time.Duration = -1

// LimitKeysFor returns the keys of the named limit: the hash of its
// settings and state and the sorted set of its leases, both in the cluster
// slot of the hash tag "{pelwarden:limit:NAME}". An ACL user that takes
// permits needs both (for "payments": `~{pelwarden:limit:payments}*`).
func LimitKeysFor(name string) (hash, leases string) {
	hash = "{pelwarden:limit:" + name + "}"
	return hash, hash + ":leases"
}

// LimitSettings are a limit's rate and cap. A limit has a rate, a cap, or
// both.
type LimitSettings struct {
	// Rate is the permits per second across every holder (0: no rate).
	// Taken with a resolution of 0.001 per second.
	Rate float64
	// Burst is how many permits the rate grants at once after a quiet
	// spell: 1 (0 means 1) paces them evenly. Only with a Rate.
	Burst int
	// Concurrency caps the permits held at once across every holder (0: no
	// cap): a handler holds one from its start to its end.
	Concurrency int
	// Lease is how long the cap's permits stay held without a renewal (0:
	// DefaultLimitLease). A holder that crashed gives its permits back
	// this long after its last renewal.
	Lease time.Duration
}

// LimitState is a limit's settings and use, as the server saw them.
type LimitState struct {
	// Name is the limit's name.
	Name string
	// Exists reports whether the limit is set; the other fields are zero
	// when not.
	Exists bool
	LimitSettings
	// InUse is the cap's permits held now (leases expired not counted).
	InUse int
	// Leases is the number of live leases (holders of the cap's permits).
	Leases int
	// Available is the rate's permits available now (-1 without a rate).
	Available int
}

// CheckLimitName reports whether name can name a limit: not empty, at
// most 200 bytes, and no braces (the name sits in its keys' hash tag). The
// error matches ErrInvalidArgument.
func CheckLimitName(name string) error { return checkLimitName("limit", name) }

// checkLimitName validates a limit's name for function fn.
func checkLimitName(fn, name string) error {
	switch {
	case name == "":
		return argError(fn, "Limit", "must not be empty")
	case len(name) > maxLimitName:
		return argError(fn, "Limit", "must be at most %d bytes, got %d", maxLimitName, len(name))
	case strings.ContainsAny(name, "{}"):
		return argError(fn, "Limit", "must not contain { or } (the name is its keys' hash tag), got %q", clip(name))
	}
	return nil
}

// withDefaults checks s and fills its defaults.
func (s LimitSettings) withDefaults(fn string) (LimitSettings, error) {
	if s.Burst == 0 {
		s.Burst = 1
	}
	if s.Lease == 0 {
		s.Lease = DefaultLimitLease
	}
	switch {
	case math.IsNaN(s.Rate) || s.Rate < 0 || s.Rate > MaxLimitRate:
		return s, argError(fn, "Rate", "must be between 0 and %g permits a second, got %v", float64(MaxLimitRate), s.Rate)
	case s.Rate > 0 && s.Rate < 0.001:
		return s, argError(fn, "Rate", "must be at least 0.001 a second when set, got %v", s.Rate)
	case s.Burst < 1 || s.Burst > MaxLimitBurst:
		return s, argError(fn, "Burst", "must be between 1 and %d, got %d", MaxLimitBurst, s.Burst)
	case s.Concurrency < 0 || s.Concurrency > MaxLimitConcurrency:
		return s, argError(fn, "Concurrency", "must be between 0 (no cap) and %d, got %d", MaxLimitConcurrency, s.Concurrency)
	case s.Lease < MinLimitLease || s.Lease > MaxLimitLease:
		return s, argError(fn, "Lease", "must be between %v and %v, got %v", MinLimitLease, MaxLimitLease, s.Lease)
	case s.Rate == 0 && s.Concurrency == 0:
		return s, argError(fn, "LimitSettings", "a limit needs a Rate or a Concurrency cap")
	}
	return s, nil
}

// SetLimit creates the named limit or changes its settings. A change
// applies to the next acquisition of every holder; permits held stay held
// (a lower cap grants no more until enough come back).
func (l *Library) SetLimit(ctx context.Context, name string, s LimitSettings) (*LimitState, error) {
	const fn = FunctionLimitSet
	if err := checkLimitName(fn, name); err != nil {
		return nil, err
	}
	s, err := s.withDefaults(fn)
	if err != nil {
		return nil, err
	}
	h, z := LimitKeysFor(name)
	v, err := l.call(ctx, fn, []string{h, z}, int64(math.Round(s.Rate*1000)), s.Burst, s.Concurrency, s.Lease.Milliseconds())
	if err != nil {
		return nil, err
	}
	return decodeLimitShow(fn, name, v)
}

// ReadLimit reads the named limit's settings and use (a read-only call:
// FCALL_RO). LimitState.Exists is false for a limit that was never set.
func (l *Library) ReadLimit(ctx context.Context, name string) (*LimitState, error) {
	const fn = FunctionLimitShow
	if err := checkLimitName(fn, name); err != nil {
		return nil, err
	}
	h, z := LimitKeysFor(name)
	v, err := l.callRO(ctx, fn, []string{h, z})
	if err != nil {
		return nil, err
	}
	return decodeLimitShow(fn, name, v)
}

// LimitAcquireArgs are the arguments of AcquirePermits.
type LimitAcquireArgs struct {
	// Limit is the limit's name. Required; it must be set.
	Limit string
	// Want is how many permits to take, 0 to MaxCount; 0 only renews the
	// lease of Token.
	Want int
	// Token is the caller's lease (from an earlier Permits.Token; 0: none
	// yet, and a call with Want above 0 makes one). It is renewed, and the
	// cap's permits taken are added to it. A holder keeps its token: the
	// live leases are the holders the permits are shared by.
	Token int64
	// Horizon grants the rate's permits that come due within this long
	// after the call, each with its time (Permits.Due), so a holder takes
	// a batch in one call and starts each on time. 0 grants only those due
	// now; at most MaxLimitHorizon; a millisecond's resolution.
	Horizon time.Duration
	// Release and Refund give permits back first, as ReleasePermits does
	// (the cap's permits of Token's lease whose handlers ended, and the
	// rate's permits taken and not used), so a holder's next acquisition
	// carries them in the same call.
	Release, Refund int
}

// MaxLimitHorizon bounds LimitAcquireArgs.Horizon.
const MaxLimitHorizon = time.Minute

// Permits is what AcquirePermits took.
type Permits struct {
	// Granted is how many permits were taken: as many as the rate, the
	// cap and the holder's fair shares allowed, at most Want. With more
	// than one holder the rate's permits go a share at a time: a call
	// that finds fewer than min(Want, its share) due takes none and
	// learns from Wait when they are.
	Granted int
	// Token is the caller's lease: pass it to every later call (renew it
	// within the limit's Lease), and release the cap's permits with it. 0
	// only after a call with Want 0 and no live lease.
	Token int64
	// Lost reports that LimitAcquireArgs.Token's lease had expired: its permits
	// came back to the limit, and any taken now are under a new Token.
	Lost bool
	// Wait is 0 when every wanted permit was granted; else how long until
	// the rate allows a share more, or WaitForRelease when the cap (or
	// this holder's share of it) is full.
	Wait time.Duration
	// InUse is the cap's permits held now, by every holder.
	InUse int
	// Share is how many of the cap's permits this holder may hold while
	// the others keep asking: ceil(Concurrency / holders). 0 without a cap.
	Share int
	// Held is how many of the cap's permits the lease holds after the
	// call: a holder whose earlier call's reply was lost (a timeout) finds
	// the permits it took unknowingly here, to give them back.
	Held int

	// first and interval place the rate's granted permits in time (see
	// Due); both 0 without a rate.
	first, interval time.Duration
}

// Due returns how long after the call the rate's permit k (0 to
// Granted-1) of this grant comes due: the holder starts the work it stands
// for no earlier. 0 for permits due at once, and without a rate.
func (p *Permits) Due(k int) time.Duration {
	if p.interval == 0 {
		return 0
	}
	return max(0, p.first+time.Duration(k)*p.interval)
}

// AcquirePermits takes up to Want permits of a limit, atomically: each is
// allowed by the rate and fits under the cap at the server's time. It
// never waits: Permits.Wait says when to ask again.
func (l *Library) AcquirePermits(ctx context.Context, a LimitAcquireArgs) (*Permits, error) {
	const fn = FunctionLimitAcquire
	if err := checkLimitName(fn, a.Limit); err != nil {
		return nil, err
	}
	if a.Want < 0 || a.Want > MaxCount {
		return nil, argError(fn, "Want", "must be between 0 and %d, got %d", MaxCount, a.Want)
	}
	if a.Token < 0 {
		return nil, argError(fn, "Token", "must not be negative, got %d", a.Token)
	}
	switch {
	case a.Horizon < 0 || a.Horizon > MaxLimitHorizon:
		return nil, argError(fn, "Horizon", "must be between 0 and %v, got %v", MaxLimitHorizon, a.Horizon)
	case a.Release < 0 || a.Release > MaxLimitConcurrency:
		return nil, argError(fn, "Release", "must be between 0 and %d, got %d", MaxLimitConcurrency, a.Release)
	case a.Refund < 0 || a.Refund > MaxCount:
		return nil, argError(fn, "Refund", "must be between 0 and %d, got %d", MaxCount, a.Refund)
	}
	h, z := LimitKeysFor(a.Limit)
	v, err := l.call(ctx, fn, []string{h, z}, a.Want, a.Token, a.Horizon.Milliseconds(), a.Release, a.Refund)
	if err != nil {
		return nil, err
	}
	return decodeLimitAcquire(v)
}

// LimitReleaseArgs are the arguments of ReleasePermits.
type LimitReleaseArgs struct {
	// Limit is the limit's name. Required.
	Limit string
	// Token is the holder's lease.
	Token int64
	// Permits is how many of the cap's permits to give back (their
	// handlers ended).
	Permits int
	// Refund is how many rate permits were taken and not used: the rate
	// gets them back, so a holder may take a batch ahead and return the
	// rest.
	Refund int
	// End ends the lease (the holder stops asking for permits): every
	// permit of the cap it holds is given back, whatever Permits says, and
	// it no longer counts among the holders the permits are shared by.
	End bool
}

// PermitRelease is what ReleasePermits gave back.
type PermitRelease struct {
	// Released is how many of the cap's permits were given back.
	Released int
	// NotHeld is how many were asked for but not held by the lease: it
	// expired, and they came back to the limit then.
	NotHeld int
}

// ReleasePermits gives permits back to a limit. It runs on a server at
// maxmemory too (it only frees).
func (l *Library) ReleasePermits(ctx context.Context, a LimitReleaseArgs) (*PermitRelease, error) {
	const fn = FunctionLimitRelease
	if err := checkLimitName(fn, a.Limit); err != nil {
		return nil, err
	}
	switch {
	case a.Token < 0:
		return nil, argError(fn, "Token", "must not be negative, got %d", a.Token)
	case a.Permits < 0 || a.Permits > MaxLimitConcurrency:
		return nil, argError(fn, "Permits", "must be between 0 and %d, got %d", MaxLimitConcurrency, a.Permits)
	case a.Refund < 0 || a.Refund > MaxCount:
		return nil, argError(fn, "Refund", "must be between 0 and %d, got %d", MaxCount, a.Refund)
	}
	h, z := LimitKeysFor(a.Limit)
	end := 0
	if a.End {
		end = 1
	}
	v, err := l.call(ctx, fn, []string{h, z}, a.Token, a.Permits, a.Refund, end)
	if err != nil {
		return nil, err
	}
	return decodeLimitRelease(v)
}

func decodeLimitShow(fn, name string, v any) (*LimitState, error) {
	a, err := asArray(fn, "reply", v, 0)
	if err != nil {
		return nil, err
	}
	st := &LimitState{Name: name}
	if len(a) == 0 {
		return st, nil
	}
	if len(a)%2 != 0 {
		return nil, malformed(fn, "odd number of name/value elements (%d)", len(a))
	}
	st.Exists = true
	for i := 0; i < len(a); i += 2 {
		key, err := asString(fn, "name["+strconv.Itoa(i/2)+"]", a[i])
		if err != nil {
			return nil, err
		}
		n, err := asInt(fn, key, a[i+1])
		if err != nil {
			return nil, err
		}
		switch key {
		case "rate-milli":
			st.Rate = float64(n) / 1000
		case "burst":
			st.Burst = int(n)
		case "concurrency":
			st.Concurrency = int(n)
		case "lease-ms":
			st.Lease = msDuration(n)
		case "in-use":
			st.InUse = int(n)
		case "leases":
			st.Leases = int(n)
		case "available":
			st.Available = int(n)
		}
	}
	return st, nil
}

func decodeLimitAcquire(v any) (*Permits, error) {
	const fn = FunctionLimitAcquire
	a, err := asArray(fn, "reply", v, 9)
	if err != nil {
		return nil, err
	}
	var n [9]int64
	for i, what := range []string{"granted", "token", "lost", "wait-ms", "in-use", "first-us", "interval-us", "share", "held"} {
		if n[i], err = asInt(fn, what, a[i]); err != nil {
			return nil, err
		}
	}
	p := &Permits{Granted: int(n[0]), Token: n[1], Lost: n[2] == 1, InUse: int(n[4]),
		first: time.Duration(n[5]) * time.Microsecond, interval: time.Duration(n[6]) * time.Microsecond, Share: int(n[7]), Held: int(n[8])}
	switch {
	case n[3] < 0:
		p.Wait = WaitForRelease
	default:
		p.Wait = msDuration(n[3])
	}
	return p, nil
}

func decodeLimitRelease(v any) (*PermitRelease, error) {
	const fn = FunctionLimitRelease
	a, err := asArray(fn, "reply", v, 2)
	if err != nil {
		return nil, err
	}
	released, err := asInt(fn, "released", a[0])
	if err != nil {
		return nil, err
	}
	notHeld, err := asInt(fn, "not-held", a[1])
	if err != nil {
		return nil, err
	}
	return &PermitRelease{Released: int(released), NotHeld: int(notHeld)}, nil
}

// String describes the settings, e.g. "rate 100/s (burst 10), concurrency
// 20, lease 10s".
func (s LimitSettings) String() string {
	var parts []string
	if s.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %s/s (burst %d)", strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Burst))
	}
	if s.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", s.Concurrency))
	}
	parts = append(parts, "lease "+s.Lease.String())
	return strings.Join(parts, ", ")
}
