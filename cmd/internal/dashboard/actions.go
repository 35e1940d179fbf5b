package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/pelwarden/pelwarden"
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
	case "pause":
		p, err = s.planPause(ctx, f)
	case "resume":
		p, err = s.planResume(ctx, f)
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
		}{s.newPage("Confirm: "+p.Action, ""), p}
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
		s.render(w, http.StatusOK, "job", "progress", &jobPage{page: s.newPage("", ""), J: j, S: j.snapshot()})
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
		s.render(w, http.StatusOK, "job", "progress", &jobPage{page: s.newPage("", ""), J: j, S: j.snapshot()})
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
	case errors.Is(err, errNoGroup), pelwarden.Classify(err) == pelwarden.ClassNoGroup:
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
