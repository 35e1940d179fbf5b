package integration_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// What new users hit first (issue 32): each test failed before its fix.

// untaggedKeys returns keys for a stream without a hash tag, as a
// Watermill topic's default stream is, and its dead-letter stream by the
// one rule.
func untaggedKeys(t *testing.T) pelwardentest.Keys {
	name := "orders-" + strings.ToLower(rand.Text()[:10])
	return pelwardentest.Keys{Stream: name, DeadLetterStream: pelwarden.DeadLetterStreamFor(name), Group: pelwardentest.DefaultGroup}
}

// A stream without a hash tag: the driver with its default dead-letter
// stream, the Watermill adapter's rule and the CLI all name the same
// stream, in the stream's slot; records an older version wrote under the
// former name are found by status, with what to do about them.
func TestDeadLetterStreamOneName(t *testing.T) {
	t.Parallel()
	s := servers[0]
	k := untaggedKeys(t)
	require.Equal(t, "{"+k.Stream+"}:dead", k.DeadLetterStream)
	require.Equal(t, pelwarden.Slot(k.Stream), pelwarden.Slot(k.DeadLetterStream))
	f := s.kit(t).FixtureFor(t, k).Within(30 * time.Second)
	t.Cleanup(func() { s.rdb.Del(context.Background(), k.Stream, k.DeadLetterStream, k.Stream+":dead") })
	require.NoError(t, s.rdb.XGroupCreateMkStream(t.Context(), k.Stream, k.Group, "0").Err())
	ids := f.Produce(3, nil)

	cfg := f.ConsumerConfig(driver.Config{Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		if m.ID == ids[1] {
			return driver.DeadLetter(errors.New("malformed"))
		}
		return nil
	})})
	cfg.DeadLetterStream = "" // the driver's default
	c, err := driver.New(s.rdb, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Second):
	}
	f.RequireDeadLetterIDs(ids[1])
	f.RequirePELEmpty()
	cancel()
	require.NoError(t, <-done)

	// The CLI's default is the same stream.
	v := pwJSON(t, s, "status", k.Stream, k.Group)
	require.Equal(t, k.DeadLetterStream, v["dead_letter_stream"])
	require.EqualValues(t, 1, num(t, v["dead_letter_length"]))
	require.Nil(t, v["legacy_dead_letter_stream"], "nothing under the former name")

	// Records under the former name ("orders-x:dead") are shown, with how
	// to move them.
	legacy := k.Stream + ":dead"
	for range 2 {
		require.NoError(t, s.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: legacy, Values: []string{"n", "old"}}).Err())
	}
	v = pwJSON(t, s, "status", k.Stream, k.Group)
	require.Equal(t, legacy, v["legacy_dead_letter_stream"])
	require.EqualValues(t, 2, num(t, v["legacy_dead_letter_length"]))
	r := pw(t, s, "status", k.Stream, k.Group)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, legacy+": 2 records")
	require.Contains(t, r.stdout, "pelwarden dlq redrive '"+legacy+"'")
	// An explicit --dlq is the user's choice: no advice about the former name.
	v = pwJSON(t, s, "status", k.Stream, k.Group, "--dlq", k.DeadLetterStream)
	require.Nil(t, v["legacy_dead_letter_stream"])
}
