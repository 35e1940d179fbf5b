package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/producer"
)

// The producer sends every key to its partition, pipelined, with the
// injector's fields; a retried publish with an IdempotencyID adds one entry
// on servers with XADD IDMP (Redis 8.6+) and two elsewhere, as documented.
func TestProducer(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pt := newPartitionTest(t, 3)
		inject := producer.InjectorFunc(func(_ context.Context, stream string, fs []pelwarden.Field) []pelwarden.Field {
			return append(fs, pelwarden.Field{Name: "injected-for", Value: stream})
		})
		p, err := producer.New(s.rdb, producer.Config{Partitions: pt.parts, Injector: inject, MaxBatch: 7, ProducerID: "test-producer"})
		require.NoError(t, err)

		msgs := make([]producer.Message, 50)
		for i := range msgs {
			msgs[i] = producer.Message{Key: "k" + strconv.Itoa(i), Fields: []pelwarden.Field{{Name: "n", Value: strconv.Itoa(i)}}}
		}
		res, err := p.PublishBatch(ctx, msgs)
		require.NoError(t, err)
		for i, r := range res {
			require.NoError(t, r.Err)
			require.Equal(t, pt.parts[pelwarden.PartitionFor(msgs[i].Key, 3)], r.Stream)
			got, err := s.rdb.XRange(ctx, r.Stream, r.ID, r.ID).Result()
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, strconv.Itoa(i), got[0].Values["n"])
			require.Equal(t, r.Stream, got[0].Values["injected-for"])
		}

		idmp, err := p.Idempotent(ctx)
		require.NoError(t, err)
		require.Equal(t, strings.HasPrefix(s.srv.Name, "redis-8.6"), idmp, "XADD IDMP support on %s", s.srv.Name)
		one := producer.Message{Key: "retried", Fields: []pelwarden.Field{{Name: "n", Value: "once"}}, IdempotencyID: "order-1"}
		first, err := p.PublishBatch(ctx, []producer.Message{one})
		require.NoError(t, err)
		again, err := p.PublishBatch(ctx, []producer.Message{one})
		require.NoError(t, err)
		n, err := s.rdb.XLen(ctx, first[0].Stream).Result()
		require.NoError(t, err)
		before := int64(0)
		for _, r := range res {
			if r.Stream == first[0].Stream {
				before++
			}
		}
		if idmp {
			require.Equal(t, first[0].ID, again[0].ID, "the retry is answered with the first entry's id")
			require.Equal(t, before+1, n)
		} else {
			require.NotEqual(t, first[0].ID, again[0].ID)
			require.Equal(t, before+2, n, "without IDMP a retried publish adds a second entry")
		}
	})
}

// With TrimEvery the producer trims safely: nothing while the group has
// not read the entries; after the group acknowledges the first 30 of 50,
// the next trim removes exactly those, and never an entry the group still
// needs.
func TestProducerTrims(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f := s.fixture(t)
		p, err := producer.New(s.rdb, producer.Config{Stream: f.Stream, TrimEvery: 10})
		require.NoError(t, err)
		publish := func(n int) []string {
			ids := make([]string, n)
			for i := range n {
				r, err := p.Publish(ctx, "", "n", strconv.Itoa(i))
				require.NoError(t, err)
				ids[i] = r.ID
			}
			return ids
		}
		ids := publish(50)
		require.EqualValues(t, 50, s.rdb.XLen(ctx, f.Stream).Val(), "nothing delivered: nothing trimmed")

		got, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: f.Group, Consumer: "c", Streams: []string{f.Stream, ">"}, Count: 30}).Result()
		require.NoError(t, err)
		require.Len(t, got[0].Messages, 30)
		require.NoError(t, s.rdb.XAck(ctx, f.Stream, f.Group, ids[:30]...).Err())
		more := publish(10)
		left, err := s.rdb.XRange(ctx, f.Stream, "-", "+").Result()
		require.NoError(t, err)
		var leftIDs []string
		for _, m := range left {
			leftIDs = append(leftIDs, m.ID)
		}
		require.Equal(t, append(append([]string(nil), ids[30:]...), more...), leftIDs,
			"the acknowledged entries went, every entry the group still needs stayed")
	})
}

