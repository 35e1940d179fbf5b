package driver

// The seam between a lane and the server: what a lane asks of Redis, on
// its stream, group and consumer, and the clock its rules read.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/resp"
)

// laneServer is every server operation of one lane, bound to its stream,
// dead-letter stream, group and consumer, in one part per role: the
// lane's reads and claims (fetchServer), the writes that settle entries in
// hand (settleServer), the upkeep (upkeepServer) and the group and
// topology calls of the core (streamServer). redisLane is the real one;
// the unit tests use a fake.
type laneServer interface {
	fetchServer
	settleServer
	upkeepServer
	streamServer
	pauseServer
}

// fetchServer is what the lane asks of the server to fetch entries.
type fetchServer interface {
	// read runs one XREADGROUP ">" for at most count entries, blocking up
	// to ReadBlock when block is set; nil when there is nothing new. With
	// claim > 0 it adds CLAIM claim (Redis 8.4+):
	// pending entries idle that long come first, taken over, each with its
	// delivery count, this delivery included (Deliveries > 1). A server
	// that refuses the option fails with an error matching
	// errReadClaimRefused.
	read(ctx context.Context, count int, block bool, claim time.Duration) ([]*Message, error)
	// anyIdle reports whether some pending entry has been idle for minIdle.
	anyIdle(ctx context.Context, minIdle time.Duration) (bool, error)
	// claim is one page of the claim function (a reclaim pass); Stream,
	// DeadLetterStream, Group and Consumer of a are the lane's.
	claim(ctx context.Context, a pelwarden.ClaimArgs) (*pelwarden.ClaimPage, error)
}

// settleServer is what the acker, the keeper and the settler ask of the
// server: the writes that settle entries this consumer owns.
type settleServer interface {
	// ack is a plain XACK; it returns how many ids were pending.
	ack(ctx context.Context, ids []string) (int64, error)
	// ackFenced acks through the fenced ack function: only what this
	// consumer still owns.
	ackFenced(ctx context.Context, ids []string) (*pelwarden.AckResult, error)
	// extend resets the idle time of entries this consumer owns.
	extend(ctx context.Context, ids []string) (*pelwarden.ExtendResult, error)
	// release makes entries this consumer owns claimable after delay.
	release(ctx context.Context, ids []string, minIdle, delay time.Duration) (*pelwarden.ReleaseResult, error)
	// fail records a failed attempt of an entry this consumer owns (the
	// fail function): claimable again after max(delay, its Backoff) from
	// now, its error kept for the dead letter written at MaxDeliveries.
	fail(ctx context.Context, id string, minIdle, delay time.Duration, errText string) (*pelwarden.ReleaseResult, error)
	// giveBack returns entries this consumer was handed but never
	// started, with the delivery that handed them out taken back, so they
	// cost no attempt (the giveback function).
	giveBack(ctx context.Context, ids []string, minIdle time.Duration) (*pelwarden.ReleaseResult, error)
	// deadLetter moves one entry this consumer owns to the dead-letter
	// stream on its handler's request, with the error text.
	deadLetter(ctx context.Context, id, errText string) (*pelwarden.DeadLetterResult, error)
	// deadLetterSpent moves entries this consumer owns, handed over by a
	// read's CLAIM after MaxDeliveries deliveries, to the dead-letter
	// stream with reason pelwarden.ReasonMaxDeliveries (one atomic call).
	deadLetterSpent(ctx context.Context, ids []string) (*pelwarden.DeadLetterResult, error)
}

// upkeepServer is what the maintainer asks of the server.
type upkeepServer interface {
	// idlePending returns at most count pending entries idle for at least
	// idle, lowest ids first.
	idlePending(ctx context.Context, idle time.Duration, count int) ([]pendingEntry, error)
	// trim deletes at most limit entries every group acknowledged.
	trim(ctx context.Context, limit int) (*pelwarden.TrimResult, error)
	// reap deletes the group's consumers idle longer than idle that own
	// nothing, this one excepted.
	reap(ctx context.Context, idle time.Duration) (*pelwarden.ReapResult, error)
	// time is the server's clock.
	time(ctx context.Context) (time.Time, error)
	// trimDeadLetters applies XTRIM to the dead-letter stream: MINID with
	// a minID, else MAXLEN maxLen. It returns how many records it deleted.
	trimDeadLetters(ctx context.Context, minID string, maxLen int64) (int64, error)
}

