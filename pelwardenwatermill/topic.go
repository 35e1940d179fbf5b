package pelwardenwatermill

import (
	"fmt"

	"github.com/pelwarden/pelwarden"
)

// Topics maps watermill topics to streams. The Publisher and the
// Subscriber of one topic must use the same Topics.
//
// By default a topic is the stream of the same name, as in
// watermill-redisstream, so both can run on one stream while a team
// switches. Its dead-letter stream is pelwarden.DeadLetterStreamFor(stream)
// ("{orders}" -> "{orders}:dead", "orders" -> "{orders}:dead"), the name
// the driver, the CLI and the dashboard use too, in the stream's cluster
// slot as the driver requires.
type Topics struct {
	// Stream names the stream of a topic. Defaults to the topic itself.
	Stream func(topic string) string
	// Partitions, when positive, spreads each topic over that many
	// streams, pelwarden.Partitions(Stream(topic), Partitions) (the name
	// must then not contain '{' or '}'), each with its dead-letter
	// stream. The Publisher sends a message to the partition of its key
	// (PublisherConfig.PartitionKey), the Subscriber runs one consumer
	// over all partitions. At most pelwarden.MaxPartitions.
	Partitions int
}

func (t Topics) validate(prefix string) error {
	if t.Partitions < 0 || t.Partitions > pelwarden.MaxPartitions {
		return &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: prefix + "Topics.Partitions", Reason: fmt.Sprintf("must be between 0 and %d, got %d", pelwarden.MaxPartitions, t.Partitions)}
	}
	return nil
}

func (t Topics) streamName(topic string) (string, error) {
	name := topic
	if t.Stream != nil {
		name = t.Stream(topic)
	}
	if pelwarden.CheckName(name) != nil || len(name) > maxStreamBytes {
		return "", &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "topic", Reason: fmt.Sprintf("topic %q maps to stream %q: stream names are 1 to %d bytes", topic, name, maxStreamBytes)}
	}
	return name, nil
}

// maxStreamBytes bounds the stream of a topic below pelwarden.MaxNameBytes,
// leaving room for the names made from it (its dead-letter stream, "{" +
// stream + "}:dead"), so that they pass pelwarden.CheckName too.
const maxStreamBytes = pelwarden.MaxNameBytes - 16

// streams returns the topic's streams (one, or its partitions) and, for a
// single stream, its dead-letter stream.
func (t Topics) streams(topic string) (streams []string, deadLetter string, err error) {
	name, err := t.streamName(topic)
	if err != nil {
		return nil, "", err
	}
	if t.Partitions > 0 {
		parts, err := pelwarden.Partitions(name, t.Partitions)
		if err != nil {
			return nil, "", &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "topic", Reason: fmt.Sprintf("topic %q: %v", topic, err)}
		}
		return parts, "", nil
	}
	dead, err := DeadLetterStream(name)
	if err != nil {
		return nil, "", &pelwarden.ArgumentError{Scope: "pelwarden/watermill", Field: "topic", Reason: fmt.Sprintf("topic %q: %v", topic, err)}
	}
	return []string{name}, dead, nil
}

// DeadLetterStream returns the dead-letter stream the Subscriber uses for
// stream (without partitions): pelwarden.DeadLetterStreamFor(stream), in
// the stream's cluster slot. The error is always nil (kept for
// compatibility: before v1.3.0 the adapter had its own rule, which failed
// for some names).
func DeadLetterStream(stream string) (string, error) {
	return pelwarden.DeadLetterStreamFor(stream), nil
}
