// Package producer publishes entries to the streams pelwarden consumers
// read: to one stream, or by key to the partitions of a partitioned stream
// (pelwarden.Partitions, pelwarden.PartitionFor), so that all entries of a
// key go to one partition and are consumed in order. A batch is pipelined:
// one round trip per partition's slot owner. An Injector adds fields to
// every entry, such as the W3C trace context of the publish
// (pelwarden.FieldTraceParent; the OpenTelemetry module,
// github.com/pelwarden/pelwarden/pelwardenotel, provides one).
//
// # Retried publishes
//
// A publish that returns an error may have been added or not: the reply
// can be lost after the server wrote the entry. Publishing it again then
// adds a second entry, with its own stream id, which consumers handle as a
// separate entry (their idempotency by stream id does not catch it). Two
// ways out:
//
//   - On Redis 8.6.2 and newer, set Config.ProducerID and give each
//     Message an IdempotencyID: the producer sends XADD IDMP, and the
//     server adds an entry once per (stream, ProducerID, IdempotencyID),
//     answering a retry with the first entry's id. The server keeps a
//     bounded number of recent ids per producer for a bounded time, per
//     stream: before its first publish with an IdempotencyID to a stream,
//     the producer makes the stream keep at least
//     Config.IdempotencyMaxSize ids (default: a batch, MaxBatch) for at
//     least Config.IdempotencyDuration (default an hour), where the
//     server's defaults keep 100 for 100 seconds. Retry within that
//     window: the messages of a failed call whose Result.Err is set, or
//     the whole call, in the same order. Producer.Idempotent says whether
//     the server does it (Redis 8.6.0 and 8.6.1 lose the tracked ids on an
//     AOF rewrite or an RDB load, so they are treated as not doing it).
//   - Elsewhere (older Redis, Valkey), put an application key in the fields
//     and make handlers idempotent on it.
//
// # Retention
//
// A stream used as a work queue grows until something trims it, and a
// blind XADD MAXLEN trims entries a lagging group has not read yet. With
// Config.TrimEvery the producer trims safely instead: every so many entries
// published to a stream, it calls the library's trim function
// (pelwarden.Library.Trim), which deletes only what every consumer group of
// the stream has delivered and acknowledged. The consumers can do the same
// (driver.Config.TrimInterval), and `pelwarden trim` shows it first.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// Injector adds fields to an entry before it is published, from the
// publish's context: typically the trace context (pelwarden.FieldTraceParent
// and pelwarden.FieldTraceState). It returns the fields to publish.
type Injector interface {
	Inject(ctx context.Context, stream string, fields []pelwarden.Field) []pelwarden.Field
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(ctx context.Context, stream string, fields []pelwarden.Field) []pelwarden.Field

// Inject calls f.
func (f InjectorFunc) Inject(ctx context.Context, stream string, fields []pelwarden.Field) []pelwarden.Field {
	return f(ctx, stream, fields)
}

// DefaultMaxBatch is the default Config.MaxBatch.
const DefaultMaxBatch = 500

// DefaultIdempotencyDuration is the default Config.IdempotencyDuration:
// long enough for a retry after a restart or a failover, and cheap, since
// Config.IdempotencyMaxSize bounds what the stream keeps whatever the
// duration.
const DefaultIdempotencyDuration = time.Hour

// The server's bounds on a stream's IDMP settings (XCFGSET).
const (
	maxIdempotencyDuration = 24 * time.Hour
	maxIdempotencyMaxSize  = 10000
)

// Config configures a Producer. The zero value of an optional field means
// its default.
type Config struct {
	// Stream to publish to. Set Stream or Partitions.
	Stream string
	// Partitions of a partitioned stream (pelwarden.Partitions): a
	// message goes to Partitions[pelwarden.PartitionFor(Key, n)]. Keep the
	// list in partition order; changing n moves keys to other partitions.
	Partitions []string
	// ProducerID names this producer for idempotent publishing (XADD IDMP
	// producer-id): the server recognises a retry by its IdempotencyID
	// among the ids it keeps for this ProducerID on the stream. Required
	// as soon as a Message has an IdempotencyID: PublishBatch refuses such
	// a message without it, with a *pelwarden.ArgumentError naming
	// Config.ProducerID, on every server (so that code tested on a server
	// without IDMP does not fail on one with it).
	//
	// There is no default because none can be right: the id must be the
	// same for a restarted producer (its retry comes after the restart)
	// and differ between producers running at once (each has its own
	// window of ids). Host and pid change on every start of a container;
	// a host name alone is shared by two processes on one host, whose ids
	// would then evict each other's. Take it from your deployment: a
	// StatefulSet pod name, "billing-" + shard number. A new ProducerID on
	// every start loses the retries across restarts and leaves the old
	// ids tracked until IdempotencyDuration passes (XINFO STREAM's
	// pids-tracked grows). Same rules as a stream name
	// (pelwarden.CheckName).
	ProducerID string
	// IdempotencyDuration is how long a stream keeps an IdempotencyID
	// (XCFGSET IDMP-DURATION, whole seconds, rounded up): a retry later
	// than that adds a duplicate. Default DefaultIdempotencyDuration (one
	// hour); 1 second to 24 hours.
	IdempotencyDuration time.Duration
	// IdempotencyMaxSize is how many of a ProducerID's most recent
	// IdempotencyIDs a stream keeps (XCFGSET IDMP-MAXSIZE): a retried
	// message is recognised only while fewer than that many newer ids of
	// the same ProducerID went to its stream. Default MaxBatch, so that a
	// batch retried whole after a lost reply is recognised whole; MaxBatch
	// to 10000. Raise it when one ProducerID publishes from several
	// goroutines at once (their calls share the window) or when a
	// PublishBatch call sends more than MaxBatch messages to one stream
	// and is retried whole. The stream keeps up to this many ids for each
	// ProducerID that published to it.
	//
	// Before its first publish with an IdempotencyID to a stream, the
	// producer reads the stream's settings (XINFO STREAM, once per stream
	// in the life of the Producer) and raises them to these values if they
	// are lower, never lowers them: producers with different settings on
	// one stream end on the largest, without undoing each other. A missing
	// stream is created empty with these settings (XCFGSET needs an
	// existing stream, and XADD would create it with the server's
	// defaults). Raising them (XCFGSET, atomic with the read in a script)
	// clears the ids the stream tracked, for every producer: it happens
	// once per stream and settings, and is logged on Logger. A stream
	// deleted and created again after that has the server's defaults until
	// the next start of the Producer.
	IdempotencyMaxSize int
	// Injector adds fields to every entry (see Injector). Optional.
	Injector Injector
	// MaxBatch bounds the entries of one pipeline (default 500, at most
	// pelwarden.MaxCount).
	MaxBatch int
	// TrimEvery, when positive, trims a stream safely after every
	// TrimEvery entries published to it: one call of the library's trim
	// function (at most pelwarden.DefaultTrimLimit entries), which deletes
	// only entries every consumer group has delivered and acknowledged. A
	// stream without groups is left alone. A failed trim does not fail the
	// publish; it is logged on Logger. Off by default.
	TrimEvery int
	// Logger receives what trimming did and its errors (default
	// slog.Default()).
	Logger *slog.Logger
}

// Message is one entry to publish.
type Message struct {
	// Key picks the partition (pelwarden.PartitionFor); ignored with a
	// single Stream. It is not written into the entry.
	Key string
	// Fields of the entry, in order. At least one; names in
	// pelwarden's namespace ("pelwarden.") are refused.
	Fields []pelwarden.Field
	// IdempotencyID, when set on a server with XADD IDMP (Redis 8.6.2+),
	// makes a retried publish of the same message add nothing: the server
	// answers with the first entry's id (see Config.ProducerID,
	// Config.IdempotencyMaxSize and Config.IdempotencyDuration for how long
	// it remembers). Requires Config.ProducerID. Ignored elsewhere (see
	// Producer.Idempotent). Same rules as a stream name
	// (pelwarden.CheckName).
	IdempotencyID string
}

// Result is where one message went.
type Result struct {
	// Stream the message was published to.
	Stream string
	// ID is the entry's stream id ("" when Err is set).
	ID string
	// Err is why this message was not published.
	Err error
}

// argError is a bad Config field or Message: a *pelwarden.ArgumentError
// naming it ("Config.Stream", "Message[3].Fields").
func argError(field, reason string) error {
	return &pelwarden.ArgumentError{Scope: "pelwarden/producer", Field: field, Reason: reason}
}

// Producer publishes messages. It is safe for concurrent use.
type Producer struct {
	rdb redis.UniversalClient
	cfg Config

	idmpMu    sync.Mutex
	idmpKnown bool // the server was asked
	idmp      bool

	// idmpSize and idmpSeconds are the stream settings idempotent
	// publishing needs (IDMP-MAXSIZE, IDMP-DURATION); windowed the streams
	// known to have them.
	idmpSize, idmpSeconds int64
	windowMu              sync.Mutex
	windowed              map[string]bool

	lib       *pelwarden.Library
	trimMu    sync.Mutex
	sinceTrim map[string]int // entries published per stream since its last trim
}

// New returns a Producer on rdb (any go-redis client). It validates cfg and
// does no I/O; the caller keeps ownership of rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Producer, error) {
	if rdb == nil {
		return nil, argError("rdb", "a Redis client is required")
	}
	cfg.Partitions = append([]string(nil), cfg.Partitions...)
	switch {
	case cfg.Stream == "" && len(cfg.Partitions) == 0:
		return nil, argError("Config.Stream", "required (or Partitions)")
	case cfg.Stream != "" && len(cfg.Partitions) > 0:
		return nil, argError("Config.Partitions", "set Stream or Partitions, not both")
	case len(cfg.Partitions) > pelwarden.MaxPartitions:
		return nil, argError("Config.Partitions", fmt.Sprintf("at most %d, got %d", pelwarden.MaxPartitions, len(cfg.Partitions)))
	}
	for i, s := range append([]string{cfg.Stream}, cfg.Partitions...) {
		if i == 0 && cfg.Stream == "" {
			continue
		}
		if err := pelwarden.CheckName(s); err != nil {
			return nil, argError("Config.Partitions", fmt.Sprintf("stream name %q: %v", s, err))
		}
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxBatch < 1 || cfg.MaxBatch > pelwarden.MaxCount {
		return nil, argError("Config.MaxBatch", fmt.Sprintf("must be 1 to %d, got %d", pelwarden.MaxCount, cfg.MaxBatch))
	}
	if cfg.TrimEvery < 0 {
		return nil, argError("Config.TrimEvery", fmt.Sprintf("must not be negative, got %d", cfg.TrimEvery))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProducerID != "" {
		if err := pelwarden.CheckName(cfg.ProducerID); err != nil {
			return nil, argError("Config.ProducerID", err.Error())
		}
	}
	if cfg.IdempotencyDuration == 0 {
		cfg.IdempotencyDuration = DefaultIdempotencyDuration
	}
	if cfg.IdempotencyDuration < 0 || cfg.IdempotencyDuration > maxIdempotencyDuration {
		return nil, argError("Config.IdempotencyDuration", fmt.Sprintf("must be 1s to %v, got %v", maxIdempotencyDuration, cfg.IdempotencyDuration))
	}
	if cfg.IdempotencyMaxSize == 0 {
		cfg.IdempotencyMaxSize = cfg.MaxBatch
	}
	if cfg.IdempotencyMaxSize < cfg.MaxBatch || cfg.IdempotencyMaxSize > maxIdempotencyMaxSize {
		return nil, argError("Config.IdempotencyMaxSize", fmt.Sprintf("must be MaxBatch (%d) to %d, so that a retried batch is recognised whole; got %d", cfg.MaxBatch, maxIdempotencyMaxSize, cfg.IdempotencyMaxSize))
	}
	return &Producer{
		rdb: rdb, cfg: cfg, lib: pelwarden.NewLibrary(rdb), sinceTrim: map[string]int{},
		idmpSize:    int64(cfg.IdempotencyMaxSize),
		idmpSeconds: int64((cfg.IdempotencyDuration + time.Second - 1) / time.Second),
		windowed:    map[string]bool{},
	}, nil
}

// StreamFor returns the stream a message with key goes to.
func (p *Producer) StreamFor(key string) string {
	if p.cfg.Stream != "" {
		return p.cfg.Stream
	}
	return p.cfg.Partitions[pelwarden.PartitionFor(key, len(p.cfg.Partitions))]
}

// Publish publishes one entry with fields given as name, value pairs, to
// the partition of key. It returns the stream and the entry's id.
func (p *Producer) Publish(ctx context.Context, key string, fields ...string) (Result, error) {
	if len(fields)%2 != 0 {
		return Result{}, argError("fields", "name, value pairs: got an odd count")
	}
	m := Message{Key: key, Fields: make([]pelwarden.Field, 0, len(fields)/2)}
	for i := 0; i < len(fields); i += 2 {
		m.Fields = append(m.Fields, pelwarden.Field{Name: fields[i], Value: fields[i+1]})
	}
	rs, err := p.PublishBatch(ctx, []Message{m})
	if err != nil {
		return Result{}, err
	}
	return rs[0], rs[0].Err
}

// PublishBatch publishes msgs, pipelined in batches of MaxBatch (one round
// trip per batch on a single server; per slot owner on a cluster). Results
// are in the order of msgs. A bad message fails the whole call before
// anything is sent (a *pelwarden.ArgumentError naming it; a message with
// an IdempotencyID without Config.ProducerID names Config.ProducerID); a
// Redis error fails only the messages it hit, in their Result.Err, and is
// also returned (the first one). On a server with XADD IDMP, the first
// call with IdempotencyIDs for a stream first sets the stream's window of
// ids (see Config.IdempotencyMaxSize); if that fails, the messages with
// IdempotencyIDs for that stream fail with its error and are not sent.
func (p *Producer) PublishBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	withIDs := false
	for i, m := range msgs {
		if err := checkMessage(i, m); err != nil {
			return nil, err
		}
		if m.IdempotencyID != "" {
			if p.cfg.ProducerID == "" {
				return nil, argError("Config.ProducerID", fmt.Sprintf("required with an IdempotencyID (Message[%d]): the server recognises a retry only under the ProducerID of the first attempt, which must survive a restart, so there is no default", i))
			}
			withIDs = true
		}
	}
	idmp := false
	var unwindowed map[string]error
	if withIDs {
		var err error
		if idmp, err = p.Idempotent(ctx); err != nil {
			return nil, err
		}
		if idmp {
			unwindowed = p.ensureWindows(ctx, msgs)
		}
	}
	out := make([]Result, len(msgs))
	var first error
	for start := 0; start < len(msgs); start += p.cfg.MaxBatch {
		end := min(len(msgs), start+p.cfg.MaxBatch)
		if err := p.send(ctx, msgs[start:end], out[start:end], idmp, unwindowed); err != nil && first == nil {
			first = err
		}
	}
	if p.cfg.TrimEvery > 0 {
		p.trimDue(ctx, out)
	}
	return out, first
}

// trimDue counts the published entries per stream and trims each stream
// that reached TrimEvery since its last trim.
func (p *Producer) trimDue(ctx context.Context, published []Result) {
	var due []string
	p.trimMu.Lock()
	for _, r := range published {
		if r.Err != nil {
			continue
		}
		p.sinceTrim[r.Stream]++
		if p.sinceTrim[r.Stream] == p.cfg.TrimEvery {
			p.sinceTrim[r.Stream] = 0
			due = append(due, r.Stream)
		}
	}
	p.trimMu.Unlock()
	for _, stream := range due {
		res, err := p.lib.Trim(ctx, pelwarden.TrimArgs{Stream: stream})
		switch {
		case errors.Is(err, pelwarden.ErrNoGroup):
			p.cfg.Logger.Debug("pelwarden producer: not trimming a stream without consumer groups", "stream", stream)
		case err != nil:
			p.cfg.Logger.Warn("pelwarden producer: trim failed; the stream keeps its entries", "stream", stream, "err", err)
		case res.Trimmed > 0:
			p.cfg.Logger.Debug("pelwarden producer: trimmed", "stream", stream, "entries", res.Trimmed, "held_by", res.Holder)
		}
	}
}

// send pipelines one batch. With idmp, a message with an IdempotencyID
// for a stream in unwindowed is not sent: it fails with that stream's
// error.
func (p *Producer) send(ctx context.Context, msgs []Message, out []Result, idmp bool, unwindowed map[string]error) error {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	var first error
	for i, m := range msgs {
		stream := p.StreamFor(m.Key)
		out[i].Stream = stream
		withID := idmp && m.IdempotencyID != ""
		if err := unwindowed[stream]; withID && err != nil {
			out[i].Err = err
			if first == nil {
				first = err
			}
			continue
		}
		fields := m.Fields
		if p.cfg.Injector != nil {
			fields = p.cfg.Injector.Inject(ctx, stream, append([]pelwarden.Field(nil), fields...))
		}
		args := make([]any, 0, 6+2*len(fields))
		args = append(args, "XADD", stream)
		if withID {
			args = append(args, "IDMP", p.cfg.ProducerID, m.IdempotencyID)
		}
		args = append(args, "*")
		for _, f := range fields {
			args = append(args, f.Name, f.Value)
		}
		cmds[i] = redis.NewStringCmd(ctx, args...)
		_ = pipe.Process(ctx, cmds[i])
	}
	if pipe.Len() == 0 {
		return first
	}
	_, err := pipe.Exec(ctx)
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if cerr := c.Err(); cerr != nil {
			out[i].Err = fmt.Errorf("pelwarden/producer: XADD %s: %w", out[i].Stream, cerr)
			if first == nil {
				first = out[i].Err
			}
			continue
		}
		out[i].ID = c.Val()
	}
	if first == nil && err != nil {
		first = fmt.Errorf("pelwarden/producer: %w", err)
	}
	return first
}

