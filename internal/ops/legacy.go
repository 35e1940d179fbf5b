package ops

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// LegacyDeadLetters is a dead-letter stream that pelwarden before v1.3.0
// wrote under its former name (pelwarden.LegacyDeadLetterStreamFor) and
// that still holds records.
type LegacyDeadLetters struct {
	// Stream is the former name ("orders:dead" for "orders").
	Stream string
	// Length is how many records it holds.
	Length int64
}

// Advice says what to do with the records, as a sentence.
func (l LegacyDeadLetters) Advice() string {
	return "written by pelwarden before v1.3.0 under the former name; send them back to their stream with `pelwarden dlq redrive '" +
		l.Stream + "'` or read them with `pelwarden dlq list '" + l.Stream + "'`"
}

// FindLegacyDeadLetters looks for records under the former dead-letter
// stream name of stream: nil when the name did not change (a hash-tagged
// stream), when the key does not exist or holds no stream, or when the
// stream is empty. One TYPE and one XLEN at most.
func FindLegacyDeadLetters(ctx context.Context, rdb redis.UniversalClient, stream string) (*LegacyDeadLetters, error) {
	name, differs := pelwarden.LegacyDeadLetterStreamFor(stream)
	if !differs {
		return nil, nil
	}
	t, err := rdb.Type(ctx, name).Result()
	if err != nil {
		return nil, commandError("TYPE", name, err)
	}
	if t != "stream" {
		return nil, nil
	}
	n, err := rdb.XLen(ctx, name).Result()
	if err != nil {
		return nil, commandError("XLEN", name, err)
	}
	if n == 0 {
		return nil, nil
	}
	return &LegacyDeadLetters{Stream: name, Length: n}, nil
}
