package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pelwarden/pelwarden/internal/numfmt"
)

// printJSON writes v as indented JSON on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return failuref("write JSON: %v", err)
	}
	return nil
}

// printf writes human output on stdout.
func (a *app) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.stdout, format, args...)
}

// table returns a tabwriter on stdout; call Flush.
func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
}

// isTerminal reports whether w is a character device (an interactive
// terminal) and TERM is not "dumb".
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return os.Getenv("TERM") != "dumb"
}

// fmtDuration rounds a duration for humans: 850ms, 4.2s, 3m12s, 5h3m.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	s := d.Round(time.Minute).String()
	return strings.TrimSuffix(s, "0s")
}

// fmtCount writes n with thousands separators: 12,345.
func fmtCount(n int64) string { return numfmt.Count(n) }

// clipText shortens s to n runes for a table column, on one line.
func clipText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// idTime returns the time part of a stream id ("1700000000000-0").
func idTime(id string) (time.Time, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}
