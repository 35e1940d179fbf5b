package driver

// The seams of ordered mode: what one partition's holder asks of Redis
// (partitionServer), and the membership heartbeat (memberServer).

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// groupServer checks or creates one stream's group.
type groupServer interface {
	// createGroup creates the group at startID (and the stream).
	createGroup(ctx context.Context, startID string) error
	// checkGroup fails with pelwarden.ErrNoGroup when the group is missing.
	checkGroup(ctx context.Context) error
}

// partitionServer is every server operation on one partition in ordered
// mode, bound to its stream, dead-letter stream, lease key, group and
// consumer. redisPartition is the real one; the unit tests use a fake.
type partitionServer interface {
	groupServer
	pauseServer
	// acquire takes or renews the partition's lease for ttl
	// (pelwarden_v1_lease).
	acquire(ctx context.Context, ttl time.Duration) (*pelwarden.Lease, error)
	// next is the ordered step (pelwarden_v1_lease_next): fence on token,
	// renew for ttl, ack acks, give giveBack back, hand out the next
	// entries (one pending entry, or up to orderedBatch new ones). With
	// readApart the new entries come from a plain XREADGROUP in the same
	// transaction (LeaseNextRead: Deferred lists what that read took and
	// may not run yet), where the server allows it.
	next(ctx context.Context, token int64, ttl time.Duration, acks, giveBack []string, readApart bool) (*pelwarden.LeaseNextResult, error)
	// ack acks ids through the fenced ack function (only those this
	// consumer owns), which runs on a server at maxmemory.
	ack(ctx context.Context, ids []string) (*pelwarden.AckResult, error)
	// releaseLease frees the lease held with token, acking acks and
	// giving giveBack back first (pelwarden_v1_lease_release).
	releaseLease(ctx context.Context, token int64, acks, giveBack []string) (*pelwarden.ReleaseLeaseResult, error)
	// deadLetter moves one entry this consumer owns to the dead-letter
	// stream on its handler's request, with the error text.
	deadLetter(ctx context.Context, id, errText string) (*pelwarden.DeadLetterResult, error)
	// fail records a failed attempt of the head this consumer owns (the
	// fail function, min-idle 0): its Backoff counts from now, and its
	// error is kept for the dead letter written at MaxDeliveries.
	fail(ctx context.Context, id, errText string) (*pelwarden.ReleaseResult, error)
	// stale tells the client that err suggests its cluster slot map is out
	// of date (see followTopology).
	stale(err error)
}

// memberServer is the membership of the group's ordered consumers.
type memberServer interface {
	// heartbeat marks this consumer live for ttl by the server's clock,
	// drops the members whose heartbeat lapsed, and returns the live
	// members' names in byte order (this one included).
	heartbeat(ctx context.Context, ttl time.Duration) ([]string, error)
	// leave removes this consumer at once (a graceful stop).
	leave(ctx context.Context) error
}

// redisPartition is the partitionServer of a real server.
type redisPartition struct {
	rdb                             redis.UniversalClient
	lib                             *pelwarden.Library
	tx                              *txProbe
	stream, deadLetterStream, lease string
	lastErrors                      *lastErrors
	group, consumer                 string
	backoff                         []time.Duration
	maxDeliveries                   int // Config.MaxDeliveries
}

var _ partitionServer = (*redisPartition)(nil)

func (s *redisPartition) createGroup(ctx context.Context, startID string) error {
	return s.rdb.XGroupCreateMkStream(ctx, s.stream, s.group, startID).Err()
}

func (s *redisPartition) checkGroup(ctx context.Context) error {
	_, err := s.lib.Stats(ctx, pelwarden.StatsArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream, Group: s.group})
	return err
}

func (s *redisPartition) acquire(ctx context.Context, ttl time.Duration) (*pelwarden.Lease, error) {
	return s.lib.AcquireLease(ctx, pelwarden.LeaseArgs{Stream: s.stream, Lease: s.lease, Group: s.group, Consumer: s.consumer, TTL: ttl})
}

func (s *redisPartition) next(ctx context.Context, token int64, ttl time.Duration, acks, giveBack []string, readApart bool) (*pelwarden.LeaseNextResult, error) {
	a := pelwarden.LeaseNextArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream, Lease: s.lease,
		Group: s.group, Consumer: s.consumer, Token: token, TTL: ttl, MaxDeliveries: s.maxDeliveries, Count: orderedBatch,
		AckIDs: acks, GiveBack: giveBack, Backoff: s.backoff}
	var res *pelwarden.LeaseNextResult
	err := s.lastErrors.with(func(key string) (err error) {
		a.LastErrors = key
		if readApart && s.tx.allowed(ctx) {
			res, err = s.lib.LeaseNextRead(ctx, a)
		} else {
			res, err = s.lib.LeaseNext(ctx, a)
		}
		return err
	})
	return res, err
}

