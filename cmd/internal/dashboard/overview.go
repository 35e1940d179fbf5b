package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

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
	// Paused: an operator has the group paused on the stream.
	Paused bool
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
	// Limits are the limits on the server (pelwarden.Library.SetLimit),
	// at most maxLimitsShown, by name; LimitsComplete: their discovery
	// reached the end of the keyspace; LimitsErr: it failed.
	Limits         []limitRow
	LimitsComplete bool
	LimitsErr      string
}

// limitRow is one limit's settings and use; Err is set when it could not
// be read.
type limitRow struct {
	pelwarden.LimitState
	Err string
}

// Full reports a cap whose permits are all in use.
func (r limitRow) Full() bool { return r.Concurrency > 0 && r.InUse >= r.Concurrency }

// maxLimitsShown bounds the limits the overview reads.
const maxLimitsShown = 100

// limitNames are the limits found on the server.
type limitNames struct {
	names    []string
	complete bool
}

// loadLimits reads the limits on the server: their names discovered at
// most once per DiscoverEvery, each one's state with one read-only call.
func (s *Server) loadLimits(ctx context.Context, out *overview) {
	found, err := s.limitNames.get(ctx, "limits", func(ctx context.Context) (*limitNames, error) {
		names, complete, err := ops.DiscoverLimits(ctx, s.rdb, s.opts.ScanKeys)
		if err != nil {
			return nil, fmt.Errorf("discover limits: %w", err)
		}
		return &limitNames{names: names, complete: complete}, nil
	})
	if err != nil {
		out.LimitsErr = err.Error()
		return
	}
	out.LimitsComplete = found.complete && len(found.names) <= maxLimitsShown
	lib := pelwarden.NewLibrary(s.rdb)
	for _, name := range found.names[:min(len(found.names), maxLimitsShown)] {
		st, err := lib.ReadLimit(ctx, name)
		row := limitRow{LimitState: pelwarden.LimitState{Name: name}}
		switch {
		case err != nil:
			row.Err = err.Error()
		case !st.Exists:
			continue // removed since the discovery
		default:
			row.LimitState = *st
		}
		out.Limits = append(out.Limits, row)
	}
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

// loadOverview reads every group of every discovered stream with
// ops.ReadGroups (pipelined per-stream and per-group commands that never
// read a PEL or a stream's entries) and records a sample of each for the
// rates and sparklines.
func (s *Server) loadOverview(ctx context.Context) (*overview, error) {
	d, err := s.discover(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := ops.ReadGroups(ctx, s.rdb, d.Streams, ops.GroupsOptions{StalledAfter: s.opts.MinIdle, MaxStreams: s.opts.MaxStreams})
	if err != nil {
		return nil, err
	}
	out := &overview{At: snap.At, Complete: d.Complete, Rows: make([]groupRow, 0, len(snap.Groups)),
		Streams: snap.Streams, Truncated: snap.Truncated}
	for i := range snap.Groups {
		out.Rows = append(out.Rows, s.groupRow(&snap.Groups[i], snap.At))
	}
	for i := range out.Rows {
		out.Rows[i].FirstOfStream = i == 0 || out.Rows[i-1].Stream != out.Rows[i].Stream
	}
	s.loadLimits(ctx, out)
	return out, nil
}

// groupRow builds a row from a group's state and records a sample for the
// rates and sparklines.
func (s *Server) groupRow(g *ops.GroupState, now time.Time) groupRow {
	row := groupRow{Stream: g.Stream, Group: g.Group, DeadLetterStream: g.DeadLetterStream,
		Length: g.Length, Lag: g.Lag, Pending: g.Pending, OldestPendingID: g.OldestPendingID,
		OldestPendingAge: g.OldestPendingAge, Consumers: g.Consumers, Stalled: g.Stalled,
		DeadLetterLength: g.DeadLetterLength, Lease: g.Lease, Paused: g.Pause != nil}
	if g.Err != nil {
		row.Err = g.Err.Error()
	}
	h := s.history.add(row.Stream+"\x00"+row.Group, sample{at: now, entriesRead: g.EntriesRead, deadLettered: g.DeadLetterAdded, pending: row.Pending})
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
