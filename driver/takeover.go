package driver

import (
	"log/slog"
	"sort"
	"sync/atomic"

	"github.com/pelwarden/pelwarden"
)

// takeovers reports the entries a lane took over from other consumers
// (a consumer that crashed or hung, whose entries went idle), so an
// operator sees a recovery happen: one Info record per reclaim pass that
// took some, with how many and from whom (the claim function says, from
// library 1.4.0), and, where the reads claim, one record per reclaim round
// for what the reads took since the last (XREADGROUP's CLAIM does not say
// from whom). The records go through a logLimiter like the per-entry ones.
type takeovers struct {
	limit *logLimiter
	// byReads counts the entries reads took over since the last record.
	byReads atomic.Int64
}

func newTakeovers() *takeovers {
	return &takeovers{limit: newLogLimiter(entryLogBurst, entryLogRate)}
}

// read counts n entries a read took over (delivered before).
func (t *takeovers) read(n int) {
	if n > 0 {
		t.byReads.Add(int64(n))
	}
}

// reportReads writes the record for the entries reads took over since the
// last one, if any.
func (t *takeovers) reportReads(log *slog.Logger) {
	n := t.byReads.Swap(0)
	if n == 0 {
		return
	}
	ok, suppressed := t.limit.allow()
	if !ok {
		return
	}
	args := []any{"count", n, "from", "not reported by XREADGROUP CLAIM"}
	if suppressed > 0 {
		args = append(args, "records_suppressed", suppressed)
	}
	log.Info("reads took over idle pending entries", args...)
}

// passTakeover sums what one reclaim pass took from other consumers.
type passTakeover struct {
	n    int
	from map[string]int
}

func (p *passTakeover) add(from []pelwarden.ConsumerCount) {
	for _, c := range from {
		if p.from == nil {
			p.from = map[string]int{}
		}
		p.from[c.Consumer] += c.Entries
		p.n += c.Entries
	}
}

// maxNamed is how many previous owners a record names (the ones that
// lost the most entries); the rest are counted.
const maxNamed = 10

// report writes the pass's record, if it took anything: the count, and
// the previous owners with their counts, most first.
func (t *takeovers) report(log *slog.Logger, p *passTakeover) {
	if p.n == 0 {
		return
	}
	ok, suppressed := t.limit.allow()
	if !ok {
		return
	}
	owners := make([]string, 0, len(p.from))
	for c := range p.from {
		owners = append(owners, c)
	}
	sort.Slice(owners, func(i, j int) bool {
		if p.from[owners[i]] != p.from[owners[j]] {
			return p.from[owners[i]] > p.from[owners[j]]
		}
		return owners[i] < owners[j]
	})
	named := make([]slog.Attr, 0, min(len(owners), maxNamed))
	for _, c := range owners[:min(len(owners), maxNamed)] {
		named = append(named, slog.Int(c, p.from[c]))
	}
	args := []any{"count", p.n, slog.Attr{Key: "from", Value: slog.GroupValue(named...)}}
	if len(owners) > maxNamed {
		args = append(args, "other_consumers", len(owners)-maxNamed)
	}
	if suppressed > 0 {
		args = append(args, "records_suppressed", suppressed)
	}
	log.Info("reclaim pass took over entries of other consumers", args...)
}
