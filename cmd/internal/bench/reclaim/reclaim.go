// Package reclaim measures how fast a consumer group's pending entries
// list (PEL) left by a dead consumer is reclaimed, comparing pelwarden's
// claim path with the client-side loops found in guides and libraries, on
// the same server in one run.
//
// Each method gets its own fresh copy of the scenario: a stream of Entries
// entries, all read by consumer "dead" (so they are pending), every
// PoisonEvery-th one already at MaxDeliveries deliveries, every
// DeletedEvery-th one deleted from the stream while pending. The method then
// reclaims until the PEL is empty, and the end state is verified. For the
// reclaim phase only, Run measures wall time, the round trips the client
// made (counted by a go-redis hook) and the server's CPU time (INFO cpu
// deltas; INFO commandstats deltas are recorded for comparison).
//
// Each method runs on two links: loopback, and through a TCP proxy in this
// package measure that delays every chunk by half of RoundTripLatency in each
// direction.
//
// Run does the work; WriteTable prints a Report with ratios against the
// textbook loop. `pelwarden bench --suite reclaim` (cmd/internal/cli) runs both.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/internal/measure"
	"github.com/pelwarden/pelwarden/internal/textbook"
)

// Method is one way of reclaiming a PEL.
type Method string

const (
	// MethodPelwarden: pelwarden's Library.Claim page by page (dead-letters
	// poison entries itself), a no-op handler, then one Library.Ack per page
	// for the live entries.
	MethodPelwarden Method = "pelwarden"
	// MethodTextbook: the loop the guides teach. XAUTOCLAIM a page, then per
	// entry XPENDING for its delivery count; poison entries are copied with
	// XADD to the dead-letter stream and XACKed, live ones handled and
	// XACKed. One round trip per command, no pipelining. It is the baseline
	// of every ratio.
	MethodTextbook Method = "textbook"
	// MethodWatermill: the loop of watermill-redisstream. XPENDING IDLE a
	// page, then one XCLAIM and one XACK per entry. It has no delivery
	// limit, so poison entries are handled and acked like the others.
	MethodWatermill Method = "watermill"
	// MethodPipelined: the floor of any client-side approach. XAUTOCLAIM a
	// page and XACK all its entries in one pipelined round trip, with no
	// delivery-count check (poison entries are acked like the others).
	MethodPipelined Method = "pipelined"
)

// AllMethods lists every method in the order Run uses by default.
var AllMethods = []Method{MethodPelwarden, MethodTextbook, MethodWatermill, MethodPipelined}

// deadLetters reports whether the method moves poison entries to the
// dead-letter stream (the others treat them as live).
func (m Method) deadLetters() bool { return m == MethodPelwarden || m == MethodTextbook }

// ParseMethods parses a comma-separated list of method names ("" or "all"
// means AllMethods).
func ParseMethods(s string) ([]Method, error) {
	if s = strings.TrimSpace(s); s == "" || s == "all" {
		return append([]Method(nil), AllMethods...), nil
	}
	var out []Method
	for _, f := range strings.Split(s, ",") {
		m := Method(strings.TrimSpace(f))
		found := false
		for _, k := range AllMethods {
			found = found || k == m
		}
		if !found {
			return nil, fmt.Errorf("reclaim: unknown method %q (want %s)", m, joinMethods(AllMethods))
		}
		out = append(out, m)
	}
	return out, nil
}

func joinMethods(ms []Method) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Link is the network path between the benchmark's client and the server.
type Link string

const (
	// LinkLoopback connects to the server directly.
	LinkLoopback Link = "loopback"
	// LinkProxied connects through the latency proxy, which adds
	// Config.RoundTripLatency to every round trip.
	LinkProxied Link = "proxied"
)

// AllLinks lists the links in the order Run uses by default.
var AllLinks = []Link{LinkLoopback, LinkProxied}

// ParseLinks parses a comma-separated list of link names ("" or "all" means
// AllLinks).
func ParseLinks(s string) ([]Link, error) {
	if s = strings.TrimSpace(s); s == "" || s == "all" {
		return append([]Link(nil), AllLinks...), nil
	}
	var out []Link
	for _, f := range strings.Split(s, ",") {
		l := Link(strings.TrimSpace(f))
		if l != LinkLoopback && l != LinkProxied {
			return nil, fmt.Errorf("reclaim: unknown link %q (want loopback, proxied)", l)
		}
		out = append(out, l)
	}
	return out, nil
}

