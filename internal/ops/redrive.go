package ops

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// MaxRedriveRate bounds RedriveOptions.Rate (records per second).
const MaxRedriveRate = 1e6

// DefaultRedriveRate is the default of RedriveOptions.Rate.
const DefaultRedriveRate = 500

// RedriveOptions are the options of Redrive.
type RedriveOptions struct {
	// DeadLetterStream to move records from. Required.
	DeadLetterStream string
	// To is the stream every record goes to; "" sends each record back to
	// the stream it came from (its pelwarden.stream field).
	To string
	// IDs, when not empty, are the only records moved (a selection), in
	// the order given; otherwise the whole stream is walked from its start.
	IDs []string
	// Limit stops after moving this many records (0: no limit).
	Limit int
	// Rate bounds the records examined per second. Defaults to
	// DefaultRedriveRate; at most MaxRedriveRate.
	Rate float64
	// Progress, when set, is called after each page.
	Progress func(RedriveProgress)
}

// RedriveProgress is a redrive's state after a page.
type RedriveProgress struct {
	// Examined records so far, of Total (the stream's length at the start,
	// capped by Limit, or the number of IDs).
	Examined, Total int64
	// Moved records so far.
	Moved int
	// Done: this is the last call.
	Done bool
}

// Move maps a dead-letter record to the entry that replaced it.
type Move struct {
	// From is the record's id in the dead-letter stream (now deleted).
	From string
	// To is the new entry's id in Stream.
	To string
	// Stream the record went to.
	Stream string
}

// Skipped is a record left in place, with the reason.
type Skipped struct {
	ID, Stream, Reason string
}

// RedriveResult is what Redrive did.
type RedriveResult struct {
	// Moves in the order they happened.
	Moves []Move
	// ByStream counts moved records per target stream.
	ByStream map[string]int
	// Foreign records have no pelwarden metadata; they are never moved.
	Foreign []string
	// Skipped records stay, with the reason (source stream missing, ...).
	Skipped []Skipped
	// Missing are selected IDs that were not in the dead-letter stream.
	Missing []string
	// Complete: every record (or every selected id) was examined, not
	// stopped by Limit or an error.
	Complete bool
}

// Moved is the number of records moved.
func (r *RedriveResult) Moved() int { return len(r.Moves) }

func newRedriveResult() *RedriveResult {
	return &RedriveResult{ByStream: map[string]int{}, Moves: []Move{}, Foreign: []string{}, Skipped: []Skipped{}, Missing: []string{}}
}

// Redrive moves dead-letter records back as new entries with the library's
// redrive function (original fields, metadata dropped, pelwarden.redrives
// counted), page by page, each page atomically. Pages are at most a tenth
// of a second's worth at Rate (1 to 100 records) and the records examined
// never come faster than Rate per second. It is resumable: moved records
// left the dead-letter stream, so running it again continues.
//
// Without To, records go back to their source stream; records whose source
// no longer exists, holds another type, or is in another cluster slot stay
// and are listed in Skipped. With IDs, only those records are examined: a
// record is moved with a page of one starting at its id, after it was read
// (XRANGE id id) to find its source. It returns what it did so far beside
// any error; an error from the library keeps its sentinel.
func Redrive(ctx context.Context, rdb redis.UniversalClient, o RedriveOptions) (*RedriveResult, error) {
	if o.Rate == 0 {
		o.Rate = DefaultRedriveRate
	}
	if !(o.Rate > 0) || o.Rate > MaxRedriveRate {
		return nil, argumentError("Rate", "must be positive (records per second, at most 1000000), got %v", o.Rate)
	}
	if o.Limit < 0 {
		return nil, argumentError("Limit", "must not be negative, got %d", o.Limit)
	}
	for _, id := range o.IDs {
		if _, err := pelwarden.ParseID(id); err != nil {
			return nil, err
		}
	}
	r := &redriver{rdb: rdb, lib: pelwarden.NewLibrary(rdb), o: o, out: newRedriveResult(), sources: map[string]string{}}
	var err error
	if len(o.IDs) > 0 {
		err = r.selected(ctx)
	} else {
		err = r.all(ctx)
	}
	return r.out, asInterrupted(ctx, err)
}

// asInterrupted marks an error that came from ctx ending as ErrInterrupted.
func asInterrupted(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrInterrupted) {
		return err
	}
	return interrupted(err)
}

