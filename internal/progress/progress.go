// Package progress shows the progress of a long command on a terminal or in
// a log: one status line redrawn in place on a terminal (plain lines at a
// set pace otherwise), with events printed as lines of their own. The CLI's
// commands, the demo and the benchmarks use it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/numfmt"
)

// Line shows the progress of a long operation: on a terminal, one line
// redrawn in place; otherwise plain lines at most every plainEvery. Events
// are printed as lines of their own in both cases. It is safe for
// concurrent use.
type Line struct {
	w          io.Writer
	tty        bool
	plainEvery time.Duration
	created    time.Time
	quiet      time.Duration // status lines only after this long

	mu        sync.Mutex
	current   string
	shown     bool // a status line is on screen (tty)
	any       bool // a status line was ever printed
	lastPlain time.Time
}

// New returns a Line on w printing plain lines at most every plainEvery
// (0: every Set).
func New(w io.Writer, plainEvery time.Duration) *Line {
	return &Line{w: w, tty: IsTerminal(w), plainEvery: plainEvery, created: time.Now()}
}

// NewQuiet is a Line that stays silent for operations shorter than a
// second.
func NewQuiet(w io.Writer) *Line {
	l := New(w, 2*time.Second)
	l.quiet = time.Second
	return l
}

// Set replaces the status text. On a terminal it is redrawn at once;
// otherwise it is printed when plainEvery has passed since the last plain
// line, or when force is set.
func (l *Line) Set(text string, force bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = text
	if !l.any && time.Since(l.created) < l.quiet {
		return
	}
	l.any = true
	if l.tty {
		fmt.Fprintf(l.w, "\r\033[K%s", text)
		l.shown = true
		return
	}
	if force || time.Since(l.lastPlain) >= l.plainEvery {
		fmt.Fprintln(l.w, text)
		l.lastPlain = time.Now()
	}
}

// Event prints a line of its own, keeping the status line below it.
func (l *Line) Event(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty {
		fmt.Fprintf(l.w, "\r\033[K%s\n", text)
		if l.current != "" {
			fmt.Fprint(l.w, l.current)
		}
		return
	}
	fmt.Fprintln(l.w, text)
}

// Close leaves the last status on screen and ends its line.
func (l *Line) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.shown {
		fmt.Fprintln(l.w)
		l.shown = false
	}
}

// Text is "label [#####.....] 45% 450/1000 (12/s) extra".
func Text(label string, done, total int64, started time.Time, extra string) string {
	var b strings.Builder
	b.WriteString(label)
	if total > 0 {
		const width = 24
		frac := float64(done) / float64(total)
		frac = min(max(frac, 0), 1)
		filled := int(frac * width)
		fmt.Fprintf(&b, " [%s%s] %3.0f%% %s/%s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			frac*100, numfmt.Count(done), numfmt.Count(total))
	} else {
		fmt.Fprintf(&b, " %s", numfmt.Count(done))
	}
	if el := time.Since(started); el > 500*time.Millisecond {
		fmt.Fprintf(&b, " (%.0f/s)", float64(done)/el.Seconds())
	}
	if extra != "" {
		b.WriteString(" ")
		b.WriteString(extra)
	}
	return b.String()
}

// IsTerminal reports whether w is a character device (an interactive
// terminal) and TERM is not "dumb".
func IsTerminal(w io.Writer) bool {
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
