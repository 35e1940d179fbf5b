package driver

import (
	"context"
	"errors"
	"fmt"
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
// Everything one Run needs lives in a run of its own (run.go); the
// Consumer keeps what outlives runs.
type Consumer struct {
	rdb redis.UniversalClient
	lib *pelwarden.Library
	cfg Config
	log *slog.Logger
	m   Metrics

	running atomic.Bool
}

// New returns a Consumer for rdb (any go-redis client: single server,
// cluster, failover). It validates cfg, naming the bad field in an error
// matching pelwarden.ErrInvalidArgument, and does no I/O. The caller keeps
// ownership of rdb; the Consumer never closes it.
func New(rdb redis.UniversalClient, cfg Config) (*Consumer, error) {
	if rdb == nil {
		return nil, &ConfigError{Field: "rdb", Reason: "a Redis client is required"}
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
		m:   cfg.Metrics,
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

// Config returns the effective configuration, defaults filled in.
func (c *Consumer) Config() Config { return c.cfg }

// Run loads the library, makes sure the group exists, then reads, reclaims
// and handles entries until ctx is cancelled. It then stops reading, lets
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
	s, lanes := newRun(c)
	lingering, err := s.run(ctx, c, lanes)
	if lingering == nil {
		c.running.Store(false)
	} else {
		// Let Run be called again only once the lingering call and the
		// abandoned handlers returned: they still use this run's state.
		go func() { <-lingering; c.running.Store(false) }()
	}
	return err
}

// start loads the library and checks or creates the group of every
// stream.
func (s *shared) start(ctx context.Context, c *Consumer, lanes []*run) error {
	failed := func(r *run, what string) func(error, int) {
		return func(err error, attempt int) {
			if !permanent(err) {
				r.commandError(what, err, attempt)
			}
		}
	}
	err := retry(ctx, onPermanent, failed(lanes[0], "load library"), func(ctx context.Context) error {
		_, err := c.lib.Load(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() != nil && !permanent(err) {
			err = ctx.Err()
		}
		return fmt.Errorf("pelwarden/driver: load library: %w", err)
	}
	for _, r := range lanes {
		err = retry(ctx, onPermanent, failed(r, "check group"), r.ensureGroup)
		if err != nil && ctx.Err() != nil && !permanent(err) {
			return fmt.Errorf("pelwarden/driver: check group: %w", ctx.Err())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ensureGroup creates the lane's group when CreateGroup is set (BUSYGROUP
// is fine), and otherwise checks it exists.
func (c *run) ensureGroup(ctx context.Context) error {
	if c.cfg.CreateGroup {
		err := c.rdb.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, c.cfg.GroupStartID).Err()
		switch {
		case err == nil:
			c.log.Info("created consumer group", "start_id", c.cfg.GroupStartID)
			return nil
		case redis.HasErrorPrefix(err, "BUSYGROUP"):
			return nil
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			return fmt.Errorf("pelwarden/driver: create group: %w: %v", pelwarden.ErrWrongType, err)
		case redis.HasErrorPrefix(err, "NOPERM"):
			return fmt.Errorf("pelwarden/driver: create group (XGROUP CREATE %s %s %s MKSTREAM; Config.CreateGroup needs +xgroup|create): %w: %w",
				c.cfg.Stream, c.cfg.Group, c.cfg.GroupStartID, pelwarden.ErrNoPermission, err)
		}
		return fmt.Errorf("pelwarden/driver: create group: %w", err)
	}
	_, err := c.lib.Stats(ctx, pelwarden.StatsArgs{Stream: c.cfg.Stream, DeadLetterStream: c.cfg.DeadLetterStream, Group: c.cfg.Group})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pelwarden.ErrNoGroup):
		return fmt.Errorf("pelwarden/driver: group %q on stream %q does not exist; create it (XGROUP CREATE %s %s 0 MKSTREAM) or set Config.CreateGroup: %w",
			c.cfg.Group, c.cfg.Stream, c.cfg.Stream, c.cfg.Group, err)
	}
	return fmt.Errorf("pelwarden/driver: check group: %w", err)
}
