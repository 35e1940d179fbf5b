package driver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/pelwarden/pelwarden"
)

// Defaults of Config's fields.
const (
	DefaultMaxDeliveries   = pelwarden.DefaultMaxDeliveries
	DefaultMinIdle         = time.Minute
	DefaultReclaimInterval = 30 * time.Second
	DefaultConcurrency     = 16
	DefaultReadBlock       = 2 * time.Second
	DefaultClaimCount      = 500
	DefaultReadCount       = 500
	DefaultMaxInHand       = 2000
	DefaultMaxInHandBytes  = 32 << 20
	DefaultAckBatch        = 500
	DefaultAckInterval     = 20 * time.Millisecond
	DefaultShutdownTimeout = 30 * time.Second
	DefaultGroupStartID    = "0"
	DefaultPartitionLease  = 10 * time.Second
)

// AckMode says how a Consumer acknowledges the entries whose handler
// succeeded. Both are at least once: an entry is acked only after its handler
// succeeded, and never one whose handler failed.
type AckMode int

const (
	// AckFenced acks only the entries this consumer still owns. An entry
	// whose lease passed to another consumer while its handler ran here is
	// left to that consumer (it runs again there) and counted as
	// EventLostOwnership. The fence costs only where a takeover was
	// possible: an entry acked within MinIdle/2 of its delivery (or of its
	// last lease extension) cannot have been claimed elsewhere yet, so it
	// is acked with a plain XACK, which acks exactly what the fence would;
	// the others, held longer, go through the library's fenced ack
	// function. Under load that is nearly every entry on XACK. This is the
	// default.
	AckFenced AckMode = iota
	// AckPlain acks with XACK. An entry taken over by another consumer is
	// acked anyway: its handler succeeded here, so nothing is lost, and the
	// other consumer's run is a duplicate either way (its own ack finds
	// nothing to ack). What it gives up is the accounting: acks of entries
	// owned elsewhere are not counted as lost ownership. What it saves is
	// server CPU: the ownership check makes a fenced ack cost the server
	// about 4.5 times as much as XACK (2.1 against 0.45 µs per entry in
	// BENCHMARKS.md), which is most of what separates the driver from a raw
	// XREADGROUP+XACK loop on a busy server.
	AckPlain
)

// String returns "fenced" or "plain".
func (m AckMode) String() string {
	switch m {
	case AckFenced:
		return "fenced"
	case AckPlain:
		return "plain"
	}
	return fmt.Sprintf("AckMode(%d)", int(m))
}

// ReadClaimMode says whether a Consumer's reads take idle pending entries
// over (Config.ReadClaim).
type ReadClaimMode int

const (
	// ReadClaimAuto: on servers that have XREADGROUP ... CLAIM (Redis
	// 8.4 and later; not Valkey; the first read of each stream asks with
	// the option, and a server that refuses it is read without), every
	// read also takes over entries idle for MinIdle, longest idle first,
	// ahead of new ones: an abandoned entry reaches a handler within
	// MinIdle and one read, without waiting for a reclaim pass. An entry
	// such a read hands over after MaxDeliveries deliveries never reaches
	// a handler: it is dead-lettered at once (reason max_deliveries, in
	// one atomic call of the library). The reclaim passes stay for what
	// a read cannot do: clearing entries deleted while pending (CLAIM
	// skips them); beside the reads they would only compete for the same
	// entries, so after one page at start a pass runs only while the
	// reads find nothing. With Backoff set reads never claim (the server
	// knows only MinIdle). This is the default.
	ReadClaimAuto ReadClaimMode = iota
	// ReadClaimOff: reads take new entries only; idle entries wait for a
	// reclaim pass, as on servers without the option (which then never
	// see a read with it).
	ReadClaimOff
)

// String returns "auto" or "off".
func (m ReadClaimMode) String() string {
	switch m {
	case ReadClaimAuto:
		return "auto"
	case ReadClaimOff:
		return "off"
	}
	return fmt.Sprintf("ReadClaimMode(%d)", int(m))
}