// Defaults of Config.
const (
	// DefaultEntries is the default Config.Entries.
	DefaultEntries = 100_000
	// DefaultProxiedEntries is the default Config.ProxiedEntries.
	DefaultProxiedEntries = 20_000
	// DefaultRoundTripLatency is the default Config.RoundTripLatency.
	DefaultRoundTripLatency = time.Millisecond
	// DefaultMaxDeliveries is the default Config.MaxDeliveries.
	DefaultMaxDeliveries = pelwarden.DefaultMaxDeliveries
	// DefaultPoisonEvery is the default Config.PoisonEvery (5%).
	DefaultPoisonEvery = 20
	// DefaultDeletedEvery is the default Config.DeletedEvery (1%).
	DefaultDeletedEvery = 100
	// DefaultPageSize is the default Config.PageSize.
	DefaultPageSize = 500
	// DefaultWatermillPageSize is the default Config.WatermillPageSize,
	// watermill-redisstream's DefaultClaimBatchSize.
	DefaultWatermillPageSize = 100
	// DefaultMinIdle is the default Config.MinIdle.
	DefaultMinIdle = 100 * time.Millisecond
	// DefaultPayloadBytes is the default Config.PayloadBytes.
	DefaultPayloadBytes = 64
	// DefaultKeyPrefix is the default Config.KeyPrefix.
	DefaultKeyPrefix = "pwbench"
)

// Config configures Run. The zero value of every field but Options means its
// documented default. Run never modifies the caller's Config.
type Config struct {
	// Options connect to the server under test. Required. Run dials its own
	// clients from copies of it and closes them; a custom Dialer is kept, and
	// the latency proxy reaches the server through it too. TLS is not
	// supported on the proxied link.
	Options *redis.Options
	// Entries is the PEL size of each run on the loopback link. Defaults to
	// DefaultEntries (100,000).
	Entries int
	// ProxiedEntries is the PEL size of each run on the proxied link.
	// Defaults to DefaultProxiedEntries (20,000): at 1 ms per round trip the
	// textbook loop needs about two round trips per entry, so 100,000
	// entries would take minutes per method.
	ProxiedEntries int
	// Methods to run, in this order. Defaults to AllMethods. Ratios are
	// computed against MethodTextbook and omitted without it.
	Methods []Method
	// Links to run every method on, in this order. Defaults to AllLinks.
	Links []Link
	// RoundTripLatency is what the proxy adds to a round trip: each chunk of
	// bytes is delayed by half of it in each direction. Defaults to
	// DefaultRoundTripLatency (1 ms).
	RoundTripLatency time.Duration
	// MaxDeliveries is the delivery limit: poison entries are prepared with
	// this many deliveries, and the methods that dead-letter do so to
	// entries that reached it. Defaults to DefaultMaxDeliveries (5).
	MaxDeliveries int
	// PoisonEvery makes every n-th entry poison (already delivered
	// MaxDeliveries times). Defaults to DefaultPoisonEvery (20, i.e. 5%); a
	// negative value means no poison entries.
	PoisonEvery int
	// DeletedEvery deletes every n-th entry from the stream while it is
	// pending (never a poison one). Defaults to DefaultDeletedEvery (100,
	// i.e. 1%); a negative value means none.
	DeletedEvery int
	// PageSize is the page of MethodPelwarden (ClaimArgs.Count) and
	// MethodPipelined (XAUTOCLAIM COUNT). Defaults to DefaultPageSize (500).
	PageSize int
	// TextbookPageSize is MethodTextbook's XAUTOCLAIM COUNT. Defaults to
	// textbook.DefaultPageSize (50, as in the guides).
	TextbookPageSize int
	// WatermillPageSize is MethodWatermill's XPENDING count. Defaults to
	// DefaultWatermillPageSize (100, watermill-redisstream's default).
	WatermillPageSize int
	// MinIdle is the idle time every method asks for; Run waits this long
	// after building a scenario. Defaults to DefaultMinIdle (100 ms).
	MinIdle time.Duration
	// PayloadBytes is the size of each entry's payload field. Defaults to
	// DefaultPayloadBytes (64).
	PayloadBytes int
	// KeyPrefix starts every key Run creates; keys are
	// "{<prefix>-<run>-<method>-<link>}" and the same with ":dead", deleted
	// after each run. Defaults to DefaultKeyPrefix ("pwbench").
	KeyPrefix string
	// ServerLabel describes the server in the report header (for example
	// the container image). Optional.
	ServerLabel string
	// Logf receives progress messages. Optional.
	Logf func(format string, args ...any)
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	measure.Default(&c.Entries, DefaultEntries)
	measure.Default(&c.ProxiedEntries, DefaultProxiedEntries)
	measure.Default(&c.MaxDeliveries, DefaultMaxDeliveries)
	measure.Default(&c.PoisonEvery, DefaultPoisonEvery)
	measure.Default(&c.DeletedEvery, DefaultDeletedEvery)
	measure.Default(&c.PageSize, DefaultPageSize)
	measure.Default(&c.TextbookPageSize, textbook.DefaultPageSize)
	measure.Default(&c.WatermillPageSize, DefaultWatermillPageSize)
	measure.Default(&c.PayloadBytes, DefaultPayloadBytes)
	measure.Default(&c.RoundTripLatency, DefaultRoundTripLatency)
	measure.Default(&c.MinIdle, DefaultMinIdle)
	measure.Default(&c.KeyPrefix, DefaultKeyPrefix)
	c.Methods = append([]Method(nil), c.Methods...)
	if len(c.Methods) == 0 {
		c.Methods = append(c.Methods, AllMethods...)
	}
	c.Links = append([]Link(nil), c.Links...)
	if len(c.Links) == 0 {
		c.Links = append(c.Links, AllLinks...)
	}
	return c
}

