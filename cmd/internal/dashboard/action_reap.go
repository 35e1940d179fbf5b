package dashboard

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/ops"
)

// planReap checks and counts a reap: consumers idle at least idle that own
// nothing, except those in keep.
func (s *Server) planReap(ctx context.Context, f url.Values) (*plan, error) {
	stream, err := name(f, "stream")
	if err != nil {
		return nil, err
	}
	group, err := name(f, "group")
	if err != nil {
		return nil, err
	}
	if f.Get("idle") == "" {
		return nil, &paramError{"idle", "is required"}
	}
	idle, err := duration(f, "idle", 0)
	if err != nil {
		return nil, err
	}
	if idle < time.Millisecond {
		return nil, &paramError{"idle", "must be at least 1ms"}
	}
	var keep []string
	for _, k := range strings.Split(f.Get("keep"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			keep = append(keep, k)
		}
	}
	if err := s.needStream(ctx, "stream", stream); err != nil {
		return nil, err
	}
	o := ops.ReapOptions{Stream: stream, Group: group, Idle: idle, Keep: keep}
	del, kept, err := ops.ReapCandidates(ctx, s.rdb, o)
	if err != nil {
		return nil, err
	}
	p := &plan{Action: "reap", Back: s.link("/group", "stream", stream, "group", group),
		Attrs: []any{"stream", stream, "group", group, "idle", idle.String(), "keep", strings.Join(keep, ",")}}
	p.Summary = fmt.Sprintf("Delete the consumers of %s / %s idle at least %s that own no pending entries (check and delete are one atomic step).", stream, group, fmtDuration(idle))
	p.Count = fmt.Sprintf("%d consumers now", len(del))
	if len(del) > 0 {
		p.Count += ": " + joinIDs(del, 10)
	}
	if len(kept) > 0 {
		p.Count += fmt.Sprintf("; %d idle consumers still own entries and are kept", len(kept))
	}
	p.run = func(ctx context.Context, j *job) {
		j.update(func(st *jobState) { st.Total = int64(len(del)) })
		res, err := ops.Reap(ctx, s.rdb, o)
		if err != nil {
			finish(j, 0, "nothing deleted", err)
			return
		}
		msg := fmt.Sprintf("deleted %d consumers", len(res.Deleted))
		if len(res.Deleted) > 0 {
			msg += ": " + joinIDs(res.Deleted, 10)
		}
		if len(res.Kept) > 0 {
			msg += fmt.Sprintf("; kept %d that still own entries", len(res.Kept))
		}
		j.update(func(st *jobState) { st.Examined = st.Total })
		finish(j, int64(len(res.Deleted)), msg, nil)
	}
	return p, nil
}
