package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// Flag checks, run before connecting: bad input never reaches the server.

func positiveInt(name string, v int) error {
	if v <= 0 {
		return usageErrorf("--%s must be positive, got %d", name, v)
	}
	return nil
}

func intInRange(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return usageErrorf("--%s must be between %d and %d, got %d", name, lo, hi, v)
	}
	return nil
}

func positiveDuration(name string, d time.Duration) error {
	if d <= 0 {
		return usageErrorf("--%s must be a positive duration such as 30s or 5m, got %v", name, d)
	}
	return nil
}

func nonNegativeDuration(name string, d time.Duration) error {
	if d < 0 {
		return usageErrorf("--%s must not be negative, got %v", name, d)
	}
	return nil
}

// nonEmptyFlag rejects a flag given explicitly as "".
func nonEmptyFlag(cmd *cobra.Command, name, v string) error {
	if v == "" && !cmd.Flags().Changed(name) {
		return nil
	}
	if err := pelwarden.CheckName(v); err != nil {
		return usageErrorf("--%s %v", name, err)
	}
	return nil
}

// checkStreamID accepts a full stream id, "1700000000000-0"
// (pelwarden.ParseID).
func checkStreamID(what, id string) error {
	if _, err := pelwarden.ParseID(id); err != nil {
		if ms, seq, ok := strings.Cut(id, "-"); ok && digits(ms) && digits(seq) {
			return usageErrorf("%s %q is out of range", what, clipText(id, 64))
		}
		return usageErrorf("%s %q is not a stream id like 1700000000000-0", what, clipText(id, 64))
	}
	return nil
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Server-side checks that turn a library error into a message naming what
// is missing.

// keyType returns the type of key ("none" when it does not exist).
func keyType(ctx context.Context, rdb redis.UniversalClient, key string) (string, error) {
	t, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return "", failuref("TYPE %s: %v", key, err)
	}
	return t, nil
}

// needStream fails with ExitBadTarget unless key holds a stream. what names
// the key in the message, e.g. "dead-letter stream".
func needStream(ctx context.Context, rdb redis.UniversalClient, what, key string) error {
	t, err := keyType(ctx, rdb, key)
	if err != nil {
		return err
	}
	switch t {
	case "stream":
		return nil
	case "none":
		return targetErrorf("%s %q does not exist", what, key)
	}
	return targetErrorf("%s %q holds a %s, not a stream", what, key, t)
}

// deadLetterFlag is the value of --dlq for stream: the flag, which must not
// be empty when given, else the stream's dead-letter stream.
func deadLetterFlag(cmd *cobra.Command, stream, dlq string) (string, error) {
	if err := nonEmptyFlag(cmd, "dlq", dlq); err != nil {
		return "", err
	}
	if dlq == "" {
		return pelwarden.DeadLetterStreamFor(stream), nil
	}
	return dlq, nil
}

// groupStats is one stats call on (stream, group, dlq), with ErrNoGroup and
// ErrWrongType explained (explainGroupError). It checks the keys and the
// group before a command changes anything.
func groupStats(ctx context.Context, rdb redis.UniversalClient, stream, group, dlq string) (*pelwarden.Stats, error) {
	st, err := pelwarden.NewLibrary(rdb).Stats(ctx, pelwarden.StatsArgs{Stream: stream, DeadLetterStream: dlq, Group: group})
	if err != nil {
		return nil, explainGroupError(ctx, rdb, err, stream, group, dlq)
	}
	return st, nil
}

// explainGroupError replaces ErrNoGroup / ErrWrongType from a call on
// (stream, group, dlq) by a message that says which key or group is wrong.
// Other errors are returned unchanged.
func explainGroupError(ctx context.Context, rdb redis.UniversalClient, err error, stream, group, dlq string) error {
	if !errors.Is(err, pelwarden.ErrNoGroup) && !errors.Is(err, pelwarden.ErrWrongType) {
		return err
	}
	t, terr := keyType(ctx, rdb, stream)
	if terr != nil {
		return terr
	}
	switch t {
	case "none":
		return targetErrorf("stream %q does not exist (check the name; a hash tag such as {orders} is part of it)", stream)
	case "stream":
	default:
		return targetErrorf("stream %q holds a %s, not a stream", stream, t)
	}
	if errors.Is(err, pelwarden.ErrNoGroup) {
		groups, gerr := rdb.XInfoGroups(ctx, stream).Result()
		if gerr != nil {
			return classify(err)
		}
		var names []string
		for _, g := range groups {
			if g.Name == group {
				return classify(err) // it exists after all (raced): report as is
			}
			names = append(names, g.Name)
		}
		if len(names) == 0 {
			return targetErrorf("group %q does not exist on stream %q, which has no consumer groups", group, stream)
		}
		return targetErrorf("group %q does not exist on stream %q (its groups: %s)", group, stream, strings.Join(names, ", "))
	}
	if dlq != "" {
		t, terr := keyType(ctx, rdb, dlq)
		if terr == nil && t != "stream" && t != "none" {
			return targetErrorf("dead-letter stream %q holds a %s, not a stream (choose another with --dlq)", dlq, t)
		}
	}
	return classify(err)
}

// serverTime returns the server's clock (ages are computed against it, not
// against this machine's clock).
func serverTime(ctx context.Context, rdb redis.UniversalClient) time.Time {
	return ops.ServerTime(ctx, rdb)
}

// plural returns "1 entry" / "2 entries" style counts.
func plural(n int64, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%s %s", fmtCount(n), one)
	}
	return fmt.Sprintf("%s %s", fmtCount(n), many)
}
