package pelwardenwatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// Defaults of SubscriberConfig (the other settings are the driver's).
const (
	// DefaultReclaimInterval is the Subscriber's driver.Config.ReclaimInterval:
	// a Nacked message comes back at the first reclaim pass after
	// NackDelay, so the interval bounds how late a Nack is redelivered
	// (where reads claim, Redis 8.4+, with the first read after it). A
	// pass that finds nothing idle costs one XPENDING.
	DefaultReclaimInterval = time.Second
	// DefaultCloseTimeout is SubscriberConfig.CloseTimeout.
	DefaultCloseTimeout = 30 * time.Second
	// DefaultFlushTimeout is what the Subscriber adds to CloseTimeout for
	// the driver's ShutdownTimeout: the time left to flush acks.
	DefaultFlushTimeout = 5 * time.Second
)

// SubscriberConfig configures a Subscriber. The zero value of every
// optional field means its documented default. NewSubscriber never
// modifies the caller's SubscriberConfig.
type SubscriberConfig struct {
	// Group is the consumer group every subscription reads its topic's
	// stream with. Required. Subscribers of one group share the topic's
	// messages; each group gets all of them.
	Group string
	// Consumer is the consumer's name in the group. Defaults to a name
	// unique per subscription (host-pid-random). When set, every
	// subscription uses it, so one Subscriber may subscribe to a topic
	// only once at a time.
	Consumer string
	// Topics maps topics to streams; the Publisher must use the same.
	Topics Topics
	// NackDelay is how long a Nacked message waits before it is delivered
	// again (at the first reclaim pass after it, or the first read where
	// reads claim; see DefaultReclaimInterval). Defaults to 0: the next
	// pass or read.
	NackDelay time.Duration
	// CloseTimeout is how long a closing subscription (Close, or its
	// context cancelled) waits for the message it has handed out to be
	// acked or nacked. The message's context is cancelled at once; an Ack
	// within CloseTimeout is acknowledged on the server before Close
	// returns, and a message still unanswered after it is released for
	// another consumer (its Ack then does nothing). Defaults to
	// DefaultCloseTimeout.
	CloseTimeout time.Duration
	// RequireGroup makes a subscription fail (its channel closes, the
	// error is logged) when the group does not exist, instead of creating
	// it with the stream at Driver.GroupStartID ("0" by default: every
	// entry already in the stream).
	RequireGroup bool
	// Unmarshaler decodes entries. Defaults to DefaultMarshaler, which
	// also reads watermill-redisstream's layout.
	Unmarshaler Unmarshaler
	// WrapHandler, when set, wraps the driver handler of each subscription
	// (the handler runs from delivery to Ack or Nack), for driver
	// middleware such as pelwardenotel.Handler. Values the middleware
	// puts in the handler's context are visible through the message's
	// context.
	WrapHandler func(driver.Handler) driver.Handler
	// Driver is the template of every subscription's driver.Config
	// (MaxDeliveries, MinIdle, Backoff, Tuning, Metrics and the rest keep
	// the driver's documented defaults). Stream, Streams,
	// DeadLetterStream, Group, Consumer and Handler must be empty: the
	// Subscriber sets them. Concurrency must be 0 or 1 (NewSubscriber
	// refuses any other value): watermill hands a subscription's messages
	// out one at a time. Tuning.ReclaimInterval defaults to
	// DefaultReclaimInterval here, CreateGroup follows RequireGroup, and
	// ShutdownTimeout defaults to CloseTimeout + DefaultFlushTimeout (it
	// must exceed CloseTimeout). Logger defaults to Logger. Limit passes
	// through: every subscription runs under it, a message holding its
	// permit from delivery to Ack or Nack.
	Driver driver.Config
	// Logger receives the Subscriber's logs (a subscription that stops
	// with an error). Defaults to slog.Default().
	Logger *slog.Logger
}