// redriver is one Redrive run.
type redriver struct {
	rdb redis.UniversalClient
	lib *pelwarden.Library
	o   RedriveOptions
	out *RedriveResult
	// sources checked so far: "" when usable, else why not.
	sources  map[string]string
	started  time.Time
	examined int64
	total    int64
}

func (r *redriver) progress(done bool) {
	if r.o.Progress != nil {
		r.o.Progress(RedriveProgress{Examined: r.examined, Total: r.total, Moved: r.out.Moved(), Done: done})
	}
}

// pace waits until the records examined so far are due at Rate.
func (r *redriver) pace(ctx context.Context) error {
	due := r.started.Add(time.Duration(float64(r.examined) / r.o.Rate * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return interrupted(ctx.Err())
	case <-t.C:
		return nil
	}
}

// all walks the whole dead-letter stream.
func (r *redriver) all(ctx context.Context) error {
	key := r.o.DeadLetterStream
	total, err := r.rdb.XLen(ctx, key).Result()
	if err != nil {
		return commandError("XLEN", key, err)
	}
	if r.o.Limit > 0 {
		total = min(total, int64(r.o.Limit))
	}
	r.total = total
	pageMax := int(min(max(r.o.Rate/10, 1), 100))
	r.started = time.Now()
	cursor := "0-0"
	for {
		n := pageMax
		if r.o.Limit > 0 {
			n = min(n, r.o.Limit-r.out.Moved())
			if n == 0 {
				return nil
			}
		}
		var done bool
		var seen int
		if r.o.To != "" {
			page, err := r.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: key, Stream: r.o.To, AnySource: true, Cursor: cursor, Count: n})
			if err != nil {
				return err
			}
			r.record(page, r.o.To)
			r.out.Foreign = append(r.out.Foreign, page.Foreign...)
			seen = len(page.Moved) + len(page.Foreign) + len(page.OtherSource)
			done, cursor = page.Done(), page.Cursor
		} else {
			var err error
			seen, done, cursor, err = r.pageToSources(ctx, cursor, n)
			if err != nil {
				return err
			}
		}
		r.examined += int64(seen)
		if done {
			r.out.Complete = true
			r.progress(true)
			return nil
		}
		r.progress(false)
		if err := r.pace(ctx); err != nil {
			return err
		}
	}
}

func (r *redriver) record(page *pelwarden.RedrivePage, stream string) {
	for _, m := range page.Moved {
		r.out.Moves = append(r.out.Moves, Move{From: m.From, To: m.To, Stream: stream})
	}
	// A page to a source stream names it even when it moved nothing (the
	// command line's JSON has always done so); with To only moves count.
	if len(page.Moved) > 0 || r.o.To == "" {
		r.out.ByStream[stream] += len(page.Moved)
	}
}

// pageToSources reads one page of records after cursor, groups them by
// source stream and moves each group back with Redrive (AnySource false),
// examining exactly the records of the page. It returns how many records
// it examined, whether the stream is done and the next cursor.
func (r *redriver) pageToSources(ctx context.Context, cursor string, n int) (int, bool, string, error) {
	key := r.o.DeadLetterStream
	start, more := After(cursor)
	if !more {
		return 0, true, cursor, nil
	}
	page, err := XRange(ctx, r.rdb, key, start, "+", int64(n))
	if err != nil {
		return 0, false, cursor, commandError("XRANGE", key, err)
	}
	if len(page) == 0 {
		return 0, true, cursor, nil
	}
	bySource := map[string][]string{}
	var order []string
	for _, e := range page {
		d, ok := pelwarden.ParseDeadLetter(e.Fields)
		if !ok || d.Stream == "" {
			r.out.Foreign = append(r.out.Foreign, e.ID)
			continue
		}
		if _, ok := bySource[d.Stream]; !ok {
			order = append(order, d.Stream)
		}
		bySource[d.Stream] = append(bySource[d.Stream], e.ID)
	}
	// Records still in the window (cursor, last]: each Redrive call examines
	// exactly them, so records beyond this page are never touched.
	window := len(page)
	for _, src := range order {
		ids := bySource[src]
		if why := r.source(ctx, src); why != "" {
			r.skip(ids, src, why)
			continue
		}
		p, err := r.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: key, Stream: src, AnySource: false, Cursor: cursor, Count: window})
		if errors.Is(err, pelwarden.ErrCrossSlot) {
			r.sources[src] = reasonOtherSlot
			r.skip(ids, src, reasonOtherSlot)
			continue
		}
		if err != nil {
			return len(page), false, cursor, err
		}
		r.record(p, src)
		window -= len(p.Moved)
	}
	last := page[len(page)-1].ID
	return len(page), len(page) < n, last, nil
}

