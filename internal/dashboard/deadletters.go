package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// deadRow is one dead-letter record, split by pelwarden.ParseDeadLetter.
type deadRow struct {
	ID string
	// Foreign: no pelwarden metadata; Fields are all of the record's.
	Foreign bool
	pelwarden.DeadLetter
}

// deadPage is one page of a dead-letter stream.
type deadPage struct {
	// At is the server's time of the read.
	At     time.Time
	Length int64
	Rows   []deadRow
	// Next is the cursor of the next page ("" at the end).
	Next string
	// Scanned records read to fill a filtered page, from ScannedFrom to
	// ScannedTo; Limited: the scan stopped at Options.FilterScan before
	// filling the page.
	Scanned                  int
	ScannedFrom, ScannedTo   string
	Limited                  bool
	Missing, NotStream, Gone bool
	Type                     string
}

// deadQuery is what a dead-letter page asks for.
type deadQuery struct {
	Key string
	// Oldest lists oldest first (XRANGE); else newest first (XREVRANGE).
	Oldest bool
	// Cursor: the page starts after it (in the listing's order).
	Cursor string
	// Reason and Source filter (exact match; "" for any).
	Reason string
	// ID looks up one record.
	ID    string
	Count int
}

func (q deadQuery) key() string {
	return fmt.Sprintf("%s\x00%t\x00%s\x00%s\x00%s\x00%d", q.Key, q.Oldest, q.Cursor, q.Reason, q.ID, q.Count)
}

// loadDeadLetters reads one page: XLEN, then XREVRANGE (newest first) or
// XRANGE COUNT from the cursor. A reason filter reads pages of up to 500
// until the page is full, the stream ends or Options.FilterScan records
// were read, and says how far it got.
func (s *Server) loadDeadLetters(ctx context.Context, q deadQuery) (*deadPage, error) {
	p := &deadPage{At: ops.ServerTime(ctx, s.rdb), Rows: []deadRow{}}
	t, err := s.rdb.Type(ctx, q.Key).Result()
	if err != nil {
		return nil, fmt.Errorf("TYPE %s: %w", q.Key, err)
	}
	switch t {
	case "none":
		p.Missing = true
		return p, nil
	case "stream":
	default:
		p.NotStream, p.Type = true, t
		return p, nil
	}
	if p.Length, err = s.rdb.XLen(ctx, q.Key).Result(); err != nil {
		return nil, fmt.Errorf("XLEN %s: %w", q.Key, err)
	}
	if q.ID != "" {
		es, err := ops.XRange(ctx, s.rdb, q.Key, q.ID, q.ID, 1)
		if err != nil {
			return nil, fmt.Errorf("XRANGE %s %s %s: %w", q.Key, q.ID, q.ID, err)
		}
		for _, e := range es {
			p.Rows = append(p.Rows, toDeadRow(e))
		}
		p.Gone = len(es) == 0
		return p, nil
	}
	cursor := q.Cursor
	for {
		want := q.Count
		if q.Reason != "" {
			want = min(500, s.opts.FilterScan-p.Scanned)
		}
		es, err := s.deadRange(ctx, q.Key, q.Oldest, cursor, want)
		if err != nil {
			return nil, err
		}
		if len(es) > 0 {
			if p.ScannedFrom == "" {
				p.ScannedFrom = es[0].ID
			}
			p.ScannedTo = es[len(es)-1].ID
		}
		for i, e := range es {
			p.Scanned++
			cursor = e.ID
			row := toDeadRow(e)
			if q.Reason != "" && row.Reason != q.Reason {
				continue
			}
			p.Rows = append(p.Rows, row)
			if len(p.Rows) == q.Count {
				if i < len(es)-1 || len(es) == want {
					p.Next = cursor
				}
				return p, nil
			}
		}
		if len(es) < want {
			return p, nil // the end of the stream
		}
		if p.Scanned >= s.opts.FilterScan {
			p.Next, p.Limited = cursor, true
			return p, nil
		}
	}
}

// deadRange reads up to n records after cursor in the listing's order.
func (s *Server) deadRange(ctx context.Context, key string, oldest bool, cursor string, n int) ([]ops.Entry, error) {
	if oldest {
		start := "-"
		if cursor != "" {
			var more bool
			if start, more = ops.After(cursor); !more {
				return nil, nil
			}
		}
		es, err := ops.XRange(ctx, s.rdb, key, start, "+", int64(n))
		if err != nil {
			return nil, fmt.Errorf("XRANGE %s %s + COUNT %d: %w", key, start, n, err)
		}
		return es, nil
	}
	end := "+"
	if cursor != "" {
		var more bool
		if end, more = ops.Before(cursor); !more {
			return nil, nil
		}
	}
	es, err := ops.XRevRange(ctx, s.rdb, key, end, "-", int64(n))
	if err != nil {
		return nil, fmt.Errorf("XREVRANGE %s %s - COUNT %d: %w", key, end, n, err)
	}
	return es, nil
}

func toDeadRow(e ops.Entry) deadRow {
	d, ok := pelwarden.ParseDeadLetter(e.Fields)
	return deadRow{ID: e.ID, Foreign: !ok, DeadLetter: d}
}

// deadLettersPage is the data of the deadletters template.
type deadLettersPage struct {
	page
	Q    deadQuery
	P    *deadPage
	Rate float64
	// Reasons offered by the filter.
	Reasons []string
}

func (s *Server) handleDeadLetters(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var q deadQuery
	var err error
	if q.Key, err = name(v, "key"); err == nil {
		if q.Cursor, err = optID(v, "cursor"); err == nil {
			if q.ID, err = optID(v, "id"); err == nil {
				if q.Count, err = integer(v, "count", s.opts.PageSize, 1, MaxPageSize); err == nil {
					q.Reason, err = optName(v, "reason")
				}
			}
		}
	}
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	q.Oldest = v.Get("order") == "oldest"
	p := &deadLettersPage{page: page{Title: "Dead letters: " + q.Key, Base: s.opts.BasePath, ReadOnly: s.opts.ReadOnly, Nav: "deadletters"},
		Q: q, Rate: s.opts.RedriveRate, Reasons: []string{pelwarden.ReasonMaxDeliveries, pelwarden.ReasonHandler}}
	p.P, err = s.deads.get(r.Context(), q.key(), func(ctx context.Context) (*deadPage, error) { return s.loadDeadLetters(ctx, q) })
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "%v", err)
		return
	}
	status := http.StatusOK
	if p.P.Missing || p.P.NotStream || p.P.Gone {
		status = http.StatusNotFound
	}
	s.render(w, status, "deadletters", "", p)
}

// handleLength answers the live length of a stream (the dead-letter
// counter), from a snapshot shared by every viewer.
func (s *Server) handleLength(w http.ResponseWriter, r *http.Request) {
	key, err := name(r.URL.Query(), "key")
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	n, err := s.lengths.get(r.Context(), key, func(ctx context.Context) (int64, error) {
		n, err := s.rdb.XLen(ctx, key).Result()
		if err != nil {
			return 0, fmt.Errorf("XLEN %s: %w", key, err)
		}
		return n, nil
	})
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "%v", err)
		return
	}
	s.render(w, http.StatusOK, "deadletters", "length", lengthData{Key: key, Length: n})
}

// joinIDs is for log records.
func joinIDs(ids []string, n int) string {
	if len(ids) > n {
		return strings.Join(ids[:n], ",") + fmt.Sprintf(",... (%d)", len(ids))
	}
	return strings.Join(ids, ",")
}
