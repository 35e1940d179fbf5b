package integration_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The stall check reports an entry no reclaim pass can take (too many
// fields to dead-letter from a function: it stays pending, untouched, for
// an operator) once, naming its id and owner, and never an abandoned entry
// that a reclaim pass took in time.
func TestDriverStallCheck(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		abandoned := f.Produce(1, order)[0]
		_, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: "dead", Streams: []string{f.Stream, ">"}, Count: 1}).Result()
		require.NoError(t, err)
		big := addTooLarge(t, s.rdb, f.Stream)

		logs := &lockedBuffer{}
		m := &pelwardentest.Metrics{}
		cfg := driver.Config{Consumer: "w", MaxDeliveries: 3, Handler: driver.HandlerFunc(func(ctx context.Context, msg *driver.Message) error {
			if msg.ID == big {
				return driver.DeadLetter(errors.New("cannot parse"))
			}
			return nil
		})}
		cfg.Metrics = m
		cfg.StallAfter = 3 * time.Second // well past the abandoned entry's reclaim, at MinIdle 300ms
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		r := f.RunConsumer(cfg)
		f.Eventually("the big entry reported as stalled", func() bool { return m.Total(driver.EventStalled) >= 1 })
		// Three more checks (one every StallAfter/3) find it again and
		// report nothing new.
		time.Sleep(cfg.StallAfter)
		require.NoError(t, r.Stop())

		require.Equal(t, 1, m.Total(driver.EventStalled), "reported once")
		f.RequirePending(big, pelwardentest.Pending{})
		f.RequireAcked(abandoned)
		out := logs.String()
		require.Contains(t, out, "recovery is stalled")
		require.Contains(t, out, "ids=["+big+"]")
		require.Contains(t, out, "owners=[w:1]")
		require.NotContains(t, out, abandoned)
		require.Equal(t, 1, strings.Count(out, "recovery is stalled"))
	})
}
