package pelwarden

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	d.setMeta(fields[n-k:])
	return d, true
}

// setMeta sets d's metadata from the record's metadata fields, and
// Redrives from d.Fields.
func (d *DeadLetter) setMeta(meta []Field) {
	for _, f := range d.Fields {
		if f.Name == FieldRedrives {
			d.Redrives, _ = strconv.ParseInt(f.Value, 10, 64)
		}
	}
	for _, f := range meta {
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
}

// ParseDeadLetterMessage decodes a dead-letter record read with go-redis's
// typed stream commands (XRange, XRevRange, XRead; an XStream's Messages)
// into a DeadLetter. ParseDeadLetter cannot take such a record: go-redis
// keeps an XMessage's fields in a map, which loses their order (and, of
// fields sharing a name, all values but the last), and ParseDeadLetter's rule
// is about order (FieldMetaCount last, the metadata pairs before it).
//
// ParseDeadLetterMessage recognises the metadata by name instead: the
// fields named with the "pelwarden." prefix that the library writes after
// the entry's fields (FieldOriginalID, FieldStream, FieldGroup,
// FieldConsumer, FieldDeliveries, FieldReason, FieldError,
// FieldDeadLetteredAt and FieldMetaCount; FieldRedrives, which Redrive adds
// to the entry itself, is an original field). The record is pelwarden's (ok)
// when FieldMetaCount holds what the redrive function accepts (one to three
// digits, at least 2) and exactly that many fields carry the prefix. Then
// d.Fields holds the other fields; otherwise ok is false and d.Fields holds
// all of them. Either way d.Fields is sorted by name, not in stream order,
// and a field's values other than the last one are gone.
//
// Where the original fields' order or repeated names matter, read the
// records in order instead: run XRANGE through rdb.Do (its reply is a list
// of [id, [name, value, name, value, ...]] that keeps both), build the
// []Field of each record and call ParseDeadLetter; the CLI's
// `pelwarden dlq show` does that.
func ParseDeadLetterMessage(m redis.XMessage) (d DeadLetter, ok bool) {
	fields := make([]Field, 0, len(m.Values))
	meta := 0
	for name, v := range m.Values {
		fields = append(fields, Field{Name: name, Value: messageValue(v)})
		if isMetaName(name) {
			meta++
		}
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].Name < fields[j].Name })
	k := 0
	if v, found := m.Values[FieldMetaCount]; found && isMetaCount(messageValue(v)) {
		k, _ = strconv.Atoi(messageValue(v))
	}
	if k < 2 || k != meta {
		return DeadLetter{Fields: fields}, false
	}
	// The original fields, then the metadata, each sorted by name.
	sort.SliceStable(fields, func(i, j int) bool { return !isMetaName(fields[i].Name) && isMetaName(fields[j].Name) })
	n := len(fields) - meta
	d.Fields = fields[:n:n]
	d.setMeta(fields[n:])
	return d, true
}

// isMetaName reports whether a field named name is dead-letter metadata:
// named with the "pelwarden." prefix and not FieldRedrives (an entry's own
// field, which Redrive adds).
func isMetaName(name string) bool {
	return strings.HasPrefix(name, "pelwarden.") && name != FieldRedrives
}

// messageValue is an XMessage value as a string (go-redis gives strings;
// anything else is formatted).
func messageValue(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
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
