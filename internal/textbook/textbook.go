// Package textbook is the reclaim loop the guides teach, run next to
// pelwarden by the benchmark suites: XAUTOCLAIM a page, one XPENDING per
// entry for its delivery count, XADD to the dead-letter stream and XACK.
package textbook

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultPageSize is the XAUTOCLAIM COUNT the guides use.
	DefaultPageSize = 50
	// OriginalIDField is the dead-letter record's field holding the entry's
	// id.
	OriginalIDField = "original_id"
)

// Loop is the reclaim loop the guides teach; both benchmark suites run it
// next to pelwarden.
// A pass XAUTOCLAIMs a page of Count entries idle at least MinIdle for
// Consumer, then for each entry sends XPENDING for its delivery count; an
// entry delivered more than MaxDeliveries times (this claim included) is
// copied with XADD to DeadLetterStream (its fields, plus original_id and
// deliveries) and XACKed, any other one is handed to a no-op handler and
// XACKed. Every command is its own round trip.
type Loop struct {
	// Stream, DeadLetterStream, Group and Consumer name the keys, the group
	// and the consumer that claims.
	Stream, DeadLetterStream, Group, Consumer string
	// MinIdle is XAUTOCLAIM's min-idle-time.
	MinIdle time.Duration
	// Count is XAUTOCLAIM's COUNT (DefaultPageSize in the guides).
	Count int
	// MaxDeliveries is the delivery limit: see Loop.
	MaxDeliveries int
	// Handled, when set, is called with the id of each entry handled, after
	// its XACK. Optional.
	Handled func(id string)
	// DeadLettered, when set, is called with the id of each entry copied to
	// the dead-letter stream, after its XACK. Optional.
	DeadLettered func(id string)
}

// Pass walks the PEL once, from its start until XAUTOCLAIM's cursor returns
// to 0-0. An entry found no longer pending when its XPENDING is sent
// (someone else acked it) is skipped.
func (t Loop) Pass(ctx context.Context, rdb *redis.Client) error {
	cursor := "0-0"
	for {
		msgs, next, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: t.Stream, Group: t.Group,
			Consumer: t.Consumer, MinIdle: t.MinIdle, Start: cursor, Count: int64(t.Count)}).Result()
		if err != nil {
			return fmt.Errorf("XAUTOCLAIM: %w", err)
		}
		for _, m := range msgs {
			p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: t.Stream, Group: t.Group,
				Start: m.ID, End: m.ID, Count: 1}).Result()
			if err != nil {
				return fmt.Errorf("XPENDING %s: %w", m.ID, err)
			}
			if len(p) == 0 {
				continue // no longer pending: someone else acked it
			}
			if p[0].RetryCount > int64(t.MaxDeliveries) {
				values := make(map[string]any, len(m.Values)+2)
				for k, v := range m.Values {
					values[k] = v
				}
				values[OriginalIDField] = m.ID
				values["deliveries"] = p[0].RetryCount
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: t.DeadLetterStream, Values: values}).Err(); err != nil {
					return fmt.Errorf("XADD dead-letter: %w", err)
				}
				if err := rdb.XAck(ctx, t.Stream, t.Group, m.ID).Err(); err != nil {
					return fmt.Errorf("XACK: %w", err)
				}
				if t.DeadLettered != nil {
					t.DeadLettered(m.ID)
				}
				continue
			}
			if err := rdb.XAck(ctx, t.Stream, t.Group, m.ID).Err(); err != nil {
				return fmt.Errorf("XACK: %w", err)
			}
			if t.Handled != nil {
				t.Handled(m.ID)
			}
		}
		if next == "0-0" {
			return nil
		}
		cursor = next
	}
}
