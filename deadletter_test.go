package pelwarden

import (
	"encoding/json"
	"os"
	"testing"
	"time"

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