func (c SubscriberConfig) withDefaults() SubscriberConfig {
	if c.Unmarshaler == nil {
		c.Unmarshaler = DefaultMarshaler{}
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	d := &c.Driver
	if d.ReclaimInterval == 0 {
		d.ReclaimInterval = DefaultReclaimInterval
	}
	if d.ShutdownTimeout == 0 {
		d.ShutdownTimeout = c.CloseTimeout + DefaultFlushTimeout
	}
	if d.Logger == nil {
		d.Logger = c.Logger
	}
	if d.Concurrency == 0 {
		d.Concurrency = 1
	}
	d.CreateGroup = !c.RequireGroup
	d.Backoff = append([]time.Duration(nil), d.Backoff...)
	return c
}

func (c SubscriberConfig) validate() error {
	bad := func(field, format string, a ...any) error {
		return &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "SubscriberConfig." + field, Reason: fmt.Sprintf(format, a...)}
	}
	if err := pelwarden.CheckName(c.Group); err != nil {
		return bad("Group", "%v", err)
	}
	if c.Consumer != "" { // empty: one is made per subscription
		if err := pelwarden.CheckName(c.Consumer); err != nil {
			return bad("Consumer", "%v", err)
		}
	}
	switch {
	case c.NackDelay < 0:
		return bad("NackDelay", "must not be negative, got %v", c.NackDelay)
	case c.CloseTimeout < 0:
		return bad("CloseTimeout", "must be positive, got %v", c.CloseTimeout)
	}
	d := c.Driver
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Stream", d.Stream != ""}, {"Streams", len(d.Streams) > 0}, {"DeadLetterStream", d.DeadLetterStream != ""},
		{"Group", d.Group != ""}, {"Consumer", d.Consumer != ""}, {"Handler", d.Handler != nil},
	} {
		if f.set {
			return bad("Driver."+f.name, "must be empty: the Subscriber sets it (use SubscriberConfig.Group, Consumer, Topics)")
		}
	}
	if d.Concurrency != 1 {
		return bad("Driver.Concurrency", "must be 0 or 1: watermill hands a subscription's messages out one at a time, so a handler never runs alongside another (subscribe more than once, or run more handlers, for parallel work); got %d", d.Concurrency)
	}
	if d.ShutdownTimeout <= c.CloseTimeout {
		return bad("Driver.ShutdownTimeout", "must exceed CloseTimeout (%v), got %v", c.CloseTimeout, d.ShutdownTimeout)
	}
	return c.Topics.validate("SubscriberConfig.")
}

// Subscriber is a watermill message.Subscriber on pelwarden's driver:
// each Subscribe runs a driver.Consumer on the topic's stream (or
// partitions) in the configured group. It is safe for concurrent use.
type Subscriber struct {
	rdb redis.UniversalClient
	cfg SubscriberConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	subs    map[*subscription]struct{}
	byTopic map[string]int // subscriptions per topic, with a fixed Consumer
	wg      sync.WaitGroup // the subscriptions' goroutines
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber on rdb (any go-redis client: single
// server, Cluster, Sentinel). It validates cfg, naming a bad field in a
// *pelwarden.ArgumentError, and does no I/O. The caller keeps ownership of rdb: the
// Subscriber never closes it. Each subscription holds one of rdb's
// connections in a blocking XREADGROUP per stream (an idle partition of
// several holds none), so size rdb's pool for the subscriptions it
// carries.
func NewSubscriber(rdb redis.UniversalClient, cfg SubscriberConfig) (*Subscriber, error) {
	if rdb == nil {
		return nil, &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "rdb", Reason: "a Redis client is required"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{rdb: rdb, cfg: cfg, closing: make(chan struct{}),
		subs: map[*subscription]struct{}{}, byTopic: map[string]int{}}, nil
}

// driverConfig is the driver.Config of one subscription.
func (s *Subscriber) driverConfig(topic string, h driver.Handler) (driver.Config, error) {
	streams, dead, err := s.cfg.Topics.streams(topic)
	if err != nil {
		return driver.Config{}, err
	}
	cfg := s.cfg.Driver
	cfg.Group, cfg.Consumer, cfg.Handler = s.cfg.Group, s.cfg.Consumer, h
	if len(streams) == 1 && s.cfg.Topics.Partitions == 0 {
		cfg.Stream, cfg.DeadLetterStream = streams[0], dead
	} else {
		cfg.Streams = streams
	}
	if s.cfg.WrapHandler != nil {
		cfg.Handler = s.cfg.WrapHandler(h)
	}
	return cfg, nil
}

// Subscribe starts a consumer of the group on topic's stream and returns
// its channel. Messages come one at a time: the next one only after the
// previous one was acked or nacked. Each message's context carries ctx's
// values (and those of WrapHandler's middleware) and is cancelled on Ack,
// on Nack, when the subscription closes, and when the consumer loses the
// entry to another consumer (its lease lapsed).
//
//   - Ack acknowledges the entry in the driver's next batched, fenced ack
//     (pelwarden's ack function, or XACK for an entry delivered less than
//     MinIdle/2 ago); it is on the server before Close returns.
//   - Nack gives the entry back for a retry: one release call (a round
//     trip, fenced by ownership) makes it claimable after NackDelay, and
//     the next reclaim pass (DefaultReclaimInterval) claims it with the
//     claim function, which counts the delivery on the server (XCLAIM) and,
//     once the entry has been delivered Driver.MaxDeliveries times (5 by
//     default), dead-letters it with reason max_deliveries atomically
//     instead of delivering it again. A Nack therefore costs one round
//     trip of its own plus a share of the next pass (one XPENDING and one
//     claim call for every entry idle by then), and arrives at most
//     NackDelay + ReclaimInterval later. Other consumers of the group may
//     claim it too.
//
// DeadLetter(msg, err) instead of Nack dead-letters the entry at once with
// err's text (reason "handler"), in the same atomic step as its ack,
// without the MaxDeliveries round of retries; driver middleware
// (WrapHandler) sees a *driver.DeadLetterError wrapping err.
//
// An entry that is not a watermill message (Unmarshaler fails) is
// dead-lettered at once with the error's text (reason "handler") and never
// reaches the channel. Every message delivered carries its stream, stream
// id and the server's delivery count in its metadata (MetadataStream,
// MetadataStreamID, MetadataDeliveries).
//
// Cancelling ctx closes the subscription: the channel is closed once the
// message handed out was answered (or CloseTimeout passed), entries
// fetched but not handed out were released for other consumers and acks
// were flushed. A consumer that stops for a reason retrying cannot fix
// (pelwarden.ErrNoGroup with RequireGroup, an ACL refusal) logs the error
// and closes the channel.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	sub := &subscription{s: s, topic: topic, values: ctx, out: make(chan *message.Message),
		closing: make(chan struct{}), nackDelay: s.cfg.NackDelay, closeTimeout: s.cfg.CloseTimeout,
		unmarshaler: s.cfg.Unmarshaler}
	cfg, err := s.driverConfig(topic, driver.HandlerFunc(sub.handle))
	if err != nil {
		return nil, err
	}
	c, err := driver.New(s.rdb, cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.cfg.Consumer != "" {
		if s.byTopic[topic] > 0 {
			return nil, &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "SubscriberConfig.Consumer", Reason: fmt.Sprintf("set to %q, so topic %q can be subscribed once at a time; leave Consumer empty for a consumer per subscription", s.cfg.Consumer, topic)}
		}
		s.byTopic[topic]++
	}
	s.subs[sub] = struct{}{}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	ended := make(chan struct{})
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-s.closing:
		case <-ended:
		}
		sub.close()
		stop()
	}()
	go func() {
		defer s.wg.Done()
		defer stop()
		err := c.Run(runCtx)
		if err != nil {
			s.cfg.Logger.Error("pelwarden/watermill: subscription stopped", "topic", topic, "group", s.cfg.Group, "consumer", c.Name(), "err", err)
		}
		// Free the topic before the channel closes: a caller that sees
		// the close may subscribe again at once.
		s.mu.Lock()
		delete(s.subs, sub)
		if s.cfg.Consumer != "" {
			s.byTopic[topic]--
		}
		s.mu.Unlock()
		close(ended)
		close(sub.out)
	}()
	return sub.out, nil
}

