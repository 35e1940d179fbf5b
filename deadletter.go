package pelwarden

import (
	"strconv"
	"strings"
	"time"
)

// DeadLetter is a dead-letter record split the way the library writes it:
// the entry's original fields, then the metadata fields.
type DeadLetter struct {
	// Fields are the entry's original fields, in order, without metadata.
	Fields []Field
	// OriginalID, Stream and Group locate the entry it came from.
	OriginalID, Stream, Group string
	// Consumer that last owned the entry, and its delivery count then.
	Consumer   string
	Deliveries int64
	// Reason (ReasonMaxDeliveries, ReasonHandler or a caller's) and error
	// text ("" for ReasonMaxDeliveries).
	Reason, Error string
	// DeadLetteredAt is when the record was written (zero if absent).
	DeadLetteredAt time.Time
	// Redrives is the FieldRedrives value among the original fields: how
	// many times the entry was redriven before.
	Redrives int64
}

// ParseDeadLetter splits a dead-letter record's fields. It applies the same
// rule as the redrive function: the last field is FieldMetaCount holding
// k >= 2 (at most three digits), the last k pairs all have names starting
// with "pelwarden.". A record that fails the rule is foreign (not written
// by pelwarden): ok is false and d.Fields holds all its fields.
func ParseDeadLetter(fields []Field) (d DeadLetter, ok bool) {
	n := len(fields)
	k := 0
	if n > 0 && fields[n-1].Name == FieldMetaCount && isMetaCount(fields[n-1].Value) {
		k, _ = strconv.Atoi(fields[n-1].Value)
	}
	ok = k >= 2 && k <= n
	for i := n - k; ok && i < n; i++ {
		ok = strings.HasPrefix(fields[i].Name, "pelwarden.")
	}
	if !ok {
		return DeadLetter{Fields: fields}, false
	}
	d.Fields = fields[:n-k]
	for _, f := range d.Fields {
		if f.Name == FieldRedrives {
			d.Redrives, _ = strconv.ParseInt(f.Value, 10, 64)
		}
	}
	for _, f := range fields[n-k:] {
		switch f.Name {
		case FieldOriginalID:
			d.OriginalID = f.Value
		case FieldStream:
			d.Stream = f.Value
		case FieldGroup:
			d.Group = f.Value
		case FieldConsumer:
			d.Consumer = f.Value
		case FieldDeliveries:
			d.Deliveries, _ = strconv.ParseInt(f.Value, 10, 64)
		case FieldReason:
			d.Reason = f.Value
		case FieldError:
			d.Error = f.Value
		case FieldDeadLetteredAt:
			if ms, err := strconv.ParseInt(f.Value, 10, 64); err == nil {
				d.DeadLetteredAt = time.UnixMilli(ms)
			}
		}
	}
	return d, true
}

// isMetaCount reports whether v is what the redrive function accepts as a
// metadata count: one to three decimal digits (Lua '^%d%d?%d?$'; no sign,
// no space, which strconv.Atoi would take).
func isMetaCount(v string) bool {
	if v == "" || len(v) > 3 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}
