package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/ops"
)

// Server is the dashboard: an http.Handler over a go-redis client. Create
// it with New; call Run to keep the overview's samples coming and Close
// (or let Run return) to stop running actions.
type Server struct {
	rdb       redis.UniversalClient
	opts      Options
	templates map[string]*template.Template
	handler   http.Handler

	discovery  *cache[*ops.Discovery]
	limitNames *cache[*limitNames]
	overviews  *cache[*overview]
	groups     *cache[*groupView]
	pels       *cache[*pelPage]
	stuck      *cache[*stuckView]
	deads      *cache[*deadPage]
	lengths    *cache[int64]
	history    *histories
	jobs       *jobs

	// ctx is cancelled by Close: running actions stop.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// New returns a dashboard reading rdb (any go-redis client, cluster
// included; never closed by the dashboard). It validates o (a
// *pelwarden.ArgumentError names the bad field).
func New(rdb redis.UniversalClient, o Options) (*Server, error) {
	if rdb == nil {
		return nil, configError("rdb", "must not be nil")
	}
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		rdb:        rdb,
		opts:       o,
		discovery:  newCache[*ops.Discovery](o.DiscoverEvery),
		limitNames: newCache[*limitNames](o.DiscoverEvery),
		overviews:  newCache[*overview](o.Refresh),
		groups:     newCache[*groupView](o.Refresh),
		pels:       newCache[*pelPage](o.Refresh),
		stuck:      newCache[*stuckView](o.Refresh),
		deads:      newCache[*deadPage](o.Refresh),
		lengths:    newCache[int64](o.Refresh),
		history:    newHistories(o.History),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.jobs = newJobs()
	t, err := s.parseTemplates()
	if err != nil {
		return nil, err
	}
	s.templates = t
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the dashboard under Options.BasePath.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Run refreshes the overview every Options.Refresh, so its rates and
// sparklines have samples even while nobody looks, until ctx is done; then
// it closes the server (running actions are cancelled and waited for) and
// returns nil.
func (s *Server) Run(ctx context.Context) error {
	defer s.Close()
	t := time.NewTicker(s.opts.Refresh)
	defer t.Stop()
	for {
		if _, err := s.overview(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("dashboard: refresh failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Close cancels running actions and waits for them to stop. The handler
// keeps serving pages; new actions are refused.
func (s *Server) Close() {
	s.once.Do(func() {
		s.cancel()
		s.jobs.wait()
	})
}

// routes builds the handler: every path under the base path, cross-origin
// protection on every request, authentication when configured.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	b := s.opts.BasePath
	mux.Handle("GET "+b+"/static/", http.StripPrefix(b, staticHandler()))
	mux.HandleFunc("GET "+b+"/{$}", s.handleOverview)
	mux.HandleFunc("GET "+b+"/fragment/overview", s.handleOverview)
	mux.HandleFunc("GET "+b+"/group", s.handleGroup)
	mux.HandleFunc("GET "+b+"/fragment/group", s.handleGroup)
	mux.HandleFunc("GET "+b+"/entry", s.handleEntry)
	mux.HandleFunc("GET "+b+"/deadletters", s.handleDeadLetters)
	mux.HandleFunc("GET "+b+"/fragment/length", s.handleLength)
	mux.HandleFunc("GET "+b+"/job", s.handleJob)
	mux.HandleFunc("GET "+b+"/fragment/job", s.handleJob)
	mux.HandleFunc(b+"/actions/{action}", s.handleAction)
	if b != "" {
		mux.Handle("GET "+b, http.RedirectHandler(b+"/", http.StatusFound))
	}

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.opts.Logger.Warn("dashboard: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	var h http.Handler = cop.Handler(securityHeaders(mux))
	if s.opts.Auth != nil {
		h = requireAuth(s.opts.Auth, h)
	}
	return h
}

// securityHeaders sets a Content-Security-Policy that allows nothing but
// this server (no inline script, no other host), and friends.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// isFragment reports a partial update (htmx) rather than a page load.
func isFragment(r *http.Request) bool {
	return strings.Contains(r.URL.Path, "/fragment/")
}

// forget drops every cached snapshot after an action changed the data.
func (s *Server) forget() {
	s.overviews.forget()
	s.groups.forget()
	s.pels.forget()
	s.stuck.forget()
	s.deads.forget()
	s.lengths.forget()
}

// failPage renders an error page (or fragment) with status.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, status int, format string, a ...any) {
	data := struct {
		page
		Message string
	}{s.newPage("Error", ""), fmt.Sprintf(format, a...)}
	if r.Header.Get("HX-Request") != "" && status < 500 {
		// A refusal shown in place (htmx): the browser would log a 4xx as a
		// failed load; the status goes in a header instead.
		w.Header().Set("X-Pelwarden-Status", strconv.Itoa(status))
		s.render(w, http.StatusOK, "error", "message", data)
		return
	}
	if isFragment(r) || r.Header.Get("HX-Request") != "" {
		s.render(w, status, "error", "message", data)
		return
	}
	s.render(w, status, "error", "", data)
}