func (r *redriver) skip(ids []string, src, why string) {
	for _, id := range ids {
		r.out.Skipped = append(r.out.Skipped, Skipped{ID: id, Stream: src, Reason: why})
	}
}

const reasonOtherSlot = "in another cluster slot than the dead-letter stream (use --to with the same hash tag)"

// source returns "" when records can go to src, else why not (cached).
func (r *redriver) source(ctx context.Context, src string) string {
	why, checked := r.sources[src]
	if !checked {
		why = SourceProblem(ctx, r.rdb, r.o.DeadLetterStream, src)
		r.sources[src] = why
	}
	return why
}

// SourceProblem returns "" when records of the dead-letter stream dlq can
// be redriven to src, else why not.
func SourceProblem(ctx context.Context, rdb redis.UniversalClient, dlq, src string) string {
	if _, ok := rdb.(*redis.ClusterClient); ok && pelwarden.Slot(src) != pelwarden.Slot(dlq) {
		return reasonOtherSlot
	}
	t, err := rdb.Type(ctx, src).Result()
	switch {
	case err != nil:
		return "TYPE failed: " + err.Error()
	case t == "none":
		return "source stream does not exist any more (use --to)"
	case t != "stream":
		return "source key holds a " + t + ", not a stream"
	}
	return ""
}

// selected moves the records of IDs one by one.
func (r *redriver) selected(ctx context.Context) error {
	r.total = int64(len(r.o.IDs))
	if r.o.Limit > 0 {
		r.total = min(r.total, int64(r.o.Limit))
	}
	r.started = time.Now()
	for i, id := range r.o.IDs {
		if r.o.Limit > 0 && r.out.Moved() >= r.o.Limit {
			r.progress(true)
			return nil
		}
		if err := r.one(ctx, id); err != nil {
			return err
		}
		r.examined++
		if i == len(r.o.IDs)-1 {
			break
		}
		r.progress(false)
		if err := r.pace(ctx); err != nil {
			return err
		}
	}
	r.out.Complete = true
	r.progress(true)
	return nil
}

// one moves the record id: a page of one starting at it. The record is read
// first to find its source; if it vanished between that read and the move
// (another operator redrove or purged it), the page holds the next record
// and the library moves that one only if it has the same source: Moves
// then names it, and the selection's id is listed in Missing.
func (r *redriver) one(ctx context.Context, id string) error {
	key := r.o.DeadLetterStream
	page, err := XRange(ctx, r.rdb, key, id, id, 1)
	if err != nil {
		return commandError("XRANGE", key, err)
	}
	if len(page) == 0 {
		r.out.Missing = append(r.out.Missing, id)
		return nil
	}
	d, ok := pelwarden.ParseDeadLetter(page[0].Fields)
	if !ok || (r.o.To == "" && d.Stream == "") {
		r.out.Foreign = append(r.out.Foreign, id)
		return nil
	}
	target := r.o.To
	if target == "" {
		target = d.Stream
		if why := r.source(ctx, target); why != "" {
			r.skip([]string{id}, target, why)
			return nil
		}
	}
	p, _ := pelwarden.ParseID(id)
	cursor := predecessor(p).String()
	res, err := r.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: key, Stream: target, AnySource: r.o.To != "", Cursor: cursor, Count: 1})
	if errors.Is(err, pelwarden.ErrCrossSlot) {
		r.sources[target] = reasonOtherSlot
		r.skip([]string{id}, target, reasonOtherSlot)
		return nil
	}
	if err != nil {
		return err
	}
	r.record(res, target)
	if len(res.Moved) == 0 || res.Moved[0].From != id {
		r.out.Missing = append(r.out.Missing, id)
	}
	r.out.Foreign = append(r.out.Foreign, res.Foreign...)
	return nil
}