// SubscribeInitialize creates the group on topic's stream (or each
// partition), with the stream, at Driver.GroupStartID, so that messages
// published before the first Subscribe are kept for the group. An existing
// group is left as it is. With RequireGroup it only checks that the group
// exists.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	streams, dead, err := s.cfg.Topics.streams(topic)
	if err != nil {
		return err
	}
	start := s.cfg.Driver.GroupStartID
	if start == "" {
		start = driver.DefaultGroupStartID
	}
	ctx := context.Background()
	for _, stream := range streams {
		if s.cfg.RequireGroup {
			d := dead
			if s.cfg.Topics.Partitions > 0 {
				d = pelwarden.DeadLetterStreamFor(stream)
			}
			if _, err := pelwarden.NewLibrary(s.rdb).Stats(ctx, pelwarden.StatsArgs{Stream: stream, DeadLetterStream: d, Group: s.cfg.Group}); err != nil {
				return fmt.Errorf("pelwarden/watermill: group %q on %s: %w", s.cfg.Group, stream, err)
			}
			continue
		}
		err := s.rdb.XGroupCreateMkStream(ctx, stream, s.cfg.Group, start).Err()
		if err != nil && !pelwarden.Matches(err, pelwarden.ErrGroupExists) {
			return fmt.Errorf("pelwarden/watermill: create group %q on %s: %w", s.cfg.Group, stream, err)
		}
	}
	return nil
}

// Close closes every subscription, as cancelling its context does, and
// waits until all have stopped: the messages handed out were answered (or
// CloseTimeout passed), their acks are on the server, and every channel is
// closed. Later calls wait likewise and return nil; Subscribe then fails
// with ErrClosed.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// subscription is one Subscribe: its channel and the driver handler that
// feeds it. The driver runs it with Concurrency 1, so handle is never
// called concurrently and the channel carries one message at a time.
type subscription struct {
	s            *Subscriber
	topic        string
	values       context.Context // Subscribe's ctx: the values of every message's context
	out          chan *message.Message
	nackDelay    time.Duration
	closeTimeout time.Duration
	unmarshaler  Unmarshaler

	closeOnce sync.Once
	closing   chan struct{} // closed when the subscription begins to close
}

