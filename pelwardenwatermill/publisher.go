package pelwardenwatermill

import (
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/producer"
)

// PublisherConfig configures a Publisher. The zero value of every optional
// field means its documented default. NewPublisher never modifies the
// caller's PublisherConfig.
type PublisherConfig struct {
	// Topics maps topics to streams; the Subscribers must use the same.
	Topics Topics
	// PartitionKey names the metadata entry whose value is a message's
	// partition key with Topics.Partitions: all messages of one key go to
	// one partition, and are consumed in order there as long as none is
	// Nacked. A message without it is placed by its UUID. Ignored without
	// partitions.
	PartitionKey string
	// Marshaler encodes messages. Defaults to DefaultMarshaler.
	Marshaler Marshaler
	// Injector adds fields to every entry from its message's context, such
	// as pelwardenotel.Injector(), which starts a PRODUCER span per entry
	// and writes its W3C trace context as pelwarden.FieldTraceParent and
	// pelwarden.FieldTraceState. Without it those fields come from the
	// message's metadata of the same names, if any (DefaultMarshaler).
	Injector producer.Injector
	// MaxBatch bounds the entries of one pipeline (producer.Config.MaxBatch;
	// default producer.DefaultMaxBatch).
	MaxBatch int
	// TrimEvery, when positive, trims each stream safely every so many
	// entries published to it (producer.Config.TrimEvery): only what every
	// group has delivered and acknowledged. Off by default.
	TrimEvery int
	// ProducerID is producer.Config.ProducerID (none by default: the
	// publisher sends no idempotency ids).
	ProducerID string
}

// Publisher is a watermill message.Publisher on pelwarden's producer. It
// is safe for concurrent use.
type Publisher struct {
	rdb redis.UniversalClient
	cfg PublisherConfig

	mu        sync.RWMutex
	closed    bool
	inFlight  sync.WaitGroup
	producers map[string]*producer.Producer // by topic
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher on rdb (any go-redis client). It
// validates cfg, naming a bad field in a *pelwarden.ArgumentError, and does no I/O.
// The caller keeps ownership of rdb: the Publisher never closes it.
func NewPublisher(rdb redis.UniversalClient, cfg PublisherConfig) (*Publisher, error) {
	if rdb == nil {
		return nil, &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "rdb", Reason: "a Redis client is required"}
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = DefaultMarshaler{}
	}
	if err := cfg.Topics.validate("PublisherConfig."); err != nil {
		return nil, err
	}
	if cfg.MaxBatch < 0 || cfg.MaxBatch > pelwarden.MaxCount {
		return nil, &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "PublisherConfig.MaxBatch", Reason: fmt.Sprintf("must be 1 to %d, got %d", pelwarden.MaxCount, cfg.MaxBatch)}
	}
	if cfg.TrimEvery < 0 {
		return nil, &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "PublisherConfig.TrimEvery", Reason: fmt.Sprintf("must not be negative, got %d", cfg.TrimEvery)}
	}
	return &Publisher{rdb: rdb, cfg: cfg, producers: map[string]*producer.Producer{}}, nil
}

// producerFor returns the topic's producer, making it on first use.
func (p *Publisher) producerFor(topic string) (*producer.Producer, error) {
	p.mu.RLock()
	pr := p.producers[topic]
	p.mu.RUnlock()
	if pr != nil {
		return pr, nil
	}
	streams, _, err := p.cfg.Topics.streams(topic)
	if err != nil {
		return nil, err
	}
	pc := producer.Config{MaxBatch: p.cfg.MaxBatch, TrimEvery: p.cfg.TrimEvery, ProducerID: p.cfg.ProducerID}
	if p.cfg.Topics.Partitions > 0 {
		pc.Partitions = streams
	} else {
		pc.Stream = streams[0]
	}
	pr, err = producer.New(p.rdb, pc)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev := p.producers[topic]; prev != nil {
		return prev, nil
	}
	p.producers[topic] = pr
	return pr, nil
}

// Publish adds messages to topic's stream (or partitions), pipelined:
// one round trip per producer.DefaultMaxBatch messages on a single server
// (per slot owner on a cluster). It is synchronous: it returns once the
// server has added every message, or with the first error. All messages
// are marshaled first, so a message that cannot be marshaled fails the
// call before anything is sent; a Redis error fails the messages it hit
// (the others of the call may have been added). The Injector gets each
// message's own context; the pipeline goes out under the first message's
// context (cancelling it cuts the call short). A publish whose reply was
// lost may have added its messages: retrying adds them again with new
// stream ids (the UUIDs stay the same, so a handler can deduplicate on
// them).
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	p.inFlight.Add(1)
	p.mu.RUnlock()
	defer p.inFlight.Done()
	if len(messages) == 0 {
		return nil
	}
	pr, err := p.producerFor(topic)
	if err != nil {
		return err
	}
	batch := make([]producer.Message, len(messages))
	for i, msg := range messages {
		fields, err := p.cfg.Marshaler.Marshal(topic, msg)
		if err != nil {
			return fmt.Errorf("pelwarden/watermill: marshal message %s: %w", msg.UUID, err)
		}
		key := msg.UUID
		if p.cfg.PartitionKey != "" {
			if k, ok := msg.Metadata[p.cfg.PartitionKey]; ok {
				key = k
			}
		}
		if p.cfg.Injector != nil {
			fields = p.cfg.Injector.Inject(msg.Context(), pr.StreamFor(key), fields)
		}
		batch[i] = producer.Message{Key: key, Fields: fields}
	}
	_, err = pr.PublishBatch(messages[0].Context(), batch)
	if err != nil {
		return fmt.Errorf("pelwarden/watermill: publish to %s: %w", topic, err)
	}
	return nil
}

// Close refuses new publishes (they return ErrClosed) and waits for those
// in progress to finish, so every message a Publish call was given has been
// added or failed when Close returns. It never closes rdb. It is safe to
// call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.inFlight.Wait()
	return nil
}
