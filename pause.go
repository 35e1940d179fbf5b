package pelwarden

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// PauseKeyFor returns the pause hash of a stream: one field per paused
// consumer group, named like the dead-letter stream and in the stream's
// slot ("{orders}" -> "{orders}:paused", "orders" -> "{orders}:paused").
// Operators write it (PauseGroup, ResumeGroup, `pelwarden pause`); driver
// consumers read it every second (ReadPause). ACL users of a consumer need
// read access to it (+hget); an operator pausing needs write access
// (+hset +hdel +time).
func PauseKeyFor(stream string) string { return keyInSlot(stream, ":paused") }

// Pause is a consumer group paused by an operator: its consumers take no
// new entries (no reads, no claims) and start no handler until it is
// resumed; handlers already running finish and their acks land.
type Pause struct {
	// By names who paused it; Reason says why (both free text).
	By, Reason string
	// At is when, on the server's clock (millisecond precision).
	At time.Time
}

// pauseRecord is a Pause as stored in its hash field.
type pauseRecord struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	AtMS   int64  `json:"at_ms"`
}

// MaxPauseText bounds Pause.By and Pause.Reason, in bytes.
const MaxPauseText = 1024

// PauseGroup pauses group on stream: it records p (its At set from the
// server's clock) in the stream's pause hash, replacing an earlier pause
// of the group. Running consumers stop taking entries at their next check
// (every second); a consumer started later waits. By and Reason longer
// than MaxPauseText fail with an error matching ErrInvalidArgument. The
// stream and group are not checked: pausing a group before it exists is
// allowed.
func PauseGroup(ctx context.Context, rdb redis.Cmdable, stream, group string, p Pause) error {
	const fn = "PauseGroup"
	if err := checkNames(fn, "stream", stream, "group", group); err != nil {
		return err
	}
	switch {
	case len(p.By) > MaxPauseText:
		return argError(fn, "By", "at most %d bytes, got %d", MaxPauseText, len(p.By))
	case len(p.Reason) > MaxPauseText:
		return argError(fn, "Reason", "at most %d bytes, got %d", MaxPauseText, len(p.Reason))
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return &CommandError{Command: "TIME", Err: err}
	}
	v, err := json.Marshal(pauseRecord{By: p.By, Reason: p.Reason, AtMS: now.UnixMilli()})
	if err != nil {
		return fmt.Errorf("pelwarden.PauseGroup: %w", err)
	}
	key := PauseKeyFor(stream)
	if err := rdb.HSet(ctx, key, group, v).Err(); err != nil {
		return &CommandError{Command: "HSET", Key: key, Err: err}
	}
	return nil
}

// ResumeGroup ends a pause of group on stream; it reports whether the group
// was paused. Running consumers take entries again at their next check
// (every second).
func ResumeGroup(ctx context.Context, rdb redis.Cmdable, stream, group string) (bool, error) {
	if err := checkNames("ResumeGroup", "stream", stream, "group", group); err != nil {
		return false, err
	}
	key := PauseKeyFor(stream)
	n, err := rdb.HDel(ctx, key, group).Result()
	if err != nil {
		return false, &CommandError{Command: "HDEL", Key: key, Err: err}
	}
	return n > 0, nil
}

// ReadPause returns the pause of group on stream, nil when it is not
// paused. A field that is not a pause record PauseGroup wrote fails with
// an error naming the key and field.
func ReadPause(ctx context.Context, rdb redis.Cmdable, stream, group string) (*Pause, error) {
	key := PauseKeyFor(stream)
	v, err := rdb.HGet(ctx, key, group).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, &CommandError{Command: "HGET", Key: key, Err: err}
	}
	return DecodePause(key, group, v)
}

// DecodePause decodes the field group of the pause hash key, whose value is
// v (for a caller that read the hash itself).
func DecodePause(key, group, v string) (*Pause, error) {
	var r pauseRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil || r.AtMS <= 0 {
		return nil, fmt.Errorf("pelwarden: pause hash %s: field %q is %q, not a pause record", key, group, clip(v))
	}
	return &Pause{By: r.By, Reason: r.Reason, At: time.UnixMilli(r.AtMS)}, nil
}