// pendingEntry is one entry of the PEL, as XPENDING's extended form
// reports it.
type pendingEntry struct {
	ID, Consumer string
	Idle         time.Duration
	Deliveries   int64
}

// redisStream is one stream's binding on a real server: rdb, lib over it,
// and the stream's names; each role's part of redisLane has it.
type redisStream struct {
	rdb                      redis.UniversalClient
	lib                      *pelwarden.Library
	stream, deadLetterStream string
	lastErrors               *lastErrors
	group, consumer          string
	readBlock                time.Duration   // Config.ReadBlock
	backoff                  []time.Duration // Config.Backoff
	replies                  replyBuffers    // the reads' raw replies
}

// replyBuffer collects the raw bytes of a read's reply (go-redis's
// RawWriteToCmd writes them), so that a read decodes them with one
// allocation per entry (see decodeRawRead); nothing keeps its bytes, so
// the next read reuses it.
type replyBuffer struct{ b []byte }

// Write appends p.
func (r *replyBuffer) Write(p []byte) (int, error) {
	r.b = append(r.b, p...)
	return len(p), nil
}

// ReadFrom appends what src gives until it ends. go-redis copies each
// string of the reply with io.CopyN, whose reader says how long it is:
// it is read in place, in one call.
func (r *replyBuffer) ReadFrom(src io.Reader) (int64, error) {
	lr, limited := src.(*io.LimitedReader)
	var read int64
	for {
		want := 512
		if limited {
			if lr.N <= 0 {
				return read, nil
			}
			want = int(min(lr.N, 1<<30))
		}
		r.b = slices.Grow(r.b, want)
		n, err := src.Read(r.b[len(r.b):cap(r.b)][:want])
		r.b = r.b[:len(r.b)+n]
		read += int64(n)
		switch {
		case err == nil && limited && lr.N <= 0:
			return read, nil // the string read whole, in one call
		case err == nil:
		case errors.Is(err, io.EOF):
			return read, nil
		default:
			return read, err
		}
	}
}

// replyBuffers holds a stream's reply buffer between reads (a lane reads
// from one loop; a second read at once gets a buffer of its own).
type replyBuffers struct {
	mu   sync.Mutex
	free *replyBuffer
}

// replyKeepMax: a buffer grown beyond this by a read of large entries is
// not kept for the next read.
const replyKeepMax = 8 << 20

func (p *replyBuffers) take() *replyBuffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.free
	p.free = nil
	if b == nil {
		b = &replyBuffer{}
	}
	b.b = b.b[:0]
	return b
}

func (p *replyBuffers) put(b *replyBuffer) {
	if cap(b.b) > replyKeepMax {
		return
	}
	p.mu.Lock()
	p.free = b
	p.mu.Unlock()
}

// redisLane is the laneServer of a real server, a part per role over one
// redisStream.
type redisLane struct {
	*redisStream
	redisFetch
	redisSettle
	redisUpkeep
}

// The roles' parts of redisLane.
type (
	redisFetch  struct{ *redisStream }
	redisSettle struct{ *redisStream }
	redisUpkeep struct{ *redisStream }
)

// newRedisLane returns the laneServer of s.
func newRedisLane(s *redisStream) *redisLane {
	return &redisLane{redisStream: s, redisFetch: redisFetch{s}, redisSettle: redisSettle{s}, redisUpkeep: redisUpkeep{s}}
}

var _ laneServer = (*redisLane)(nil)

// readMargin is added to ReadBlock for a read's context deadline.
const readMargin = 2 * time.Second

// errReadClaimRefused: the server refused XREADGROUP's CLAIM option (an
// error reply of no known class to a read that has it: an older server or
// a fork behind the same address, say after a failover).
var errReadClaimRefused = errors.New("the server refused XREADGROUP ... CLAIM")

