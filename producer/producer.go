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
//   - On Redis 8.6 and newer, give each Message an IdempotencyID: the
//     producer sends XADD IDMP, and the server adds an entry once per
//     (ProducerID, IdempotencyID), answering a retry with the first entry's
//     id. Server-side deduplication keeps recent ids per producer for a
//     bounded time and count (the server's stream-idmp settings), so retry
//     promptly. Producer.Idempotent says whether the server does it.
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
	"os"
	"strconv"
	"strings"
	"sync"

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
	// producer-id). Keep it stable across restarts of the same producer,
	// or a retry after a restart is not recognised. Defaults to
	// host-pid, which is stable only for the life of the process.
	ProducerID string
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
	// IdempotencyID, when set on a server with XADD IDMP (Redis 8.6+),
	// makes a retried publish of the same message add nothing: the server
	// answers with the first entry's id. Ignored elsewhere (see
	// Producer.Idempotent).
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
	if cfg.ProducerID == "" {
		host, _ := os.Hostname()
		cfg.ProducerID = host + "-" + strconv.Itoa(os.Getpid())
	}
	return &Producer{rdb: rdb, cfg: cfg, lib: pelwarden.NewLibrary(rdb), sinceTrim: map[string]int{}}, nil
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
// anything is sent (a *pelwarden.ArgumentError naming it); a Redis error
// fails only the messages it hit, in their Result.Err, and is also
// returned (the first one).
func (p *Producer) PublishBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	for i, m := range msgs {
		if err := checkMessage(i, m); err != nil {
			return nil, err
		}
	}
	idmp := false
	for _, m := range msgs {
		if m.IdempotencyID != "" {
			var err error
			if idmp, err = p.Idempotent(ctx); err != nil {
				return nil, err
			}
			break
		}
	}
	out := make([]Result, len(msgs))
	var first error
	for start := 0; start < len(msgs); start += p.cfg.MaxBatch {
		end := min(len(msgs), start+p.cfg.MaxBatch)
		if err := p.send(ctx, msgs[start:end], out[start:end], idmp); err != nil && first == nil {
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

// send pipelines one batch.
func (p *Producer) send(ctx context.Context, msgs []Message, out []Result, idmp bool) error {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		stream := p.StreamFor(m.Key)
		fields := m.Fields
		if p.cfg.Injector != nil {
			fields = p.cfg.Injector.Inject(ctx, stream, append([]pelwarden.Field(nil), fields...))
		}
		args := make([]any, 0, 6+2*len(fields))
		args = append(args, "XADD", stream)
		if idmp && m.IdempotencyID != "" {
			args = append(args, "IDMP", p.cfg.ProducerID, m.IdempotencyID)
		}
		args = append(args, "*")
		for _, f := range fields {
			args = append(args, f.Name, f.Value)
		}
		out[i].Stream = stream
		cmds[i] = redis.NewStringCmd(ctx, args...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, err := pipe.Exec(ctx)
	var first error
	for i, c := range cmds {
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
// IDMP (Redis 8.6 and newer; not Valkey 9.1). It asks the server once (INFO
// server) and remembers the answer. On a cluster it asks one node: keep
// the nodes on one version.
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

// supportsIDMP reads an INFO server reply: Redis 8.6 or newer (Valkey
// reports its own valkey_version and has no IDMP).
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
	major, minor := versionParts(version)
	return major > 8 || (major == 8 && minor >= 6)
}

func versionParts(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if errors.Join(err1, err2) != nil {
		return 0, 0
	}
	return major, minor
}
