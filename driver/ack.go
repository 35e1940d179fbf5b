package driver

// The ack loop: batched acks, fenced or plain (Config.AckMode).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// ackLoop batches acks: one call per AckBatch ids or AckInterval (at most
// MinIdle/4),
// or at once when the consumer has drained what it had in hand.
// Failed batches are kept and retried, never dropped. It returns when ackStop
// is closed and everything is flushed, or when ctx is cancelled (the
// shutdown bound), logging what stays pending.
func (r *run) ackLoop(ctx context.Context) {
	var pending []ackItem
	// A succeeded entry waits for its ack at most MinIdle/4 too, so it
	// needs no lease extension meanwhile and its ack no fence (fenceFrom).
	interval := min(r.cfg.AckInterval, r.cfg.MinIdle/4)
	t := time.NewTimer(interval)
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
	// flush sends the pending acks, retrying until ctx ends.
	flush := func(ctx context.Context) bool {
		for len(pending) > 0 {
			batch := pending[:min(len(pending), r.cfg.AckBatch)]
			var res ackResult
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
				r.held.forget(itemIDs(batch)...)
				pending = pending[len(batch):]
				continue
			default: // permanent
				r.stop(fmt.Errorf("pelwarden/driver: ack: %w", err))
				return false
			}
			r.m.Count(EventAcked, int(res.acked))
			if len(res.ownedElsewhere) > 0 {
				r.m.Count(EventLostOwnership, len(res.ownedElsewhere))
				r.log.Warn("acks refused: entries are owned by another consumer now (they will be handled again there)",
					"count", len(res.ownedElsewhere), "ids", firstIDs(res.ownedElsewhere))
			}
			if res.notPending > 0 {
				// Typically the retry of an ack whose first attempt was
				// applied but whose reply was lost with the connection.
				r.log.Info("acked entries were no longer pending (acked already, or cleared from the group)",
					"count", res.notPending, "ids", firstIDs(res.notPendingIDs))
			}
			r.held.forget(itemIDs(batch)...)
			pending = pending[len(batch):]
		}
		return true
	}
	report := func() {
		ids := itemIDs(pending)
		r.held.forget(ids...)
		if len(pending) > 0 {
			r.log.Error("shutdown: acks not sent; these entries stay pending and will be handled again", "count", len(ids), "ids", firstIDs(ids))
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
			t.Reset(interval)
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

// ackResult is what one ack of a batch did.
type ackResult struct {
	acked          int64
	ownedElsewhere []string // refused: another consumer holds them
	notPending     int      // neither acked nor owned elsewhere
	notPendingIDs  []string // those of them the fenced ack named
}

// ack acks a batch the configured way (Config.AckMode). AckFenced acks
// with one XACK the entries no other consumer can have taken over yet (see
// fenceFrom), and through the fenced ack function only the others: held
// so long that a takeover was possible. Under load every entry is acked
// within milliseconds of its delivery, so the fence costs nothing there.
func (r *run) ack(ctx context.Context, batch []ackItem) (ackResult, error) {
	now := time.Since(monoEpoch)
	var plain, fenced []string
	for _, it := range batch {
		if now < it.ownedUntil {
			plain = append(plain, it.id)
		} else {
			fenced = append(fenced, it.id)
		}
	}
	var res ackResult
	if len(plain) > 0 {
		n, err := r.rdb.XAck(ctx, r.cfg.Stream, r.cfg.Group, plain...).Result()
		if redis.HasErrorPrefix(err, "NOGROUP") {
			return res, fmt.Errorf("pelwarden/driver: XACK: %w: %w", pelwarden.ErrNoGroup, err)
		}
		if redis.HasErrorPrefix(err, "NOPERM") {
			return res, fmt.Errorf("pelwarden/driver: XACK on stream %s: %w: %w", r.cfg.Stream, pelwarden.ErrNoPermission, err)
		}
		if err != nil {
			return res, fmt.Errorf("pelwarden/driver: XACK: %w", err)
		}
		res.acked = n
		res.notPending = len(plain) - int(n)
	}
	if len(fenced) > 0 {
		f, err := r.lib.Ack(ctx, pelwarden.AckArgs{Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer, IDs: fenced})
		if err != nil {
			return res, err
		}
		res.acked += f.Acked
		res.ownedElsewhere = f.OwnedElsewhere()
		res.notPending += len(f.NotPending)
		res.notPendingIDs = f.NotPending
	}
	return res, nil
}

func itemIDs(items []ackItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	return ids
}
