package pelwarden

import (
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