func (s redisFetch) read(ctx context.Context, count int, block bool, claim time.Duration) ([]*Message, error) {
	ctx, cancel := context.WithTimeout(ctx, s.readBlock+readMargin)
	defer cancel()
	args := []any{"XREADGROUP", "GROUP", s.group, s.consumer, "COUNT", count}
	if block {
		args = append(args, "BLOCK", s.readBlock.Milliseconds())
	}
	if claim > 0 {
		args = append(args, "CLAIM", claim.Milliseconds())
	}
	args = append(args, "STREAMS", s.stream, ">")
	buf := s.replies.take()
	defer s.replies.put(buf)
	err := s.rdb.Process(ctx, redis.NewRawWriteToCmd(ctx, buf, args...))
	if err == nil && !resp.IsError(buf.b) {
		return decodeRawRead(buf.b, s.stream, s.group, s.consumer)
	}
	var v any
	if err == nil {
		// An error reply, which a raw read returns as bytes: the read did
		// nothing, and go-redis's own reply classifies the error and
		// follows a cluster's redirections. Rare, so sent again.
		v, err = s.rdb.Do(ctx, args...).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if claim > 0 && pelwarden.Classify(err) == pelwarden.ClassServer {
			// Any other error reply: the read's arguments are well formed,
			// so it is the option the server refuses (ERR syntax error).
			err = fmt.Errorf("%w: %w", errReadClaimRefused, err)
		}
		return nil, &pelwarden.CommandError{Command: "XREADGROUP GROUP " + s.group + " " + s.consumer, Key: s.stream, Err: err}
	}
	return decodeRead(v, s.stream, s.group, s.consumer)
}

func (s redisSettle) deadLetterSpent(ctx context.Context, ids []string) (*pelwarden.DeadLetterResult, error) {
	var res *pelwarden.DeadLetterResult
	err := s.lastErrors.with(func(key string) (err error) {
		res, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream,
			Group: s.group, Consumer: s.consumer, IDs: ids, Reason: pelwarden.ReasonMaxDeliveries, LastErrors: key})
		return err
	})
	return res, err
}

func (s redisFetch) anyIdle(ctx context.Context, minIdle time.Duration) (bool, error) {
	p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: s.group,
		Idle: minIdle, Start: "-", End: "+", Count: 1}).Result()
	if err != nil {
		return false, &pelwarden.CommandError{Command: "XPENDING", Key: s.stream, Err: err}
	}
	return len(p) > 0, nil
}

func (s redisUpkeep) idlePending(ctx context.Context, idle time.Duration, count int) ([]pendingEntry, error) {
	p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: s.group,
		Idle: idle, Start: "-", End: "+", Count: int64(count)}).Result()
	if err != nil {
		return nil, &pelwarden.CommandError{Command: "XPENDING IDLE", Key: s.stream, Err: err}
	}
	out := make([]pendingEntry, len(p))
	for i, e := range p {
		out[i] = pendingEntry{ID: e.ID, Consumer: e.Consumer, Idle: e.Idle, Deliveries: e.RetryCount}
	}
	return out, nil
}

func (s redisFetch) claim(ctx context.Context, a pelwarden.ClaimArgs) (*pelwarden.ClaimPage, error) {
	a.Stream, a.DeadLetterStream, a.Group, a.Consumer = s.stream, s.deadLetterStream, s.group, s.consumer
	var page *pelwarden.ClaimPage
	err := s.lastErrors.with(func(key string) (err error) {
		a.LastErrors = key
		page, err = s.lib.Claim(ctx, a)
		return err
	})
	return page, err
}

// ack acks ids with one XACK. Its arguments point into ids (see ackArg),
// which stay unchanged until it returns.
func (s redisSettle) ack(ctx context.Context, ids []string) (int64, error) {
	args := make([]any, 3, 3+len(ids))
	args[0], args[1], args[2] = "xack", s.stream, s.group
	for i := range ids {
		args = append(args, (*ackArg)(&ids[i]))
	}
	cmd := redis.NewIntCmd(ctx, args...)
	_ = s.rdb.Process(ctx, cmd)
	n, err := cmd.Result()
	if err != nil {
		return 0, &pelwarden.CommandError{Command: "XACK", Key: s.stream, Err: err}
	}
	return n, nil
}

