package dashboard

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// entryPage is the data of the entry template.
type entryPage struct {
	page
	Stream, Group, ID string
	Found             bool
	Fields            []pelwarden.Field
	// Pending is the entry's PEL row in Group (nil when not pending or no
	// group given).
	Pending       *redis.XPendingExt
	MaxDeliveries int
}

// handleEntry shows one stream entry's fields (XRANGE id id) and, with a
// group, its PEL row (XPENDING group id id 1).
func (s *Server) handleEntry(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	stream, err := name(q, "stream")
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	group, err := optName(q, "group")
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	id, err := optID(q, "id")
	if err == nil && id == "" {
		err = &paramError{"id", "is required"}
	}
	if err != nil {
		s.failPage(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	p := &entryPage{page: s.newPage(stream+" "+id, "group"),
		Stream: stream, Group: group, ID: id, MaxDeliveries: s.opts.MaxDeliveries}
	ctx := r.Context()
	es, err := ops.XRange(ctx, s.rdb, stream, id, id, 1)
	if err != nil {
		s.failPage(w, r, http.StatusBadGateway, "XRANGE %s %s %s: %v", stream, id, id, err)
		return
	}
	if len(es) == 1 {
		p.Found, p.Fields = true, es[0].Fields
	}
	if group != "" {
		rows, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
		if err != nil && pelwarden.Classify(err) != pelwarden.ClassNoGroup {
			s.failPage(w, r, http.StatusBadGateway, "XPENDING %s %s: %v", stream, group, err)
			return
		}
		if len(rows) == 1 {
			p.Pending = &rows[0]
		}
	}
	status := http.StatusOK
	if !p.Found && p.Pending == nil {
		status = http.StatusNotFound
	}
	s.render(w, status, "entry", "", p)
}
