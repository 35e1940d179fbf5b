// Package consume measures the driver with its defaults: its main
// path, consuming new entries of a stream through a consumer group, side by
// side with watermill-redisstream and a raw go-redis loop on the same server
// in one run; its reclaim of a dead consumer's PEL against the claim
// function's own page loop and the textbook client loop; two consumers with
// slow handlers sharing a burst; large entries against the server's slow
// log; and the driver's client memory as the group's PEL grows.
//
// Every method gets its own fresh stream of Entries entries (fields n and a
// payload of PayloadBytes bytes; watermill's stream is written by its own
// Publisher in its own message format). Preparing a stream is not measured.
// From the start of consuming until the method has acked every entry, Run
// measures wall time, the round trips the method's client made (a go-redis
// hook), the server's CPU time (INFO cpu deltas) and the benchmark process's
// memory (peak HeapInuse sampled every 50 ms, TotalAlloc per entry). At the
// end of each method the PEL must be empty and every entry read.
//
// A driver "with its defaults" sets only Stream, Group, Consumer, Handler
// and CreateGroup, plus Logger and Metrics, which count what it logs and
// does; a part that needs idle entries reclaimed within the run also sets
// MinIdle and ReclaimInterval, and says so.
//
// Run does the work; WriteTable prints a Report with ratios and the targets
// of the driver with its defaults. benchmarks/cmd/consume (make bench
// BENCH_SUITE=consume) runs it; it lives in the benchmarks module, which is
// never published, so the pelwarden CLI links no Watermill.
package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// Part is one section of the benchmark.
type Part string

const (
	// PartMain: the driver (each of Config.Drivers), watermill-
	// redisstream and the raw loop consuming Entries new entries each.
	PartMain Part = "main"
	// PartReclaim: a PEL of ReclaimEntries entries left by a dead consumer,
	// every PoisonEvery-th one at the driver's DefaultMaxDeliveries, idle
	// past the default MinIdle, reclaimed by the driver (every field at
	// its default; and with MinIdle and ReclaimInterval 10ms), by the claim
	// function's own page loop (Claim+Ack; and once more as a control of
	// the machine's noise) and by the textbook loop (textbook.Loop).
	PartReclaim Part = "reclaim"
	// PartPEL: the driver consuming new entries while its reclaim passes
	// walk a PEL of each of PELSizes entries that are not yet idle.
	PartPEL Part = "pel"
	// PartAck: what acknowledging costs the server: XACK against the fenced
	// ack function, its ids in order (Library.Ack puts the lowest first and
	// the highest last) and shuffled (a raw FCALL), AckEntries pending
	// entries acked in batches of the driver's AckBatch.
	PartAck Part = "ack"
	// PartSlow: two driver consumers with their defaults and a handler
	// taking SlowHandlerTime share a burst of SlowEntries entries added at
	// once while both wait in the group: each one's share, the most entries
	// each held at once, and the drain time against the ideal.
	PartSlow Part = "slow"
	// PartLarge: LargeEntries entries of LargeEntryBytes each, half pending
	// at a dead consumer, half new, consumed by one driver (defaults,
	// MinIdle and ReclaimInterval 10ms), while the server's slow log
	// records every command.
	PartLarge Part = "large"
)

// AllParts lists every part in the order Run uses by default.
var AllParts = []Part{PartMain, PartReclaim, PartPEL, PartAck, PartSlow, PartLarge}

