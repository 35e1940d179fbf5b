package driver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

func nopHandler() Handler {
	return HandlerFunc(func(context.Context, *Message) error { return nil })
}

func TestNewValidatesAndNamesTheField(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	ok := Config{Stream: "{orders}", Group: "billing", Handler: nopHandler()}
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Stream", func(c *Config) { c.Stream = "" }},
		{"Group", func(c *Config) { c.Group = "" }},
		{"Group", func(c *Config) { c.Group = strings.Repeat("g", pelwarden.MaxNameBytes+1) }},
		{"Handler", func(c *Config) { c.Handler = nil }},
		{"DeadLetterStream", func(c *Config) { c.DeadLetterStream = "{elsewhere}:dead" }},
		{"DeadLetterStream", func(c *Config) { c.DeadLetterStream = c.Stream }},
		{"MaxDeliveries", func(c *Config) { c.MaxDeliveries = -2 }},
		{"MinIdle", func(c *Config) { c.MinIdle = time.Millisecond }},
		{"MinIdle", func(c *Config) { c.MinIdle = -time.Second }},
		{"Tuning.HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = 2 * time.Minute }},
		{"Tuning.ReclaimInterval", func(c *Config) { c.ReclaimInterval = -1 }},
		{"Backoff[1]", func(c *Config) { c.Backoff = []time.Duration{time.Second, -time.Second} }},
		{"Concurrency", func(c *Config) { c.Concurrency = -1 }},
		{"Concurrency", func(c *Config) { c.Concurrency = pelwarden.MaxCount + 1 }},
		{"Tuning.ReadBlock", func(c *Config) { c.ReadBlock = time.Microsecond }},
		{"Tuning.ClaimCount", func(c *Config) { c.ClaimCount = -3 }},
		{"Tuning.ReadCount", func(c *Config) { c.ReadCount = -1 }},
		{"Tuning.ReadCount", func(c *Config) { c.ReadCount = pelwarden.MaxCount + 1 }},
		{"Tuning.AckBatch", func(c *Config) { c.AckBatch = pelwarden.MaxCount + 1 }},
		{"Tuning.AckInterval", func(c *Config) { c.AckInterval = -1 }},
		{"Tuning.AckMode", func(c *Config) { c.AckMode = AckPlain + 1 }},
		{"Tuning.Prefetch", func(c *Config) { c.Prefetch = -1 }},
		{"Tuning.Prefetch", func(c *Config) { c.Concurrency, c.Prefetch = 16, pelwarden.MaxCount-15 }},
		{"GroupStartID", func(c *Config) { c.GroupStartID = "yesterday" }},
		{"ReapIdle", func(c *Config) { c.ReapIdle = -1 }},
		{"ReapIdle", func(c *Config) { c.ReapIdle = time.Second }},
		{"ShutdownTimeout", func(c *Config) { c.ShutdownTimeout = -1 }},
		{"Streams", func(c *Config) { c.Streams = []string{"{a}", "{b}"} }},
		{"Stream", func(c *Config) { c.Stream, c.Streams = "", nil }},
		{"DeadLetterStream", func(c *Config) { c.Stream, c.Streams, c.DeadLetterStream = "", []string{"{a}", "{b}"}, "{a}:dead" }},
		{"Streams[1]", func(c *Config) { c.Stream, c.Streams = "", []string{"{a}", ""} }},
		{"Streams[2]", func(c *Config) { c.Stream, c.Streams = "", []string{"{a}", "{b}", "{a}"} }},
		{"Streams[0]", func(c *Config) { c.Stream, c.Streams = "", []string{"{a}", "{a}:dead"} }},
		{"Streams[0]", func(c *Config) { c.Stream, c.Streams = "", []string{strings.Repeat("s", pelwarden.MaxNameBytes-2)} }},
		{"Streams", func(c *Config) { c.Stream, c.Streams = "", make([]string, MaxStreams+1) }},
		{"TrimInterval", func(c *Config) { c.TrimInterval = -time.Second }},
		{"TrimLimit", func(c *Config) { c.TrimLimit = -1 }},
		{"TrimLimit", func(c *Config) { c.TrimLimit = pelwarden.MaxCount + 1 }},
		{"DeadLetterMaxAge", func(c *Config) { c.DeadLetterMaxAge = -time.Hour }},
		{"DeadLetterMaxAge", func(c *Config) { c.DeadLetterMaxAge = time.Microsecond }},
		{"DeadLetterMaxLen", func(c *Config) { c.DeadLetterMaxLen = -1 }},
		{"StallAfter", func(c *Config) { c.StallAfter = DefaultMinIdle }},
		{"StallAfter", func(c *Config) {
			c.StallAfter, c.Backoff = 5*time.Minute, []time.Duration{time.Second, 10 * time.Minute}
		}},
		{"StallAfter", func(c *Config) { c.StallAfter = -2 }},
	}
	for _, tc := range cases {
		cfg := ok
		tc.mod(&cfg)
		_, err := New(rdb, cfg)
		var ce *pelwarden.ArgumentError
		require.True(t, errors.As(err, &ce), "%s: %v", tc.field, err)
		require.Equal(t, "Config."+tc.field, ce.Field)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
		require.Contains(t, err.Error(), "Config."+tc.field)
	}
	_, err := New(nil, ok)
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
}