// validate checks a Config with defaults applied and names the bad field.
func (c Config) validate() error {
	bad := func(field, format string, a ...any) error {
		return measure.BadConfig("reclaim", field, format, a...)
	}
	switch {
	case c.Options == nil:
		return bad("Options", "is required")
	case c.Entries < 1:
		return bad("Entries", "must be positive, got %d", c.Entries)
	case c.ProxiedEntries < 1:
		return bad("ProxiedEntries", "must be positive, got %d", c.ProxiedEntries)
	case c.RoundTripLatency < 0:
		return bad("RoundTripLatency", "must not be negative, got %v", c.RoundTripLatency)
	case c.MaxDeliveries < 2:
		// Live entries have 1 delivery; a limit of 1 would make all poison.
		return bad("MaxDeliveries", "must be at least 2, got %d", c.MaxDeliveries)
	case c.PageSize < 1 || c.PageSize > 10000:
		return bad("PageSize", "must be between 1 and 10000, got %d", c.PageSize)
	case c.TextbookPageSize < 1:
		return bad("TextbookPageSize", "must be positive, got %d", c.TextbookPageSize)
	case c.WatermillPageSize < 1:
		return bad("WatermillPageSize", "must be positive, got %d", c.WatermillPageSize)
	case c.MinIdle < time.Millisecond:
		return bad("MinIdle", "must be at least 1ms, got %v", c.MinIdle)
	case c.PayloadBytes < 0:
		return bad("PayloadBytes", "must not be negative, got %d", c.PayloadBytes)
	}
	if _, err := ParseMethods(joinMethods(c.Methods)); err != nil {
		return bad("Methods", "%v", err)
	}
	for _, l := range c.Links {
		if l != LinkLoopback && l != LinkProxied {
			return bad("Links", "has unknown link %q", l)
		}
		if l == LinkProxied && c.Options.TLSConfig != nil {
			return bad("Links", "includes proxied, which does not support TLS")
		}
	}
	return nil
}

func (c Config) entriesOn(l Link) int {
	if l == LinkProxied {
		return c.ProxiedEntries
	}
	return c.Entries
}