// NoHeartbeat as Config.HeartbeatInterval disables the heartbeat.
const NoHeartbeat = -1

// NoStallCheck as Config.StallAfter disables the stall check.
const NoStallCheck = -1

// stallPasses is how many reclaim passes a pending entry may outlast past
// the moment it became claimable before the default stall check reports it.
const stallPasses = 3

// NoDeliveryLimit as Config.MaxDeliveries disables dead-lettering by
// delivery count. MaxDeliveries has one meaning in the driver, the library,
// the test kit and the CLI: pelwarden.DeliveryLimit.
const NoDeliveryLimit = pelwarden.NoDeliveryLimit

// Config configures a Consumer. The zero value of every optional field means
// its documented default. New never modifies the caller's Config.
type Config struct {
	// Stream to consume. Use a hash tag ("{orders}") so the dead-letter
	// stream lands in the same cluster slot. Set Stream or Streams.
	Stream string
	// Streams to consume with one Consumer, instead of Stream: typically
	// the partitions of a partitioned stream (pelwarden.Partitions), at
	// most MaxStreams. Every stream has its own dead-letter stream,
	// pelwarden.DeadLetterStreamFor(stream), in its slot (DeadLetterStream
	// must then be empty), and its own loops: reads (a cluster refuses one
	// XREADGROUP across slots), reclaim passes, lease extensions, acks and
	// reaping. The entries of all streams share one flow-control window and
	// the Concurrency handlers; streams with entries take turns in it, so
	// none starves. An idle stream costs one non-blocking XREADGROUP every
	// ReadBlock/2 and holds no connection (with a single stream, the read
	// blocks up to ReadBlock instead). Message.Stream tells the handler
	// which stream an entry came from. The group is the same on every
	// stream.
	Streams []string

	// Group is the consumer group. Required.
	Group string
	// Consumer is this consumer's name in the group. Defaults to
	// host-pid-random, unique per process.
	Consumer string
	// Handler runs the business work. Required.
	Handler Handler

	// DeadLetterStream receives poison entries of Stream. Defaults to
	// pelwarden.DeadLetterStreamFor(Stream), in the stream's slot
	// ("{orders}:dead" for "{orders}" and for "orders"); with Streams each
	// stream's is that. Must be empty with Streams.
	DeadLetterStream string
	// MaxDeliveries: an entry delivered this many times without success is
	// dead-lettered by the next reclaim pass (or the read that takes it
	// over: see ReadClaimAuto) instead of reaching a handler again. Defaults to DefaultMaxDeliveries; NoDeliveryLimit disables it
	// (the library counts 0 as no limit: see NoDeliveryLimit).
	MaxDeliveries int
	// MinIdle: a pending entry idle this long is considered abandoned and
	// may be reclaimed by any consumer. Keep it well above the p99 handling
	// time; slow handlers are protected by the heartbeat, which
	// extends in-flight entries every MinIdle/3. Defaults to DefaultMinIdle;
	// at least 10ms.
	MinIdle time.Duration
	// Backoff is an optional delay per attempt for reclaimed entries: an
	// entry delivered n times is not retried before it has been idle
	// Backoff[min(n, len(Backoff))-1] (and at least MinIdle). With
	// Backoff, reads never claim (see ReadClaimAuto).
	Backoff []time.Duration
	// StallAfter: a pending entry of the group idle longer than this, which
	// a completed sweep of the PEL (a reclaim pass that reached its end, or
	// a read that claims and found nothing more) left although it was
	// claimable when the sweep began, has outlasted the reclaim that should
	// have taken it, and is reported as stalled: once per entry, with one
	// log line naming the ids and owners (level Warn) and EventStalled. A
	// backlog the consumer is still working through (a dead consumer's
	// large PEL, slow handlers) is not reported, however long its entries
	// wait. In a healthy group no
	// entry is ever reported; one that is points at a consumer whose
	// reclaim loop is wedged, an entry too large to dead-letter (see
	// EventTooLarge), or a bug in recovery, and this check makes it
	// visible in production. Each consumer checks with one XPENDING IDLE call
	// every max(ReclaimInterval, StallAfter/3), for every stream of
	// Streams. Defaults to max(MinIdle, the longest Backoff) plus three
	// ReclaimIntervals (2m30s with the other defaults); NoStallCheck
	// disables the check. Must be above max(MinIdle, the longest Backoff).
	StallAfter time.Duration

	// Concurrency is the most handlers run at once. Handlers that finish
	// in less than 50 µs run on no more workers than the process has cores
	// (GOMAXPROCS), since more would only take turns on them; as soon as
	// handlers take longer or block, up to Concurrency run. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// Limit names a limit this consumer runs under, shared with every
	// consumer that names it, in any group and on any stream: a rate of
	// handler starts per second and a cap on handlers running at once,
	// across all of them, enforced by the function library on the
	// server's clock (set it with pelwarden.Library.SetLimit or `pelwarden
	// limit set`; a change reaches running consumers within a second). The
	// consumer reads and claims only as many entries as it has permits
	// for, so entries waiting for a permit stay in the stream for any
	// consumer with permits to spare, and are not counted as deliveries;
	// the holders share the permits fairly. A handler holds its permit of
	// the cap from its read to its end; a consumer that crashed gives its
	// permits back when its lease expires (the limit's Lease). Empty, the
	// default, is no limit (and costs nothing). The limit must be set
	// before Run: Run returns an error matching pelwarden.ErrNoLimit if it
	// is not. The consumer's ACL user needs the limit's keys
	// (pelwarden.LimitKeysFor).
	Limit string

	// CreateGroup creates the group (and the stream) at start if missing,
	// and again if it disappears while running. Without it a missing group
	// makes Run return an error matching pelwarden.ErrNoGroup.
	CreateGroup bool
	// GroupStartID is where a created group starts: "0" (every entry already
	// in the stream) or "$" (only new ones). Defaults to DefaultGroupStartID.
	GroupStartID string

	// ReapIdle, when positive, deletes at start and every ReclaimInterval
	// the group's consumers idle longer than this that own no pending
	// entries.
	ReapIdle time.Duration

	// TrimInterval, when positive, trims the stream at start and every
	// TrimInterval: the entries every consumer group of the stream (this
	// one and any other) has delivered and acknowledged are deleted, in
	// calls of at most TrimLimit entries, until none below the bound is
	// left (pelwarden.Library.Trim). An entry some group still needs,
	// pending there or not yet delivered to it, is never deleted, so a
	// group that lags holds the trimming back at its position. Zero, the
	// default, never trims: a stream can have readers the groups do not
	// know about (XREAD, XRANGE, a group created later at "0"), and
	// deleting their entries must be asked for. Each consumer that has it
	// set trims; the calls are atomic, so several consumers trimming at
	// once only repeat a cheap check. Deleted entries are counted as
	// EventTrimmed; a failed trim is logged and counted as
	// EventCommandError and tried again at the next interval. The
	// consumer's ACL user needs +xtrim and +xrevrange besides its usual
	// commands (a refusal stops the consumer, as for any command it needs).
	TrimInterval time.Duration
	// TrimLimit bounds the entries one trim call deletes, so no call
	// blocks the server long however far behind the trimming is. Defaults
	// to pelwarden.DefaultTrimLimit; at most pelwarden.MaxCount.
	TrimLimit int
	// DeadLetterMaxAge, when positive, deletes at start and every
	// ReclaimInterval the dead-letter records older than this (by their
	// record id, the time they were dead-lettered, against the server's
	// clock: XTRIM MINID).
	// Zero, the default, keeps them until an operator removes them.
	// Deleted records are counted as EventDeadLetterTrimmed. The
	// consumer's ACL user needs +xtrim (and +time) for this and for
	// DeadLetterMaxLen.
	DeadLetterMaxAge time.Duration
	// DeadLetterMaxLen, when positive, keeps at start and every
	// ReclaimInterval only the newest DeadLetterMaxLen dead-letter records
	// (XTRIM MAXLEN); the older ones are deleted and counted as EventDeadLetterTrimmed. Zero,
	// the default, sets no bound. Both bounds may be set; each applies.
	DeadLetterMaxLen int64

	// ShutdownTimeout: after Run's context is cancelled, in-flight handlers
	// get this long to finish; then their contexts are cancelled and their
	// entries stay pending. Pending acks are flushed within the same bound.
	// When Redis hangs, Run still returns in a few ShutdownTimeouts; for the
	// bound to cut Redis calls short too, create the client with
	// redis.Options.ContextTimeoutEnabled (otherwise a call in progress
	// lasts up to the client's ReadTimeout). Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Logger receives the driver's logs; errors are always logged. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// Metrics receives counters. Defaults to none.
	Metrics Metrics

	// Tuning holds the knobs the defaults are measured for (BENCHMARKS.md):
	// leave it unset unless a measurement of your own says otherwise.
	Tuning

	// ordered and partitionLease come from an OrderedConfig (NewOrdered).
	ordered        bool
	partitionLease time.Duration
}

