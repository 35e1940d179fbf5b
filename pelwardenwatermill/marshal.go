package pelwardenwatermill

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pelwarden/pelwarden"
)

// The stream fields of a message published by DefaultMarshaler, in this
// order:
//
//	wm.uuid          the message's UUID (always present, first)
//	wm.md.<key>      one field per metadata entry, by key in byte order
//	traceparent      metadata "traceparent", under the W3C field name
//	tracestate       metadata "tracestate", likewise
//	wm.payload       the payload, as is (always present, last; may be empty)
//
// Metadata keys are written as they are; a key may contain any byte. The
// trace-context keys travel as pelwarden.FieldTraceParent and
// pelwarden.FieldTraceState, the fields the rest of pelwarden (the
// producer's Injector, pelwardenotel.Handler) reads and writes, so a trace
// continues across watermill and plain pelwarden consumers. The keys the
// Subscriber adds on delivery (MetadataStream, MetadataStreamID,
// MetadataDeliveries) are not written.
const (
	// FieldUUID holds the message's UUID.
	FieldUUID = "wm.uuid"
	// FieldPayload holds the payload.
	FieldPayload = "wm.payload"
	// FieldMetadataPrefix prefixes the field of each metadata entry.
	FieldMetadataPrefix = "wm.md."
)

// The fields of watermill-redisstream's DefaultMarshallerUnmarshaller,
// which DefaultMarshaler reads too: the UUID, the payload, and the
// metadata as one msgpack map (absent or empty without metadata).
const (
	RedisstreamFieldUUID     = "_watermill_message_uuid"
	RedisstreamFieldPayload  = "payload"
	RedisstreamFieldMetadata = "metadata"
)

// Metadata keys the Subscriber sets on every message it delivers.
const (
	// MetadataStream is the stream the entry was read from (a topic's
	// partition, with SubscriberConfig.Partitions).
	MetadataStream = "pelwarden_stream"
	// MetadataStreamID is the entry's stream id: the natural idempotency
	// key of the delivery (a message published twice has two).
	MetadataStreamID = "pelwarden_stream_id"
	// MetadataDeliveries is the server's delivery count of the entry,
	// this delivery included ("1" on the first), as a decimal string. It
	// grows with every Nack: at SubscriberConfig's MaxDeliveries the
	// entry is dead-lettered instead of being delivered again.
	MetadataDeliveries = "pelwarden_deliveries"
)

// Marshaler turns a watermill message into the fields of one stream entry.
type Marshaler interface {
	Marshal(topic string, msg *message.Message) ([]pelwarden.Field, error)
}

// Unmarshaler turns the fields of a stream entry into a watermill message.
// An error makes the Subscriber dead-letter the entry with the error's
// text (a message that cannot be decoded now never can).
type Unmarshaler interface {
	Unmarshal(fields []pelwarden.Field) (*message.Message, error)
}

// MarshalerUnmarshaler is both.
type MarshalerUnmarshaler interface {
	Marshaler
	Unmarshaler
}

// DefaultMarshaler writes the layout described at FieldUUID and reads it,
// and also reads entries written by watermill-redisstream's
// DefaultMarshallerUnmarshaller (RedisstreamFieldUUID), so subscribers
// can move to pelwarden before the publishers do.
type DefaultMarshaler struct{}

var _ MarshalerUnmarshaler = DefaultMarshaler{}

// subscriberKeys are the metadata keys the Subscriber sets on delivery;
// Marshal leaves them out.
func subscriberKey(k string) bool {
	return k == MetadataStream || k == MetadataStreamID || k == MetadataDeliveries
}

// Marshal returns the message's fields in the documented layout.
func (DefaultMarshaler) Marshal(_ string, msg *message.Message) ([]pelwarden.Field, error) {
	keys := make([]string, 0, len(msg.Metadata))
	for k := range msg.Metadata {
		if !subscriberKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	fields := make([]pelwarden.Field, 0, len(keys)+2)
	fields = append(fields, pelwarden.Field{Name: FieldUUID, Value: msg.UUID})
	var trace []pelwarden.Field
	for _, k := range keys {
		switch k {
		case pelwarden.FieldTraceParent, pelwarden.FieldTraceState:
			trace = append(trace, pelwarden.Field{Name: k, Value: msg.Metadata[k]})
		default:
			fields = append(fields, pelwarden.Field{Name: FieldMetadataPrefix + k, Value: msg.Metadata[k]})
		}
	}
	fields = append(fields, trace...)
	return append(fields, pelwarden.Field{Name: FieldPayload, Value: string(msg.Payload)}), nil
}

// Unmarshal reads an entry in either layout (the first field of a name
// wins, as in driver.Message.Value). Fields of neither layout are ignored.
// An entry with neither UUID field is refused with an error wrapping
// ErrNotWatermill; a watermill-redisstream entry whose metadata is not a
// msgpack map of strings, with an error saying so.
func (DefaultMarshaler) Unmarshal(fields []pelwarden.Field) (*message.Message, error) {
	var (
		uuid, payload, md     string
		haveUUID, redisstream bool
		havePayload, haveMD   bool
		meta                  = message.Metadata{}
	)
	for _, f := range fields {
		switch {
		case f.Name == FieldUUID || f.Name == RedisstreamFieldUUID:
			if !haveUUID {
				uuid, haveUUID, redisstream = f.Value, true, f.Name == RedisstreamFieldUUID
			}
		case f.Name == pelwarden.FieldTraceParent || f.Name == pelwarden.FieldTraceState:
			if _, ok := meta[f.Name]; !ok {
				meta[f.Name] = f.Value
			}
		}
	}
	if !haveUUID {
		return nil, fmt.Errorf("%w: no %s or %s field", ErrNotWatermill, FieldUUID, RedisstreamFieldUUID)
	}
	for _, f := range fields {
		switch {
		case redisstream && f.Name == RedisstreamFieldPayload && !havePayload:
			payload, havePayload = f.Value, true
		case redisstream && f.Name == RedisstreamFieldMetadata && !haveMD:
			md, haveMD = f.Value, true
		case !redisstream && f.Name == FieldPayload && !havePayload:
			payload, havePayload = f.Value, true
		case !redisstream && strings.HasPrefix(f.Name, FieldMetadataPrefix):
			k := f.Name[len(FieldMetadataPrefix):]
			if _, ok := meta[k]; !ok {
				meta[k] = f.Value
			}
		}
	}
	if md != "" {
		m, err := decodeMsgpackStringMap([]byte(md))
		if err != nil {
			return nil, fmt.Errorf("pelwarden/watermill: watermill-redisstream metadata field: %w", err)
		}
		for k, v := range m {
			meta[k] = v
		}
	}
	msg := message.NewMessage(uuid, []byte(payload))
	msg.Metadata = meta
	return msg, nil
}
