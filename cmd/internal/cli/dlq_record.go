package cli

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// fieldJSON is one stream field in JSON output.
type fieldJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// rawEntry is a stream entry with its fields in stream order.
type rawEntry = ops.Entry

// xrange runs XRANGE key start end [COUNT count] keeping field order.
func xrange(ctx context.Context, rdb redis.UniversalClient, key, start, end string, count int64) ([]rawEntry, error) {
	return ops.XRange(ctx, rdb, key, start, end, count)
}

func decodeEntries(v any) ([]rawEntry, error) { return ops.DecodeEntries(v) }

// deadRecord is a dead-letter record split into the entry's original fields
// and pelwarden's metadata.
type deadRecord struct {
	ID string `json:"id"`
	// Foreign records carry no pelwarden metadata: Fields are all of them.
	Foreign    bool   `json:"foreign"`
	OriginalID string `json:"original_id,omitempty"`
	Stream     string `json:"stream,omitempty"`
	Group      string `json:"group,omitempty"`
	Consumer   string `json:"consumer,omitempty"`
	Deliveries int64  `json:"deliveries"`
	Reason     string `json:"reason,omitempty"`
	Error      string `json:"error"`
	// DeadLetteredAt is RFC 3339 in UTC, with milliseconds.
	DeadLetteredAt   string `json:"dead_lettered_at,omitempty"`
	DeadLetteredAtMs int64  `json:"dead_lettered_at_ms,omitempty"`
	// Redrives is how many times the entry was redriven before.
	Redrives int64 `json:"redrives"`
	// Fields are the entry's original fields, in order.
	Fields []fieldJSON `json:"fields"`
}

// parseDeadRecord splits a record the way the library writes it (see
// pelwarden.ParseDeadLetter; foreign records keep all their fields).
func parseDeadRecord(e rawEntry) deadRecord {
	d, ok := pelwarden.ParseDeadLetter(e.Fields)
	r := deadRecord{
		ID: e.ID, Foreign: !ok, Fields: []fieldJSON{},
		OriginalID: d.OriginalID, Stream: d.Stream, Group: d.Group, Consumer: d.Consumer,
		Deliveries: d.Deliveries, Reason: d.Reason, Error: d.Error, Redrives: d.Redrives,
	}
	for _, f := range d.Fields {
		r.Fields = append(r.Fields, fieldJSON{Name: f.Name, Value: f.Value})
	}
	if !d.DeadLetteredAt.IsZero() {
		r.DeadLetteredAtMs = d.DeadLetteredAt.UnixMilli()
		r.DeadLetteredAt = d.DeadLetteredAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	return r
}

// after is the XRANGE start of the entries after id (a valid stream id),
// and false when there can be none (id is the largest id).
func after(id string) (string, bool) { return ops.After(id) }

// readDeadLetters reads the whole dead-letter stream page by page.
func readDeadLetters(ctx context.Context, rdb redis.UniversalClient, key string) ([]deadRecord, error) {
	var out []deadRecord
	start := "-"
	for {
		page, err := xrange(ctx, rdb, key, start, "+", 1000)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			out = append(out, parseDeadRecord(e))
		}
		next, more := after(page[len(page)-1].ID)
		if len(page) < 1000 || !more {
			return out, nil
		}
		start = next
	}
}
