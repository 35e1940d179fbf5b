package dashboard

import (
	"context"
	"fmt"
	"net/url"

	"github.com/pelwarden/pelwarden"
)

// planPause checks a pause of a group: its consumers stop taking entries.
// The pause is recorded as by "dashboard:" and the dashboard's user (the
// basic-auth name, or "anonymous" without authentication).
func (s *Server) planPause(ctx context.Context, f url.Values) (*plan, error) {
	stream, group, n, err := s.pauseTarget(ctx, f)
	if err != nil {
		return nil, err
	}
	reason := f.Get("reason")
	if len(reason) > pelwarden.MaxPauseText {
		return nil, &paramError{"reason", fmt.Sprintf("at most %d bytes", pelwarden.MaxPauseText)}
	}
	p := &plan{Action: "pause", Back: s.link("/group", "stream", stream, "group", group),
		Attrs: []any{"stream", stream, "group", group, "reason", reason}}
	p.Summary = fmt.Sprintf("Pause %s / %s: within about a second its consumers stop reading and claiming and start no handler (the entries they hold wait, their leases kept); running handlers finish and their acks land. Resume ends it; nothing is redelivered.", stream, group)
	p.Count = fmt.Sprintf("%d consumers now", n)
	p.run = func(ctx context.Context, j *job) {
		by := "dashboard:" + j.User
		if err := pelwarden.PauseGroup(ctx, s.rdb, stream, group, pelwarden.Pause{By: by, Reason: reason}); err != nil {
			finish(j, 0, "not paused", err)
			return
		}
		s.groups.forget()
		s.overviews.forget()
		finish(j, 1, "paused "+stream+" / "+group, nil)
	}
	return p, nil
}

// planResume checks the resume of a paused group.
func (s *Server) planResume(ctx context.Context, f url.Values) (*plan, error) {
	stream, group, n, err := s.pauseTarget(ctx, f)
	if err != nil {
		return nil, err
	}
	p := &plan{Action: "resume", Back: s.link("/group", "stream", stream, "group", group),
		Attrs: []any{"stream", stream, "group", group}}
	p.Summary = fmt.Sprintf("Resume %s / %s: within about a second its consumers take entries again, the ones they held first.", stream, group)
	p.Count = fmt.Sprintf("%d consumers now", n)
	p.run = func(ctx context.Context, j *job) {
		was, err := pelwarden.ResumeGroup(ctx, s.rdb, stream, group)
		if err != nil {
			finish(j, 0, "not resumed", err)
			return
		}
		s.groups.forget()
		s.overviews.forget()
		msg := "resumed " + stream + " / " + group
		if !was {
			msg = stream + " / " + group + " was not paused"
		}
		finish(j, 1, msg, nil)
	}
	return p, nil
}

// pauseTarget reads and checks the stream and group of a pause or resume,
// and counts the group's consumers.
func (s *Server) pauseTarget(ctx context.Context, f url.Values) (stream, group string, consumers int, err error) {
	if stream, err = name(f, "stream"); err != nil {
		return "", "", 0, err
	}
	if group, err = name(f, "group"); err != nil {
		return "", "", 0, err
	}
	if err = s.needStream(ctx, "stream", stream); err != nil {
		return "", "", 0, err
	}
	cs, err := s.rdb.XInfoConsumers(ctx, stream, group).Result()
	if err != nil {
		return "", "", 0, fmt.Errorf("XINFO CONSUMERS %s %s: %w", stream, group, err)
	}
	return stream, group, len(cs), nil
}
