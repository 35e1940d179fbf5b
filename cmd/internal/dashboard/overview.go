package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// groupRow is one consumer group in the overview.
type groupRow struct {
	Stream, Group, DeadLetterStream string
	// Length of the stream; Lag of the group (-1: the server cannot tell).
	Length, Lag int64
	// Pending is the PEL size; OldestPendingID its lowest id and
	// OldestPendingAge that id's age (-1 when the PEL is empty).
	Pending          int64
	OldestPendingID  string
	OldestPendingAge time.Duration
	// Consumers of the group, Stalled the ones owning entries idle past
	// Options.MinIdle.
	Consumers, Stalled int
	// DeadLetterLength is the dead-letter stream's length (0 when absent).
	DeadLetterLength int64
	// Rates per second over the last samples (-1: not enough samples yet).
	DeliveredRate, DeadLetteredRate float64
	// Series for the sparklines, oldest first.
	DeliveredSeries, DeadLetteredSeries, PendingSeries []float64
	// Err is set when the group could not be read; the other fields are
	// then partial.
	Err string
	// Lease is the stream's partition lease (nil when the stream is not a
	// partition in ordered mode or its lease could not be read: the group
	// page says why).
	Lease *ops.LeaseState
	// FirstOfStream: the first row of its stream. The dead-letter stream
	// is the stream's, so its cells are shown on that row only.
	FirstOfStream bool
}

// overview is the snapshot every overview viewer shares.
type overview struct {
	// At is the server's time of the snapshot.
	At   time.Time
	Rows []groupRow
	// Streams with groups shown; Complete: discovery reached the end of
	// every primary's keyspace; Truncated: more than MaxStreams streams.
	Streams             int
	Complete, Truncated bool
}

// streamReads are the per-stream commands of one refresh.
type streamReads struct {
	stream, dlq string
	groups      *redis.XInfoGroupsCmd
	length      *redis.IntCmd
	dlqLength   *redis.IntCmd
	dlqInfo     *redis.XInfoStreamCmd
	lease       *redis.SliceCmd
}

// groupReads are the per-group commands of one refresh.
type groupReads struct {
	s         *streamReads
	g         redis.XInfoGroup
	pending   *redis.XPendingCmd
	consumers *redis.XInfoConsumersCmd
}

// discover returns the streams to show (cached for DiscoverEvery).
func (s *Server) discover(ctx context.Context) (*ops.Discovery, error) {
	return s.discovery.get(ctx, "streams", func(ctx context.Context) (*ops.Discovery, error) {
		d, err := ops.DiscoverStreams(ctx, s.rdb, ops.DiscoverOptions{Match: s.opts.Streams, MaxKeys: s.opts.ScanKeys})
		if err != nil {
			return nil, fmt.Errorf("discover streams: %w", err)
		}
		return d, nil
	})
}

// overview returns the shared overview snapshot, refreshed at most once per
// Refresh whatever the number of viewers.
func (s *Server) overview(ctx context.Context) (*overview, error) {
	return s.overviews.get(ctx, "overview", s.loadOverview)
}