// windowGroup is the consumer group windowScript creates and destroys at
// once to create an empty stream (XGROUP CREATE ... MKSTREAM): inside the
// script, nobody sees it.
const windowGroup = "pelwarden.producer-create"

// windowScript makes the stream KEYS[1] keep at least ARGV[1] idempotency
// ids per producer for at least ARGV[2] seconds (ARGV[3] is windowGroup),
// atomically: it creates a missing stream empty with these settings, and
// raises the settings of an existing one where they are lower, never
// lowers them. XCFGSET clears the ids the stream tracks when it changes a
// value, so it is called only for a change. It returns {maxsize,
// duration, changed (0 or 1)}.
var windowScript = redis.NewScript(`
local key, size, dur = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
if redis.call('EXISTS', key) == 0 then
  redis.call('XGROUP', 'CREATE', key, ARGV[3], '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', key, ARGV[3])
  redis.call('XCFGSET', key, 'IDMP-MAXSIZE', size, 'IDMP-DURATION', dur)
  return {size, dur, 1}
end
local info = redis.call('XINFO', 'STREAM', key)
local cur = {}
for i = 1, #info, 2 do cur[info[i]] = info[i + 1] end
local curSize, curDur = cur['idmp-maxsize'], cur['idmp-duration']
if type(curSize) ~= 'number' or type(curDur) ~= 'number' then
  return redis.error_reply('ERR XINFO STREAM reports no idmp-maxsize and idmp-duration')
end
if curSize >= size and curDur >= dur then
  return {curSize, curDur, 0}
end
size, dur = math.max(size, curSize), math.max(dur, curDur)
redis.call('XCFGSET', key, 'IDMP-MAXSIZE', size, 'IDMP-DURATION', dur)
return {size, dur, 1}
`)

