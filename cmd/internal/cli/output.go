package cli

import (
	"encoding/json"
	"fmt"
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

// fmtDuration rounds a duration for humans (numfmt.Duration).
func fmtDuration(d time.Duration) string { return numfmt.Duration(d) }

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
