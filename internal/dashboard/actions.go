package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// maxSelected bounds the records one redrive of a selection names.
const maxSelected = 10_000

// maxFormBytes bounds an action's form.
const maxFormBytes = 1 << 20

// plan is an action checked and counted, waiting for its confirmation.
type plan struct {
	Action string
	// Summary says what will happen, Count how many entries it touches
	// (computed on the server, bounded).
	Summary, Count string
	// Back links to the page the action came from.
	Back string
	// Form is the action's form, posted again with step=run.
	Form []formField
	// Attrs go to the action's log records.
	Attrs []any
	run   func(ctx context.Context, j *job)
}

type formField struct{ Name, Value string }

// actionError is a refused action with its HTTP status.
type actionError struct {
	status int
	msg    string
}

func (e *actionError) Error() string { return e.msg }

func refuse(status int, format string, a ...any) error {
	return &actionError{status: status, msg: fmt.Sprintf(format, a...)}
}

// handleAction serves POST /actions/{action}: without step=run it answers
// the confirmation (what will happen and to how many entries); with
// step=run it starts the action and answers its progress. Any other
// method is refused with 405, any action with ReadOnly with 403.
func (s *Server) handleAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.failPage(w, r, http.StatusMethodNotAllowed, "actions take POST only")
		return
	}
	if s.opts.ReadOnly {
		s.opts.Logger.Warn("dashboard: action refused: read-only", "action", r.PathValue("action"), "user", userOf(r), "remote", r.RemoteAddr)
		s.failPage(w, r, http.StatusForbidden, "this dashboard is read-only: actions are disabled")
		return
	}
	if s.ctx.Err() != nil {
		s.failPage(w, r, http.StatusServiceUnavailable, "the dashboard is shutting down")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.failPage(w, r, http.StatusBadRequest, "bad form: %v", err)
		return
	}
	f := r.PostForm
	if r.PathValue("action") == "stop" {
		s.stopJob(w, r, f.Get("id"))
		return
	}
	var p *plan
	var err error
	ctx := r.Context()
	switch r.PathValue("action") {
	case "redrive":
		p, err = s.planRedrive(ctx, f)
	case "purge":
		p, err = s.planPurge(ctx, f)
	case "poison":
		p, err = s.planPoison(ctx, f)
	case "reap":
		p, err = s.planReap(ctx, f)
	default:
		s.failPage(w, r, http.StatusNotFound, "no such action %q", r.PathValue("action"))
		return
	}
	if err != nil {
		s.failPage(w, r, actionStatus(err), "%v", err)
		return
	}
	for name, vs := range f {
		if name == "step" {
			continue
		}
		for _, v := range vs {
			p.Form = append(p.Form, formField{name, v})
		}
	}
	if f.Get("step") != "run" {
		data := struct {
			page
			P *plan
		}{page{Title: "Confirm: " + p.Action, Base: s.opts.BasePath}, p}
		if r.Header.Get("HX-Request") != "" {
			s.render(w, http.StatusOK, "confirm", "dialog", data)
			return
		}
		s.render(w, http.StatusOK, "confirm", "", data)
		return
	}
	j := &job{Action: p.Action, Summary: p.Summary, User: userOf(r), Back: p.Back}
	log := s.opts.Logger.With(append([]any{"action", p.Action, "user", j.User, "remote", r.RemoteAddr}, p.Attrs...)...)
	s.jobs.start(s.ctx, j, func(ctx context.Context, j *job) {
		log.Info("dashboard: action started", "job", j.ID, "touches", p.Count)
		p.run(ctx, j)
		s.forget()
		st := j.snapshot()
		level := slog.LevelInfo
		if st.Err != "" {
			level = slog.LevelError
		}
		log.Log(context.Background(), level, "dashboard: action finished", "job", j.ID, "changed", st.Changed, "examined", st.Examined,
			"outcome", st.Message, "err", st.Err, "took", time.Since(j.Started).Round(time.Millisecond))
	})
	if r.Header.Get("HX-Request") != "" {
		s.render(w, http.StatusOK, "job", "progress", &jobPage{page: page{Base: s.opts.BasePath}, J: j, S: j.snapshot()})
		return
	}
	http.Redirect(w, r, s.link("/job", "id", j.ID), http.StatusSeeOther)
}

// stopJob stops a running action (no confirmation: stopping leaves what
// was done done and the rest as it is).
func (s *Server) stopJob(w http.ResponseWriter, r *http.Request, id string) {
	j := s.jobs.get(id)
	if j == nil {
		s.failPage(w, r, http.StatusNotFound, "no such action (the dashboard remembers the last %d)", maxJobs)
		return
	}
	if !j.snapshot().Done {
		s.opts.Logger.Info("dashboard: action stop requested", "action", j.Action, "job", j.ID, "user", userOf(r), "remote", r.RemoteAddr)
		j.stop(userOf(r))
		select {
		case <-j.finished:
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	if r.Header.Get("HX-Request") != "" {
		s.render(w, http.StatusOK, "job", "progress", &jobPage{page: page{Base: s.opts.BasePath}, J: j, S: j.snapshot()})
		return
	}
	http.Redirect(w, r, s.link("/job", "id", j.ID), http.StatusSeeOther)
}

// actionStatus maps a planning error to an HTTP status.
func actionStatus(err error) int {
	var ae *actionError
	var pe *paramError
	var ws *ops.WorkStreamError
	switch {
	case errors.As(err, &ae):
		return ae.status
	case errors.As(err, &pe), errors.Is(err, pelwarden.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.As(err, &ws):
		return http.StatusConflict
	case errors.Is(err, errNoGroup), errors.Is(err, pelwarden.ErrNoGroup), redis.HasErrorPrefix(err, "NOGROUP"):
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// needStream refuses key unless it holds a stream.
func (s *Server) needStream(ctx context.Context, what, key string) error {
	t, err := s.rdb.Type(ctx, key).Result()
	switch {
	case err != nil:
		return fmt.Errorf("TYPE %s: %w", key, err)
	case t == "none":
		return refuse(http.StatusNotFound, "%s %q does not exist", what, key)
	case t != "stream":
		return refuse(http.StatusConflict, "%s %q holds a %s, not a stream", what, key, t)
	}
	return nil
}

// finish records an action's outcome on its job.
func finish(j *job, changed int64, message string, err error) {
	j.update(func(st *jobState) {
		st.Done, st.Changed, st.Message, st.Finished = true, changed, message, time.Now()
		if err != nil {
			st.Err = err.Error()
		}
	})
}

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
