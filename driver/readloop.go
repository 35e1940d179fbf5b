package driver

// The read loop: new entries with XREADGROUP ">", never more than free
// handler slots.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// How long acquire waits for more slots once it has one: briefly for reads
// (new entries should not wait), longer for reclaim pages (a claim call has
// a larger fixed cost, and reclaimed entries are not in a hurry).
const (
	readLinger    = time.Millisecond
	reclaimLinger = 10 * time.Millisecond
)

// readMargin is added to ReadBlock for a read's context deadline.
const readMargin = 2 * time.Second

// readLoop reads new entries with XREADGROUP ">", never more than free
// handler slots nor ReadCount. Only a read for a single entry blocks (up to
// ReadBlock): while entries keep coming, reads take every free slot (up to
// ReadCount) without blocking; once one finds nothing new, the loop waits
// for the next entry holding a single slot. A blocked read holding every
// free slot would starve the reclaim pass for ReadBlock at a time.
func (c *Consumer) readLoop(ctx, handlerCtx context.Context) {
	idle := true // the last read found nothing new (or none ran yet)
	for attempt := 0; ctx.Err() == nil; {
		want := min(c.cfg.Concurrency+c.cfg.Prefetch, c.cfg.ReadCount)
		if idle {
			want = 1
		}
		n := c.slots.acquire(ctx, want, readLinger)
		if n == 0 {
			return
		}
		msgs, err := c.read(ctx, n, idle)
		if err != nil {
			c.slots.release(n)
			if ctx.Err() != nil {
				return
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				if !c.groupMissing(ctx, fmt.Errorf("%w: %v", pelwarden.ErrNoGroup, err)) {
					return
				}
				continue
			}
			c.commandError("read", err, attempt)
			ctxwait.Sleep(ctx, backoff(attempt))
			attempt++
			continue
		}
		attempt = 0
		idle = len(msgs) == 0
		c.readIdle.Store(idle)
		if idle && c.inHand.Load() == 0 {
			c.drained()
		}
		c.slots.release(n - len(msgs))
		c.m.Count(EventRead, len(msgs))
		c.dispatch(handlerCtx, msgs)
	}
}

// read runs one XREADGROUP, blocking up to ReadBlock when block is set, and
// decodes it keeping field order.
func (c *Consumer) read(ctx context.Context, count int, block bool) ([]*Message, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadBlock+readMargin)
	defer cancel()
	args := []any{"XREADGROUP", "GROUP", c.cfg.Group, c.cfg.Consumer, "COUNT", count}
	if block {
		args = append(args, "BLOCK", c.cfg.ReadBlock.Milliseconds())
	}
	args = append(args, "STREAMS", c.cfg.Stream, ">")
	v, err := c.rdb.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		return nil, fmt.Errorf("XREADGROUP GROUP %s %s on stream %s: %w: %w", c.cfg.Group, c.cfg.Consumer, c.cfg.Stream, pelwarden.ErrNoPermission, err)
	}
	if err != nil {
		return nil, err
	}
	return decodeRead(v, c.cfg.Stream, c.cfg.Group)
}
