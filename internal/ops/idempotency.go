package ops

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// Idempotency is what a stream reports of idempotent publishing (XADD
// IDMP, Redis 8.6 and newer) in XINFO STREAM: how many publishes the
// server dropped as duplicates, and the window of ids it keeps.
type Idempotency struct {
	// Duplicates is XINFO STREAM's iids-duplicates: XADD IDMP calls the
	// server answered with an existing entry (retries that added nothing),
	// since the stream was created.
	Duplicates int64
	// Added is iids-added: XADD IDMP calls that added an entry.
	Added int64
	// Producers and IDs are pids-tracked and iids-tracked: the producer
	// ids and idempotency ids the stream keeps now.
	Producers, IDs int64
	// MaxSize and Duration are idmp-maxsize and idmp-duration: the ids
	// kept per producer, and for how long (XCFGSET).
	MaxSize  int64
	Duration time.Duration
}

// IdempotencyOf reads a stream's XINFO STREAM reply: nil when the server
// does not report idempotent publishing (before Redis 8.6, Valkey), which
// shows as no idmp-maxsize (at least 1 where reported).
func IdempotencyOf(info *redis.XInfoStream) *Idempotency {
	if info == nil || info.IDMPMaxSize <= 0 {
		return nil
	}
	return &Idempotency{
		Duplicates: info.IIDsDuplicates, Added: info.IIDsAdded,
		Producers: info.PIDsTracked, IDs: info.IIDsTracked,
		MaxSize: info.IDMPMaxSize, Duration: time.Duration(info.IDMPDuration) * time.Second,
	}
}

// StreamIdempotency reads stream's idempotent publishing (one XINFO STREAM,
// which also reads the stream's first and last entries, nothing else): nil
// when the server does not report it, and nil when the ACL user may not
// run XINFO STREAM (it is a fact shown beside the group's state, not part
// of it). Other errors name the command and the key.
func StreamIdempotency(ctx context.Context, rdb redis.UniversalClient, stream string) (*Idempotency, error) {
	info, err := rdb.XInfoStream(ctx, stream).Result()
	switch {
	case pelwarden.Matches(err, pelwarden.ErrNoPermission):
		return nil, nil
	case err != nil:
		return nil, commandError("XINFO STREAM", stream, err)
	}
	return IdempotencyOf(info), nil
}
