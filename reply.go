package pelwarden

import (
	"fmt"
	"strconv"

	"github.com/pelwarden/pelwarden/internal/resp"
)

// Reply decoders. They accept what go-redis returns for FCALL under RESP2 and
// RESP3 (arrays as []any, integers as int64, strings as string), return
// ErrMalformedReply on any other shape, and never panic (see FuzzDecode).
// Extra trailing elements are ignored, so a newer library may add fields.

func malformed(fn, format string, a ...any) error {
	return &Error{Function: fn, Message: "malformed reply: " + fmt.Sprintf(format, a...), Kind: ErrMalformedReply}
}

func asArray(fn, what string, v any, min int) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, malformed(fn, "%s: want an array, got %T", what, v)
	}
	if len(a) < min {
		return nil, malformed(fn, "%s: want at least %d elements, got %d", what, min, len(a))
	}
	return a, nil
}

func asString(fn, what string, v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", malformed(fn, "%s: want a string, got %T", what, v)
}

func asInt(fn, what string, v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return 0, malformed(fn, "%s: want an integer, got %q", what, n)
		}
		return i, nil
	}
	return 0, malformed(fn, "%s: want an integer, got %T", what, v)
}

func asStrings(fn, what string, v any) ([]string, error) {
	a, err := asArray(fn, what, v, 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(a))
	for i, e := range a {
		s, ok := resp.String(e)
		if !ok {
			// The element's name is formatted only here: on the hot path
			// (thousands of fields per reply) it would cost more than the
			// decoding itself.
			return nil, malformed(fn, "%s[%d]: want a string, got %T", what, i, e)
		}
		out[i] = s
	}
	return out, nil
}

func asFields(fn, what string, v any) ([]Field, error) {
	flat, err := asArray(fn, what, v, 0)
	if err != nil {
		return nil, err
	}
	if len(flat)%2 != 0 {
		return nil, malformed(fn, "%s: odd number of field/value elements (%d)", what, len(flat))
	}
	out := make([]Field, len(flat)/2)
	for i := range out {
		name, ok := resp.String(flat[2*i])
		if !ok {
			return nil, malformed(fn, "%s[%d]: want a string, got %T", what, 2*i, flat[2*i])
		}
		value, ok := resp.String(flat[2*i+1])
		if !ok {
			return nil, malformed(fn, "%s[%d]: want a string, got %T", what, 2*i+1, flat[2*i+1])
		}
		out[i] = Field{Name: name, Value: value}
	}
	return out, nil
}

