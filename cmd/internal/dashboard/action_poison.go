package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// planPoison checks and counts a poison pass: the group's pending entries
// delivered at least max_deliveries times and idle at least min_idle.
func (s *Server) planPoison(ctx context.Context, f url.Values) (*plan, error) {
	stream, err := name(f, "stream")
	if err != nil {
		return nil, err
	}
	group, err := name(f, "group")
	if err != nil {
		return nil, err
	}
	dlq, err := optName(f, "dlq")
	if err != nil {
		return nil, err
	}
	if dlq == "" {
		dlq = pelwarden.DeadLetterStreamFor(stream)
	}
	if dlq == stream {
		return nil, refuse(http.StatusBadRequest, "the dead-letter stream must differ from the stream")
	}
	if f.Get("max_deliveries") == "" {
		return nil, &paramError{"max_deliveries", "is required"}
	}
	maxDel, err := integer(f, "max_deliveries", 0, 1, 1<<31-1)
	if err != nil {
		return nil, err
	}
	minIdle, err := duration(f, "min_idle", 0)
	if err != nil {
		return nil, err
	}
	if err := s.needStream(ctx, "stream", stream); err != nil {
		return nil, err
	}
	c, err := ops.CountPoison(ctx, s.rdb, stream, group, maxDel, minIdle, s.opts.CountLimit)
	if err != nil {
		return nil, err
	}
	p := &plan{Action: "poison", Back: s.link("/group", "stream", stream, "group", group),
		Attrs: []any{"stream", stream, "group", group, "dlq", dlq, "max_deliveries", maxDel, "min_idle", minIdle.String()}}
	p.Summary = fmt.Sprintf("Move the pending entries of %s / %s delivered at least %d times and idle at least %s to %s (reason %s), acknowledging them.",
		stream, group, maxDel, fmtDuration(minIdle), dlq, pelwarden.ReasonMaxDeliveries)
	if c.Complete {
		p.Count = fmt.Sprintf("%s of the %s pending entries", numfmt.Count(c.Poison), numfmt.Count(c.Pending))
	} else {
		p.Count = fmt.Sprintf("%s among the first %s of %s pending entries (the rest was not counted: the PEL is walked in full when it runs)",
			numfmt.Count(c.Poison), numfmt.Count(c.Scanned), numfmt.Count(c.Pending))
	}
	p.run = func(ctx context.Context, j *job) {
		j.update(func(st *jobState) { st.Total = c.Pending })
		res, err := ops.Poison(ctx, s.rdb, ops.PoisonOptions{Stream: stream, Group: group, DeadLetterStream: dlq, MaxDeliveries: maxDel, MinIdle: minIdle,
			Progress: func(pr ops.PoisonProgress) {
				j.update(func(st *jobState) {
					st.Examined, st.Changed = min(int64(pr.Page)*ops.PoisonPage, st.Total), int64(pr.DeadLettered)
				})
			}})
		if res == nil {
			finish(j, 0, "nothing moved", err)
			return
		}
		msg := fmt.Sprintf("dead-lettered %s entries", numfmt.Count(int64(len(res.DeadLettered))))
		if n := len(res.Deleted); n > 0 {
			msg += fmt.Sprintf("; cleared %d pending ids whose entries were deleted", n)
		}
		finish(j, int64(len(res.DeadLettered)), msg, err)
	}
	return p, nil
}
