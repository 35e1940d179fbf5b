package ops

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// ReapOptions are the options of Reap.
type ReapOptions struct {
	// Stream and Group are required.
	Stream, Group string
	// Idle: consumers idle at least this long that own nothing are deleted.
	// Required, at least a millisecond.
	Idle time.Duration
	// Keep names consumers never deleted.
	Keep []string
}

// Reap deletes the group's consumers idle at least Idle that own no pending
// entries, with the library's reap function (check and delete in one
// atomic step); consumers idle that long that still own entries are kept
// and listed.
func Reap(ctx context.Context, rdb redis.UniversalClient, o ReapOptions) (*pelwarden.ReapResult, error) {
	if o.Idle < time.Millisecond {
		return nil, argumentError("Idle", "must be at least 1ms, got %v", o.Idle)
	}
	return pelwarden.NewLibrary(rdb).Reap(ctx, pelwarden.ReapArgs{Stream: o.Stream, Group: o.Group, Idle: o.Idle, Keep: o.Keep})
}

// ReapCandidates lists the consumers a Reap with o would delete now (idle
// at least o.Idle, owning nothing, not kept) and those it would keep
// because they still own entries (XINFO CONSUMERS: one call, a row per
// consumer).
func ReapCandidates(ctx context.Context, rdb redis.UniversalClient, o ReapOptions) (deleted []string, kept []pelwarden.ConsumerPending, err error) {
	cs, err := rdb.XInfoConsumers(ctx, o.Stream, o.Group).Result()
	if err != nil {
		return nil, nil, commandError("XINFO CONSUMERS", o.Stream, err)
	}
	for _, c := range cs {
		if c.Idle < o.Idle || slices.Contains(o.Keep, c.Name) {
			continue
		}
		if c.Pending > 0 {
			kept = append(kept, pelwarden.ConsumerPending{Name: c.Name, Pending: c.Pending})
			continue
		}
		deleted = append(deleted, c.Name)
	}
	return deleted, kept, nil
}
