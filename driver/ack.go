package driver

// The ack loop: batched acks, fenced or plain (Config.AckMode).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden"
)

// ackLoop batches acks: one fenced call per AckBatch ids or AckInterval,
// or at once when the consumer has drained what it had in hand.
// Failed batches are kept and retried, never dropped. It returns when ackStop
// is closed and everything is flushed, or when ctx is cancelled (the
// shutdown bound), logging what stays pending.
func (r *run) ackLoop(ctx context.Context) {
	var pending []string
	t := time.NewTimer(r.cfg.AckInterval)
	defer t.Stop()
	// live ends at ackStop, so a flush retrying on a server that does not
	// answer gives way to the final, bounded flush.
	live, stopLive := context.WithCancel(ctx)
	defer stopLive()
	go func() {
		select {
		case <-r.ackStop:
			stopLive()
		case <-live.Done():
		}
	}()
	failed := func(err error, attempt int) { r.commandError("ack", err, attempt) }
	flush := func(ctx context.Context) bool {
		for len(pending) > 0 {
			batch := pending[:min(len(pending), r.cfg.AckBatch)]
			var res pelwarden.AckResult
			err := retry(ctx, onPermanent, failed, func(ctx context.Context) error {
				var err error
				res, err = r.ack(ctx, batch)
				return err
			})
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return false
			case errors.Is(err, pelwarden.ErrNoGroup):
				// The group and its PEL are gone: nothing left to ack.
				r.groupMissing(ctx, err)
				r.held.forget(batch...)
				pending = pending[len(batch):]
				continue
			default: // permanent
				r.stop(fmt.Errorf("pelwarden/driver: ack: %w", err))
				return false
			}
			r.m.Count(EventAcked, int(res.Acked))
			if lost := res.OwnedElsewhere(); len(lost) > 0 {
				r.m.Count(EventLostOwnership, len(lost))
				r.log.Warn("acks refused: entries are owned by another consumer now (they will be handled again there)",
					"count", len(lost), "ids", firstIDs(lost))
			}
			if len(res.NotPending) > 0 {
				// Typically the retry of an ack whose first attempt was
				// applied but whose reply was lost with the connection.
				r.log.Info("acked entries were no longer pending (acked already, or cleared from the group)",
					"count", len(res.NotPending), "ids", firstIDs(res.NotPending))
			}
			r.held.forget(batch...)
			pending = pending[len(batch):]
		}
		return true
	}
	report := func() {
		r.held.forget(pending...)
		if len(pending) > 0 {
			r.log.Error("shutdown: acks not sent; these entries stay pending and will be handled again", "count", len(pending), "ids", firstIDs(pending))
		}
	}
	for {
		select {
		case <-r.acks.full:
			pending = append(pending, r.acks.take()...)
			if len(pending) >= r.cfg.AckBatch {
				flush(live)
			}
		case <-r.acks.drained:
			pending = append(pending, r.acks.take()...)
			flush(live)
		case <-t.C:
			pending = append(pending, r.acks.take()...)
			flush(live)
			t.Reset(r.cfg.AckInterval)
		case <-r.ackStop:
			// Handlers that return from now on (after the shutdown timeout)
			// are not acked: their entries stay pending.
			pending = append(pending, r.acks.close()...)
			// The final flush is bounded by ShutdownTimeout (a deadline, so
			// clients with ContextTimeoutEnabled stop waiting on a hung server).
			fctx, cancel := context.WithTimeout(ctx, r.cfg.ShutdownTimeout)
			for len(pending) > 0 && fctx.Err() == nil {
				if !flush(fctx) && r.stopping() {
					break // a permanent error: retrying cannot help
				}
			}
			cancel()
			report()
			return
		case <-ctx.Done():
			pending = append(pending, r.acks.close()...)
			report()
			return
		}
	}
}

// ack acks ids the configured way (Config.AckMode).
func (r *run) ack(ctx context.Context, ids []string) (pelwarden.AckResult, error) {
	if r.cfg.AckMode == AckPlain {
		n, err := r.rdb.XAck(ctx, r.cfg.Stream, r.cfg.Group, ids...).Result()
		if err != nil {
			return pelwarden.AckResult{}, fmt.Errorf("pelwarden/driver: XACK: %w", err)
		}
		return pelwarden.AckResult{Acked: n}, nil
	}
	res, err := r.lib.Ack(ctx, pelwarden.AckArgs{Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer, IDs: ids})
	if err != nil {
		return pelwarden.AckResult{}, err
	}
	return *res, nil
}