// ackArg is an entry id as an XACK argument, passed by pointer: go-redis
// boxes each argument in an interface, and a string's box is an
// allocation where a pointer's is none (one fewer allocation per acked
// entry). go-redis writes it through MarshalBinary; String keeps it
// readable where a command is printed (errors, tracing hooks).
type ackArg string

// MarshalBinary returns the id's bytes without copying them: go-redis
// only writes them to the connection.
func (a *ackArg) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(string(*a)), len(*a)), nil
}

func (a *ackArg) String() string { return string(*a) }

func (s redisSettle) ackFenced(ctx context.Context, ids []string) (*pelwarden.AckResult, error) {
	return s.lib.Ack(ctx, pelwarden.AckArgs{Stream: s.stream, Group: s.group, Consumer: s.consumer, IDs: ids})
}

func (s redisSettle) extend(ctx context.Context, ids []string) (*pelwarden.ExtendResult, error) {
	return s.lib.Extend(ctx, pelwarden.ExtendArgs{Stream: s.stream, Group: s.group, Consumer: s.consumer, IDs: ids})
}

func (s redisSettle) release(ctx context.Context, ids []string, minIdle, delay time.Duration) (*pelwarden.ReleaseResult, error) {
	return s.lib.Release(ctx, pelwarden.ReleaseArgs{Stream: s.stream, Group: s.group, Consumer: s.consumer,
		IDs: ids, MinIdle: minIdle, Delay: delay})
}

func (s redisSettle) fail(ctx context.Context, id string, minIdle, delay time.Duration, errText string) (*pelwarden.ReleaseResult, error) {
	var res *pelwarden.ReleaseResult
	err := s.lastErrors.with(func(key string) (err error) {
		res, err = s.lib.Fail(ctx, pelwarden.FailArgs{Stream: s.stream, LastErrors: key, Group: s.group, Consumer: s.consumer,
			IDs: []string{id}, MinIdle: minIdle, Delay: delay, Backoff: s.backoff, Error: errText})
		return err
	})
	return res, err
}

func (s redisSettle) giveBack(ctx context.Context, ids []string, minIdle time.Duration) (*pelwarden.ReleaseResult, error) {
	return s.lib.GiveBack(ctx, pelwarden.ReleaseArgs{Stream: s.stream, Group: s.group, Consumer: s.consumer, IDs: ids, MinIdle: minIdle})
}

func (s redisSettle) deadLetter(ctx context.Context, id, errText string) (*pelwarden.DeadLetterResult, error) {
	var res *pelwarden.DeadLetterResult
	err := s.lastErrors.with(func(key string) (err error) {
		res, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream,
			Group: s.group, Consumer: s.consumer, IDs: []string{id}, Reason: pelwarden.ReasonHandler, Error: errText, LastErrors: key})
		return err
	})
	return res, err
}

func (s redisUpkeep) trim(ctx context.Context, limit int) (*pelwarden.TrimResult, error) {
	return s.lib.Trim(ctx, pelwarden.TrimArgs{Stream: s.stream, Limit: limit})
}

func (s redisUpkeep) reap(ctx context.Context, idle time.Duration) (*pelwarden.ReapResult, error) {
	return s.lib.Reap(ctx, pelwarden.ReapArgs{Stream: s.stream, Group: s.group, Idle: idle, Keep: []string{s.consumer}})
}

func (s redisUpkeep) time(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, &pelwarden.CommandError{Command: "TIME", Err: err}
	}
	return t, nil
}

func (s redisUpkeep) trimDeadLetters(ctx context.Context, minID string, maxLen int64) (int64, error) {
	if minID != "" {
		n, err := s.rdb.XTrimMinID(ctx, s.deadLetterStream, minID).Result()
		if err != nil {
			return 0, &pelwarden.CommandError{Command: "XTRIM MINID", Key: s.deadLetterStream, Err: err}
		}
		return n, nil
	}
	n, err := s.rdb.XTrimMaxLen(ctx, s.deadLetterStream, maxLen).Result()
	if err != nil {
		return 0, &pelwarden.CommandError{Command: "XTRIM MAXLEN", Key: s.deadLetterStream, Err: err}
	}
	return n, nil
}

func (s *redisStream) createGroup(ctx context.Context, startID string) error {
	return s.rdb.XGroupCreateMkStream(ctx, s.stream, s.group, startID).Err()
}

