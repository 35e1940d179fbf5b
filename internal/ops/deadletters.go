package ops

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// DefaultScanLimit is the default of DeadLetterQuery.ScanLimit.
const DefaultScanLimit = 5000

// filterPage is the XRANGE COUNT of a filtered listing's reads.
const filterPage = 500

// DeadLetterQuery is one page of a dead-letter listing.
type DeadLetterQuery struct {
	// Key is the dead-letter stream. Required.
	Key string
	// Newest lists newest first (XREVRANGE); else oldest first (XRANGE).
	Newest bool
	// After is the cursor: the page starts after this record id, in the
	// listing's order ("" starts at the beginning).
	After string
	// Count is the page size (at least 1).
	Count int
	// Reason keeps only records with this reason ("" keeps every record).
	Reason string
	// OriginalID keeps only records of the entry with this id in its
	// source stream ("" keeps every record).
	OriginalID string
	// ScanLimit bounds the records a filtered page reads (in XRANGE pages
	// of 500) before it returns what it found. Defaults to
	// DefaultScanLimit.
	ScanLimit int
}

// DeadLetterPage is a page of dead-letter records.
type DeadLetterPage struct {
	// Length of the dead-letter stream (XLEN, before the read).
	Length int64
	// Records of the page, in the listing's order.
	Records []Entry
	// Next is the cursor of the next page ("" at the end).
	Next string
	// Scanned records were read to fill the page, from ScannedFrom to
	// ScannedTo. Limited: a filtered page stopped at ScanLimit before it
	// was full; Next continues the scan.
	Scanned                int
	ScannedFrom, ScannedTo string
	Limited                bool
}

// ListDeadLetters reads one page of a dead-letter stream: XLEN, then
// XRANGE or XREVRANGE COUNT from the cursor. With a filter it reads
// pages of 500 until the page is full, the stream ends or ScanLimit records
// were read, and says how far it got. It never reads more than
// max(Count, ScanLimit) records.
func ListDeadLetters(ctx context.Context, rdb redis.UniversalClient, q DeadLetterQuery) (*DeadLetterPage, error) {
	if q.Count < 1 {
		return nil, argumentError("Count", "must be positive, got %d", q.Count)
	}
	if q.ScanLimit <= 0 {
		q.ScanLimit = DefaultScanLimit
	}
	if q.After != "" {
		if _, err := pelwarden.ParseID(q.After); err != nil {
			return nil, err
		}
	}
	p := &DeadLetterPage{Records: []Entry{}}
	var err error
	if p.Length, err = rdb.XLen(ctx, q.Key).Result(); err != nil {
		return nil, commandError("XLEN", q.Key, err)
	}
	cursor := q.After
	for {
		want := q.Count
		if q.filtered() {
			want = min(filterPage, q.ScanLimit-p.Scanned)
		}
		es, err := readAfter(ctx, rdb, q.Key, q.Newest, cursor, want)
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
			if q.filtered() && !q.matches(e) {
				continue
			}
			p.Records = append(p.Records, e)
			if len(p.Records) == q.Count {
				if i < len(es)-1 || len(es) == want {
					p.Next = cursor
				}
				return p, nil
			}
		}
		if len(es) < want {
			return p, nil // the end of the stream
		}
		if p.Scanned >= q.ScanLimit {
			p.Next, p.Limited = cursor, true
			return p, nil
		}
	}
}

// filtered reports whether the query keeps only some records.
func (q DeadLetterQuery) filtered() bool { return q.Reason != "" || q.OriginalID != "" }

// matches reports whether a record passes the query's filters (a foreign
// record never does).
func (q DeadLetterQuery) matches(e Entry) bool {
	d, ok := pelwarden.ParseDeadLetter(e.Fields)
	return ok && (q.Reason == "" || d.Reason == q.Reason) && (q.OriginalID == "" || d.OriginalID == q.OriginalID)
}

// readAfter reads up to n records after cursor ("" for the start) in the
// listing's order.
func readAfter(ctx context.Context, rdb redis.UniversalClient, key string, newest bool, cursor string, n int) ([]Entry, error) {
	if !newest {
		start := "-"
		if cursor != "" {
			var more bool
			if start, more = After(cursor); !more {
				return nil, nil
			}
		}
		es, err := XRange(ctx, rdb, key, start, "+", int64(n))
		if err != nil {
			return nil, commandError("XRANGE", key, err)
		}
		return es, nil
	}
	end := "+"
	if cursor != "" {
		var more bool
		if end, more = Before(cursor); !more {
			return nil, nil
		}
	}
	es, err := XRevRange(ctx, rdb, key, end, "-", int64(n))
	if err != nil {
		return nil, commandError("XREVRANGE", key, err)
	}
	return es, nil
}
