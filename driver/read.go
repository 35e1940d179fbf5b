package driver

import (
	"fmt"
	"strconv"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/resp"
)

// decodeRead decodes an XREADGROUP reply of one stream, keeping each entry's
// fields in stream order (go-redis's XMessage uses a map, which loses order
// and duplicate fields). It accepts the RESP2 shape [[stream, entries]] and
// the RESP3 shape {stream: entries}. A read with CLAIM (Redis 8.4+) gives
// every entry two more elements: its idle time and the number of times it
// was delivered before this read (0 for a new entry), so a taken-over
// entry's Deliveries is that number plus one.
func decodeRead(v any, stream, group, consumer string) ([]*Message, error) {
	list, nfields, err := resp.ReadEntries(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
	}
	// One allocation for the batch's messages and one for all their fields
	// (the handlers may keep them: nothing is reused).
	msgs := make([]Message, len(list))
	all := make([]pelwarden.Field, 0, nfields)
	out := make([]*Message, 0, len(list))
	for i, e := range list {
		id, flat, extra, err := resp.Entry(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
		}
		first := len(all)
		for j := range len(flat) / 2 {
			name, value, err := resp.Field(flat, j, id)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", pelwarden.ErrMalformedReply, err)
			}
			all = append(all, pelwarden.Field{Name: name, Value: value})
		}
		deliveries := int64(1)
		if len(extra) >= 2 {
			before, err := replyInt(extra[1])
			if err != nil || before < 0 {
				return nil, fmt.Errorf("%w: XREADGROUP: unexpected delivery count of %s: %v", pelwarden.ErrMalformedReply, id, extra[1])
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