// loadOverview reads every group of every discovered stream in two
// pipelined round trips: per stream XINFO GROUPS, XLEN, and the dead-letter
// stream's XLEN and XINFO STREAM (not FULL: its entries-added counter makes
// the dead-lettered rate) and an HMGET of its lease hash; per group XPENDING (the summary form: one row
// per consumer) and XINFO CONSUMERS. Nothing reads a PEL or a stream's
// entries.
func (s *Server) loadOverview(ctx context.Context) (*overview, error) {
	d, err := s.discover(ctx)
	if err != nil {
		return nil, err
	}
	out := &overview{Complete: d.Complete, Rows: []groupRow{}}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	out.At = now

	streams := make([]*streamReads, 0, len(d.Streams))
	pipe := s.rdb.Pipeline()
	for _, name := range d.Streams {
		sr := &streamReads{stream: name, dlq: pelwarden.DeadLetterStreamFor(name)}
		sr.groups = pipe.XInfoGroups(ctx, name)
		sr.length = pipe.XLen(ctx, name)
		sr.dlqLength = pipe.XLen(ctx, sr.dlq)
		sr.dlqInfo = pipe.XInfoStream(ctx, sr.dlq)
		sr.lease = pipe.HMGet(ctx, pelwarden.LeaseKeyFor(name), ops.LeaseFields...)
		streams = append(streams, sr)
	}
	if len(streams) > 0 {
		// Per-command errors are read from each command below (a missing
		// dead-letter stream fails XINFO STREAM, which is fine).
		_, _ = pipe.Exec(ctx)
	}

	var groups []*groupReads
	pipe = s.rdb.Pipeline()
	for _, sr := range streams {
		gs, err := sr.groups.Result()
		if err != nil || len(gs) == 0 {
			continue // a stream without groups (a dead-letter stream) or gone
		}
		if out.Streams == s.opts.MaxStreams {
			out.Truncated = true
			break
		}
		out.Streams++
		for _, g := range gs {
			gr := &groupReads{s: sr, g: g}
			gr.pending = pipe.XPending(ctx, sr.stream, g.Name)
			gr.consumers = pipe.XInfoConsumers(ctx, sr.stream, g.Name)
			groups = append(groups, gr)
		}
	}
	if len(groups) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for _, gr := range groups {
		out.Rows = append(out.Rows, s.groupRow(gr, now))
	}
	sort.SliceStable(out.Rows, func(i, j int) bool {
		if out.Rows[i].Stream != out.Rows[j].Stream {
			return out.Rows[i].Stream < out.Rows[j].Stream
		}
		return out.Rows[i].Group < out.Rows[j].Group
	})
	for i := range out.Rows {
		out.Rows[i].FirstOfStream = i == 0 || out.Rows[i-1].Stream != out.Rows[i].Stream
	}
	return out, nil
}

// groupRow builds a row from its commands' replies and records a sample
// for the rates and sparklines.
func (s *Server) groupRow(gr *groupReads, now time.Time) groupRow {
	row := groupRow{Stream: gr.s.stream, Group: gr.g.Name, DeadLetterStream: gr.s.dlq,
		Lag: gr.g.Lag, Pending: gr.g.Pending, Consumers: int(gr.g.Consumers), OldestPendingAge: -1}
	row.Length, _ = gr.s.length.Result()
	row.DeadLetterLength, _ = gr.s.dlqLength.Result()
	row.Lease, _ = leaseState(pelwarden.LeaseKeyFor(gr.s.stream), gr.s.lease, now)
	var dlqAdded int64
	if info, err := gr.s.dlqInfo.Result(); err == nil {
		dlqAdded = info.EntriesAdded
	}
	if p, err := gr.pending.Result(); err == nil {
		row.Pending = p.Count
		row.OldestPendingID = p.Lower
		if t, ok := idTime(p.Lower); ok && p.Count > 0 {
			row.OldestPendingAge = max(now.Sub(t), 0)
		}
	} else if pelwarden.Classify(err) != pelwarden.ClassNoGroup {
		row.Err = fmt.Sprintf("XPENDING %s %s: %v", gr.s.stream, gr.g.Name, err)
	}
	if cs, err := gr.consumers.Result(); err == nil {
		row.Consumers = len(cs)
		for _, c := range cs {
			if c.Pending > 0 && c.Idle >= s.opts.MinIdle {
				row.Stalled++
			}
		}
	} else if row.Err == "" && pelwarden.Classify(err) != pelwarden.ClassNoGroup {
		row.Err = fmt.Sprintf("XINFO CONSUMERS %s %s: %v", gr.s.stream, gr.g.Name, err)
	}
	h := s.history.add(row.Stream+"\x00"+row.Group, sample{at: now, entriesRead: gr.g.EntriesRead, deadLettered: dlqAdded, pending: row.Pending})
	row.DeliveredRate, row.DeadLetteredRate = h.rates()
	row.DeliveredSeries, row.DeadLetteredSeries, row.PendingSeries = h.series()
	return row
}