// Tuning holds a Consumer's flow-control and batching knobs: the window,
// the reads, claim pages and acks, the heartbeat and the reclaim
// interval. The defaults are the fast configuration, measured side by side
// with the alternatives (BENCHMARKS.md); a zero field means its default.
type Tuning struct {
	// HeartbeatInterval: in-flight entries whose handler has run this long get
	// their lease extended, and again every HeartbeatInterval, so a slow but
	// healthy handler is not reclaimed by another consumer. An extension
	// comes at most halfway between HeartbeatInterval and MinIdle after the
	// entry's read or last extension (MinIdle/2 by default). Defaults to
	// MinIdle/3; must be below MinIdle. NoHeartbeat disables the heartbeat;
	// an entry held past MinIdle may then be taken over by whichever
	// consumer claims it first, this one included (its own reclaim pass,
	// or its own read where reads claim, takes it back from itself).
	HeartbeatInterval time.Duration
	// ReclaimInterval between reclaim passes (the first runs at start).
	// Defaults to DefaultReclaimInterval.
	ReclaimInterval time.Duration
	// ReadClaim: whether reads also take over idle entries where the
	// server can (ReadClaimAuto, the default) or never (ReadClaimOff).
	ReadClaim ReadClaimMode
	// MaxInHand bounds the entries the consumer holds: queued for a handler
	// or running. Within it the consumer sizes its window by itself,
	// starting at Concurrency (and never below 2 where MaxInHand allows,
	// so a blocking read of an idle stream leaves room for a reclaim
	// pass): the window grows while handlers run out of
	// work before the next read arrives (fast handlers: reads of hundreds
	// go out while the handlers work on the last batch), and shrinks when
	// queued entries wait longer than they take to handle (slow handlers:
	// it holds little more than it runs, leaving the rest to other
	// consumers). Queued entries are leased like running ones, and at
	// shutdown those not yet started are released at once for other
	// consumers. Defaults to DefaultMaxInHand; at least Concurrency.
	MaxInHand int
	// MaxInHandBytes bounds the field data (names and values) of the
	// entries in hand; reads and claim pages also follow the observed entry
	// size, each fetching a few MiB at most (min(4 MiB, MaxInHandBytes/2)),
	// so large entries are read a few at a time. The first read takes at
	// most Concurrency entries. An entry larger than the bound is still
	// taken, alone. Defaults to DefaultMaxInHandBytes.
	MaxInHandBytes int64
	// Prefetch, when set, fixes the window at Concurrency + Prefetch
	// entries instead of sizing it automatically (MaxInHand is then
	// ignored): the consumer holds up to Prefetch entries queued beyond its
	// running handlers. Leave it 0 unless measurements say otherwise.
	// Concurrency + Prefetch is at most pelwarden.MaxCount.
	Prefetch int
	// ReadBlock is how long one XREADGROUP waits for new entries. Keep it
	// below the client's ReadTimeout (go-redis default 3s). Defaults to
	// DefaultReadBlock.
	ReadBlock time.Duration
	// ReadCount is the most entries one XREADGROUP asks for; a read takes
	// fewer when the window has less room or the entries are large.
	// Defaults to DefaultReadCount; at most pelwarden.MaxCount.
	ReadCount int
	// ClaimCount is the most entries one reclaim call claims; a page takes
	// fewer when the window has less room, the entries are large, or a
	// page that large would take more than MinIdle/8 (by the time the
	// calls took per entry so far: with a MinIdle of 10 ms about a hundred
	// entries, so they arrive with their lease to spare). Defaults to
	// DefaultClaimCount; at most pelwarden.MaxCount.
	ClaimCount int
	// AckBatch: acks are sent in one call per batch of this many, or every
	// AckInterval, whichever comes first, and at once when the consumer has
	// drained what it held (its last read found nothing new and no handler
	// is queued or running: no more acks are coming soon). A batch also
	// goes out early enough for its acks to be plain XACKs, before the
	// first of them reaches MinIdle/2 since its delivery (less the time an
	// ack call takes): only with a short MinIdle does that come before
	// AckInterval. Defaults to DefaultAckBatch.
	AckBatch int
	// AckInterval: see AckBatch. Defaults to DefaultAckInterval; a MinIdle
	// below 4 x AckInterval shortens it to MinIdle/4.
	AckInterval time.Duration
	// AckMode is how those calls ack: AckFenced (the default) or AckPlain.
	AckMode AckMode
}

