package driver

// The read loop: new entries with XREADGROUP ">", as many as the window
// has room for.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// readMargin is added to ReadBlock for a read's context deadline.
const readMargin = 2 * time.Second

// readLoop reads new entries with XREADGROUP ">", as many as the window
// offers (at most ReadCount). Only a read for a single entry blocks (up to
// ReadBlock): while entries keep coming, reads take what the window offers
// without blocking; once one finds nothing new, the loop waits for the
// next entry holding a single place. A blocked read holding the whole
// window would starve the reclaim pass for ReadBlock at a time.
//
// A lane of a consumer of several streams does not block: an idle stream
// is polled without BLOCK every ReadBlock/2 (see idlePoll), so idle
// streams hold neither a connection nor a place in the window.
func (r *run) readLoop(ctx, handlerCtx context.Context) {
	idle := true // the last read found nothing new (or none ran yet)
	block := len(r.Consumer.cfg.Streams) == 1
	for first := true; ctx.Err() == nil; first = false {
		want := r.cfg.ReadCount
		if idle {
			want = 1
			if !block && !first && !r.idlePoll(ctx) {
				return
			}
		}
		res := r.flow.reserve(ctx, partyRead, want)
		n := res.n
		if n == 0 {
			return
		}
		var msgs []*Message
		var began, rtt time.Duration
		err := retry(ctx, r.readGiveUp, r.readFailed, func(ctx context.Context) error {
			began = time.Since(monoEpoch)
			var err error
			msgs, err = r.read(ctx, n, idle && block)
			rtt = time.Since(monoEpoch) - began
			return err
		})
		if err != nil {
			r.flow.giveBack(res)
			if ctx.Err() != nil || r.stopping() {
				return
			}
			if redis.HasErrorPrefix(err, "NOGROUP") && !r.groupMissing(ctx, fmt.Errorf("%w: %v", pelwarden.ErrNoGroup, err)) {
				return
			}
			continue
		}
		if idle {
			rtt = 0 // it waited for entries: not a round trip
		}
		idle = len(msgs) == 0
		r.readIdle.Store(idle)
		if idle && r.inHand.Load() == 0 {
			r.drained()
		}
		r.m.Count(EventRead, len(msgs))
		r.dispatch(handlerCtx, msgs, res, began, rtt, len(msgs) == n)
	}
}

// idlePoll waits before the next read of an idle stream of a consumer of
// several streams: ReadBlock/2, jittered by ±10% so the streams' polls
// spread out. It reports false when ctx ended.
func (r *run) idlePoll(ctx context.Context) bool {
	d := r.cfg.ReadBlock / 2
	d += time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return ctxwait.Sleep(ctx, d)
}

// readGiveUp stops retrying a read at a missing group (handled by the
// caller) and once the consumer is stopping.
func (r *run) readGiveUp(err error, _ int) bool {
	return redis.HasErrorPrefix(err, "NOGROUP") || r.stopping()
}

func (r *run) readFailed(err error, attempt int) {
	if !redis.HasErrorPrefix(err, "NOGROUP") {
		r.commandError("read", err, attempt)
	}
}

// read runs one XREADGROUP, blocking up to ReadBlock when block is set, and
// decodes it keeping field order.
func (r *run) read(ctx context.Context, count int, block bool) ([]*Message, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReadBlock+readMargin)
	defer cancel()
	args := []any{"XREADGROUP", "GROUP", r.cfg.Group, r.cfg.Consumer, "COUNT", count}
	if block {
		args = append(args, "BLOCK", r.cfg.ReadBlock.Milliseconds())
	}
	args = append(args, "STREAMS", r.cfg.Stream, ">")
	v, err := r.rdb.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		return nil, fmt.Errorf("XREADGROUP GROUP %s %s on stream %s: %w: %w", r.cfg.Group, r.cfg.Consumer, r.cfg.Stream, pelwarden.ErrNoPermission, err)
	}
	if err != nil {
		return nil, err
	}
	return decodeRead(v, r.cfg.Stream, r.cfg.Group, r.cfg.Consumer)
}