func (sub *subscription) close() { sub.closeOnce.Do(func() { close(sub.closing) }) }

// handle is the driver handler: it hands one message out and returns once
// it was answered, steering the entry's outcome.
func (sub *subscription) handle(ctx context.Context, m *driver.Message) error {
	msg, err := sub.unmarshaler.Unmarshal(m.Fields)
	if err != nil {
		return driver.DeadLetter(err)
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	msg.Metadata.Set(MetadataStream, m.Stream)
	msg.Metadata.Set(MetadataStreamID, m.ID)
	msg.Metadata.Set(MetadataDeliveries, strconv.FormatInt(m.Deliveries, 10))
	msgCtx, cancel := context.WithCancel(mergedContext{Context: ctx, values: sub.values})
	defer cancel()
	msg.SetContext(msgCtx)
	d := &delivery{}
	deliveries.Store(msg, d)
	defer deliveries.Delete(msg)
	select {
	case sub.out <- msg:
	case <-sub.closing:
		return driver.RetryAfter(0, ErrNotAcked)
	case <-ctx.Done():
		return context.Cause(ctx) // taken over before it was handed out
	}
	// ctx is cancelled when the entry is lost to another consumer (the
	// driver then drops the outcome; the holder still answers before the
	// next message goes out) or when the driver's ShutdownTimeout cut the
	// wait short (which CloseTimeout < ShutdownTimeout leaves to a
	// subscription that stopped for an error of its own).
	cut := ctx.Done()
	closing := sub.closing
	var timeout <-chan time.Time
	for {
		select {
		case <-msg.Acked():
			return nil
		case <-msg.Nacked():
			if err := d.settle(); err != nil {
				return driver.DeadLetter(err)
			}
			return driver.RetryAfter(sub.nackDelay, ErrNacked)
		case <-closing:
			// Tell the holder, then give it CloseTimeout to answer.
			cancel()
			t := time.NewTimer(sub.closeTimeout)
			defer t.Stop()
			closing, timeout = nil, t.C
		case <-timeout:
			return driver.RetryAfter(0, ErrNotAcked)
		case <-cut:
			if !errors.Is(context.Cause(ctx), driver.ErrLostOwnership) {
				return context.Cause(ctx)
			}
			cut = nil
		}
	}
}

// deliveries are the messages the subscriptions of this process have
// handed out and wait on, for DeadLetter.
var deliveries sync.Map // *message.Message -> *delivery

// delivery is what DeadLetter tells the subscription waiting on a message.
type delivery struct {
	mu      sync.Mutex
	err     error // DeadLetter's: dead-letter the entry with it
	settled bool  // the subscription took the Nack
}

// deadLetter asks for the entry to be dead-lettered with err; false when
// the subscription took the Nack already (a retry).
func (d *delivery) deadLetter(err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return false
	}
	d.err = err
	return true
}

// settle takes the Nack: it returns DeadLetter's error, or nil for a plain
// Nack, after which DeadLetter no longer changes the outcome.
func (d *delivery) settle() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settled = true
	return d.err
}

// DeadLetter answers msg, a message a Subscriber handed out, with a
// permanent failure: the subscription dead-letters its entry at once, with
// err's text and reason "handler" (pelwarden.ReasonHandler), in the same
// atomic step as its ack. It is Nack for a message that can never be
// processed: a plain Nack retries the message until Driver.MaxDeliveries
// and records no error text, while DeadLetter spends no more deliveries and
// keeps the error in the dead-letter record (pelwarden.FieldError, bounded
// to pelwarden.MaxErrorBytes). A nil err records ErrDeadLettered's text.
//
// It returns true when the entry will be dead-lettered. It returns false
// when msg was answered already (an Ack stands; after a Nack the retry
// does), or is not a message a Subscriber of this process is waiting on
// (such as a copy, msg.Copy()): then it only Nacks msg, so a message meant
// for the dead-letter stream is never acked.
//
// In a watermill Router handler, call DeadLetter and return nil: the
// router's Ack after it does nothing, and no error reaches middleware such
// as Retry or PoisonQueue (see the package documentation).
//
//	if err := json.Unmarshal(msg.Payload, &order); err != nil {
//		pelwardenwatermill.DeadLetter(msg, fmt.Errorf("malformed order: %w", err))
//		return nil
//	}
func DeadLetter(msg *message.Message, err error) bool {
	if err == nil {
		err = ErrDeadLettered
	}
	if v, ok := deliveries.Load(msg); ok && v.(*delivery).deadLetter(err) {
		return msg.Nack()
	}
	msg.Nack()
	return false
}

// mergedContext is the driver handler's context (cancellation, and the
// values of driver middleware) with the values of Subscribe's context
// behind them.
type mergedContext struct {
	context.Context
	values context.Context
}

func (c mergedContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}
