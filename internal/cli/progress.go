package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// liveLine shows the progress of a long operation: on a terminal, one line
// redrawn in place; otherwise plain lines at most every plainEvery. Events
// are printed as lines of their own in both cases. It is safe for
// concurrent use.
type liveLine struct {
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

// newLiveLine returns a liveLine on w printing plain lines at most every
// plainEvery.
func newLiveLine(w io.Writer, plainEvery time.Duration) *liveLine {
	return &liveLine{w: w, tty: isTerminal(w), plainEvery: plainEvery, created: time.Now()}
}

// newProgressLine is a liveLine that stays silent for operations shorter
// than a second.
func newProgressLine(w io.Writer) *liveLine {
	l := newLiveLine(w, 2*time.Second)
	l.quiet = time.Second
	return l
}

// Set replaces the status text. On a terminal it is redrawn at once;
// otherwise it is printed when plainEvery has passed since the last plain
// line, or when force is set.
func (l *liveLine) Set(text string, force bool) {
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
func (l *liveLine) Event(text string) {
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
func (l *liveLine) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.shown {
		fmt.Fprintln(l.w)
		l.shown = false
	}
}

// progressText is "label [#####.....] 45% 450/1000 (12/s) extra".
func progressText(label string, done, total int64, started time.Time, extra string) string {
	var b strings.Builder
	b.WriteString(label)
	if total > 0 {
		const width = 24
		frac := float64(done) / float64(total)
		frac = min(max(frac, 0), 1)
		filled := int(frac * width)
		fmt.Fprintf(&b, " [%s%s] %3.0f%% %s/%s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			frac*100, fmtCount(done), fmtCount(total))
	} else {
		fmt.Fprintf(&b, " %s", fmtCount(done))
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
