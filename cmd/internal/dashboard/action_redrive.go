package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// planRedrive checks and counts a redrive of selected records (id) or of
// all (all=1), to their sources or to another stream (to), at a rate.
func (s *Server) planRedrive(ctx context.Context, f url.Values) (*plan, error) {
	dlq, err := name(f, "dlq")
	if err != nil {
		return nil, err
	}
	to, err := optName(f, "to")
	if err != nil {
		return nil, err
	}
	rate, err := number(f, "rate", s.opts.RedriveRate, ops.MaxRedriveRate)
	if err != nil {
		return nil, err
	}
	ids := f["id"]
	all := f.Get("all") == "1"
	switch {
	case len(ids) == 0 && !all:
		return nil, refuse(http.StatusBadRequest, "select the records to redrive, or redrive all")
	case len(ids) > 0 && all:
		return nil, refuse(http.StatusBadRequest, "either select records or redrive all, not both")
	case len(ids) > maxSelected:
		return nil, refuse(http.StatusBadRequest, "at most %d records can be selected", maxSelected)
	case to == dlq:
		return nil, refuse(http.StatusBadRequest, "the target stream must differ from the dead-letter stream")
	}
	for _, id := range ids {
		if _, err := pelwarden.ParseID(id); err != nil {
			return nil, &paramError{"id", "must be a stream id like 1700000000000-0"}
		}
	}
	if err := s.needStream(ctx, "dead-letter stream", dlq); err != nil {
		return nil, err
	}
	if to != "" {
		if err := s.needStream(ctx, "target stream", to); err != nil {
			return nil, err
		}
	}
	where := "back to their source streams"
	if to != "" {
		where = "to " + to
	}
	p := &plan{Action: "redrive", Back: s.link("/deadletters", "key", dlq),
		Attrs: []any{"dlq", dlq, "to", to, "rate", rate, "selected", len(ids), "all", all, "ids", joinIDs(ids, 20)}}
	var total int64
	if all {
		if total, err = s.rdb.XLen(ctx, dlq).Result(); err != nil {
			return nil, fmt.Errorf("XLEN %s: %w", dlq, err)
		}
		p.Summary = fmt.Sprintf("Redrive every record of %s %s, at most %s records a second.", dlq, where, fmtRate(rate))
		p.Count = numfmt.Count(total) + " records (the stream's length now)"
	} else {
		if total, err = s.countExisting(ctx, dlq, ids); err != nil {
			return nil, err
		}
		p.Summary = fmt.Sprintf("Redrive the %s selected records of %s %s, at most %s records a second.", numfmt.Count(int64(len(ids))), dlq, where, fmtRate(rate))
		p.Count = numfmt.Count(total) + " records"
		if int(total) < len(ids) {
			p.Count += fmt.Sprintf(" (%d of the selection are no longer there)", len(ids)-int(total))
		}
	}
	p.run = func(ctx context.Context, j *job) {
		j.update(func(st *jobState) { st.Total = total })
		res, err := ops.Redrive(ctx, s.rdb, ops.RedriveOptions{DeadLetterStream: dlq, To: to, IDs: ids, Rate: rate,
			Progress: func(pr ops.RedriveProgress) {
				j.update(func(st *jobState) { st.Examined, st.Total, st.Changed = pr.Examined, pr.Total, int64(pr.Moved) })
			}})
		if res == nil {
			finish(j, 0, "nothing moved", err)
			return
		}
		msg := fmt.Sprintf("moved %s records", numfmt.Count(int64(res.Moved())))
		if len(res.ByStream) > 0 {
			var parts []string
			for st, n := range res.ByStream {
				parts = append(parts, fmt.Sprintf("%s: %d", st, n))
			}
			msg += " (" + strings.Join(parts, ", ") + ")"
		}
		if n := len(res.Foreign); n > 0 {
			msg += fmt.Sprintf("; left %d without pelwarden metadata", n)
		}
		if n := len(res.Skipped); n > 0 {
			msg += fmt.Sprintf("; left %d in place (first: %s: %s)", n, res.Skipped[0].Stream, res.Skipped[0].Reason)
		}
		if n := len(res.Missing); n > 0 {
			msg += fmt.Sprintf("; %d selected records were gone", n)
		}
		finish(j, int64(res.Moved()), msg, err)
	}
	return p, nil
}

// countExisting counts the ids present in key (one pipelined XRANGE id id
// per id).
func (s *Server) countExisting(ctx context.Context, key string, ids []string) (int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Do(ctx, "XRANGE", key, id, id, "COUNT", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("XRANGE %s: %w", key, err)
	}
	var n int64
	for _, c := range cmds {
		if v, ok := c.Val().([]any); ok && len(v) > 0 {
			n++
		}
	}
	return n, nil
}
