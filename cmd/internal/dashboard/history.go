package dashboard

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one group's counters at a refresh.
type sample struct {
	at time.Time
	// entriesRead is the group's entries-read counter (XINFO GROUPS);
	// deadLettered the dead-letter stream's entries-added (XINFO STREAM).
	entriesRead, deadLettered, pending int64
}

// histories keeps the samples of every group for Options.History: the
// source of the overview's rates and sparklines.
type histories struct {
	span time.Duration

	mu     sync.Mutex
	groups map[string]*history
	// seen is when a group was last sampled: groups gone for a span are
	// dropped.
	seen map[string]time.Time
}

func newHistories(span time.Duration) *histories {
	return &histories{span: span, groups: map[string]*history{}, seen: map[string]time.Time{}}
}

// history is one group's samples, oldest first (a copy: safe to read).
type history []sample

// add records a sample of group key and returns a copy of its history.
func (h *histories) add(key string, s sample) history {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[key]
	if g == nil {
		g = &history{}
		h.groups[key] = g
	}
	if n := len(*g); n == 0 || s.at.After((*g)[n-1].at) {
		*g = append(*g, s)
	}
	cut := 0
	for cut < len(*g) && s.at.Sub((*g)[cut].at) > h.span {
		cut++
	}
	*g = append((*g)[:0], (*g)[cut:]...)
	h.seen[key] = s.at
	for k, at := range h.seen {
		if s.at.Sub(at) > h.span {
			delete(h.seen, k)
			delete(h.groups, k)
		}
	}
	return append(history(nil), (*g)...)
}

// rateWindow is the span the current rates are averaged over.
const rateWindow = 10 * time.Second

// rates returns the delivered and dead-lettered rates per second over the
// last rateWindow (at least the last two samples); -1 with fewer than two
// samples. A counter that went down (a group recreated, a dead-letter
// stream deleted) counts as 0.
func (h history) rates() (delivered, deadLettered float64) {
	n := len(h)
	if n < 2 {
		return -1, -1
	}
	last := h[n-1]
	first := h[n-2]
	for i := n - 2; i >= 0 && last.at.Sub(h[i].at) <= rateWindow; i-- {
		first = h[i]
	}
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return -1, -1
	}
	return max(float64(last.entriesRead-first.entriesRead), 0) / dt,
		max(float64(last.deadLettered-first.deadLettered), 0) / dt
}

// series returns the per-interval delivered and dead-lettered rates and
// the pending counts, oldest first.
func (h history) series() (delivered, deadLettered, pending []float64) {
	for i, s := range h {
		pending = append(pending, float64(s.pending))
		if i == 0 {
			continue
		}
		dt := s.at.Sub(h[i-1].at).Seconds()
		if dt <= 0 {
			continue
		}
		delivered = append(delivered, max(float64(s.entriesRead-h[i-1].entriesRead), 0)/dt)
		deadLettered = append(deadLettered, max(float64(s.deadLettered-h[i-1].deadLettered), 0)/dt)
	}
	return delivered, deadLettered, pending
}

// sparkline draws values as an inline SVG polyline (numbers only: nothing
// of the user's data reaches it).
func sparkline(values []float64) string {
	const w, hgt = 120.0, 24.0
	var b strings.Builder
	b.WriteString(`<svg class="spark" viewBox="0 0 120 24" width="120" height="24" aria-hidden="true">`)
	if len(values) >= 2 {
		hi := 0.0
		for _, v := range values {
			hi = max(hi, v)
		}
		b.WriteString(`<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="`)
		for i, v := range values {
			x := w * float64(i) / float64(len(values)-1)
			y := hgt - 1
			if hi > 0 {
				y = hgt - 1 - (hgt-2)*v/hi
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}