// Streams: each stream gets its own dead-letter stream; Stream alone is the
// one-stream case of Streams.
func TestNewStreams(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	parts, err := pelwarden.Partitions("events", 3)
	require.NoError(t, err)
	c, err := New(rdb, Config{Streams: parts, Group: "g", Handler: nopHandler()})
	require.NoError(t, err)
	require.Equal(t, parts, c.Config().Streams)
	require.Empty(t, c.Config().DeadLetterStream)
	for _, p := range parts {
		require.Equal(t, pelwarden.DeadLetterStreamFor(p), c.Config().deadLetterStreamOf(p))
	}
	parts[0] = "changed"
	require.NotEqual(t, "changed", c.Config().Streams[0], "New copies Streams")

	c, err = New(rdb, Config{Stream: "{orders}", Group: "g", Handler: nopHandler()})
	require.NoError(t, err)
	require.Equal(t, []string{"{orders}"}, c.Config().Streams)
	require.Equal(t, "{orders}:dead", c.Config().deadLetterStreamOf("{orders}"))
}

func TestNewFillsDefaultsWithoutMutating(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	backoff := []time.Duration{time.Second}
	cfg := Config{Stream: "{orders}", Group: "billing", Handler: nopHandler(), Backoff: backoff}
	before := cfg
	c, err := New(rdb, cfg)
	require.NoError(t, err)
	require.Equal(t, before.Consumer, cfg.Consumer, "the caller's struct is untouched")
	require.Empty(t, cfg.DeadLetterStream)
	got := c.Config()
	require.Equal(t, "{orders}:dead", got.DeadLetterStream)
	require.Equal(t, DefaultMaxDeliveries, got.MaxDeliveries)
	require.Equal(t, DefaultMinIdle, got.MinIdle)
	require.Equal(t, DefaultMinIdle/3, got.HeartbeatInterval)
	require.Equal(t, DefaultReclaimInterval, got.ReclaimInterval)
	require.Equal(t, DefaultMinIdle+3*DefaultReclaimInterval, got.StallAfter)
	require.Equal(t, DefaultConcurrency, got.Concurrency)
	require.Equal(t, DefaultAckBatch, got.AckBatch)
	require.Equal(t, DefaultShutdownTimeout, got.ShutdownTimeout)
	require.Equal(t, DefaultGroupStartID, got.GroupStartID)
	require.NotEmpty(t, c.Name())
	got.Backoff[0] = time.Hour
	require.Equal(t, time.Second, backoff[0], "the Backoff slice is copied")

	other, err := New(rdb, cfg)
	require.NoError(t, err)
	require.NotEqual(t, c.Name(), other.Name(), "default consumer names are unique")
}

// OutcomeOf: what a consumer does with each handler result, RetryAfter
// beyond MinIdle held, within it released.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	base := errors.New("x")
	for _, c := range []struct {
		err  error
		want Outcome
	}{
		{nil, Outcome{Action: ActionAck}},
		{DeadLetter(base), Outcome{Action: ActionDeadLetter, ErrText: "x"}},
		{fmtWrap(DeadLetter(nil)), Outcome{Action: ActionDeadLetter, ErrText: "<nil>"}},
		{fmtWrap(RetryAfter(time.Second, base)), Outcome{Action: ActionRelease, Delay: time.Second, Retry: true, ErrText: "context\nretry after 1s: x"}},
		{RetryAfter(-time.Second, base), Outcome{Action: ActionRelease, Retry: true, ErrText: "retry after -1s: x"}},
		{RetryAfter(time.Minute, base), Outcome{Action: ActionHold, Delay: time.Minute, Retry: true, ErrText: "retry after 1m0s: x"}},
		{base, Outcome{Action: ActionRelease, ErrText: "x"}},
	} {
		require.Equal(t, c.want, OutcomeOf(c.err, time.Second), "%v", c.err)
	}
	require.ErrorIs(t, DeadLetter(base), base)
	require.ErrorIs(t, RetryAfter(time.Second, base), base)
	require.Equal(t, "dead-letter: x", DeadLetter(base).Error())
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }

func TestDecodeRead(t *testing.T) {
	t.Parallel()
	entries := []any{[]any{"1-0", []any{"b", "2", "a", "1", "b", "3"}}}
	for _, v := range []any{
		[]any{[]any{"s", entries}},   // RESP2
		map[any]any{"s": entries},    // RESP3
		map[string]any{"s": entries}, // RESP3, string keys
	} {
		msgs, err := decodeRead(v, "s", "g", "c")
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, []pelwarden.Field{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}, {Name: "b", Value: "3"}}, msgs[0].Fields)
		require.EqualValues(t, 1, msgs[0].Deliveries)
		require.Equal(t, "c", msgs[0].Consumer)
		v, ok := msgs[0].Value("b")
		require.True(t, ok)
		require.Equal(t, "2", v, "Value returns the first field of that name")
	}
	for _, bad := range []any{"x", []any{"s"}, []any{[]any{"s", "e"}}, []any{[]any{"s", []any{[]any{"1-0", []any{"odd"}}}}}} {
		_, err := decodeRead(bad, "s", "g", "c")
		require.ErrorIs(t, err, pelwarden.ErrMalformedReply)
	}
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	t.Parallel()
	for attempt := range 20 {
		d := backoff(attempt)
		require.Positive(t, d)
		require.LessOrEqual(t, d, 5*time.Second)
	}
	require.Less(t, backoff(0), 60*time.Millisecond)
}