// A batch of producer.DefaultMaxBatch messages with distinct
// IdempotencyIDs, retried as after a lost reply (the same ProducerID, the
// same ids in the same order), adds nothing on a server with XADD IDMP:
// the stream keeps a batch's worth of ids per producer, where the server's
// defaults keep 100 (for 100 s) and the retry added all 500 again. Once on
// a stream the producer creates, once on a stream that exists with the
// server's defaults. Elsewhere the retry adds the batch again, as
// documented.
func TestProducerIdempotentBatchRetry(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		for _, existing := range []bool{false, true} {
			name := map[bool]string{false: "new stream", true: "existing stream"}[existing]
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				f := s.kit(t).FixtureFor(t, pelwardentest.NewKeys(t))
				if existing {
					require.NoError(t, s.rdb.XGroupCreateMkStream(ctx, f.Stream, f.Group, "0").Err())
				}
				p, err := producer.New(s.rdb, producer.Config{Stream: f.Stream, ProducerID: "orders-api-1"})
				require.NoError(t, err)
				msgs := idmpBatch(producer.DefaultMaxBatch)
				first, err := p.PublishBatch(ctx, msgs)
				require.NoError(t, err)
				again, err := p.PublishBatch(ctx, msgs)
				require.NoError(t, err)
				idmp, err := p.Idempotent(ctx)
				require.NoError(t, err)
				n, err := s.rdb.XLen(ctx, f.Stream).Result()
				require.NoError(t, err)
				if !idmp {
					require.EqualValues(t, 2*len(msgs), n, "without IDMP a retried batch is added again")
					return
				}
				require.EqualValues(t, len(msgs), n, "the retried batch added nothing")
				for i := range msgs {
					require.Equal(t, first[i].ID, again[i].ID, "message %d: the retry is answered with the first entry's id", i)
				}
				info, err := s.rdb.XInfoStream(ctx, f.Stream).Result()
				require.NoError(t, err)
				require.EqualValues(t, producer.DefaultMaxBatch, info.IDMPMaxSize)
				require.EqualValues(t, producer.DefaultIdempotencyDuration/time.Second, info.IDMPDuration)
				require.EqualValues(t, len(msgs), info.IIDsDuplicates)
				require.EqualValues(t, len(msgs), info.IIDsTracked)
				require.EqualValues(t, 1, info.PIDsTracked)
				groups, err := s.rdb.XInfoGroups(ctx, f.Stream).Result()
				require.NoError(t, err)
				if existing {
					require.Len(t, groups, 1)
				} else {
					require.Empty(t, groups, "the group that created the stream empty is gone")
				}
			})
		}
	})
}

// idmpBatch returns n messages with distinct IdempotencyIDs.
func idmpBatch(n int) []producer.Message {
	msgs := make([]producer.Message, n)
	for i := range msgs {
		msgs[i] = producer.Message{Fields: []pelwarden.Field{{Name: "n", Value: strconv.Itoa(i)}}, IdempotencyID: "order-" + strconv.Itoa(i)}
	}
	return msgs
}

// The window is set once per stream and settings. A restarted producer (a
// new Producer, same ProducerID) reads the stream's settings, finds them
// enough and does not set them again (XCFGSET would clear the tracked
// ids): its retry of the batch the first one published adds nothing. A
// producer asking for less leaves the larger settings alone; one asking
// for more raises them, which clears the tracked ids (documented). Where
// the server has no IDMP the producer reads and sets nothing.
func TestProducerIdempotencyWindowKept(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.kit(t).FixtureFor(t, pelwardentest.NewKeys(t))
		rdb := redis.NewClient(s.srv.Options())
		t.Cleanup(func() { _ = rdb.Close() })
		calls := &commandCalls{n: map[string]int{}}
		rdb.AddHook(calls)
		start := func(cfg producer.Config) *producer.Producer {
			cfg.Stream = f.Stream
			p, err := producer.New(rdb, cfg)
			require.NoError(t, err)
			return p
		}
		msgs := idmpBatch(producer.DefaultMaxBatch)
		first, err := start(producer.Config{ProducerID: "orders-api-1"}).PublishBatch(ctx, msgs)
		require.NoError(t, err)
		restarted := start(producer.Config{ProducerID: "orders-api-1"})
		idmp, err := restarted.Idempotent(ctx)
		require.NoError(t, err)
		if !idmp {
			_, err = restarted.PublishBatch(ctx, msgs)
			require.NoError(t, err)
			require.Zero(t, calls.get("xinfo stream")+calls.scripts()+calls.get("eval"), "no IDMP: the producer reads and sets no stream settings")
			return
		}
		require.Equal(t, 1, calls.scripts(), "the first producer set the window of the stream it created")
		again, err := restarted.PublishBatch(ctx, msgs)
		require.NoError(t, err)
		require.Equal(t, 1, calls.scripts(), "the restarted producer found the settings enough")
		require.Equal(t, 2, calls.get("xinfo stream"), "one XINFO STREAM per producer and stream")
		for i := range msgs {
			require.Equal(t, first[i].ID, again[i].ID)
		}
		info, err := s.rdb.XInfoStream(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, len(msgs), info.Length, "the restarted producer's retry added nothing")
		require.EqualValues(t, len(msgs), info.IIDsTracked, "the ids tracked survived the restart")

		// Asking for less changes nothing; the next batches of the same
		// producer read nothing more.
		smaller := start(producer.Config{ProducerID: "orders-api-2", IdempotencyDuration: time.Minute, MaxBatch: 10})
		for range 3 {
			_, err = smaller.PublishBatch(ctx, []producer.Message{{Fields: []pelwarden.Field{{Name: "n", Value: "x"}}, IdempotencyID: "x"}})
			require.NoError(t, err)
		}
		require.Equal(t, 1, calls.scripts())
		require.Equal(t, 3, calls.get("xinfo stream"))
		info, err = s.rdb.XInfoStream(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, producer.DefaultMaxBatch, info.IDMPMaxSize)
		require.EqualValues(t, 3600, info.IDMPDuration)
		require.EqualValues(t, len(msgs)+1, info.IIDsTracked)
		require.EqualValues(t, 2, info.PIDsTracked)

		// Asking for more raises the settings, which clears what the
		// stream tracked.
		larger := start(producer.Config{ProducerID: "orders-api-3", IdempotencyDuration: 2 * time.Hour, IdempotencyMaxSize: 600})
		_, err = larger.PublishBatch(ctx, []producer.Message{{Fields: []pelwarden.Field{{Name: "n", Value: "y"}}, IdempotencyID: "y"}})
		require.NoError(t, err)
		require.Equal(t, 2, calls.scripts())
		info, err = s.rdb.XInfoStream(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 600, info.IDMPMaxSize)
		require.EqualValues(t, 7200, info.IDMPDuration)
		require.EqualValues(t, 1, info.IIDsTracked, "only the id published after the change")
		require.EqualValues(t, 1, info.PIDsTracked)
	})
}