// ensureWindows makes sure that every stream msgs send an IdempotencyID
// to keeps this producer's window of ids (Config.IdempotencyMaxSize). It
// reads the settings of the streams not known yet in one pipelined round
// trip (XINFO STREAM), runs windowScript for the streams missing or short,
// and remembers the streams that are set. It returns the streams it could
// not set, with why.
func (p *Producer) ensureWindows(ctx context.Context, msgs []Message) map[string]error {
	p.windowMu.Lock()
	defer p.windowMu.Unlock()
	var todo []string
	for _, m := range msgs {
		if m.IdempotencyID == "" {
			continue
		}
		if s := p.StreamFor(m.Key); !p.windowed[s] && !slices.Contains(todo, s) {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	pipe := p.rdb.Pipeline()
	infos := make([]*redis.XInfoStreamCmd, len(todo))
	for i, s := range todo {
		infos[i] = pipe.XInfoStream(ctx, s)
	}
	// Errors are read per command: a missing stream fails XINFO STREAM and
	// goes to the script, which creates it (and returns any other error
	// with its own context).
	_, _ = pipe.Exec(ctx)
	var failed map[string]error
	for i, s := range todo {
		if info, err := infos[i].Result(); err == nil && info.IDMPMaxSize >= p.idmpSize && info.IDMPDuration >= p.idmpSeconds {
			p.windowed[s] = true
			continue
		}
		if err := p.setWindow(ctx, s); err != nil {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[s] = err
			continue
		}
		p.windowed[s] = true
	}
	return failed
}

// setWindow runs windowScript on stream.
func (p *Producer) setWindow(ctx context.Context, stream string) error {
	res, err := windowScript.Run(ctx, p.rdb, []string{stream}, p.idmpSize, p.idmpSeconds, windowGroup).Int64Slice()
	if redis.HasErrorPrefix(err, "ACL failure in script") {
		// The ACL refused a command of the script (the server names it):
		// make it match pelwarden.ErrNoPermission as a refused command does.
		err = fmt.Errorf("%w: %w", pelwarden.ErrNoPermission, err)
	}
	if err != nil {
		hint := ""
		if pelwarden.Matches(err, pelwarden.ErrNoPermission) {
			hint = "; the user needs EVALSHA and EVAL, and for the script EXISTS, XINFO STREAM, XCFGSET, XGROUP CREATE and XGROUP DESTROY"
		}
		return fmt.Errorf("pelwarden/producer: set the idempotency window of %s (at least IDMP-MAXSIZE %d IDMP-DURATION %d%s): %w", stream, p.idmpSize, p.idmpSeconds, hint, err)
	}
	if len(res) != 3 {
		return fmt.Errorf("pelwarden/producer: set the idempotency window of %s: unexpected reply %v", stream, res)
	}
	if res[2] == 1 {
		p.cfg.Logger.Info("pelwarden producer: set the stream's idempotency window (XCFGSET; the ids it tracked are cleared)",
			"stream", stream, "idmp_maxsize", res[0], "idmp_duration_s", res[1])
	}
	return nil
}

// checkMessage checks message i.
func checkMessage(i int, m Message) error {
	bad := func(field, format string, a ...any) error {
		return argError(fmt.Sprintf("Message[%d].%s", i, field), fmt.Sprintf(format, a...))
	}
	if len(m.Fields) == 0 {
		return bad("Fields", "at least one field is required")
	}
	for _, f := range m.Fields {
		if strings.HasPrefix(f.Name, "pelwarden.") {
			return bad("Fields", "%q is in pelwarden's reserved namespace", f.Name)
		}
	}
	if m.IdempotencyID != "" {
		if err := pelwarden.CheckName(m.IdempotencyID); err != nil {
			return bad("IdempotencyID", "%v", err)
		}
	}
	return nil
}

// Idempotent reports whether the server deduplicates publishes with XADD
// IDMP: Redis 8.6.2 and newer. Not Valkey, and not Redis 8.6.0 and 8.6.1,
// which lose the tracked ids on an AOF rewrite or an RDB load (a restart,
// a new replica), so that a retry after one adds a duplicate: on those,
// IdempotencyIDs are not sent, as on older servers, and handlers need an
// application key. It asks the server once (INFO server) and remembers the
// answer. On a cluster it asks one node: keep the nodes on one version.
func (p *Producer) Idempotent(ctx context.Context) (bool, error) {
	p.idmpMu.Lock()
	defer p.idmpMu.Unlock()
	if p.idmpKnown {
		return p.idmp, nil
	}
	info, err := p.rdb.Info(ctx, "server").Result()
	if err != nil {
		// Asked again next time: the server may have been unreachable.
		return false, fmt.Errorf("pelwarden/producer: INFO server: %w", err)
	}
	p.idmp, p.idmpKnown = supportsIDMP(info), true
	return p.idmp, nil
}

// supportsIDMP reads an INFO server reply: Redis 8.6.2 or newer (Valkey
// reports its own valkey_version and has no IDMP; 8.6.0 and 8.6.1 lose
// the ids on AOF rewrite and RDB load).
func supportsIDMP(info string) bool {
	var version string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "valkey_version":
			return false
		case "redis_version":
			version = v
		}
	}
	v, ok := parseVersion(version)
	return ok && !v.less(version3{8, 6, 2})
}

// version3 is a server version: major, minor, patch.
type version3 [3]int

func (v version3) less(w version3) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// parseVersion reads "major.minor.patch" (a missing patch reads 0).
func parseVersion(s string) (version3, bool) {
	var v version3
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, false
	}
	for i, part := range parts {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}
