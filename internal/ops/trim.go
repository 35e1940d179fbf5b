package ops

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// TrimOptions are the options of Trim and PlanTrim.
type TrimOptions struct {
	// Stream to trim. Required; it must have consumer groups.
	Stream string
	// Limit bounds the entries deleted in all (Trim) or counted (PlanTrim,
	// at most pelwarden.MaxCount). 0: Trim deletes every entry below the
	// bound, PlanTrim counts up to pelwarden.DefaultTrimLimit.
	Limit int64
	// Batch is the most entries one library call deletes (TrimArgs.Limit).
	// Defaults to pelwarden.DefaultTrimLimit.
	Batch int
}

// TrimReport is what Trim did (or PlanTrim found).
type TrimReport struct {
	// Trimmed entries (PlanTrim: that a trim would delete, counted up to
	// its Limit).
	Trimmed int64
	// Calls is the number of library calls made.
	Calls int
	// FirstID and LastID are the first and the last id trimmed (counted),
	// "" when none.
	FirstID, LastID string
	// Last is the last call's result: the bound, the group holding it, every
	// group's bounds, the stream's length, and More (entries below the
	// bound remain).
	Last *pelwarden.TrimResult
}

// PlanTrim reports what a trim would delete now without deleting anything
// (one dry-run call of the library's trim function): the bound, the group
// holding it back, every group's position, and the entries below the
// bound, counted up to o.Limit (Last.More: there are more).
func PlanTrim(ctx context.Context, rdb redis.UniversalClient, o TrimOptions) (*TrimReport, error) {
	limit := o.Limit
	switch {
	case limit == 0:
		limit = pelwarden.DefaultTrimLimit
	case limit < 0 || limit > pelwarden.MaxCount:
		return nil, argumentError("Limit", "must be between 1 and %d, got %d", pelwarden.MaxCount, limit)
	}
	res, err := pelwarden.NewLibrary(rdb).Trim(ctx, pelwarden.TrimArgs{Stream: o.Stream, Limit: int(limit), DryRun: true})
	if err != nil {
		return nil, err
	}
	return &TrimReport{Trimmed: res.Trimmed, Calls: 1, FirstID: res.FirstID, LastID: res.LastID, Last: res}, nil
}

// Trim deletes the entries of o.Stream that every consumer group has
// delivered and acknowledged, with the library's trim function (see
// pelwarden.Library.Trim: never an entry a group still needs), in calls of
// o.Batch entries until nothing below the bound remains or o.Limit entries
// are deleted. progress, if not nil, is called after each call with the
// totals so far. On error or interruption it returns what was done so far
// with the error.
func Trim(ctx context.Context, rdb redis.UniversalClient, o TrimOptions, progress func(TrimReport)) (*TrimReport, error) {
	if o.Limit < 0 {
		return nil, argumentError("Limit", "must not be negative, got %d", o.Limit)
	}
	batch := o.Batch
	switch {
	case batch == 0:
		batch = pelwarden.DefaultTrimLimit
	case batch < 0 || batch > pelwarden.MaxCount:
		return nil, argumentError("Batch", "must be between 1 and %d, got %d", pelwarden.MaxCount, batch)
	}
	lib := pelwarden.NewLibrary(rdb)
	rep := &TrimReport{}
	for {
		n := batch
		if o.Limit > 0 {
			n = int(min(int64(batch), o.Limit-rep.Trimmed))
		}
		if err := ctx.Err(); err != nil {
			return rep, interrupted(err)
		}
		res, err := lib.Trim(ctx, pelwarden.TrimArgs{Stream: o.Stream, Limit: n})
		if err != nil {
			if ctx.Err() != nil {
				return rep, interrupted(ctx.Err())
			}
			return rep, err
		}
		rep.Calls++
		rep.Trimmed += res.Trimmed
		if rep.FirstID == "" {
			rep.FirstID = res.FirstID
		}
		if res.LastID != "" {
			rep.LastID = res.LastID
		}
		rep.Last = res
		if progress != nil {
			progress(*rep)
		}
		if !res.More || (o.Limit > 0 && rep.Trimmed >= o.Limit) {
			return rep, nil
		}
	}
}
