package driver

// The ack loop: batched acks, fenced or plain (Config.AckMode).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// ackLoop batches acks: one fenced call per AckBatch ids or AckInterval,
// or at once when the consumer has drained what it had in hand.
// Failed batches are kept and retried, never dropped. It returns when ackStop
// is closed and everything is flushed, or when ctx is cancelled (the
// shutdown bound), logging what stays pending.
func (c *Consumer) ackLoop(ctx context.Context) {
	var pending []string
	t := time.NewTimer(c.cfg.AckInterval)
	defer t.Stop()
	attempt := 0
	flush := func(ctx context.Context) bool {
		for len(pending) > 0 {
			batch := pending[:min(len(pending), c.cfg.AckBatch)]
			r, err := c.ack(ctx, batch)
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				c.commandError("ack", err, attempt)
				if errors.Is(err, pelwarden.ErrNoGroup) {
					// The group and its PEL are gone: nothing left to ack.
					c.groupMissing(ctx, err)
					c.forget(batch...)
					pending = pending[len(batch):]
					continue
				}
				if permanent(err) {
					c.stop(fmt.Errorf("pelwarden/driver: ack: %w", err))
					return false
				}
				attempt++
				return ctxwait.Sleep(ctx, backoff(attempt))
			}
			attempt = 0
			c.m.Count(EventAcked, int(r.Acked))
			if lost := r.OwnedElsewhere(); len(lost) > 0 {
				c.m.Count(EventLostOwnership, len(lost))
				c.log.Warn("acks refused: entries are owned by another consumer now (they will be handled again there)",
					"count", len(lost), "ids", firstIDs(lost))
			}
			if len(r.NotPending) > 0 {
				// Typically the retry of an ack whose first attempt was
				// applied but whose reply was lost with the connection.
				c.log.Info("acked entries were no longer pending (acked already, or cleared from the group)",
					"count", len(r.NotPending), "ids", firstIDs(r.NotPending))
			}
			c.forget(batch...)
			pending = pending[len(batch):]
		}
		return true
	}
	report := func() {
		c.forget(pending...)
		if len(pending) > 0 {
			c.log.Error("shutdown: acks not sent; these entries stay pending and will be handled again", "count", len(pending), "ids", firstIDs(pending))
		}
	}
	for {
		select {
		case <-c.acks.full:
			pending = append(pending, c.acks.take()...)
			if len(pending) >= c.cfg.AckBatch {
				flush(ctx)
			}
		case <-c.acks.drained:
			pending = append(pending, c.acks.take()...)
			flush(ctx)
		case <-t.C:
			pending = append(pending, c.acks.take()...)
			flush(ctx)
			t.Reset(c.cfg.AckInterval)
		case <-c.ackStop:
			// Handlers that return from now on (after the shutdown timeout)
			// are not acked: their entries stay pending.
			pending = append(pending, c.acks.close()...)
			// The final flush is bounded by ShutdownTimeout (a deadline, so
			// clients with ContextTimeoutEnabled stop waiting on a hung server).
			fctx, cancel := context.WithTimeout(ctx, c.cfg.ShutdownTimeout)
			for len(pending) > 0 && fctx.Err() == nil {
				if !flush(fctx) && c.stopping() {
					break // a permanent error: retrying cannot help
				}
			}
			cancel()
			report()
			return
		case <-ctx.Done():
			pending = append(pending, c.acks.close()...)
			report()
			return
		}
	}
}

// ack acks ids the configured way (Config.AckMode).
func (c *Consumer) ack(ctx context.Context, ids []string) (pelwarden.AckResult, error) {
	if c.cfg.AckMode == AckPlain {
		n, err := c.rdb.XAck(ctx, c.cfg.Stream, c.cfg.Group, ids...).Result()
		if err != nil {
			return pelwarden.AckResult{}, fmt.Errorf("pelwarden/driver: XACK: %w", err)
		}
		return pelwarden.AckResult{Acked: n}, nil
	}
	r, err := c.lib.Ack(ctx, pelwarden.AckArgs{Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer, IDs: ids})
	if err != nil {
		return pelwarden.AckResult{}, err
	}
	return *r, nil
}
