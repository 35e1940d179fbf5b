package reclaim

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/textbook"
)

// outcome is what a method did to one scenario.
type outcome struct {
	handled []string // ids handed to the handler and acked
	dead    []string // ids moved to the dead-letter stream
	passes  int
}

// reclaimer runs one method over a scenario until its PEL is empty.
type reclaimer struct {
	m   Method
	rdb *redis.Client
	lib *pelwarden.Library
	cfg Config
	sc  *scenario
}

// newReclaimer prepares a method; for MethodPelwarden it loads the library
// (outside the measured phase).
func newReclaimer(ctx context.Context, m Method, rdb *redis.Client, cfg Config, sc *scenario) (*reclaimer, error) {
	r := &reclaimer{m: m, rdb: rdb, cfg: cfg, sc: sc}
	if m == MethodPelwarden {
		r.lib = pelwarden.NewLibrary(rdb)
		if _, err := r.lib.Load(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// handle is the benchmark's handler: it does nothing with the entry.
func handle(id string, fields any) {}

// maxPasses bounds the passes over the PEL; every method empties it in one
// pass, so reaching the bound means the method is stuck.
const maxPasses = 5

func (r *reclaimer) reclaim(ctx context.Context) (outcome, error) {
	var out outcome
	out.handled = make([]string, 0, len(r.sc.ids))
	for {
		out.passes++
		var err error
		switch r.m {
		case MethodPelwarden:
			err = r.pelwardenPass(ctx, &out)
		case MethodTextbook:
			err = r.textbookPass(ctx, &out)
		case MethodWatermill:
			err = r.watermillPass(ctx, &out)
		case MethodPipelined:
			err = r.pipelinedPass(ctx, &out)
		default:
			err = fmt.Errorf("unknown method %q", r.m)
		}
		if err != nil {
			return out, err
		}
		// A pass is complete; repeat until nothing is pending.
		sum, err := r.rdb.XPending(ctx, r.sc.stream, r.sc.group).Result()
		if err != nil {
			return out, fmt.Errorf("XPENDING: %w", err)
		}
		if sum.Count == 0 {
			return out, nil
		}
		if out.passes >= maxPasses {
			return out, fmt.Errorf("%d entries still pending after %d passes", sum.Count, out.passes)
		}
	}
}

// pelwardenPass: Claim page by page; the library dead-letters poison entries
// and clears deleted ones; the live entries of a page are handled, then
// acked in one Ack call.
func (r *reclaimer) pelwardenPass(ctx context.Context, out *outcome) error {
	args := pelwarden.ClaimArgs{
		Stream: r.sc.stream, DeadLetterStream: r.sc.dlq, Group: r.sc.group, Consumer: rescuer,
		MinIdle: r.cfg.MinIdle, Count: r.cfg.PageSize, MaxDeliveries: r.cfg.MaxDeliveries,
	}
	for {
		page, err := r.lib.Claim(ctx, args)
		if err != nil {
			return err
		}
		out.dead = append(out.dead, page.DeadLettered...)
		if len(page.Entries) > 0 {
			ids := make([]string, 0, len(page.Entries))
			for _, e := range page.Entries {
				handle(e.ID, e.Fields)
				ids = append(ids, e.ID)
			}
			res, err := r.lib.Ack(ctx, pelwarden.AckArgs{Stream: r.sc.stream, Group: r.sc.group, Consumer: rescuer, IDs: ids})
			if err != nil {
				return err
			}
			if err := res.Err(); err != nil {
				return err
			}
			out.handled = append(out.handled, ids...)
		}
		if page.Done() {
			return nil
		}
		args.Cursor = page.Cursor
	}
}

// textbookPass runs the Textbook loop once over the scenario's PEL.
func (r *reclaimer) textbookPass(ctx context.Context, out *outcome) error {
	return textbook.Loop{
		Stream: r.sc.stream, DeadLetterStream: r.sc.dlq, Group: r.sc.group, Consumer: rescuer,
		MinIdle: r.cfg.MinIdle, Count: r.cfg.TextbookPageSize, MaxDeliveries: r.cfg.MaxDeliveries,
		Handled:      func(id string) { out.handled = append(out.handled, id) },
		DeadLettered: func(id string) { out.dead = append(out.dead, id) },
	}.Pass(ctx, r.rdb)
}

// watermillPass: XPENDING IDLE a page from the start of the PEL, then per
// entry one XCLAIM (with the same min-idle, so two claimers cannot both take
// it) and one XACK after handling. No delivery limit.
func (r *reclaimer) watermillPass(ctx context.Context, out *outcome) error {
	count := int64(r.cfg.WatermillPageSize)
	// Each page restarts at the head of the PEL; a page that leaves its
	// entries pending would be read again forever.
	maxPages := len(r.sc.ids)/r.cfg.WatermillPageSize + 10
	for pages := 1; ; pages++ {
		if pages > maxPages {
			return fmt.Errorf("no progress after %d XPENDING pages", pages-1)
		}
		xps, err := r.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.sc.stream, Group: r.sc.group,
			Idle: r.cfg.MinIdle, Start: "0", End: "+", Count: count}).Result()
		if err != nil {
			return fmt.Errorf("XPENDING IDLE: %w", err)
		}
		for _, xp := range xps {
			if xp.Idle < r.cfg.MinIdle {
				continue
			}
			xm, err := r.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: r.sc.stream, Group: r.sc.group,
				Consumer: rescuer, MinIdle: r.cfg.MinIdle, Messages: []string{xp.ID}}).Result()
			if errors.Is(err, redis.Nil) {
				// As watermill does: a nil entry is acked and skipped.
				if err := r.rdb.XAck(ctx, r.sc.stream, r.sc.group, xp.ID).Err(); err != nil {
					return fmt.Errorf("XACK: %w", err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("XCLAIM %s: %w", xp.ID, err)
			}
			// An entry deleted from the stream comes back empty; Redis 7+ and
			// Valkey drop it from the PEL in XCLAIM.
			for _, m := range xm {
				handle(m.ID, m.Values)
				if err := r.rdb.XAck(ctx, r.sc.stream, r.sc.group, m.ID).Err(); err != nil {
					return fmt.Errorf("XACK: %w", err)
				}
				out.handled = append(out.handled, m.ID)
			}
		}
		if int64(len(xps)) < count {
			return nil
		}
	}
}

// pipelinedPass: XAUTOCLAIM a page, handle it, and XACK every entry of the
// page in one pipelined round trip. No delivery-count check.
func (r *reclaimer) pipelinedPass(ctx context.Context, out *outcome) error {
	cursor := "0-0"
	for {
		msgs, next, err := r.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: r.sc.stream, Group: r.sc.group,
			Consumer: rescuer, MinIdle: r.cfg.MinIdle, Start: cursor, Count: int64(r.cfg.PageSize)}).Result()
		if err != nil {
			return fmt.Errorf("XAUTOCLAIM: %w", err)
		}
		if len(msgs) > 0 {
			p := r.rdb.Pipeline()
			for _, m := range msgs {
				handle(m.ID, m.Values)
				p.XAck(ctx, r.sc.stream, r.sc.group, m.ID)
			}
			if _, err := p.Exec(ctx); err != nil {
				return fmt.Errorf("pipelined XACK: %w", err)
			}
			for _, m := range msgs {
				out.handled = append(out.handled, m.ID)
			}
		}
		if next == "0-0" {
			return nil
		}
		cursor = next
	}
}