// commandCalls counts the commands a client sends by name and subcommand
// ("evalsha", "xinfo stream"), pipelines included.
type commandCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCalls) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// scripts is the number of script runs: each starts with an EVALSHA
// (followed by an EVAL when the server did not have the script).
func (c *commandCalls) scripts() int { return c.get("evalsha") }

func (c *commandCalls) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		name := strings.ToLower(cmd.Name())
		if args := cmd.Args(); name == "xinfo" && len(args) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(args[1]))
		}
		c.n[name]++
	}
}

func (c *commandCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// status shows the stream's idempotent publishing where the server reports
// it: the retries the server dropped, and the window the producer set.
func TestCLIStatusIdempotency(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		p, err := producer.New(s.rdb, producer.Config{Stream: f.Stream, ProducerID: "orders-api-1", MaxBatch: 10})
		require.NoError(t, err)
		msgs := idmpBatch(10)
		for range 2 {
			_, err = p.PublishBatch(ctx, msgs)
			require.NoError(t, err)
		}
		idmp, err := p.Idempotent(ctx)
		require.NoError(t, err)
		v := pwJSON(t, s, "status", f.Stream, f.Group)
		r := pw(t, s, "status", f.Stream, f.Group)
		require.Equal(t, exitOK, r.code, r.stderr)
		if !idmp {
			require.NotContains(t, v, "idempotency", "nothing reported, nothing shown")
			require.NotContains(t, r.stdout, "idempotency")
			return
		}
		i := obj(t, v["idempotency"])
		require.EqualValues(t, 10, num(t, i["duplicates"]))
		require.EqualValues(t, 10, num(t, i["added"]))
		require.EqualValues(t, 1, num(t, i["producers_tracked"]))
		require.EqualValues(t, 10, num(t, i["ids_tracked"]))
		require.EqualValues(t, 100, num(t, i["max_size"]), "the server's default, more than the producer's 10: kept")
		require.EqualValues(t, 3600, num(t, i["duration_s"]), "raised from the server's default 100")
		require.Regexp(t, `(?m)^  idempotency +10 duplicates dropped, 10 added; keeps 100 ids per producer for 1h0m \(1 producer tracked\)$`, r.stdout)
	})
}

// A stream whose window the producer cannot set gets no message with an
// IdempotencyID, which would be deduplicated only within the server's
// defaults: those messages fail with the server's refusal (here an ACL
// user refused XCFGSET), the others are published.
func TestProducerIdempotencyWindowRefused(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		probe, err := producer.New(s.rdb, producer.Config{Stream: f.Stream})
		require.NoError(t, err)
		if idmp, err := probe.Idempotent(ctx); err != nil || !idmp {
			require.NoError(t, err)
			t.Skip("no XADD IDMP on this server: IdempotencyIDs are not sent, no window is set")
		}
		tag := strings.NewReplacer("/", ".", ":", ".").Replace(t.Name())
		rdb := restrictedClient(t, ctx, s, "producer-"+tag, "-xcfgset")
		p, err := producer.New(rdb, producer.Config{Stream: f.Stream, ProducerID: "orders-api-1"})
		require.NoError(t, err)
		res, err := p.PublishBatch(ctx, []producer.Message{
			{Fields: []pelwarden.Field{{Name: "n", Value: "plain"}}},
			{Fields: []pelwarden.Field{{Name: "n", Value: "with-id"}}, IdempotencyID: "order-1"},
		})
		require.Error(t, err)
		require.NoError(t, res[0].Err)
		require.Equal(t, res[1].Err, err)
		require.ErrorIs(t, err, pelwarden.ErrNoPermission)
		require.Contains(t, err.Error(), "set the idempotency window of "+f.Stream)
		require.Contains(t, err.Error(), "xcfgset", "the server names the refused command")
		require.Empty(t, res[1].ID)
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "only the message without an IdempotencyID was published")
	})
}