func (c Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run builds a fresh scenario for every method on every link, reclaims it,
// measures the reclaim phase and verifies the end state. It returns the
// report of every run it completed; the error is non-nil when a run failed or
// its end state was wrong (the Result says which). Run loads the pelwarden
// library on the server when MethodPelwarden is selected, and deletes the
// keys it created.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.WithDefaults()
	rep := Report{Config: cfg, RunInfo: measure.RunInfo{Started: time.Now()}}
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	ctl := redis.NewClient(measure.CloneOptions(cfg.Options))
	defer ctl.Close()

	srv, err := measure.ServerVersion(ctx, ctl)
	if err != nil {
		return rep, err
	}
	rep.Server = srv
	rep.IdleCPU, err = measure.IdleCPU(ctx, ctl, time.Second)
	if err != nil {
		return rep, err
	}
	runID := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)

	var errs []error
	for _, link := range cfg.Links {
		lr, err := runLink(ctx, cfg, ctl, link, runID, rep.IdleCPU)
		if lr != nil {
			rep.Links = append(rep.Links, *lr)
		}
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// runLink runs every method on one link.
func runLink(ctx context.Context, cfg Config, ctl *redis.Client, link Link, runID string, idle time.Duration) (*LinkReport, error) {
	lr := &LinkReport{Link: link, Entries: cfg.entriesOn(link)}
	opts := measure.CloneOptions(cfg.Options)
	var proxy *measure.LatencyProxy
	if link == LinkProxied {
		p, err := measure.NewLatencyProxy(measure.UpstreamDialer(cfg.Options), cfg.RoundTripLatency/2)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		proxy = p
		addr := p.Addr()
		opts.Addr = addr
		opts.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
		lr.AddedLatency = cfg.RoundTripLatency
	}
	// One connection: the methods are sequential, and the round-trip counter
	// must not see a second connection's handshake.
	opts.PoolSize = 1
	opts.MinIdleConns = 0
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	counter := measure.NewRoundTripCounter()
	rdb.AddHook(counter)

	base, err := measure.MeasureRTT(ctx, ctl, rttPings)
	if err != nil {
		return nil, fmt.Errorf("reclaim: ping: %w", err)
	}
	lr.BaseRTT = base
	if proxy != nil {
		// The proxy's own hop and the sleeps' overshoot add to the delay:
		// tune the delay until the measured round trip is the direct one
		// plus RoundTripLatency.
		if err := calibrate(ctx, rdb, proxy, base, cfg.RoundTripLatency); err != nil {
			return nil, fmt.Errorf("reclaim: %s: %w", link, err)
		}
		lr.ProxyDelay = proxy.Delay()
	}
	rtt, err := measure.MeasureRTT(ctx, rdb, rttPings)
	if err != nil {
		return nil, fmt.Errorf("reclaim: %s: ping: %w", link, err)
	}
	lr.RTT = rtt
	cfg.logf("%s: measured round trip %v (direct %v), %d entries per method", link,
		rtt.Round(time.Microsecond), base.Round(time.Microsecond), lr.Entries)

	var errs []error
	for _, m := range cfg.Methods {
		r, err := runOne(ctx, cfg, ctl, rdb, counter, m, link, lr.Entries, runID, idle)
		if r != nil {
			lr.Results = append(lr.Results, *r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reclaim: %s on %s: %w", m, link, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return lr, errors.Join(errs...)
}

// runOne builds the scenario for one method, reclaims and verifies it.
func runOne(ctx context.Context, cfg Config, ctl, rdb *redis.Client, counter *measure.RoundTripCounter, m Method, link Link, n int, runID string, idle time.Duration) (*Result, error) {
	stream := fmt.Sprintf("{%s-%s-%s-%s}", cfg.KeyPrefix, runID, m, link)
	sc := &scenario{stream: stream, dlq: stream + ":dead", group: benchGroup}
	defer sc.cleanup(context.WithoutCancel(ctx), ctl)

	cfg.logf("%s/%s: building %d entries", link, m, n)
	if err := sc.build(ctx, ctl, cfg, n); err != nil {
		return nil, err
	}
	rc, err := newReclaimer(ctx, m, rdb, cfg, sc)
	if err != nil {
		return nil, err
	}
	// Every entry must be idle at least MinIdle when the reclaim starts.
	if !ctxwait.Sleep(ctx, cfg.MinIdle+10*time.Millisecond) {
		return nil, ctx.Err()
	}

	cfg.logf("%s/%s: reclaiming", link, m)
	before, err := measure.TakeSnapshot(ctx, ctl)
	if err != nil {
		return nil, err
	}
	counter.Reset()
	start := time.Now()
	out, runErr := rc.reclaim(ctx)
	wall := time.Since(start)
	sent := counter.Snapshot()
	after, err := measure.TakeSnapshot(ctx, ctl)
	if err != nil {
		return nil, err
	}

	r := &Result{
		Method: m,
		Link:   link,
		Sample: measure.Sample{Entries: n, Wall: wall, RoundTrips: sent.RoundTrips, Commands: sent.Commands,
			ServerCPU: after.CPU - before.CPU},
		Poison:           len(sc.poison),
		Deleted:          len(sc.deleted),
		Handled:          len(out.handled),
		DeadLettered:     len(out.dead),
		Passes:           out.passes,
		IdleCPU:          time.Duration(float64(idle) * wall.Seconds()),
		CommandStatsUsec: measure.CommandStatsUsec(before, after, sent.ByName),
	}
	if runErr != nil {
		r.Problem = runErr.Error()
		return r, runErr
	}
	if err := sc.verify(ctx, ctl, m, out); err != nil {
		r.Problem = err.Error()
		return r, err
	}
	r.Verified = true
	cfg.logf("%s/%s: %d entries in %v, %d round trips, server CPU %v", link, m, n,
		wall.Round(time.Millisecond), r.RoundTrips, r.ServerCPU.Round(time.Millisecond))
	return r, nil
}

// rttPings is how many PINGs a round-trip measurement takes (the median
// counts).
const rttPings = 200

// calibrate adjusts the proxy's delay until a round trip through it takes
// about base+added (within 5%, at most 6 attempts; the last delay stays).
func calibrate(ctx context.Context, rdb *redis.Client, p *measure.LatencyProxy, base, added time.Duration) error {
	for i := 0; i < 6; i++ {
		rtt, err := measure.MeasureRTT(ctx, rdb, rttPings)
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		miss := added - (rtt - base)
		if miss.Abs() <= added/20 {
			return nil
		}
		p.SetDelay(p.Delay() + miss/2)
	}
	return nil
}
