package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// planPurge checks and counts a purge of a dead-letter stream: records
// older than older_than, or every record (all=1).
func (s *Server) planPurge(ctx context.Context, f url.Values) (*plan, error) {
	dlq, err := name(f, "dlq")
	if err != nil {
		return nil, err
	}
	olderThan, err := duration(f, "older_than", 0)
	if err != nil {
		return nil, err
	}
	all := f.Get("all") == "1"
	if olderThan <= 0 && !all {
		return nil, refuse(http.StatusBadRequest, "give an age (older_than, e.g. 720h) or purge all")
	}
	if all {
		olderThan = 0
	}
	if err := s.needStream(ctx, "dead-letter stream", dlq); err != nil {
		return nil, err
	}
	if err := ops.RefuseWorkStream(ctx, s.rdb, dlq); err != nil {
		return nil, err
	}
	c, err := ops.CountPurge(ctx, s.rdb, dlq, olderThan, s.opts.CountLimit)
	if err != nil {
		return nil, err
	}
	p := &plan{Action: "purge", Back: s.link("/deadletters", "key", dlq), Count: bounded(c.N, c.Exact, "records", s.opts.CountLimit),
		Attrs: []any{"dlq", dlq, "older_than", olderThan.String(), "all", all}}
	p.Summary = fmt.Sprintf("Delete for good every record of %s.", dlq)
	if olderThan > 0 {
		p.Summary = fmt.Sprintf("Delete for good the records of %s dead-lettered more than %s ago (XTRIM MINID).", dlq, fmtDuration(olderThan))
	}
	p.run = func(ctx context.Context, j *job) {
		j.update(func(st *jobState) { st.Total = c.N })
		res, err := ops.Purge(ctx, s.rdb, ops.PurgeOptions{DeadLetterStream: dlq, OlderThan: olderThan})
		if err != nil {
			finish(j, 0, "nothing deleted", err)
			return
		}
		j.update(func(st *jobState) { st.Examined = res.Deleted })
		finish(j, res.Deleted, fmt.Sprintf("deleted %s records; %s left", numfmt.Count(res.Deleted), numfmt.Count(res.Remaining)), nil)
	}
	return p, nil
}

// bounded writes a bounded count for a confirmation.
func bounded(n int64, exact bool, what string, limit int64) string {
	if exact {
		return numfmt.Count(n) + " " + what
	}
	return fmt.Sprintf("at least %s %s (counting stopped after %s)", numfmt.Count(n), what, numfmt.Count(limit))
}
