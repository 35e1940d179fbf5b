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
	// Reason and OriginalID filter (exact match; "" for any).
	Reason, OriginalID string
	// ID looks up one record.
	ID    string
	Count int
}

func (q deadQuery) key() string {
	return fmt.Sprintf("%s\x00%t\x00%s\x00%s\x00%s\x00%s\x00%d", q.Key, q.Oldest, q.Cursor, q.Reason, q.OriginalID, q.ID, q.Count)
}

// loadDeadLetters reads one page with ops.ListDeadLetters (XLEN, then
// XREVRANGE or XRANGE COUNT from the cursor; a reason filter reads at most
// Options.FilterScan records and says how far it got), or one record by id.
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
	if q.ID != "" {
		if p.Length, err = s.rdb.XLen(ctx, q.Key).Result(); err != nil {
			return nil, fmt.Errorf("XLEN %s: %w", q.Key, err)
		}
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
	page, err := ops.ListDeadLetters(ctx, s.rdb, ops.DeadLetterQuery{Key: q.Key, Newest: !q.Oldest, After: q.Cursor,
		Count: q.Count, Reason: q.Reason, OriginalID: q.OriginalID, ScanLimit: s.opts.FilterScan})
	if err != nil {
		return nil, err
	}
	p.Length, p.Next, p.Limited = page.Length, page.Next, page.Limited
	p.Scanned, p.ScannedFrom, p.ScannedTo = page.Scanned, page.ScannedFrom, page.ScannedTo
	for _, e := range page.Records {
		p.Rows = append(p.Rows, toDeadRow(e))
	}
	return p, nil
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
					if q.Reason, err = optName(v, "reason"); err == nil {
						q.OriginalID, err = optID(v, "original_id")
					}
				}
			}
		}
	}
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	q.Oldest = v.Get("order") == "oldest"
	p := &deadLettersPage{page: s.newPage("Dead letters: "+q.Key, "deadletters"),
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
