package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// PurgeOptions are the options of Purge.
type PurgeOptions struct {
	// DeadLetterStream to delete records from. Required.
	DeadLetterStream string
	// OlderThan deletes only records dead-lettered longer ago than this
	// (by record id, against the server's clock); 0 deletes every record.
	OlderThan time.Duration
}

// PurgeResult is what Purge did.
type PurgeResult struct {
	// Deleted records, and the records left.
	Deleted, Remaining int64
	// Cutoff is the first id kept ("" when every record was deleted).
	Cutoff string
}

// Purge deletes dead-letter records for good with XTRIM: every record, or
// with OlderThan those whose id time is older than the server's clock
// minus OlderThan (XTRIM MINID). It refuses, with a *WorkStreamError, a
// stream that has consumer groups. The stream must exist (check first).
func Purge(ctx context.Context, rdb redis.UniversalClient, o PurgeOptions) (*PurgeResult, error) {
	key := o.DeadLetterStream
	if o.OlderThan < 0 {
		return nil, argumentError("OlderThan", "must not be negative, got %v", o.OlderThan)
	}
	if err := RefuseWorkStream(ctx, rdb, key); err != nil {
		return nil, err
	}
	out := &PurgeResult{}
	var err error
	if o.OlderThan > 0 {
		out.Cutoff = PurgeCutoff(ServerTime(ctx, rdb), o.OlderThan)
		out.Deleted, err = rdb.XTrimMinID(ctx, key, out.Cutoff).Result()
	} else {
		out.Deleted, err = rdb.XTrimMaxLen(ctx, key, 0).Result()
	}
	if err != nil {
		return nil, commandError("XTRIM", key, err)
	}
	out.Remaining, _ = rdb.XLen(ctx, key).Result()
	return out, nil
}

// PurgeCutoff is the first record id Purge keeps when deleting records
// older than olderThan at the server time now.
func PurgeCutoff(now time.Time, olderThan time.Duration) string {
	return fmt.Sprintf("%d-0", max(now.Add(-olderThan).UnixMilli(), 0))
}

// RefuseWorkStream returns a *WorkStreamError when key has consumer groups.
func RefuseWorkStream(ctx context.Context, rdb redis.UniversalClient, key string) error {
	groups, err := rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return commandError("XINFO GROUPS", key, err)
	}
	if len(groups) == 0 {
		return nil
	}
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	return &WorkStreamError{Key: key, Groups: names}
}

// Count is a bounded count: N items counted, and whether the count is
// exact (Exact false: at least N; counting stopped at a bound).
type Count struct {
	N     int64
	Exact bool
}

// CountPurge counts the records a Purge with olderThan would delete,
// reading at most limit records (XRANGE COUNT pages from the start, ids
// only kept). olderThan 0 counts every record (XLEN, exact).
func CountPurge(ctx context.Context, rdb redis.UniversalClient, key string, olderThan time.Duration, limit int64) (Count, error) {
	n, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		return Count{}, commandError("XLEN", key, err)
	}
	if olderThan <= 0 || n == 0 {
		return Count{N: n, Exact: true}, nil
	}
	cutoff := PurgeCutoff(ServerTime(ctx, rdb), olderThan)
	// Everything is older when the newest record is.
	last, err := XRevRange(ctx, rdb, key, "+", "-", 1)
	if err != nil {
		return Count{}, commandError("XREVRANGE", key, err)
	}
	if len(last) == 1 && lessID(last[0].ID, cutoff) {
		return Count{N: n, Exact: true}, nil
	}
	var counted int64
	start := "-"
	for counted < limit {
		want := min(1000, limit-counted)
		page, err := XRange(ctx, rdb, key, start, "("+cutoff, want)
		if err != nil {
			return Count{}, commandError("XRANGE", key, err)
		}
		counted += int64(len(page))
		if int64(len(page)) < want {
			return Count{N: counted, Exact: true}, nil
		}
		start = "(" + page[len(page)-1].ID
	}
	return Count{N: counted, Exact: false}, nil
}

// ServerTime returns the server's clock (ages are computed against it, not
// against this machine's), or this machine's when TIME fails.
func ServerTime(ctx context.Context, rdb redis.UniversalClient) time.Time {
	t, err := rdb.Time(ctx).Result()
	if err != nil {
		return time.Now()
	}
	return t
}