// txProbe finds out, once per run, whether the server lets this client's
// user run MULTI/EXEC, which LeaseNextRead needs: with MULTI refused, the
// commands meant for the transaction would run one by one (so the probe
// is a transaction of TIME alone, before any LeaseNextRead). Refused, the
// holders read new entries inside lease_next, as fast as before
// LeaseNextRead existed; the run logs that once.
type txProbe struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu     sync.Mutex
	probed bool
	ok     bool
}

// allowed reports whether LeaseNextRead may run, probing on the first
// call (and again after a probe that failed for another reason than a
// refusal, such as a cut connection).
func (t *txProbe) allowed(ctx context.Context) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.probed {
		return t.ok
	}
	_, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Time(ctx)
		return nil
	})
	switch {
	case err == nil:
		t.probed, t.ok = true, true
	case pelwarden.Classify(err) == pelwarden.ClassNoPermission:
		t.probed = true
		t.log.Warn("the server refuses MULTI/EXEC to this user: ordered mode reads new entries inside lease_next (grant +multi +exec for the faster read)", "err", err)
	}
	return t.ok
}

func (s *redisPartition) fail(ctx context.Context, id, errText string) (*pelwarden.ReleaseResult, error) {
	var res *pelwarden.ReleaseResult
	err := s.lastErrors.with(func(key string) (err error) {
		res, err = s.lib.Fail(ctx, pelwarden.FailArgs{Stream: s.stream, LastErrors: key, Group: s.group, Consumer: s.consumer,
			IDs: []string{id}, Backoff: s.backoff, Error: errText})
		return err
	})
	return res, err
}

func (s *redisPartition) ack(ctx context.Context, ids []string) (*pelwarden.AckResult, error) {
	return s.lib.Ack(ctx, pelwarden.AckArgs{Stream: s.stream, Group: s.group, Consumer: s.consumer, IDs: ids})
}

func (s *redisPartition) releaseLease(ctx context.Context, token int64, acks, giveBack []string) (*pelwarden.ReleaseLeaseResult, error) {
	return s.lib.ReleaseLease(ctx, pelwarden.ReleaseLeaseArgs{Stream: s.stream, Lease: s.lease, Group: s.group, Consumer: s.consumer,
		Token: token, AckIDs: acks, GiveBack: giveBack})
}

func (s *redisPartition) deadLetter(ctx context.Context, id, errText string) (*pelwarden.DeadLetterResult, error) {
	return s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: s.stream, DeadLetterStream: s.deadLetterStream,
		Group: s.group, Consumer: s.consumer, IDs: []string{id}, Reason: pelwarden.ReasonHandler, Error: errText})
}

func (s *redisPartition) stale(err error) { followTopology(s.rdb, err) }

func (s *redisPartition) pauseState(ctx context.Context) (*pelwarden.Pause, error) {
	return pelwarden.ReadPause(ctx, s.rdb, s.stream, s.group)
}

// redisMembers is the memberServer of a real server: a sorted set
// (MembersKey) of consumer names scored with the server time (ms) their
// heartbeat lasts until. Plain commands, not a library function: the
// membership only sizes each consumer's share of the partitions (the
// leases' fence keeps two holders apart whatever a consumer believes), so
// it needs no atomicity with a stream's state, and a heartbeat is TIME
// then one pipeline of ZADD, ZREMRANGEBYSCORE, ZRANGE and PEXPIRE (the
// set vanishes once every consumer is gone). Every score comes from the
// server's clock, so the clocks of the consumers' hosts never matter.
type redisMembers struct {
	rdb           redis.UniversalClient
	key, consumer string
}

var _ memberServer = (*redisMembers)(nil)

func (s *redisMembers) heartbeat(ctx context.Context, ttl time.Duration) ([]string, error) {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, &pelwarden.CommandError{Command: "TIME", Err: err}
	}
	ms := now.UnixMilli()
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, s.key, redis.Z{Score: float64(ms + ttl.Milliseconds()), Member: s.consumer})
	pipe.ZRemRangeByScore(ctx, s.key, "-inf", "("+strconv.FormatInt(ms, 10))
	live := pipe.ZRange(ctx, s.key, 0, -1)
	pipe.PExpire(ctx, s.key, 2*ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, &pelwarden.CommandError{Command: "ZADD/ZREMRANGEBYSCORE/ZRANGE/PEXPIRE", Key: s.key, Err: err}
	}
	names := live.Val()
	slices.Sort(names)
	return names, nil
}

func (s *redisMembers) leave(ctx context.Context) error {
	if err := s.rdb.ZRem(ctx, s.key, s.consumer).Err(); err != nil {
		return &pelwarden.CommandError{Command: "ZREM", Key: s.key, Err: err}
	}
	return nil
}
