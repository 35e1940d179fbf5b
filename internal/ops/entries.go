package ops

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// MaxStreamID is the largest stream id: nothing comes after it.
const MaxStreamID = "18446744073709551615-18446744073709551615"

// Entry is a stream entry with its fields in stream order (go-redis's
// XMessage keeps them in a map, losing order and duplicates).
type Entry struct {
	ID     string
	Fields []pelwarden.Field
}

// XRange runs XRANGE key start end [COUNT count] (no COUNT when count <= 0)
// keeping field order. start and end are as XRANGE takes them ("-", "+",
// an id, "(" + id).
func XRange(ctx context.Context, rdb redis.UniversalClient, key, start, end string, count int64) ([]Entry, error) {
	return rangeCmd(ctx, rdb, "XRANGE", key, start, end, count)
}

// XRevRange runs XREVRANGE key end start [COUNT count]: newest first.
func XRevRange(ctx context.Context, rdb redis.UniversalClient, key, end, start string, count int64) ([]Entry, error) {
	return rangeCmd(ctx, rdb, "XREVRANGE", key, end, start, count)
}

func rangeCmd(ctx context.Context, rdb redis.UniversalClient, cmd, key, a, b string, count int64) ([]Entry, error) {
	args := []any{cmd, key, a, b}
	if count > 0 {
		args = append(args, "COUNT", count)
	}
	v, err := rdb.Do(ctx, args...).Result()
	if err != nil {
		return nil, err
	}
	return DecodeEntries(v)
}

// DecodeEntries decodes an XRANGE or XREVRANGE reply.
func DecodeEntries(v any) ([]Entry, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("XRANGE: unexpected reply %T", v)
	}
	out := make([]Entry, 0, len(list))
	for _, item := range list {
		pair, ok := item.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("XRANGE: unexpected entry %v", item)
		}
		id, ok := pair[0].(string)
		if !ok {
			return nil, fmt.Errorf("XRANGE: unexpected id %v", pair[0])
		}
		var flat []any
		switch f := pair[1].(type) {
		case []any:
			flat = f
		case nil:
		default:
			return nil, fmt.Errorf("XRANGE: unexpected fields %T", pair[1])
		}
		e := Entry{ID: id}
		for i := 0; i+1 < len(flat); i += 2 {
			name, _ := flat[i].(string)
			value, _ := flat[i+1].(string)
			e.Fields = append(e.Fields, pelwarden.Field{Name: name, Value: value})
		}
		out = append(out, e)
	}
	return out, nil
}

// After is the XRANGE start of the entries after id (a valid stream id),
// and false when there can be none (id is the largest id).
func After(id string) (string, bool) {
	p, err := pelwarden.ParseID(id)
	if err == nil && p.Ms == math.MaxUint64 && p.Seq == math.MaxUint64 {
		return "", false
	}
	return "(" + id, true
}

// Before is the XREVRANGE end of the entries before id (a valid stream
// id), and false when there can be none (id is 0-0).
func Before(id string) (string, bool) {
	p, err := pelwarden.ParseID(id)
	if err == nil && p.Ms == 0 && p.Seq == 0 {
		return "", false
	}
	return "(" + id, true
}

// predecessor is the largest id below id (a valid stream id other than
// 0-0): the cursor from which a page starts at id.
func predecessor(id pelwarden.StreamID) pelwarden.StreamID {
	switch {
	case id.Seq > 0:
		return pelwarden.StreamID{Ms: id.Ms, Seq: id.Seq - 1}
	case id.Ms > 0:
		return pelwarden.StreamID{Ms: id.Ms - 1, Seq: math.MaxUint64}
	}
	return id
}

// lessID orders two valid stream ids (an invalid one sorts first).
func lessID(a, b string) bool { return pelwarden.CompareIDs(a, b) < 0 }
