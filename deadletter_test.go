package pelwarden

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestParseDeadLetter(t *testing.T) {
	t.Parallel()
	orig := []Field{{"b", "2"}, {FieldRedrives, "3"}, {"b", "dup"}}
	meta := []Field{{FieldOriginalID, "5-1"}, {FieldStream, "{s}"}, {FieldGroup, "g"}, {FieldConsumer, "c"},
		{FieldDeliveries, "4"}, {FieldReason, ReasonHandler}, {FieldError, "boom"}, {FieldDeadLetteredAt, "1700000000123"}, {FieldMetaCount, "9"}}
	d, ok := ParseDeadLetter(append(append([]Field{}, orig...), meta...))
	require.True(t, ok)
	require.Equal(t, DeadLetter{Fields: orig, OriginalID: "5-1", Stream: "{s}", Group: "g", Consumer: "c", Deliveries: 4,
		Reason: ReasonHandler, Error: "boom", DeadLetteredAt: time.UnixMilli(1700000000123), Redrives: 3}, d)

	// Foreign records, by the redrive function's rule: all fields kept.
	for _, fs := range [][]Field{
		nil,
		{{"a", "b"}},
		{{"a", "b"}, {FieldMetaCount, "nan"}},
		{{"a", "b"}, {FieldMetaCount, "1"}},
		{{"a", "b"}, {FieldMetaCount, "2"}},         // swallows a foreign field
		{{FieldStream, "x"}, {FieldMetaCount, "3"}}, // more pairs than fields
		{{"x", "1"}, {FieldStream, "s"}, {FieldMetaCount, "0002"}}, // not plain 1-3 digits
	} {
		d, ok := ParseDeadLetter(fs)
		require.False(t, ok, "%v", fs)
		require.Equal(t, fs, d.Fields)
	}
}

// deadLetterCase is one record of testdata/deadletter_cases.json.
type deadLetterCase struct {
	Name   string      `json:"name"`
	Fields [][2]string `json:"fields"`
	Ours   bool        `json:"ours"`
}

// ParseDeadLetter on the agreement table (integration_test runs the redrive
// function on the same table: the two must agree).
func TestParseDeadLetterCases(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/deadletter_cases.json")
	require.NoError(t, err)
	var table struct {
		Cases []deadLetterCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Cases)
	for _, c := range table.Cases {
		fields := make([]Field, len(c.Fields))
		for i, f := range c.Fields {
			fields[i] = Field{Name: f[0], Value: f[1]}
		}
		_, ok := ParseDeadLetter(fields)
		require.Equal(t, c.Ours, ok, c.Name)
	}
}

// A record as go-redis's XRange returns it (fields in a map) decodes into
// the DeadLetter that ParseDeadLetter makes of it in order, the original
// fields sorted by name.
func TestParseDeadLetterMessage(t *testing.T) {
	t.Parallel()
	values := map[string]any{
		"sku": "A-1", "amount": "oops", FieldRedrives: "2", "traceparent": "00-x",
		FieldOriginalID: "5-1", FieldStream: "{s}", FieldGroup: "g", FieldConsumer: "c",
		FieldDeliveries: "1", FieldReason: ReasonHandler, FieldError: "malformed amount",
		FieldDeadLetteredAt: "1700000000123", FieldMetaCount: "9",
	}
	d, ok := ParseDeadLetterMessage(redis.XMessage{ID: "9-0", Values: values})
	require.True(t, ok)
	require.Equal(t, DeadLetter{
		Fields:     []Field{{"amount", "oops"}, {FieldRedrives, "2"}, {"sku", "A-1"}, {"traceparent", "00-x"}},
		OriginalID: "5-1", Stream: "{s}", Group: "g", Consumer: "c", Deliveries: 1,
		Reason: ReasonHandler, Error: "malformed amount", DeadLetteredAt: time.UnixMilli(1700000000123), Redrives: 2,
	}, d)

	// Only metadata: no original fields.
	d, ok = ParseDeadLetterMessage(redis.XMessage{Values: map[string]any{FieldStream: "{s}", FieldMetaCount: "2"}})
	require.True(t, ok)
	require.Empty(t, d.Fields)
	require.Equal(t, "{s}", d.Stream)

	// Foreign records: all fields kept, sorted by name.
	for _, vs := range []map[string]any{
		nil,
		{"b": "1", "a": "2"},
		{"a": "b", FieldMetaCount: "2"}, // one metadata pair, not two
		{"a": "b", FieldStream: "s", FieldMetaCount: "1"},                     // count below 2
		{"a": "b", FieldStream: "s", FieldMetaCount: "02x"},                   // not digits
		{"a": "b", FieldStream: "s", FieldMetaCount: "0002"},                  // more than three digits
		{"a": "b", FieldStream: "s", "pelwarden.x": "y", FieldMetaCount: "2"}, // a third prefixed field
		{"a": "b", FieldStream: "s", FieldMetaCount: "3"},                     // count past the metadata
		{FieldRedrives: "1", FieldMetaCount: "2"},                             // FieldRedrives is not metadata
	} {
		d, ok := ParseDeadLetterMessage(redis.XMessage{Values: vs})
		require.False(t, ok, "%v", vs)
		require.Len(t, d.Fields, len(vs))
		for i := 1; i < len(d.Fields); i++ {
			require.Less(t, d.Fields[i-1].Name, d.Fields[i].Name)
		}
		for _, f := range d.Fields {
			require.Equal(t, vs[f.Name], f.Value)
		}
	}
}

// ParseDeadLetterMessage agrees with ParseDeadLetter on the agreement table,
// but for the records whose rule is about order, which a map cannot see.
func TestParseDeadLetterMessageCases(t *testing.T) {
	t.Parallel()
	orderOnly := map[string]bool{"count not last": true}
	raw, err := os.ReadFile("testdata/deadletter_cases.json")
	require.NoError(t, err)
	var table struct {
		Cases []deadLetterCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Cases)
	for _, c := range table.Cases {
		values := map[string]any{}
		for _, f := range c.Fields {
			values[f[0]] = f[1]
		}
		_, ok := ParseDeadLetterMessage(redis.XMessage{Values: values})
		if orderOnly[c.Name] {
			require.True(t, ok, c.Name)
			continue
		}
		require.Equal(t, c.Ours, ok, c.Name)
	}
}