// overviewPage is the data of the overview template.
type overviewPage struct {
	page
	O *overview
	// Rows are O's rows filtered by Filter and ordered by Sort.
	Rows       []groupRow
	Match      string
	MaxStreams int
	History    string
	Err        string
	// Sort is the column the rows are ordered by ("" for stream and
	// group names); Filter keeps the rows whose stream or group contains it.
	Sort, Filter string
}

// overviewSorts are the columns the overview can be ordered by, largest
// first, with how to compare two rows.
var overviewSorts = map[string]func(a, b groupRow) int{
	"length":        func(a, b groupRow) int { return cmp.Compare(b.Length, a.Length) },
	"lag":           func(a, b groupRow) int { return cmp.Compare(b.Lag, a.Lag) },
	"pending":       func(a, b groupRow) int { return cmp.Compare(b.Pending, a.Pending) },
	"oldest":        func(a, b groupRow) int { return cmp.Compare(b.OldestPendingAge, a.OldestPendingAge) },
	"stalled":       func(a, b groupRow) int { return cmp.Compare(b.Stalled, a.Stalled) },
	"dead":          func(a, b groupRow) int { return cmp.Compare(b.DeadLetterLength, a.DeadLetterLength) },
	"delivered":     func(a, b groupRow) int { return cmp.Compare(b.DeliveredRate, a.DeliveredRate) },
	"dead_lettered": func(a, b groupRow) int { return cmp.Compare(b.DeadLetteredRate, a.DeadLetteredRate) },
}

// SortLink is the overview's URL ordered by column (the filter kept).
func (p *overviewPage) SortLink(column string) string {
	return p.linkTo("/", column, p.Filter)
}

// FragmentLink is the live table's URL (the order and filter kept).
func (p *overviewPage) FragmentLink() string {
	return p.linkTo("/fragment/overview", p.Sort, p.Filter)
}

func (p *overviewPage) linkTo(path, sort, filter string) string {
	v := url.Values{}
	if sort != "" {
		v.Set("sort", sort)
	}
	if filter != "" {
		v.Set("q", filter)
	}
	if len(v) == 0 {
		return p.Base + path
	}
	return p.Base + path + "?" + v.Encode()
}

// arrange filters and orders the shared snapshot's rows for one viewer
// (a copy: the snapshot is not changed).
func (p *overviewPage) arrange() {
	p.Rows = make([]groupRow, 0, len(p.O.Rows))
	for _, r := range p.O.Rows {
		if p.Filter == "" || strings.Contains(r.Stream, p.Filter) || strings.Contains(r.Group, p.Filter) {
			p.Rows = append(p.Rows, r)
		}
	}
	by := overviewSorts[p.Sort]
	if by == nil {
		return // the snapshot's order: stream, then group
	}
	slices.SortStableFunc(p.Rows, by)
	// Rows of a stream are no longer together: show its dead-letter cells
	// on each of them.
	for i := range p.Rows {
		p.Rows[i].FirstOfStream = true
	}
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &overviewPage{page: s.newPage("Consumer groups", "overview"),
		MaxStreams: s.opts.MaxStreams, History: fmtDuration(s.opts.History), Filter: q.Get("q")}
	if _, ok := overviewSorts[q.Get("sort")]; ok {
		p.Sort = q.Get("sort")
	}
	if len(p.Filter) > pelwarden.MaxNameBytes {
		s.failPage(w, r, http.StatusBadRequest, "q must be at most %d bytes", pelwarden.MaxNameBytes)
		return
	}
	if s.opts.Streams != "*" {
		p.Match = s.opts.Streams
	}
	o, err := s.overview(r.Context())
	if err != nil {
		p.Err = err.Error()
		o = &overview{Complete: true}
	}
	p.O = o
	p.arrange()
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadGateway
	}
	if isFragment(r) {
		s.render(w, status, "overview", "table", p)
		return
	}
	s.render(w, status, "overview", "", p)
}
