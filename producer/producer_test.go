package producer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, c := range []struct {
		field string
		cfg   Config
	}{
		{"Config.Stream", Config{}},
		{"Config.Partitions", Config{Stream: "{a}", Partitions: []string{"{b}"}}},
		{"Config.Partitions", Config{Partitions: []string{"{a}", ""}}},
		{"Config.Partitions", Config{Partitions: make([]string, pelwarden.MaxPartitions+1)}},
		{"Config.MaxBatch", Config{Stream: "{a}", MaxBatch: -1}},
		{"Config.TrimEvery", Config{Stream: "{a}", TrimEvery: -1}},
		{"Config.ProducerID", Config{Stream: "{a}", ProducerID: string(make([]byte, pelwarden.MaxNameBytes+1))}},
		{"Config.IdempotencyDuration", Config{Stream: "{a}", IdempotencyDuration: -time.Second}},
		{"Config.IdempotencyDuration", Config{Stream: "{a}", IdempotencyDuration: 24*time.Hour + time.Second}},
		{"Config.IdempotencyMaxSize", Config{Stream: "{a}", IdempotencyMaxSize: DefaultMaxBatch - 1}},
		{"Config.IdempotencyMaxSize", Config{Stream: "{a}", MaxBatch: 10, IdempotencyMaxSize: 10001}},
	} {
		_, err := New(rdb, c.cfg)
		var pe *pelwarden.ArgumentError
		require.True(t, errors.As(err, &pe), "%+v: %v", c.cfg, err)
		require.Equal(t, c.field, pe.Field)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	}
	_, err := New(nil, Config{Stream: "{a}"})
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
}

// The idempotency window defaults to a batch for an hour, in whole
// seconds rounded up.
func TestIdempotencyDefaults(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, c := range []struct {
		cfg           Config
		size, seconds int64
	}{
		{Config{Stream: "{a}"}, DefaultMaxBatch, 3600},
		{Config{Stream: "{a}", MaxBatch: 20}, 20, 3600},
		{Config{Stream: "{a}", MaxBatch: 20, IdempotencyMaxSize: 10000, IdempotencyDuration: 24 * time.Hour}, 10000, 86400},
		{Config{Stream: "{a}", IdempotencyDuration: 1500 * time.Millisecond}, DefaultMaxBatch, 2},
		{Config{Stream: "{a}", IdempotencyDuration: time.Nanosecond}, DefaultMaxBatch, 1},
	} {
		p, err := New(rdb, c.cfg)
		require.NoError(t, err)
		require.Equal(t, c.size, p.idmpSize, "%+v", c.cfg)
		require.Equal(t, c.seconds, p.idmpSeconds, "%+v", c.cfg)
	}
}

// Bad messages fail the whole call before anything is sent: the client
// here has no server, so any send would fail with a dial error instead.
func TestPublishRefusesBadMessages(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	p, err := New(rdb, Config{Stream: "{a}"})
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range []struct {
		field string
		msgs  []Message
	}{
		{"Message[0].Fields", []Message{{}}},
		{"Message[1].Fields", []Message{{Fields: []pelwarden.Field{{Name: "a", Value: "1"}}}, {Fields: []pelwarden.Field{{Name: pelwarden.FieldReason, Value: "x"}}}}},
		{"Message[0].IdempotencyID", []Message{{Fields: []pelwarden.Field{{Name: "a", Value: "1"}}, IdempotencyID: string(make([]byte, pelwarden.MaxNameBytes+1))}}},
		// An IdempotencyID needs a ProducerID, whatever the server.
		{"Config.ProducerID", []Message{{Fields: []pelwarden.Field{{Name: "a", Value: "1"}}}, {Fields: []pelwarden.Field{{Name: "a", Value: "1"}}, IdempotencyID: "order-1"}}},
	} {
		_, err := p.PublishBatch(ctx, c.msgs)
		var pe *pelwarden.ArgumentError
		require.True(t, errors.As(err, &pe), "%v", err)
		require.Equal(t, c.field, pe.Field)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	}
	_, err = p.Publish(ctx, "k", "odd")
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
}

func TestStreamForFollowsPartitionFor(t *testing.T) {
	t.Parallel()
	parts, err := pelwarden.Partitions("orders", 4)
	require.NoError(t, err)
	p, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Config{Partitions: parts})
	require.NoError(t, err)
	defer p.rdb.Close()
	for _, key := range []string{"", "a", "customer-42", "ключ"} {
		require.Equal(t, parts[pelwarden.PartitionFor(key, 4)], p.StreamFor(key))
	}
}

// XADD IDMP counts from Redis 8.6.2: 8.6.0 and 8.6.1 lose the tracked ids
// on AOF rewrite and RDB load. Valkey has none.
func TestSupportsIDMP(t *testing.T) {
	t.Parallel()
	for info, want := range map[string]bool{
		"# Server\r\nredis_version:8.6.3\r\n":             true,
		"redis_version:8.6.2\r\n":                         true,
		"redis_version:8.6.10\r\n":                        true,
		"redis_version:8.7.0\r\n":                         true,
		"redis_version:9.0.0\r\n":                         true,
		"redis_version:255.255.255\r\n":                   true, // unstable builds
		"redis_version:8.6.1\r\n":                         false,
		"redis_version:8.6.0\r\n":                         false,
		"redis_version:8.6\r\n":                           false,
		"redis_version:8.4.0\r\n":                         false,
		"redis_version:7.2.4\r\nvalkey_version:9.1.2\r\n": false,
		"redis_version:garbage\r\n":                       false,
		"redis_version:8.6.x\r\n":                         false,
		"redis_version:8.6.2.1\r\n":                       false,
		"redis_version:-9.6.2\r\n":                        false,
		"":                                                false,
	} {
		require.Equal(t, want, supportsIDMP(info), "%q", info)
	}
}
