package driver

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// ErrAlreadyRunning is returned by Run when the Consumer is already running,
// or when a previous Run returned while a Redis call or a handler that
// ignored its cancelled context was still in progress (until they return).
var ErrAlreadyRunning = errors.New("pelwarden/driver: consumer already running")

// Consumer runs handlers for one consumer of a group. Create it with New.
// Everything one Run needs lives in a session of its own (session.go);
// the Consumer keeps what outlives runs.
type Consumer struct {
	rdb redis.UniversalClient
	lib *pelwarden.Library
	cfg Config
	log *slog.Logger

	running atomic.Bool
	// health is the running Run's (nil while not running).
	health atomic.Pointer[health]
}

// New returns an unordered Consumer for rdb (any go-redis client: single
// server, cluster, failover). It validates cfg, naming the bad field in an
// error matching pelwarden.ErrInvalidArgument, and does no I/O. The caller
// keeps ownership of rdb; the Consumer never closes it.
func New(rdb redis.UniversalClient, cfg Config) (*Consumer, error) {
	cfg.ordered, cfg.partitionLease = false, 0
	return newConsumer(rdb, cfg)
}

// NewOrdered returns an ordered Consumer for rdb (see OrderedConfig), as
// New does an unordered one.
func NewOrdered(rdb redis.UniversalClient, cfg OrderedConfig) (*Consumer, error) {
	return newConsumer(rdb, cfg.config())
}

func newConsumer(rdb redis.UniversalClient, cfg Config) (*Consumer, error) {
	if rdb == nil {
		return nil, &pelwarden.ArgumentError{Scope: "pelwarden/driver", Field: "rdb", Reason: "a Redis client is required"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{
		rdb: rdb,
		lib: pelwarden.NewLibrary(rdb),
		cfg: cfg,
		log: consumerLogger(cfg),
	}, nil
}

// consumerLogger is the Logger with the consumer's group and name, and its
// stream when it has one (the lanes of several streams add theirs).
func consumerLogger(cfg Config) *slog.Logger {
	if len(cfg.Streams) == 1 {
		return cfg.Logger.With("stream", cfg.Streams[0], "group", cfg.Group, "consumer", cfg.Consumer)
	}
	return cfg.Logger.With("group", cfg.Group, "consumer", cfg.Consumer)
}

// Name returns the consumer's name in the group.
func (c *Consumer) Name() string { return c.cfg.Consumer }

// Config returns the effective configuration of a Consumer made by New,
// defaults filled in (the zero Config for one made by NewOrdered: see
// OrderedConfig).
func (c *Consumer) Config() Config {
	if c.cfg.ordered {
		return Config{}
	}
	return c.cfg
}

// Run loads the library, makes sure the group exists, then reads, reclaims
// and handles entries until ctx is cancelled (made by NewOrdered: takes
// its share of the partitions' leases and handles each partition in order;
// at the stop it hands them over). It then stops reading, lets
// in-flight handlers finish within ShutdownTimeout (cancelling the rest,
// whose entries stay pending), flushes pending acks and returns nil. It also
// returns nil when ctx is cancelled before it has started.
//
// It returns an error for conditions retrying cannot fix: a missing group
// without CreateGroup (pelwarden.ErrNoGroup), a key of the wrong type, a
// server that cannot run the library, a command or key the server's ACL
// refuses (pelwarden.ErrNoPermission, naming it), refused credentials, a
// TLS certificate that does not verify. Connection loss, timeouts, failover
// and a server out of memory are retried with capped exponential backoff
// and jitter. A Consumer runs once at a time.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	var lingering <-chan struct{}
	var err error
	if c.cfg.ordered {
		members := &redisMembers{rdb: c.rdb, key: MembersKey(c.cfg.Streams, c.cfg.Group), consumer: c.cfg.Consumer}
		tx := &txProbe{rdb: c.rdb, log: c.log}
		partitionOf := func(cfg Config) partitionServer { return c.partitionServer(cfg, tx) }
		clk := newClock()
		r := newOrderedRun(c.cfg, c.log, c.lib, partitionOf, members, clk)
		r.limit = newPermits(c.limitServer(), r.core, clk)
		c.health.Store(r.health)
		lingering, err = r.serve(ctx)
	} else {
		clk := newClock()
		s, lanes := newSession(c.cfg, c.log, c.lib, c.laneServer, clk)
		s.limit = newPermits(c.limitServer(), s.core, clk)
		c.health.Store(s.health)
		lingering, err = s.serve(ctx, lanes)
	}
	c.health.Store(nil)
	if lingering == nil {
		c.running.Store(false)
	} else {
		// Let Run be called again only once the lingering call and the
		// abandoned handlers returned: they still use this run's state.
		go func() { <-lingering; c.running.Store(false) }()
	}
	return err
}

// partitionServer is the server of the partition cfg.Stream in ordered
// mode; tx is the run's probe of MULTI/EXEC.
func (c *Consumer) partitionServer(cfg Config, tx *txProbe) partitionServer {
	return &redisPartition{rdb: c.rdb, lib: c.lib, tx: tx, stream: cfg.Stream, deadLetterStream: cfg.DeadLetterStream,
		lease: pelwarden.LeaseKeyFor(cfg.Stream), lastErrors: newLastErrors(cfg.Stream, c.log), group: cfg.Group, consumer: cfg.Consumer,
		backoff: cfg.Backoff, maxDeliveries: cfg.MaxDeliveries}
}

// limitServer is the server of Config.Limit.
func (c *Consumer) limitServer() limitServer {
	return &redisLimit{lib: c.lib, name: c.cfg.Limit}
}

// laneServer is the server of the lane of cfg.Stream.
func (c *Consumer) laneServer(cfg Config) laneServer {
	return newRedisLane(&redisStream{rdb: c.rdb, lib: c.lib, stream: cfg.Stream, deadLetterStream: cfg.DeadLetterStream,
		lastErrors: newLastErrors(cfg.Stream, c.log), group: cfg.Group, consumer: cfg.Consumer,
		readBlock: cfg.ReadBlock, backoff: cfg.Backoff})
}
