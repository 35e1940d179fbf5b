package pelwardenwatermill_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// The documented layout, field by field.
func TestMarshalLayout(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("uuid-1", []byte("payload"))
	msg.Metadata = message.Metadata{
		"b": "2", "a": "1", "": "empty key",
		pelwarden.FieldTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		pelwarden.FieldTraceState:  "k=v",
		// set by a Subscriber on delivery: not written
		pelwardenwatermill.MetadataStreamID: "1-0", pelwardenwatermill.MetadataDeliveries: "3", pelwardenwatermill.MetadataStream: "s",
	}
	fields, err := pelwardenwatermill.DefaultMarshaler{}.Marshal("topic", msg)
	require.NoError(t, err)
	require.Equal(t, []pelwarden.Field{
		{Name: "wm.uuid", Value: "uuid-1"},
		{Name: "wm.md.", Value: "empty key"},
		{Name: "wm.md.a", Value: "1"},
		{Name: "wm.md.b", Value: "2"},
		{Name: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{Name: "tracestate", Value: "k=v"},
		{Name: "wm.payload", Value: "payload"},
	}, fields)

	back, err := pelwardenwatermill.DefaultMarshaler{}.Unmarshal(fields)
	require.NoError(t, err)
	require.Equal(t, "uuid-1", back.UUID)
	require.Equal(t, "payload", string(back.Payload))
	want := message.Metadata{"": "empty key", "a": "1", "b": "2",
		pelwarden.FieldTraceParent: msg.Metadata[pelwarden.FieldTraceParent], pelwarden.FieldTraceState: "k=v"}
	require.Equal(t, want, back.Metadata)
}

// Without metadata and payload: two fields, both read back empty.
func TestMarshalEmpty(t *testing.T) {
	t.Parallel()
	fields, err := pelwardenwatermill.DefaultMarshaler{}.Marshal("topic", message.NewMessage("u", nil))
	require.NoError(t, err)
	require.Equal(t, []pelwarden.Field{{Name: "wm.uuid", Value: "u"}, {Name: "wm.payload", Value: ""}}, fields)
	back, err := pelwardenwatermill.DefaultMarshaler{}.Unmarshal(fields)
	require.NoError(t, err)
	require.Empty(t, back.Payload)
	require.Empty(t, back.Metadata)
}

// redisstreamFields turns watermill-redisstream's marshalled values into
// the fields the server would store (XADD turns []byte and string alike
// into strings).
func redisstreamFields(t *testing.T, msg *message.Message) []pelwarden.Field {
	t.Helper()
	values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("topic", msg)
	require.NoError(t, err)
	var fields []pelwarden.Field
	for _, k := range []string{redisstream.UUIDHeaderKey, "metadata", "payload"} {
		switch v := values[k].(type) {
		case string:
			fields = append(fields, pelwarden.Field{Name: k, Value: v})
		case []byte:
			fields = append(fields, pelwarden.Field{Name: k, Value: string(v)})
		default:
			t.Fatalf("redisstream value %s of type %T", k, v)
		}
	}
	return fields
}

// Entries of watermill-redisstream's default marshaller read as it reads
// them, for metadata of every msgpack size class (fixmap, map16; fixstr,
// str8, str16, str32).
func TestUnmarshalRedisstreamLayout(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return string(make([]byte, n)) }
	for name, md := range map[string]message.Metadata{
		"none":     nil,
		"small":    {"k": "v", "empty": ""},
		"str8":     {"k": long(200)},
		"str16":    {long(300): long(70000 - 69000)},
		"str32":    {"k": long(70000)},
		"map16":    manyKeys(20),
		"map16big": manyKeys(70),
	} {
		t.Run(name, func(t *testing.T) {
			msg := message.NewMessage(watermill.NewUUID(), []byte("payload "+name))
			msg.Metadata = md
			fields := redisstreamFields(t, msg)
			got, err := pelwardenwatermill.DefaultMarshaler{}.Unmarshal(fields)
			require.NoError(t, err)
			values := map[string]any{}
			for _, f := range fields {
				values[f.Name] = f.Value
			}
			want, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(values)
			require.NoError(t, err)
			require.Equal(t, want.UUID, got.UUID)
			require.Equal(t, string(want.Payload), string(got.Payload))
			if len(want.Metadata) == 0 {
				require.Empty(t, got.Metadata)
			} else {
				require.Equal(t, want.Metadata, got.Metadata)
			}
		})
	}
}

