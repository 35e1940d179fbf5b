package driver

import (
	"fmt"
	"strconv"

	"github.com/pelwarden/pelwarden"
)

// decodeRead decodes an XREADGROUP reply of one stream, keeping each entry's
// fields in stream order (go-redis's XMessage uses a map, which loses order
// and duplicate fields). It accepts the RESP2 shape [[stream, entries]] and
// the RESP3 shape {stream: entries}. A read with CLAIM (Redis 8.4+) gives
// every entry two more elements: its idle time and the number of times it
// was delivered before this read (0 for a new entry), so a taken-over
// entry's Deliveries is that number plus one.
func decodeRead(v any, stream, group, consumer string) ([]*Message, error) {
	var entries any
	switch r := v.(type) {
	case nil:
		return nil, nil
	case map[any]any:
		for _, e := range r {
			entries = e
		}
	case map[string]any:
		for _, e := range r {
			entries = e
		}
	case []any:
		if len(r) == 0 {
			return nil, nil
		}
		s, ok := r[0].([]any)
		if !ok || len(s) < 2 {
			return nil, fmt.Errorf("%w: XREADGROUP: unexpected stream element %T", pelwarden.ErrMalformedReply, r[0])
		}
		entries = s[1]
	default:
		return nil, fmt.Errorf("%w: XREADGROUP: unexpected reply %T", pelwarden.ErrMalformedReply, v)
	}
	list, ok := entries.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: XREADGROUP: unexpected entries %T", pelwarden.ErrMalformedReply, entries)
	}
	// One allocation for the batch's messages and one for all their fields
	// (the handlers may keep them: nothing is reused).
	nfields := 0
	for _, e := range list {
		if pair, ok := e.([]any); ok && len(pair) >= 2 {
			if flat, ok := pair[1].([]any); ok {
				nfields += len(flat) / 2
			}
		}
	}
	msgs := make([]Message, len(list))
	all := make([]pelwarden.Field, 0, nfields)
	out := make([]*Message, 0, len(list))
	for i, e := range list {
		pair, ok := e.([]any)
		if !ok || len(pair) < 2 {
			return nil, fmt.Errorf("%w: XREADGROUP: unexpected entry %T", pelwarden.ErrMalformedReply, e)
		}
		id, ok := pair[0].(string)
		if !ok {
			return nil, fmt.Errorf("%w: XREADGROUP: unexpected id %T", pelwarden.ErrMalformedReply, pair[0])
		}
		flat, ok := pair[1].([]any)
		if !ok || len(flat)%2 != 0 {
			return nil, fmt.Errorf("%w: XREADGROUP: unexpected fields of %s", pelwarden.ErrMalformedReply, id)
		}
		first := len(all)
		for j := 0; j < len(flat); j += 2 {
			name, ok1 := flat[j].(string)
			value, ok2 := flat[j+1].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: XREADGROUP: non-string field in %s", pelwarden.ErrMalformedReply, id)
			}
			all = append(all, pelwarden.Field{Name: name, Value: value})
		}
		deliveries := int64(1)
		if len(pair) >= 4 {
			before, err := replyInt(pair[3])
			if err != nil || before < 0 {
				return nil, fmt.Errorf("%w: XREADGROUP: unexpected delivery count of %s: %v", pelwarden.ErrMalformedReply, id, pair[3])
			}
			deliveries = before + 1
		}
		m := &msgs[i]
		// A full slice expression: a handler appending to its Fields must
		// not write into the next message's.
		*m = Message{ID: id, Fields: all[first:len(all):len(all)], Deliveries: deliveries, Stream: stream, Group: group, Consumer: consumer}
		out = append(out, m)
	}
	return out, nil
}

// replyInt is an integer element of a reply (a string holding one too).
func replyInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T", v)
}