// withDefaults returns a copy of c with defaults filled in.
func (c Config) withDefaults() Config {
	if c.Consumer == "" {
		c.Consumer = defaultConsumerName()
	}
	if len(c.Streams) == 0 && c.Stream != "" {
		c.Streams = []string{c.Stream}
		if c.DeadLetterStream == "" {
			c.DeadLetterStream = pelwarden.DeadLetterStreamFor(c.Stream)
		}
	} else {
		c.Streams = append([]string(nil), c.Streams...)
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.MinIdle == 0 {
		c.MinIdle = DefaultMinIdle
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.MinIdle / 3
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = DefaultReclaimInterval
	}
	if c.StallAfter == 0 {
		c.StallAfter = c.claimableAfter() + stallPasses*c.ReclaimInterval
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ReadBlock == 0 {
		c.ReadBlock = DefaultReadBlock
	}
	if c.ReadCount == 0 {
		c.ReadCount = DefaultReadCount
	}
	if c.ClaimCount == 0 {
		c.ClaimCount = DefaultClaimCount
	}
	if c.MaxInHand == 0 {
		c.MaxInHand = max(DefaultMaxInHand, c.Concurrency)
	}
	if c.MaxInHandBytes == 0 {
		c.MaxInHandBytes = DefaultMaxInHandBytes
	}
	if c.AckBatch == 0 {
		c.AckBatch = DefaultAckBatch
	}
	if c.AckInterval == 0 {
		c.AckInterval = DefaultAckInterval
	}
	if c.GroupStartID == "" {
		c.GroupStartID = DefaultGroupStartID
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.TrimLimit == 0 {
		c.TrimLimit = pelwarden.DefaultTrimLimit
	}
	if c.ordered && c.partitionLease == 0 {
		c.partitionLease = DefaultPartitionLease
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	c.Backoff = append([]time.Duration(nil), c.Backoff...)
	return c
}

// claimableAfter is the longest a pending entry may be idle before a
// reclaim pass may take it: max(MinIdle, the longest Backoff).
func (c Config) claimableAfter() time.Duration {
	d := c.MinIdle
	for _, b := range c.Backoff {
		d = max(d, b)
	}
	return d
}

// deliveryLimit is the delivery count at which the consumer's entries
// are dead-lettered, 0 for none: MaxDeliveries as pelwarden.DeliveryLimit
// reads it (the library's arguments take MaxDeliveries as it is).
func (c Config) deliveryLimit() int {
	limit, _, _ := pelwarden.DeliveryLimit("Config.MaxDeliveries", c.MaxDeliveries)
	return limit
}

// MaxStreams bounds Config.Streams: one Consumer runs a lane per stream,
// of four to seven goroutines, five with the defaults: the read, reclaim
// and lease loops and the acker's loop always; the stall check unless
// StallAfter is NoStallCheck; the upkeep loop with ReapIdle,
// DeadLetterMaxAge or DeadLetterMaxLen, and the trim loop with
// TrimInterval (see lane.startLoops and the package doc).
const MaxStreams = 1024

// validateStreams checks Stream or Streams (defaults applied: Streams
// holds Stream when only Stream was set) and the dead-letter streams.
func (c Config) validateStreams() error {
	bad := c.fieldError
	name := func(field, v string) error {
		if err := pelwarden.CheckName(v); err != nil {
			return bad(field, "%v", err)
		}
		return nil
	}
	single := len(c.Streams) == 1 && c.Streams[0] == c.Stream
	switch {
	case len(c.Streams) == 0:
		return bad("Stream", "required (or Streams)")
	case c.Stream != "" && !single:
		return bad("Streams", "set Stream or Streams, not both")
	case single:
		if err := name("Stream", c.Stream); err != nil {
			return err
		}
		if err := name("DeadLetterStream", c.DeadLetterStream); err != nil {
			return err
		}
		if c.DeadLetterStream == c.Stream {
			return bad("DeadLetterStream", "must differ from Stream")
		}
		if pelwarden.Slot(c.Stream) != pelwarden.Slot(c.DeadLetterStream) {
			return bad("DeadLetterStream", "%q and %q hash to different cluster slots; use a hash tag such as {orders} and {orders}:dead", c.Stream, c.DeadLetterStream)
		}
		return nil
	case len(c.Streams) > MaxStreams:
		return bad("Streams", "at most %d streams, got %d", MaxStreams, len(c.Streams))
	case c.DeadLetterStream != "":
		return bad("DeadLetterStream", "must be empty with Streams: each stream's is pelwarden.DeadLetterStreamFor(stream)")
	}
	seen := make(map[string]bool, len(c.Streams))
	for i, s := range c.Streams {
		field := fmt.Sprintf("Streams[%d]", i)
		if err := name(field, s); err != nil {
			return err
		}
		if len(pelwarden.DeadLetterStreamFor(s)) > pelwarden.MaxNameBytes {
			return bad(field, "its dead-letter stream name would exceed %d bytes", pelwarden.MaxNameBytes)
		}
		if seen[s] {
			return bad(field, "%q is listed twice", s)
		}
		seen[s] = true
	}
	for i, s := range c.Streams {
		if seen[pelwarden.DeadLetterStreamFor(s)] {
			return bad(fmt.Sprintf("Streams[%d]", i), "%q is the dead-letter stream of another stream in Streams", pelwarden.DeadLetterStreamFor(s))
		}
	}
	return nil
}

// deadLetterStreamOf is the dead-letter stream of one of Streams.
func (c Config) deadLetterStreamOf(stream string) string {
	if c.DeadLetterStream != "" {
		return c.DeadLetterStream
	}
	return pelwarden.DeadLetterStreamFor(stream)
}

// tuningFields are the fields of Tuning, which errors name as
// "Config.Tuning.X".
var tuningFields = map[string]bool{"HeartbeatInterval": true, "ReclaimInterval": true, "ReadClaim": true, "MaxInHand": true,
	"MaxInHandBytes": true, "Prefetch": true, "ReadBlock": true, "ReadCount": true, "ClaimCount": true,
	"AckBatch": true, "AckInterval": true, "AckMode": true}

// fieldError is an error naming field as the caller wrote it: in the
// Config, its Tuning, or the OrderedConfig it came from.
func (c Config) fieldError(field, format string, a ...any) error {
	name := "Config." + field
	switch {
	case c.ordered:
		name = "OrderedConfig." + field
	case tuningFields[field]:
		name = "Config.Tuning." + field
	}
	return &pelwarden.ArgumentError{Scope: "pelwarden/driver", Field: name, Reason: fmt.Sprintf(format, a...)}
}

func (c Config) validate() error {
	bad := c.fieldError
	if err := c.validateStreams(); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{
		{"Group", c.Group}, {"Consumer", c.Consumer},
	} {
		if err := pelwarden.CheckName(f.v); err != nil {
			return bad(f.name, "%v", err)
		}
	}
	if c.Handler == nil {
		return bad("Handler", "required")
	}
	if c.Limit != "" {
		if err := pelwarden.CheckLimitName(c.Limit); err != nil {
			return bad("Limit", "%v", err)
		}
	}
	if _, _, err := pelwarden.DeliveryLimit("MaxDeliveries", c.MaxDeliveries); err != nil {
		return bad("MaxDeliveries", "must be positive, 0 (DefaultMaxDeliveries) or NoDeliveryLimit, got %d", c.MaxDeliveries)
	}
	if c.MinIdle < 10*time.Millisecond {
		return bad("MinIdle", "must be at least 10ms, got %v", c.MinIdle)
	}
	if c.HeartbeatInterval != NoHeartbeat && (c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.MinIdle) {
		return bad("HeartbeatInterval", "must be positive and below MinIdle (%v), or NoHeartbeat; got %v", c.MinIdle, c.HeartbeatInterval)
	}
	if c.ReclaimInterval < 0 {
		return bad("ReclaimInterval", "must be positive, got %v", c.ReclaimInterval)
	}
	for i, d := range c.Backoff {
		if d < 0 {
			return bad(fmt.Sprintf("Backoff[%d]", i), "must not be negative, got %v", d)
		}
	}
	if c.StallAfter != NoStallCheck && c.StallAfter <= c.claimableAfter() {
		return bad("StallAfter", "must be above max(MinIdle, the longest Backoff) (%v), or NoStallCheck; got %v", c.claimableAfter(), c.StallAfter)
	}
	if c.Concurrency < 0 || c.Concurrency > pelwarden.MaxCount {
		return bad("Concurrency", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.Concurrency)
	}
	if c.Prefetch < 0 || c.Prefetch > pelwarden.MaxCount-c.Concurrency {
		return bad("Prefetch", "must be between 0 and %d (MaxCount - Concurrency), got %d", pelwarden.MaxCount-c.Concurrency, c.Prefetch)
	}
	if c.MaxInHand < c.Concurrency {
		return bad("MaxInHand", "must be at least Concurrency (%d), got %d", c.Concurrency, c.MaxInHand)
	}
	if c.MaxInHandBytes < 0 {
		return bad("MaxInHandBytes", "must be positive, got %d", c.MaxInHandBytes)
	}
	if c.ReadBlock < time.Millisecond {
		return bad("ReadBlock", "must be at least 1ms, got %v", c.ReadBlock)
	}
	if c.ReadCount < 0 || c.ReadCount > pelwarden.MaxCount {
		return bad("ReadCount", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.ReadCount)
	}
	if c.ClaimCount < 0 || c.ClaimCount > pelwarden.MaxCount {
		return bad("ClaimCount", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.ClaimCount)
	}
	if c.AckBatch < 0 || c.AckBatch > pelwarden.MaxCount {
		return bad("AckBatch", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.AckBatch)
	}
	if c.AckInterval < 0 {
		return bad("AckInterval", "must be positive, got %v", c.AckInterval)
	}
	if c.ReadClaim != ReadClaimAuto && c.ReadClaim != ReadClaimOff {
		return bad("ReadClaim", "must be ReadClaimAuto or ReadClaimOff, got %v", c.ReadClaim)
	}
	if c.AckMode != AckFenced && c.AckMode != AckPlain {
		return bad("AckMode", "must be AckFenced or AckPlain, got %v", c.AckMode)
	}
	if _, err := pelwarden.ParseID(c.GroupStartID); c.GroupStartID != "0" && c.GroupStartID != "$" && err != nil {
		return bad("GroupStartID", `must be "0", "$" or a stream id, got %q`, c.GroupStartID)
	}
	if c.ReapIdle < 0 {
		return bad("ReapIdle", "must not be negative, got %v", c.ReapIdle)
	}
	if c.ReapIdle > 0 && c.ReapIdle < c.MinIdle {
		return bad("ReapIdle", "must be at least MinIdle (%v), got %v", c.MinIdle, c.ReapIdle)
	}
	if c.ShutdownTimeout < 0 {
		return bad("ShutdownTimeout", "must be positive, got %v", c.ShutdownTimeout)
	}
	if c.TrimInterval < 0 {
		return bad("TrimInterval", "must not be negative, got %v", c.TrimInterval)
	}
	if c.TrimLimit < 0 || c.TrimLimit > pelwarden.MaxCount {
		return bad("TrimLimit", "must be between 1 and %d, got %d", pelwarden.MaxCount, c.TrimLimit)
	}
	if c.DeadLetterMaxAge < 0 {
		return bad("DeadLetterMaxAge", "must not be negative, got %v", c.DeadLetterMaxAge)
	}
	if c.DeadLetterMaxAge > 0 && c.DeadLetterMaxAge < time.Millisecond {
		return bad("DeadLetterMaxAge", "must be at least 1ms, got %v", c.DeadLetterMaxAge)
	}
	if c.DeadLetterMaxLen < 0 {
		return bad("DeadLetterMaxLen", "must not be negative, got %d", c.DeadLetterMaxLen)
	}
	return c.validateOrdered()
}

func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "consumer"
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// heartbeatTick is how often the keeper looks at the entries in hand. An
// entry is extended on the first tick at least HeartbeatInterval after its
// last reset, so at most HeartbeatInterval+tick after it: half the shorter
// of HeartbeatInterval and MinIdle-HeartbeatInterval keeps that at most
// halfway between HeartbeatInterval and MinIdle (MinIdle/2 by default),
// whatever the tick's phase. Without a heartbeat, only RetryAfter holds
// need ticks: MinIdle/3.
func (c Config) heartbeatTick() time.Duration {
	if c.HeartbeatInterval == NoHeartbeat {
		return c.MinIdle / 3
	}
	return max(min(c.HeartbeatInterval, c.MinIdle-c.HeartbeatInterval)/2, time.Millisecond)
}

// idleResetFrom is the idle-time reset of entries whose idle time a call begun at began
// (a clock reading) reset: a read, a claim or an extension.
func (c Config) idleResetFrom(began time.Duration) idleReset {
	return idleReset{from: began, ownedUntil: c.fenceFrom(began)}
}

// fenceFrom returns when entries delivered (or extended) by a call begun
// at began could first be taken over by another consumer, less a margin:
// a claim takes only entries idle for MinIdle, and the server reset their
// idle time after began. Until then a plain XACK acks exactly what the
// fenced ack function would, for a quarter of its server CPU, so the
// acker fences only the entries held longer (see acker.send). Ownership
// moved by hand without regard to MinIdle (XCLAIM with min-idle 0) is not
// seen for entries acked within MinIdle/2 of their delivery.
func (c Config) fenceFrom(began time.Duration) time.Duration {
	if c.AckMode == AckPlain {
		return math.MaxInt64
	}
	return began + c.MinIdle/2
}