func manyKeys(n int) message.Metadata {
	md := message.Metadata{}
	for i := range n {
		md[fmt.Sprintf("key-%d", i)] = fmt.Sprintf("value-%d", i)
	}
	return md
}

// Entries of neither layout, and broken redisstream metadata, are refused.
func TestUnmarshalRefuses(t *testing.T) {
	t.Parallel()
	_, err := pelwardenwatermill.DefaultMarshaler{}.Unmarshal([]pelwarden.Field{{Name: "order", Value: "42"}})
	require.ErrorIs(t, err, pelwardenwatermill.ErrNotWatermill)
	for _, md := range []string{"\x81\xa1k", "\x81\xa1k\xa2v", "\x92\xa1a\xa1b", "\x81\xa1k\xa1v!", "\xdf\xff\xff\xff\xff"} {
		_, err = pelwardenwatermill.DefaultMarshaler{}.Unmarshal([]pelwarden.Field{
			{Name: redisstream.UUIDHeaderKey, Value: "u"}, {Name: "metadata", Value: md}, {Name: "payload", Value: "p"}})
		require.Error(t, err, "%q", md)
	}
}

// The msgpack reader never panics and, on what it accepts, agrees with
// watermill-redisstream's own decoder.
func FuzzUnmarshalRedisstreamMetadata(f *testing.F) {
	for _, md := range []message.Metadata{nil, {"k": "v"}, manyKeys(20)} {
		msg := message.NewMessage("u", nil)
		msg.Metadata = md
		values, _ := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("t", msg)
		f.Add(values["metadata"].([]byte))
	}
	f.Fuzz(func(t *testing.T, md []byte) {
		fields := []pelwarden.Field{{Name: redisstream.UUIDHeaderKey, Value: "u"}, {Name: "metadata", Value: string(md)}}
		got, err := pelwardenwatermill.DefaultMarshaler{}.Unmarshal(fields)
		if err != nil {
			return
		}
		want, werr := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(map[string]any{redisstream.UUIDHeaderKey: "u", "metadata": string(md)})
		if werr != nil {
			return // msgpack is laxer (it also takes other types); a subset is fine
		}
		if len(want.Metadata) == 0 {
			require.Empty(t, got.Metadata)
			return
		}
		require.Equal(t, want.Metadata, got.Metadata)
	})
}

// Switching subscribers first: messages published by watermill-redisstream
// (its default marshaller) are consumed by this package's Subscriber from
// the same stream, with their UUID, payload and metadata.
func TestCrossMarshallerFromRedisstream(t *testing.T) {
	eachParallel(t, func(t *testing.T, s *server) {
		e := newEnv(t, s)
		// watermill-redisstream's Publisher closes its client on Close.
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: s.client()}, watermill.NopLogger{})
		require.NoError(t, err)
		sent := make(map[string]*message.Message)
		for i := range 50 {
			msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "payload %d", i))
			if i%2 == 0 {
				msg.Metadata.Set("test", watermill.NewUUID())
				msg.Metadata.Set("n", fmt.Sprint(i))
			}
			sent[msg.UUID] = msg
			require.NoError(t, pub.Publish(e.topic, msg))
		}
		require.NoError(t, pub.Close())

		ch, err := e.subscriber(pelwardenwatermill.SubscriberConfig{}).Subscribe(context.Background(), e.topic)
		require.NoError(t, err)
		for len(sent) > 0 {
			m := receive(t, ch)
			want, ok := sent[m.UUID]
			require.True(t, ok, "unexpected UUID %s", m.UUID)
			delete(sent, m.UUID)
			require.Equal(t, string(want.Payload), string(m.Payload))
			for k, v := range want.Metadata {
				require.Equal(t, v, m.Metadata.Get(k), k)
			}
			require.NotEmpty(t, m.Metadata.Get(pelwardenwatermill.MetadataStreamID))
			require.True(t, m.Ack())
		}
		e.fixture().RequirePELEmpty()
	})
}
