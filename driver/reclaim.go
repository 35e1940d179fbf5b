package driver

// The reclaim loop: passes over the PEL through the claim function, and
// the reaping of dead consumers.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// reclaimLoop runs a reclaim pass at start and every ReclaimInterval, when
// something is idle. At start it calls the claim function at least once,
// idle entries or not (one page when nothing is idle): the library checks
// the ACL for every command a claim can need, so a consumer that may not,
// say, XACK stops at start instead of at its first poison entry.
func (c *Consumer) reclaimLoop(ctx, handlerCtx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if idle := c.anythingIdle(ctx); idle || first {
			c.reclaimPass(ctx, handlerCtx, !idle)
		}
		if c.cfg.ReapIdle > 0 && ctx.Err() == nil {
			c.reap(ctx)
		}
		t.Reset(c.cfg.ReclaimInterval)
	}
}

// anythingIdle reports whether some pending entry has been idle for MinIdle,
// so a reclaim pass may find work. A pass over a PEL with nothing idle
// would walk all of it through the claim function (about 6 ms of server
// time per 5,000 entries: 1.2 s for 1,000,000); XPENDING IDLE scans the PEL
// in the server's own code and stops at the first idle entry (75 ms for
// 1,000,000 entries with nothing idle, microseconds for a small PEL). An
// error is logged and the pass runs anyway.
func (c *Consumer) anythingIdle(ctx context.Context) bool {
	p, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.cfg.Stream, Group: c.cfg.Group,
		Idle: c.cfg.MinIdle, Start: "-", End: "+", Count: 1}).Result()
	if err != nil {
		if ctx.Err() == nil && !redis.HasErrorPrefix(err, "NOGROUP") {
			c.commandError("check for idle entries", err, 0)
		}
		return true
	}
	return len(p) > 0
}

// reclaimPass walks the PEL page by page with the claim function until the
// cursor returns to 0-0 (after the first page with onePage).
func (c *Consumer) reclaimPass(ctx, handlerCtx context.Context, onePage bool) {
	maxDeliveries := c.cfg.MaxDeliveries
	if maxDeliveries == NoDeliveryLimit {
		maxDeliveries = 0
	}
	cursor := "0-0"
	for attempt := 0; ctx.Err() == nil; {
		n := c.slots.acquire(ctx, c.cfg.ClaimCount, reclaimLinger)
		if n == 0 {
			return
		}
		page, err := c.lib.Claim(ctx, pelwarden.ClaimArgs{
			Stream: c.cfg.Stream, DeadLetterStream: c.cfg.DeadLetterStream, Group: c.cfg.Group,
			Consumer: c.cfg.Consumer, MinIdle: c.cfg.MinIdle, Cursor: cursor, Count: n,
			MaxDeliveries: maxDeliveries, Backoff: c.cfg.Backoff,
		})
		if err != nil {
			c.slots.release(n)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, pelwarden.ErrNoGroup) {
				if !c.groupMissing(ctx, err) {
					return
				}
				continue
			}
			if permanent(err) {
				c.stop(fmt.Errorf("pelwarden/driver: reclaim: %w", err))
				return
			}
			c.commandError("reclaim", err, attempt)
			if attempt >= 5 {
				return // give up this pass; the next one starts over
			}
			ctxwait.Sleep(ctx, backoff(attempt))
			attempt++
			continue
		}
		attempt = 0
		c.slots.release(n - len(page.Entries))
		c.m.Count(EventClaimed, len(page.Entries))
		if len(page.DeadLettered) > 0 {
			c.m.DeadLettered(pelwarden.ReasonMaxDeliveries, len(page.DeadLettered))
			c.log.Warn("dead-lettered entries delivered too often", "count", len(page.DeadLettered),
				"max_deliveries", maxDeliveries, "ids", firstIDs(page.DeadLettered))
		}
		if len(page.TooLarge) > 0 {
			c.m.Count(EventTooLarge, len(page.TooLarge))
			c.log.Error("entries at MaxDeliveries have too many fields to dead-letter atomically; they stay pending for an operator",
				"count", len(page.TooLarge), "ids", firstIDs(page.TooLarge))
		}
		if len(page.Deleted) > 0 {
			c.m.Count(EventDeletedFromPEL, len(page.Deleted))
			c.log.Warn("pending entries were deleted from the stream; cleared from the PEL", "count", len(page.Deleted), "ids", firstIDs(page.Deleted))
		}
		msgs := make([]Message, len(page.Entries))
		ptrs := make([]*Message, len(page.Entries))
		for i, e := range page.Entries {
			msgs[i] = Message{ID: e.ID, Fields: e.Fields, Deliveries: e.Deliveries, Stream: c.cfg.Stream, Group: c.cfg.Group}
			ptrs[i] = &msgs[i]
		}
		c.dispatch(handlerCtx, ptrs)
		if page.Done() || onePage {
			return
		}
		cursor = page.Cursor
	}
}

func (c *Consumer) reap(ctx context.Context) {
	r, err := c.lib.Reap(ctx, pelwarden.ReapArgs{Stream: c.cfg.Stream, Group: c.cfg.Group, Idle: c.cfg.ReapIdle, Keep: []string{c.cfg.Consumer}})
	if err != nil {
		if ctx.Err() == nil {
			c.commandError("reap", err, 0)
		}
		return
	}
	if len(r.Deleted) > 0 {
		c.m.Count(EventReaped, len(r.Deleted))
		c.log.Info("reaped idle consumers that owned nothing", "consumers", r.Deleted)
	}
	for _, k := range r.Kept {
		c.log.Debug("idle consumer kept: it still owns pending entries", "idle_consumer", k.Name, "pending", k.Pending)
	}
}