func (s *redisStream) checkGroup(ctx context.Context) error {
	_, err := s.lib.Stats(ctx, pelwarden.StatsArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream, Group: s.group})
	return err
}

func (s *redisStream) stale(err error) { followTopology(s.rdb, err) }

func (s *redisStream) pauseState(ctx context.Context) (*pelwarden.Pause, error) {
	return pelwarden.ReadPause(ctx, s.rdb, s.stream, s.group)
}

// minIDBefore is the XTRIM MINID bound of records older than age at now.
func minIDBefore(now time.Time, age time.Duration) string {
	return strconv.FormatInt(max(now.Add(-age).UnixMilli(), 0), 10) + "-0"
}

// decodeRawRead decodes the raw bytes of an XREADGROUP reply of one
// stream, as decodeRead decodes go-redis's generic reply, with one
// allocation per entry (its id and fields; see resp.RawRead) and one for
// the batch's messages and one for their fields.
func decodeRawRead(raw []byte, stream, group, consumer string) ([]*Message, error) {
	var msgs []Message
	var out []*Message
	var all []pelwarden.Field
	err := resp.RawRead(raw, func(n int) {
		msgs = make([]Message, n)
		out = make([]*Message, 0, n)
	}, func(e *resp.RawEntry) error {
		if all == nil {
			// Entries of a stream mostly have the same fields: the first's
			// count sizes the batch's (more grows it; the messages before
			// keep theirs).
			all = make([]pelwarden.Field, 0, len(e.Fields)/2*len(msgs))
		}
		first := len(all)
		for j := 0; j < len(e.Fields); j += 2 {
			all = append(all, pelwarden.Field{Name: e.Fields[j], Value: e.Fields[j+1]})
		}
		deliveries := int64(1)
		if e.Extra >= 2 {
			if e.Before < 0 {
				return fmt.Errorf("XREADGROUP: unexpected delivery count of %s: %d", e.ID, e.Before)
			}
			deliveries = e.Before + 1
		}
		m := &msgs[len(out)]
		// A full slice expression: a handler appending to its Fields must
		// not write into the next message's.
		*m = Message{ID: e.ID, Fields: all[first:len(all):len(all)], Deliveries: deliveries, Stream: stream, Group: group, Consumer: consumer}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
	}
	return out, nil
}

// decodeRead decodes an XREADGROUP reply of one stream, keeping each entry's
// fields in stream order (go-redis's XMessage uses a map, which loses order
// and duplicate fields). It accepts the RESP2 shape [[stream, entries]] and
// the RESP3 shape {stream: entries}. A read with CLAIM (Redis 8.4+) gives
// every entry two more elements: its idle time and the number of times it
// was delivered before this read (0 for a new entry), so a taken-over
// entry's Deliveries is that number plus one.
func decodeRead(v any, stream, group, consumer string) ([]*Message, error) {
	list, nfields, err := resp.ReadEntries(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
	}
	// One allocation for the batch's messages and one for all their fields
	// (the handlers may keep them: nothing is reused).
	msgs := make([]Message, len(list))
	all := make([]pelwarden.Field, 0, nfields)
	out := make([]*Message, 0, len(list))
	for i, e := range list {
		id, flat, extra, err := resp.Entry(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
		}
		first := len(all)
		for j := range len(flat) / 2 {
			name, value, err := resp.Field(flat, j, id)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
			}
			all = append(all, pelwarden.Field{Name: name, Value: value})
		}
		deliveries := int64(1)
		if len(extra) >= 2 {
			before, err := replyInt(extra[1])
			if err != nil || before < 0 {
				return nil, fmt.Errorf("%w: XREADGROUP: unexpected delivery count of %s: %v", pelwarden.ErrMalformedReply, id, extra[1])
			}
			deliveries = before + 1
		}
		m := &msgs[i]
		// A full slice expression: a handler appending to its Fields must
		// not write into the next message's.
		*m = Message{ID: id, Fields: all[first:len(all):len(all)], Deliveries: deliveries, Stream: stream, Group: group, Consumer: consumer}
		out = append(out, m)
	}
	return out, nil
}

// replyInt is an integer element of a reply (a string holding one too).
func replyInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T", v)
}
