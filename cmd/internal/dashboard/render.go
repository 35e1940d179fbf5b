package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pelwarden/pelwarden/internal/numfmt"
)

//go:embed templates/*.html
var templateFS embed.FS

// Truncation bounds of displayed values.
const (
	// clipCell bounds a value in a table cell.
	clipCell = 120
	// clipValue bounds a value shown in full (an entry's field, an error).
	clipValue = 4096
)

// page is what every template gets besides its own data.
type page struct {
	Title    string
	Base     string
	ReadOnly bool
	// Nav is the current section, for the menu.
	Nav string
	// Poll is the polling period of the live parts, in seconds
	// (Options.Refresh, at least half a second).
	Poll string
}

// newPage returns the common data of a page titled title in section nav.
func (s *Server) newPage(title, nav string) page {
	return page{Title: title, Base: s.opts.BasePath, ReadOnly: s.opts.ReadOnly, Nav: nav,
		Poll: strconv.FormatFloat(max(s.opts.Refresh.Seconds(), 0.5), 'f', -1, 64)}
}

// templates parses one template set per page (each defines "content" and
// its fragments) over the shared layout.
func (s *Server) parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"link":     s.link,
		"asset":    func(name string) string { return s.opts.BasePath + "/static/" + name + "?v=" + assetVersion },
		"clip":     clip,
		"dur":      fmtDuration,
		"input":    inputDuration,
		"count":    func(n int64) string { return numfmt.Count(n) },
		"int":      func(n int) string { return numfmt.Count(int64(n)) },
		"rate":     fmtRate,
		"spark":    func(v []float64) template.HTML { return template.HTML(sparkline(v)) }, // numbers only
		"ms":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
		"since":    func(now, t time.Time) string { return fmtDuration(now.Sub(t)) },
		"ge":       func(a int64, b int) bool { return a >= int64(b) },
		"lengthOf": func(key string, n int64) lengthData { return lengthData{Key: key, Length: n} },
		"order": func(oldest bool) string {
			if oldest {
				return "oldest"
			}
			return ""
		},
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimPrefix(n, "templates/")
		if base == "layout.html" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", base, err)
		}
		out[strings.TrimSuffix(base, ".html")] = t
	}
	return out, nil
}

// lengthData is the data of the live length fragment.
type lengthData struct {
	Key    string
	Length int64
}

// link builds a path under the base path with query parameters given as
// name, value pairs (empty values are left out).
func (s *Server) link(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	p := s.opts.BasePath + path
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	return p
}

// render executes the page template name (its layout, or the named
// fragment when fragment is not ""), buffering so that a failed execution
// becomes a clean 500.
func (s *Server) render(w http.ResponseWriter, status int, name, fragment string, data any) {
	t := s.templates[name]
	if t == nil {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	exec := "layout.html"
	if fragment != "" {
		exec = fragment
	}
	if err := t.ExecuteTemplate(&buf, exec, data); err != nil {
		s.opts.Logger.Error("dashboard: render", "template", name, "fragment", fragment, "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// clip shortens s to at most n bytes (cut on a UTF-8 boundary) with a
// marker that says how long it was; invalid UTF-8 is shown with U+FFFD.
func clip(n int, s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… [truncated: %s bytes]", numfmt.Count(int64(len(s))))
}

// fmtDuration rounds a duration for people: 850ms, 4.2s, 3m12s, 5h3m, 3d4h.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int64(d / (24 * time.Hour))
	return strconv.FormatInt(days, 10) + "d" + strconv.FormatInt(int64(d%(24*time.Hour)/time.Hour), 10) + "h"
}

// inputDuration writes a duration for a form field, in a form
// time.ParseDuration reads back: 1h, 1h30m, 3s, 1.5s.
func inputDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtRate writes a rate per second ("-" when unknown).
func fmtRate(r float64) string {
	switch {
	case r < 0 || math.IsNaN(r):
		return "-"
	case r == 0:
		return "0/s"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "/s"
	}
	return numfmt.Count(int64(math.Round(r))) + "/s"
}