func decodeClaim(v any) (*ClaimPage, error) {
	const fn = FunctionClaim
	a, err := asArray(fn, "reply", v, 5)
	if err != nil {
		return nil, err
	}
	p := &ClaimPage{}
	if p.Cursor, err = asString(fn, "cursor", a[0]); err != nil {
		return nil, err
	}
	live, err := asArray(fn, "entries", a[1], 0)
	if err != nil {
		return nil, err
	}
	p.Entries = make([]Entry, 0, len(live))
	for i, e := range live {
		what := "entries[" + strconv.Itoa(i) + "]"
		ea, err := asArray(fn, what, e, 3)
		if err != nil {
			return nil, err
		}
		var ent Entry
		if ent.ID, err = asString(fn, what+".id", ea[0]); err != nil {
			return nil, err
		}
		if ent.Fields, err = asFields(fn, what+".fields", ea[1]); err != nil {
			return nil, err
		}
		if ent.Deliveries, err = asInt(fn, what+".deliveries", ea[2]); err != nil {
			return nil, err
		}
		p.Entries = append(p.Entries, ent)
	}
	if p.DeadLettered, err = asStrings(fn, "dead-lettered", a[2]); err != nil {
		return nil, err
	}
	if p.Deleted, err = asStrings(fn, "deleted", a[3]); err != nil {
		return nil, err
	}
	n, err := asInt(fn, "backed-off", a[4])
	if err != nil {
		return nil, err
	}
	p.BackedOff = int(n)
	if len(a) > 5 { // library 1.0.1+
		if p.TooLarge, err = asStrings(fn, "too-large", a[5]); err != nil {
			return nil, err
		}
	}
	if len(a) > 6 { // library 1.4.0+
		if p.TakenFrom, err = asConsumerCounts(fn, "taken-from", a[6]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// asConsumerCounts decodes a flat {consumer, n, ...} array.
func asConsumerCounts(fn, what string, v any) ([]ConsumerCount, error) {
	a, err := asArray(fn, what, v, 0)
	if err != nil {
		return nil, err
	}
	if len(a)%2 != 0 {
		return nil, malformed(fn, "%s: want consumer/count pairs, got %d elements", what, len(a))
	}
	if len(a) == 0 {
		return nil, nil
	}
	out := make([]ConsumerCount, len(a)/2)
	for i := range out {
		el := what + "[" + strconv.Itoa(2*i) + "]"
		if out[i].Consumer, err = asString(fn, el, a[2*i]); err != nil {
			return nil, err
		}
		n, err := asInt(fn, el+".count", a[2*i+1])
		if err != nil {
			return nil, err
		}
		out[i].Entries = int(n)
	}
	return out, nil
}

func decodeAck(v any) (*AckResult, error) {
	const fn = FunctionAck
	a, err := asArray(fn, "reply", v, 2)
	if err != nil {
		return nil, err
	}
	r := &AckResult{}
	if r.Acked, err = asInt(fn, "acked", a[0]); err != nil {
		return nil, err
	}
	if r.NotOwned, err = asStrings(fn, "not-owned", a[1]); err != nil {
		return nil, err
	}
	if len(a) > 2 { // library 1.0.3 and later
		if r.NotPending, err = asStrings(fn, "not-pending", a[2]); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func decodeDeadLetter(v any) (*DeadLetterResult, error) {
	const fn = FunctionDeadLetter
	a, err := asArray(fn, "reply", v, 3)
	if err != nil {
		return nil, err
	}
	r := &DeadLetterResult{}
	if r.DeadLettered, err = asStrings(fn, "dead-lettered", a[0]); err != nil {
		return nil, err
	}
	if r.NotOwned, err = asStrings(fn, "not-owned", a[1]); err != nil {
		return nil, err
	}
	if r.Deleted, err = asStrings(fn, "deleted", a[2]); err != nil {
		return nil, err
	}
	if len(a) > 3 { // library 1.0.1+
		if r.TooLarge, err = asStrings(fn, "too-large", a[3]); err != nil {
			return nil, err
		}
	}
	if len(a) > 4 { // library 1.0.3+
		if r.NotPending, err = asStrings(fn, "not-pending", a[4]); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func decodeExtend(v any) (*ExtendResult, error) { return decodeExtendAs(FunctionExtend, v) }

func decodeExtendAs(fn string, v any) (*ExtendResult, error) {
	a, err := asArray(fn, "reply", v, 3)
	if err != nil {
		return nil, err
	}
	r := &ExtendResult{}
	if r.Extended, err = asInt(fn, "extended", a[0]); err != nil {
		return nil, err
	}
	if r.NotOwned, err = asStrings(fn, "not-owned", a[1]); err != nil {
		return nil, err
	}
	if r.Deleted, err = asStrings(fn, "deleted", a[2]); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeReap(v any) (*ReapResult, error) {
	const fn = FunctionReap
	a, err := asArray(fn, "reply", v, 2)
	if err != nil {
		return nil, err
	}
	r := &ReapResult{}
	if r.Deleted, err = asStrings(fn, "deleted", a[0]); err != nil {
		return nil, err
	}
	kept, err := asArray(fn, "kept", a[1], 0)
	if err != nil {
		return nil, err
	}
	for i, k := range kept {
		what := fmt.Sprintf("kept[%d]", i)
		ka, err := asArray(fn, what, k, 2)
		if err != nil {
			return nil, err
		}
		var c ConsumerPending
		if c.Name, err = asString(fn, what+".name", ka[0]); err != nil {
			return nil, err
		}
		if c.Pending, err = asInt(fn, what+".pending", ka[1]); err != nil {
			return nil, err
		}
		r.Kept = append(r.Kept, c)
	}
	return r, nil
}

func decodeRedrive(v any) (*RedrivePage, error) {
	const fn = FunctionRedrive
	a, err := asArray(fn, "reply", v, 4)
	if err != nil {
		return nil, err
	}
	p := &RedrivePage{}
	if p.Cursor, err = asString(fn, "cursor", a[0]); err != nil {
		return nil, err
	}
	moved, err := asArray(fn, "moved", a[1], 0)
	if err != nil {
		return nil, err
	}
	for i, m := range moved {
		pair, err := asStrings(fn, fmt.Sprintf("moved[%d]", i), m)
		if err != nil {
			return nil, err
		}
		if len(pair) < 2 {
			return nil, malformed(fn, "moved[%d]: want 2 ids, got %d", i, len(pair))
		}
		p.Moved = append(p.Moved, Redriven{From: pair[0], To: pair[1]})
	}
	if p.Foreign, err = asStrings(fn, "foreign", a[2]); err != nil {
		return nil, err
	}
	if p.OtherSource, err = asStrings(fn, "other-source", a[3]); err != nil {
		return nil, err
	}
	if len(a) > 4 { // library 1.0.1+
		if p.TooLarge, err = asStrings(fn, "too-large", a[4]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func decodeStats(v any) (*Stats, error) {
	const fn = FunctionStats
	a, err := asArray(fn, "reply", v, 0)
	if err != nil {
		return nil, err
	}
	if len(a)%2 != 0 {
		return nil, malformed(fn, "odd number of name/value elements (%d)", len(a))
	}
	s := &Stats{Lag: -1, EntriesRead: -1}
	seen := map[string]bool{}
	for i := 0; i < len(a); i += 2 {
		name, err := asString(fn, fmt.Sprintf("name[%d]", i/2), a[i])
		if err != nil {
			return nil, err
		}
		val := a[i+1]
		seen[name] = true
		switch name {
		case "pending":
			s.Pending, err = asInt(fn, name, val)
		case "lowest":
			s.LowestID, err = asString(fn, name, val)
		case "highest":
			s.HighestID, err = asString(fn, name, val)
		case "lag":
			s.Lag, err = asInt(fn, name, val)
		case "entries-read":
			s.EntriesRead, err = asInt(fn, name, val)
		case "last-delivered":
			s.LastDeliveredID, err = asString(fn, name, val)
		case "length":
			s.Length, err = asInt(fn, name, val)
		case "dead-letter-length":
			s.DeadLetterLength, err = asInt(fn, name, val)
		case "consumers":
			var cs []any
			if cs, err = asArray(fn, name, val, 0); err != nil {
				return nil, err
			}
			for j, c := range cs {
				what := fmt.Sprintf("consumers[%d]", j)
				ca, err := asArray(fn, what, c, 3)
				if err != nil {
					return nil, err
				}
				var cs ConsumerStats
				if cs.Name, err = asString(fn, what+".name", ca[0]); err != nil {
					return nil, err
				}
				if cs.Pending, err = asInt(fn, what+".pending", ca[1]); err != nil {
					return nil, err
				}
				idle, err := asInt(fn, what+".idle", ca[2])
				if err != nil {
					return nil, err
				}
				cs.Idle = msDuration(idle)
				s.Consumers = append(s.Consumers, cs)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	for _, need := range []string{"pending", "consumers", "length", "dead-letter-length"} {
		if !seen[need] {
			return nil, malformed(fn, "missing %q", need)
		}
	}
	return s, nil
}

func decodeTrim(v any) (*TrimResult, error) {
	const fn = FunctionTrim
	a, err := asArray(fn, "reply", v, 8)
	if err != nil {
		return nil, err
	}
	r := &TrimResult{}
	if r.Trimmed, err = asInt(fn, "trimmed", a[0]); err != nil {
		return nil, err
	}
	if r.Bound, err = asString(fn, "bound", a[1]); err != nil {
		return nil, err
	}
	if r.Holder, err = asString(fn, "holder", a[2]); err != nil {
		return nil, err
	}
	more, err := asInt(fn, "more", a[3])
	if err != nil {
		return nil, err
	}
	r.More = more != 0
	if r.FirstID, err = asString(fn, "first", a[4]); err != nil {
		return nil, err
	}
	if r.LastID, err = asString(fn, "last", a[5]); err != nil {
		return nil, err
	}
	if r.Length, err = asInt(fn, "length", a[6]); err != nil {
		return nil, err
	}
	groups, err := asArray(fn, "groups", a[7], 0)
	if err != nil {
		return nil, err
	}
	r.Groups = make([]GroupBound, 0, len(groups))
	for i, g := range groups {
		what := fmt.Sprintf("groups[%d]", i)
		ga, err := asArray(fn, what, g, 5)
		if err != nil {
			return nil, err
		}
		var b GroupBound
		if b.Name, err = asString(fn, what+".name", ga[0]); err != nil {
			return nil, err
		}
		if b.Pending, err = asInt(fn, what+".pending", ga[1]); err != nil {
			return nil, err
		}
		if b.OldestPending, err = asString(fn, what+".oldest-pending", ga[2]); err != nil {
			return nil, err
		}
		if b.LastDelivered, err = asString(fn, what+".last-delivered", ga[3]); err != nil {
			return nil, err
		}
		if b.Bound, err = asString(fn, what+".bound", ga[4]); err != nil {
			return nil, err
		}
		r.Groups = append(r.Groups, b)
	}
	return r, nil
}

func decodeLease(v any) (*Lease, error) {
	const fn = FunctionLease
	a, err := asArray(fn, "reply", v, 4)
	if err != nil {
		return nil, err
	}
	held, err := asInt(fn, "held", a[0])
	if err != nil {
		return nil, err
	}
	r := &Lease{Held: held == 1}
	if r.Owner, err = asString(fn, "owner", a[1]); err != nil {
		return nil, err
	}
	if r.Token, err = asInt(fn, "token", a[2]); err != nil {
		return nil, err
	}
	ttl, err := asInt(fn, "ttl", a[3])
	if err != nil {
		return nil, err
	}
	r.TTL = msDuration(ttl)
	return r, nil
}

func decodeLeaseRelease(v any) (*ReleaseLeaseResult, error) {
	const fn = FunctionLeaseRelease
	a, err := asArray(fn, "reply", v, 3)
	if err != nil {
		return nil, err
	}
	released, err := asInt(fn, "released", a[0])
	if err != nil {
		return nil, err
	}
	r := &ReleaseLeaseResult{Released: released == 1}
	if r.Acked, err = asInt(fn, "acked", a[1]); err != nil {
		return nil, err
	}
	if r.GivenBack, err = asInt(fn, "given-back", a[2]); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeLeaseNext(v any) (*LeaseNextResult, error) {
	const fn = FunctionLeaseNext
	a, err := asArray(fn, "reply", v, 9)
	if err != nil {
		return nil, err
	}
	held, err := asInt(fn, "held", a[0])
	if err != nil {
		return nil, err
	}
	r := &LeaseNextResult{Held: held == 1}
	if r.Acked, err = asInt(fn, "acked", a[1]); err != nil {
		return nil, err
	}
	if r.GivenBack, err = asInt(fn, "given-back", a[2]); err != nil {
		return nil, err
	}
	live, err := asArray(fn, "entries", a[3], 0)
	if err != nil {
		return nil, err
	}
	if len(live) > 0 {
		r.Entries = make([]Entry, len(live))
	}
	for i, x := range live {
		// {id, fields, deliveries} for a pending entry; {id, fields} for a
		// new one, as XREADGROUP returned it (delivery 1).
		ea, err := asArray(fn, "entries["+strconv.Itoa(i)+"]", x, 2)
		if err != nil {
			return nil, err
		}
		if len(ea) > 3 {
			return nil, malformed(fn, "entries[%d]: want 2 or 3 elements, got %d", i, len(ea))
		}
		e := &r.Entries[i]
		if e.ID, err = asString(fn, "entries.id", ea[0]); err != nil {
			return nil, err
		}
		if e.Fields, err = asFields(fn, "entries.fields", ea[1]); err != nil {
			return nil, err
		}
		e.Deliveries = 1
		if len(ea) == 3 {
			if e.Deliveries, err = asInt(fn, "entries.deliveries", ea[2]); err != nil {
				return nil, err
			}
		}
	}
	if r.DeadLettered, err = asStrings(fn, "dead-lettered", a[4]); err != nil {
		return nil, err
	}
	if r.Deleted, err = asStrings(fn, "deleted", a[5]); err != nil {
		return nil, err
	}
	if r.Blocked, err = asString(fn, "blocked", a[6]); err != nil {
		return nil, err
	}
	wait, err := asInt(fn, "wait", a[7])
	if err != nil {
		return nil, err
	}
	r.Wait = msDuration(wait)
	if r.BlockedDeliveries, err = asInt(fn, "blocked-deliveries", a[8]); err != nil {
		return nil, err
	}
	if len(a) > 9 {
		nonePending, err := asInt(fn, "none-pending", a[9])
		if err != nil {
			return nil, err
		}
		r.NonePending = nonePending == 1
	}
	return r, nil
}

// decodeReadEntries decodes the reply of an XREADGROUP of one stream
// (resp.ReadEntries), keeping each entry's fields in stream order, all of
// them in one allocation. Each entry is a first delivery.
func decodeReadEntries(v any) ([]Entry, error) {
	const fn = FunctionLeaseNext // the read of LeaseNextRead
	list, nfields, err := resp.ReadEntries(v)
	if err != nil {
		return nil, malformed(fn, "%v", err)
	}
	out := make([]Entry, len(list))
	all := make([]Field, 0, nfields)
	for i, e := range list {
		id, flat, _, err := resp.Entry(e)
		if err != nil {
			return nil, malformed(fn, "%v", err)
		}
		first := len(all)
		for j := range len(flat) / 2 {
			name, value, err := resp.Field(flat, j, id)
			if err != nil {
				return nil, malformed(fn, "%v", err)
			}
			all = append(all, Field{Name: name, Value: value})
		}
		// A full slice expression: appending to one entry's Fields must not
		// write into the next one's.
		out[i] = Entry{ID: id, Fields: all[first:len(all):len(all)], Deliveries: 1}
	}
	return out, nil
}