// ParseParts parses a comma-separated list of parts ("" or "all" means
// AllParts).
func ParseParts(s string) ([]Part, error) {
	if s = strings.TrimSpace(s); s == "" || s == "all" {
		return append([]Part(nil), AllParts...), nil
	}
	var out []Part
	for _, f := range strings.Split(s, ",") {
		p := Part(strings.TrimSpace(f))
		if !slices.Contains(AllParts, p) {
			return nil, fmt.Errorf("consume: unknown part %q (want main, reclaim, pel, ack, slow, large)", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// Defaults of Config.
const (
	// DefaultEntries is the default Config.Entries.
	DefaultEntries = 200_000
	// DefaultReclaimEntries is the default Config.ReclaimEntries.
	DefaultReclaimEntries = 50_000
	// DefaultPoisonEvery is the default Config.PoisonEvery (5%).
	DefaultPoisonEvery = 20
	// DefaultSlowEntries is the default Config.SlowEntries.
	DefaultSlowEntries = 800
	// DefaultSlowHandlerTime is the default Config.SlowHandlerTime.
	DefaultSlowHandlerTime = 40 * time.Millisecond
	// DefaultLargeEntries is the default Config.LargeEntries.
	DefaultLargeEntries = 150
	// DefaultLargeEntryBytes is the default Config.LargeEntryBytes.
	DefaultLargeEntryBytes = 1 << 20
	// DefaultAckEntries is the default Config.AckEntries.
	DefaultAckEntries = 200_000
	// DefaultPELNewEntries is the default Config.PELNewEntries.
	DefaultPELNewEntries = 100_000
	// DefaultPELMinRun is the default Config.PELMinRun.
	DefaultPELMinRun = 5 * time.Second
	// DefaultRawCount is the default Config.RawCount.
	DefaultRawCount = 500
	// DefaultClaimCount is the default Config.ClaimCount.
	DefaultClaimCount = 500
	// DefaultPayloadBytes is the default Config.PayloadBytes.
	DefaultPayloadBytes = 64
	// DefaultKeyPrefix is the default Config.KeyPrefix.
	DefaultKeyPrefix = "pwconsume"
	// DefaultTimeout is the default Config.Timeout.
	DefaultTimeout = 10 * time.Minute
)

// DriverVariant is one driver configuration measured in PartMain. Its
// zero value is the driver with every Config field at its default.
type DriverVariant struct {
	// Concurrency, Prefetch and ReadCount are the driver's Config fields;
	// 0 leaves each at its default.
	Concurrency, Prefetch, ReadCount int
	// AckMode is the driver's Config.AckMode: AckFenced (the default) or
	// AckPlain.
	AckMode driver.AckMode
	// ReadClaim is the driver's Config.ReadClaim: ReadClaimAuto (the
	// default) or ReadClaimOff.
	ReadClaim driver.ReadClaimMode
	// Limit runs the consumer under a limit set above what it can reach
	// (a rate of UnreachedLimit.Rate a second and a cap of
	// UnreachedLimit.Concurrency): the cost of taking and giving back
	// permits, with nothing throttled.
	Limit bool
}

// UnreachedLimit is the limit of a DriverVariant with Limit: far above
// what one consumer can reach, so it only costs its calls.
var UnreachedLimit = pelwarden.LimitSettings{Rate: 100_000_000, Concurrency: 1_000_000}

// String names the variant in the report, e.g. "driver defaults",
// "driver defaults, plain acks", "driver c=16 prefetch 984".
func (v DriverVariant) String() string {
	var opts []string
	if v.Concurrency > 0 {
		opts = append(opts, fmt.Sprintf("c=%d", v.Concurrency))
	}
	if v.Prefetch > 0 {
		opts = append(opts, fmt.Sprintf("prefetch %d", v.Prefetch))
	}
	if v.ReadCount > 0 {
		opts = append(opts, fmt.Sprintf("reads of %d", v.ReadCount))
	}
	s := "driver " + strings.Join(opts, " ")
	if len(opts) == 0 {
		s = "driver defaults"
		if v.AckMode != driver.AckFenced || v.ReadClaim != driver.ReadClaimAuto || v.Limit {
			s += ","
		}
	}
	if v.AckMode != driver.AckFenced {
		s += " " + v.AckMode.String() + " acks"
	}
	if v.ReadClaim != driver.ReadClaimAuto {
		s += " read claim " + v.ReadClaim.String()
	}
	if v.Limit {
		s += " under a limit"
	}
	return s
}

// concurrency is the variant's Concurrency, the driver's default for 0.
func (v DriverVariant) concurrency() int {
	if v.Concurrency == 0 {
		return driver.DefaultConcurrency
	}
	return v.Concurrency
}

// DefaultDriversSpec is DefaultDrivers in ParseDrivers' syntax.
const DefaultDriversSpec = "default,plain,c=16/p=984"

// DefaultDrivers is the default Config.Drivers: the driver's defaults
// (fenced acks, the window sized by itself); the defaults with plain acks;
// and one tuned configuration for comparison, Concurrency 16 holding up to
// 1,000 entries (Prefetch 984, a fixed window: the next read of 500 goes
// out while handlers work on the last).
var DefaultDrivers = []DriverVariant{{}, {AckMode: driver.AckPlain}, {Concurrency: 16, Prefetch: 984}}

// ParseDrivers parses driver variants for Config.Drivers: a comma-separated
// list of variants, each a slash-separated list of options: "default"
// (every field at its default; the same as leaving the others out),
// "c=N" (Concurrency), "p=N" (Prefetch), "r=N" (ReadCount), "plain" or
// "fenced" (AckMode), "noreadclaim" (ReadClaim off) and "limit" (under
// UnreachedLimit), e.g.
// "default,plain,c=16/p=984". An option left out
// keeps the driver's default. "" means DefaultDrivers.
func ParseDrivers(s string) ([]DriverVariant, error) {
	if s = strings.TrimSpace(s); s == "" {
		return append([]DriverVariant(nil), DefaultDrivers...), nil
	}
	var out []DriverVariant
	for _, f := range strings.Split(s, ",") {
		var v DriverVariant
		if strings.TrimSpace(f) == "" {
			return nil, fmt.Errorf("consume: empty driver variant in %q (want \"default\" for the defaults)", s)
		}
		for _, opt := range strings.Split(strings.TrimSpace(f), "/") {
			name, val, hasVal := strings.Cut(opt, "=")
			n, err := strconv.Atoi(val)
			switch {
			case name == "default" && !hasVal:
			case name == "plain" && !hasVal:
				v.AckMode = driver.AckPlain
			case name == "fenced" && !hasVal:
				v.AckMode = driver.AckFenced
			case name == "noreadclaim" && !hasVal:
				v.ReadClaim = driver.ReadClaimOff
			case name == "limit" && !hasVal:
				v.Limit = true
			case name == "c" && hasVal && (err != nil || n < 1):
				return nil, fmt.Errorf("consume: driver variant %q: c wants a positive integer (leave it out for the default), got %q", f, val)
			case (name == "p" || name == "r") && hasVal && (err != nil || n < 0):
				return nil, fmt.Errorf("consume: driver variant %q: %s wants a non-negative integer, got %q", f, name, val)
			case name == "c" && hasVal:
				v.Concurrency = n
			case name == "p" && hasVal:
				v.Prefetch = n
			case name == "r" && hasVal:
				v.ReadCount = n
			default:
				return nil, fmt.Errorf("consume: driver variant %q: unknown option %q (want default, c=N, p=N, r=N, plain, fenced, noreadclaim, limit)", f, opt)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// DefaultPELSizes is the default Config.PELSizes.
var DefaultPELSizes = []int{0, 100_000, 1_000_000}

// Config configures Run. The zero value of every field but Options means its
// documented default. Run never modifies the caller's Config.
type Config struct {
	// Options connect to the server under test. Required. Run dials its own
	// clients from copies of it and closes them.
	Options *redis.Options
	// Parts to run, in this order. Defaults to AllParts.
	Parts []Part
	// Entries is the stream size of each method of PartMain. Defaults to
	// DefaultEntries (200,000).
	Entries int
	// Drivers are the driver configurations measured in PartMain, one
	// method each. Defaults to DefaultDrivers.
	Drivers []DriverVariant
	// Rounds: PartMain and PartReclaim run each of their methods this many
	// times, interleaved (round 1 runs each method once, then round 2...),
	// and report for each method the round with the median entries/s, next
	// to the entries/s of every round; ratios between methods are the
	// median of the ratios within a round. watermill-redisstream runs in
	// the first round only. PartSlow runs this many times and reports
	// every run. Defaults to 1.
	Rounds int
	// SkipWatermill leaves watermill-redisstream out of PartMain (it takes
	// over a minute; useful while iterating on the driver). Optional.
	SkipWatermill bool
	// RawCount is the raw loop's XREADGROUP COUNT. Defaults to
	// DefaultRawCount (500).
	RawCount int
	// ReclaimEntries is the PEL size of PartReclaim. Defaults to
	// DefaultReclaimEntries (50,000).
	ReclaimEntries int
	// PoisonEvery makes every n-th entry of PartReclaim's PEL poison: its
	// delivery count is set to driver.DefaultMaxDeliveries, so each method
	// dead-letters it the first time it claims it. Defaults to
	// DefaultPoisonEvery (20, i.e. 5%); a negative value means none.
	PoisonEvery int
	// AckEntries is the PEL size of each method of PartAck. Defaults to
	// DefaultAckEntries (200,000).
	AckEntries int
	// ClaimCount is the page (Count) of PartReclaim's Claim+Ack loop; the
	// driver keeps its own default. Defaults to DefaultClaimCount (500).
	ClaimCount int
	// PELSizes are the PEL sizes of PartPEL. Defaults to DefaultPELSizes
	// (0, 100,000, 1,000,000).
	PELSizes []int
	// PELNewEntries is how many new entries the driver consumes in each run
	// of PartPEL. Defaults to DefaultPELNewEntries (100,000).
	PELNewEntries int
	// PELMinRun: each run of PartPEL lasts at least this long, so several
	// reclaim passes walk the PEL. Defaults to DefaultPELMinRun (5s).
	PELMinRun time.Duration
	// SlowEntries is the burst of PartSlow. Defaults to DefaultSlowEntries
	// (800).
	SlowEntries int
	// SlowHandlerTime is how long PartSlow's handler takes per entry.
	// Defaults to DefaultSlowHandlerTime (40ms).
	SlowHandlerTime time.Duration
	// LargeEntries is the number of entries of PartLarge. Defaults to
	// DefaultLargeEntries (150).
	LargeEntries int
	// LargeEntryBytes is the payload size of each entry of PartLarge.
	// Defaults to DefaultLargeEntryBytes (1 MiB).
	LargeEntryBytes int
	// PayloadBytes is the size of each entry's payload (every part but
	// PartLarge). Defaults to DefaultPayloadBytes (64).
	PayloadBytes int
	// KeyPrefix starts every key Run creates ("{<prefix>-<run>-<method>}"),
	// deleted after each method. Defaults to DefaultKeyPrefix.
	KeyPrefix string
	// Timeout bounds each method's measured phase. Defaults to
	// DefaultTimeout (10 minutes).
	Timeout time.Duration
	// ProfileDir, when set, receives a CPU profile of the benchmark process
	// and its allocations for each driver run of PartMain
	// ("driver-c<concurrency>-p<prefetch>-r<read count>-<ack mode>.pprof",
	// 0 for a field left at its default; -allocs.pprof and
	// -allocs-base.pprof beside it) and for the raw loop
	// ("raw-count<RawCount>…"). Optional.
	ProfileDir string
	// ServerLabel describes the server in the report header. Optional.
	ServerLabel string
	// Logf receives progress messages. Optional.
	Logf func(format string, args ...any)
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	measure.Default(&c.Entries, DefaultEntries)
	measure.Default(&c.RawCount, DefaultRawCount)
	measure.Default(&c.ReclaimEntries, DefaultReclaimEntries)
	measure.Default(&c.AckEntries, DefaultAckEntries)
	measure.Default(&c.ClaimCount, DefaultClaimCount)
	measure.Default(&c.PoisonEvery, DefaultPoisonEvery)
	measure.Default(&c.SlowEntries, DefaultSlowEntries)
	measure.Default(&c.LargeEntries, DefaultLargeEntries)
	measure.Default(&c.LargeEntryBytes, DefaultLargeEntryBytes)
	measure.Default(&c.Rounds, 1)
	measure.Default(&c.PELNewEntries, DefaultPELNewEntries)
	measure.Default(&c.PayloadBytes, DefaultPayloadBytes)
	measure.Default(&c.SlowHandlerTime, DefaultSlowHandlerTime)
	measure.Default(&c.PELMinRun, DefaultPELMinRun)
	measure.Default(&c.KeyPrefix, DefaultKeyPrefix)
	measure.Default(&c.Timeout, DefaultTimeout)
	c.Parts = append([]Part(nil), c.Parts...)
	if len(c.Parts) == 0 {
		c.Parts = append(c.Parts, AllParts...)
	}
	c.Drivers = append([]DriverVariant(nil), c.Drivers...)
	if len(c.Drivers) == 0 {
		c.Drivers = append(c.Drivers, DefaultDrivers...)
	}
	c.PELSizes = append([]int(nil), c.PELSizes...)
	if len(c.PELSizes) == 0 {
		c.PELSizes = append(c.PELSizes, DefaultPELSizes...)
	}
	return c
}

func (c Config) validate() error {
	bad := func(field, format string, a ...any) error {
		return measure.BadConfig("consume", field, format, a...)
	}
	switch {
	case c.Options == nil:
		return bad("Options", "is required")
	case c.Entries < 1:
		return bad("Entries", "must be positive, got %d", c.Entries)
	case c.Rounds < 1 || c.Rounds > 99:
		return bad("Rounds", "must be between 1 and 99, got %d", c.Rounds)
	case c.RawCount < 1:
		return bad("RawCount", "must be positive, got %d", c.RawCount)
	case c.AckEntries < 1:
		return bad("AckEntries", "must be positive, got %d", c.AckEntries)
	case c.ReclaimEntries < 1:
		return bad("ReclaimEntries", "must be positive, got %d", c.ReclaimEntries)
	case c.ClaimCount < 1 || c.ClaimCount > pelwarden.MaxCount:
		return bad("ClaimCount", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.ClaimCount)
	case c.SlowEntries < 1:
		return bad("SlowEntries", "must be positive, got %d", c.SlowEntries)
	case c.SlowHandlerTime < 0:
		return bad("SlowHandlerTime", "must not be negative, got %v", c.SlowHandlerTime)
	case c.LargeEntries < 2:
		return bad("LargeEntries", "must be at least 2 (half pending, half new), got %d", c.LargeEntries)
	case c.LargeEntryBytes < 1:
		return bad("LargeEntryBytes", "must be positive, got %d", c.LargeEntryBytes)
	case c.PELNewEntries < 1:
		return bad("PELNewEntries", "must be positive, got %d", c.PELNewEntries)
	case c.PELMinRun < 0:
		return bad("PELMinRun", "must not be negative, got %v", c.PELMinRun)
	case c.PayloadBytes < 0:
		return bad("PayloadBytes", "must not be negative, got %d", c.PayloadBytes)
	case c.Timeout <= 0:
		return bad("Timeout", "must be positive, got %v", c.Timeout)
	}
	for i, v := range c.Drivers {
		if v.Concurrency < 0 || v.Prefetch < 0 || v.concurrency()+v.Prefetch > pelwarden.MaxCount || v.ReadCount < 0 || v.ReadCount > pelwarden.MaxCount {
			return bad(fmt.Sprintf("Drivers[%d]", i), "needs Concurrency >= 0 (0: the default), Prefetch >= 0 and their sum at most %d, and ReadCount between 0 and %d, got %d, %d and %d",
				pelwarden.MaxCount, pelwarden.MaxCount, v.Concurrency, v.Prefetch, v.ReadCount)
		}
	}
	for i, n := range c.PELSizes {
		if n < 0 {
			return bad(fmt.Sprintf("PELSizes[%d]", i), "must not be negative, got %d", n)
		}
	}
	for _, p := range c.Parts {
		if _, err := ParseParts(string(p)); err != nil {
			return bad("Parts", "%v", err)
		}
	}
	return nil
}

func (c Config) has(p Part) bool {
	for _, q := range c.Parts {
		if q == p {
			return true
		}
	}
	return false
}

func (c Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run runs the selected parts, each method on its own fresh keys, and
// verifies each end state. It returns the report of every method it
// completed; the error is non-nil when a method failed or its end state was
// wrong (its Result says which). Run loads the pelwarden library and deletes
// the keys it created.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.WithDefaults()
	rep := Report{Config: cfg, RunInfo: measure.RunInfo{Started: time.Now()}}
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	ctl := redis.NewClient(measure.CloneOptions(cfg.Options))
	defer ctl.Close()

	var err error
	if rep.Server, err = measure.ServerVersion(ctx, ctl); err != nil {
		return rep, err
	}
	if rep.IdleCPU, err = measure.IdleCPU(ctx, ctl, time.Second); err != nil {
		return rep, err
	}
	if rep.RTT, err = measure.MeasureRTT(ctx, ctl, 200); err != nil {
		return rep, fmt.Errorf("consume: ping: %w", err)
	}
	b := &bench{cfg: cfg, ctl: ctl, runID: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)}

	var errs []error
	add := func(dst *[]Result, r *Result, err error) bool {
		if r != nil {
			*dst = append(*dst, *r)
		}
		if err != nil {
			errs = append(errs, err)
		}
		return ctx.Err() == nil
	}
	if cfg.has(PartMain) {
		methods := make([]roundMethod, 0, len(cfg.Drivers)+2)
		for _, v := range cfg.Drivers {
			methods = append(methods, roundMethod{run: func(ctx context.Context) (*Result, error) { return b.runDriver(ctx, v) }})
		}
		if !cfg.SkipWatermill {
			methods = append(methods, roundMethod{run: b.runWatermill, once: true})
		}
		methods = append(methods, roundMethod{run: b.runRaw})
		var ok bool
		if rep.Main, ok = b.rounds(ctx, "main path", methods, &errs); !ok {
			return rep, errors.Join(errs...)
		}
	}
	if cfg.has(PartReclaim) {
		var ok bool
		if rep.Reclaim, ok = b.rounds(ctx, "reclaim path", []roundMethod{{run: b.runClaimLoop}, {run: b.runDriverReclaim}, {run: b.runDriverReclaimShort}, {run: b.runClaimLoopControl}, {run: b.runTextbook}}, &errs); !ok {
			return rep, errors.Join(errs...)
		}
	}
	if cfg.has(PartPEL) {
		for _, size := range cfg.PELSizes {
			r, err := b.runDriverPEL(ctx, size)
			if !add(&rep.PEL, r, err) {
				return rep, errors.Join(errs...)
			}
		}
	}
	if cfg.has(PartAck) {
		for _, m := range ackMethods {
			r, err := b.runAck(ctx, m)
			if !add(&rep.Ack, r, err) {
				return rep, errors.Join(errs...)
			}
		}
	}
	if cfg.has(PartSlow) {
		for round := 1; round <= cfg.Rounds; round++ {
			r, err := b.runSlow(ctx, round)
			if !add(&rep.Slow, r, err) {
				return rep, errors.Join(errs...)
			}
		}
	}
	if cfg.has(PartLarge) {
		r, err := b.runLarge(ctx)
		if !add(&rep.Large, r, err) {
			return rep, errors.Join(errs...)
		}
	}
	return rep, errors.Join(errs...)
}

// roundMethod is one method of a part measured in rounds.
type roundMethod struct {
	run func(ctx context.Context) (*Result, error)
	// once: run in the first round only (watermill: over a minute a run).
	once bool
}

// rounds runs methods Config.Rounds times, interleaved (each round runs
// every method once, in order, starting one method further on than the
// round before), and returns each method's median run (see
// medians). It reports false when ctx was cancelled; errors are appended to
// errs.
func (b *bench) rounds(ctx context.Context, part string, methods []roundMethod, errs *[]error) ([]Result, bool) {
	runs := make([][]Result, len(methods))
	done := func() []Result {
		var got [][]Result
		for _, r := range runs {
			if len(r) > 0 {
				got = append(got, r)
			}
		}
		return medians(got)
	}
	for round := 1; round <= b.cfg.Rounds; round++ {
		if b.cfg.Rounds > 1 {
			b.cfg.logf("%s: round %d of %d", part, round, b.cfg.Rounds)
		}
		// Each round starts one method further on, so no method always
		// follows the same one (the server's state after a method, its
		// Lua heap and allocator among it, is what the next one meets).
		for j := range methods {
			i := (j + round - 1) % len(methods)
			m := methods[i]
			if m.once && round > 1 {
				continue
			}
			r, err := m.run(ctx)
			if r != nil {
				runs[i] = append(runs[i], *r)
			}
			if err != nil {
				*errs = append(*errs, err)
			}
			if ctx.Err() != nil {
				return done(), false
			}
		}
	}
	return done(), true
}

// medians returns, for each method's runs, the run with the median entries/s
// (the lower middle one for an even count), its Rates set to the entries/s
// of every run in run order and its ClientCPUs to their client CPU per
// entry. A method whose run failed in some round is represented by that
// failed run, so the failure is reported.
func medians(rounds [][]Result) []Result {
	out := make([]Result, 0, len(rounds))
	for _, runs := range rounds {
		rates := make([]float64, len(runs))
		cpus := make([]float64, len(runs))
		pick := -1
		for i := range runs {
			rates[i] = runs[i].EntriesPerSecond()
			cpus[i] = runs[i].ClientCPUPerEntry()
			if runs[i].Problem != "" && pick < 0 {
				pick = i
			}
		}
		if pick < 0 {
			order := make([]int, len(runs))
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rates[a], rates[b]) })
			pick = order[(len(order)-1)/2]
		}
		r := runs[pick]
		r.Rates, r.ClientCPUs = rates, cpus
		out = append(out, r)
	}
	return out
}
