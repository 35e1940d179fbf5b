package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/numfmt"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// Report is the demo's outcome; with --json it is printed as is.
type Report struct {
	Server           string `json:"server"`
	Stream           string `json:"stream"`
	DeadLetterStream string `json:"dead_letter_stream"`
	Group            string `json:"group"`
	Orders           int    `json:"orders"`
	Produced         int64  `json:"produced"`
	ElapsedMs        int64  `json:"elapsed_ms"`
	// Finished: every order was settled before --duration.
	Finished     bool             `json:"finished"`
	Settings     Settings         `json:"settings"`
	Consumers    []ConsumerReport `json:"consumers"`
	Killed       KilledReport     `json:"killed"`
	Slow         SlowReport       `json:"slow"`
	DeadLetters  DeadLetterReport `json:"dead_letters"`
	Duplicates   int              `json:"duplicates"`
	DuplicateIDs []string         `json:"duplicate_ids"`
	DriverErrors int64            `json:"driver_errors"`
	LastError    string           `json:"last_driver_error,omitempty"`
	Invariant    Invariant        `json:"invariant"`
	Kept         bool             `json:"kept"`
	byReason     map[string][]DeadRecord
}

type Settings struct {
	MinIdleMs         int64   `json:"min_idle_ms"`
	ReclaimIntervalMs int64   `json:"reclaim_interval_ms"`
	MaxDeliveries     int     `json:"max_deliveries"`
	SlowHandlerMs     int64   `json:"slow_handler_ms"`
	PoisonRate        float64 `json:"poison_rate"`
	Rate              int     `json:"rate"`
}

type ConsumerReport struct {
	Name            string `json:"name"`
	Killed          bool   `json:"killed"`
	Read            int64  `json:"read"`
	Reclaimed       int64  `json:"reclaimed"`
	Handled         int64  `json:"handled"`
	Failed          int64  `json:"failed"`
	DeadLettered    int64  `json:"dead_lettered"`
	Acked           int64  `json:"acked"`
	LeaseExtensions int64  `json:"lease_extensions"`
	LostOwnership   int64  `json:"lost_ownership"`
}

type KilledReport struct {
	Consumer string `json:"consumer"`
	AtMs     int64  `json:"at_ms"`
	// InFlight handlers were cut off by the kill.
	InFlight int64 `json:"in_flight"`
	// Pending entries were left in its name: in flight, or handled but not
	// acknowledged yet.
	Pending     int            `json:"pending"`
	PendingIDs  []string       `json:"pending_ids"`
	ReclaimedBy map[string]int `json:"reclaimed_by"`
	// DeadLettered orphans had reached MaxDeliveries: the reclaim pass
	// dead-lettered them instead of handing them out.
	DeadLettered int `json:"dead_lettered"`
	// ReclaimedAfterMs: from the kill to the last orphan taken over.
	ReclaimedAfterMs *int64 `json:"reclaimed_after_ms"`
}

type SlowReport struct {
	Orders     int   `json:"orders"`
	HandlingMs int64 `json:"handling_ms"`
	Handled    int   `json:"handled"`
	// TakenOver: slow orders another consumer started while the first
	// still ran them (not counting those orphaned by the kill). 0 shows the
	// lease heartbeat at work.
	TakenOver       int   `json:"taken_over"`
	LeaseExtensions int64 `json:"lease_extensions"`
}

type DeadLetterReport struct {
	Total    int            `json:"total"`
	ByReason map[string]int `json:"by_reason"`
	Records  []DeadRecord   `json:"records"`
}

type DeadRecord struct {
	ID         string `json:"id"`
	OriginalID string `json:"original_id"`
	Order      string `json:"order"`
	Reason     string `json:"reason"`
	Error      string `json:"error"`
	Deliveries int64  `json:"deliveries"`
	Consumer   string `json:"consumer"`
	// LastHandlerError is the handler's last error for max_deliveries
	// records (the library records no error text for them).
	LastHandlerError string `json:"last_handler_error,omitempty"`
}

type Invariant struct {
	OK bool `json:"ok"`
	// Produced = HandledAndAcked + DeadLettered + Unsettled + Lost (an
	// order in HandledAndDeadLettered is also counted in DeadLettered).
	Produced               int      `json:"produced"`
	HandledAndAcked        int      `json:"handled_and_acked"`
	DeadLettered           int      `json:"dead_lettered"`
	HandledAndDeadLettered int      `json:"handled_and_dead_lettered"`
	Unsettled              int      `json:"unsettled"`
	Lost                   int      `json:"lost"`
	LostIDs                []string `json:"lost_ids"`
	Pending                int64    `json:"pending"`
	PoisonNotDeadLettered  int      `json:"poison_not_dead_lettered"`
	DeadLetteredNotPoison  int      `json:"dead_lettered_not_poison"`
}

// verify reads the end state from the server and checks the invariant.
func (d *demo) verify(ctx context.Context, finished bool) (*Report, error) {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	rep := &Report{
		Server: d.server, Stream: d.stream, DeadLetterStream: d.dlq, Group: Group,
		Orders: d.o.Orders, Produced: st.produced.Load(), ElapsedMs: time.Since(d.start).Milliseconds(),
		Finished: finished, Kept: d.o.Keep,
		Settings: Settings{
			MinIdleMs: MinIdle.Milliseconds(), ReclaimIntervalMs: ReclaimInterval.Milliseconds(),
			MaxDeliveries: MaxDeliveries, SlowHandlerMs: SlowWork.Milliseconds(),
			PoisonRate: d.o.PoisonRate, Rate: d.o.Rate,
		},
		DuplicateIDs: []string{},
		byReason:     map[string][]DeadRecord{},
	}
	rep.DriverErrors = d.errs.n.Load()
	rep.LastError, _ = d.errs.last.Load().(string)

	// Server state: the group's PEL and last delivered id, the dead letters.
	summary, err := d.rdb.XPending(ctx, d.stream, Group).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING: %v", err)
	}
	rep.Invariant.Pending = summary.Count
	pendingIDs := map[string]bool{}
	if summary.Count > 0 {
		ps, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: d.stream, Group: Group, Start: "-", End: "+", Count: pelwarden.MaxCount}).Result()
		if err != nil {
			return nil, fmt.Errorf("XPENDING: %v", err)
		}
		for _, p := range ps {
			pendingIDs[p.ID] = true
		}
	}
	lastDelivered := "0-0"
	if groups, err := d.rdb.XInfoGroups(ctx, d.stream).Result(); err == nil {
		for _, g := range groups {
			if g.Name == Group {
				lastDelivered = g.LastDeliveredID
			}
		}
	}
	dead, err := readDeadLetters(ctx, d.rdb, d.dlq)
	if err != nil {
		return nil, fmt.Errorf("read the dead-letter stream: %v", err)
	}
	deadOf := map[string]record{}
	for _, r := range dead {
		deadOf[r.OriginalID] = r
	}

	// Every produced order: handled (then acked: the PEL no longer has it)
	// or dead-lettered; otherwise unsettled (pending or never delivered) or
	// lost (acknowledged without a successful handler nor a dead letter).
	inv := &rep.Invariant
	inv.Produced = len(st.ids)
	inv.LostIDs = []string{}
	for _, id := range st.ids {
		ok := len(st.successes[id]) > 0
		_, dl := deadOf[id]
		kind := st.kindOf[id]
		switch {
		case dl:
			inv.DeadLettered++
			if ok {
				inv.HandledAndDeadLettered++
			}
			if !kind.poison() {
				inv.DeadLetteredNotPoison++
			}
		case ok && !pendingIDs[id]:
			inv.HandledAndAcked++
		case pendingIDs[id] || pelwarden.CompareIDs(id, lastDelivered) > 0:
			inv.Unsettled++
		default:
			inv.Lost++
			inv.LostIDs = append(inv.LostIDs, id)
		}
		if kind.poison() && !dl {
			inv.PoisonNotDeadLettered++
		}
		if len(st.successes[id]) > 1 {
			rep.Duplicates++
			rep.DuplicateIDs = append(rep.DuplicateIDs, id)
		}
	}
	inv.Unsettled += d.o.Orders - len(st.ids)
	inv.OK = inv.Lost == 0 && inv.Unsettled == 0 && inv.Pending == 0

	rep.DeadLetters = DeadLetterReport{Total: len(dead), ByReason: map[string]int{}, Records: []DeadRecord{}}
	for _, r := range dead {
		rep.DeadLetters.ByReason[r.Reason]++
		order := ""
		for _, f := range r.Fields {
			if f.Name == "order" {
				order = f.Value
			}
		}
		dr := DeadRecord{ID: r.ID, OriginalID: r.OriginalID, Order: order, Reason: r.Reason, Error: r.Error, Deliveries: r.Deliveries, Consumer: r.Consumer}
		if r.Reason == pelwarden.ReasonMaxDeliveries {
			dr.LastHandlerError = st.lastErr[r.OriginalID]
		}
		if _, produced := st.kindOf[r.OriginalID]; produced {
			rep.byReason[r.Reason] = append(rep.byReason[r.Reason], dr)
		}
		if len(rep.DeadLetters.Records) < 1000 {
			rep.DeadLetters.Records = append(rep.DeadLetters.Records, dr)
		}
	}

	for _, c := range d.cons {
		rep.Consumers = append(rep.Consumers, ConsumerReport{
			Name: c.name, Killed: c.victim && c.killedAt > 0,
			Read: c.m.get(driver.EventRead), Reclaimed: c.m.get(driver.EventClaimed),
			Handled: c.handled.Load(), Failed: c.m.get(driver.EventHandlerError),
			DeadLettered: c.m.deadMax.Load() + c.m.deadByHand.Load(), Acked: c.m.get(driver.EventAcked),
			LeaseExtensions: c.m.get(driver.EventLeaseExtended), LostOwnership: c.m.get(driver.EventLostOwnership),
		})
		rep.Slow.LeaseExtensions += c.m.get(driver.EventLeaseExtended)
	}

	k := &rep.Killed
	k.Consumer, k.AtMs, k.InFlight = d.victim.name, d.victim.killedAt.Milliseconds(), d.killedInFlight
	k.PendingIDs, k.ReclaimedBy = []string{}, map[string]int{}
	for id, by := range st.orphans {
		k.PendingIDs = append(k.PendingIDs, id)
		switch {
		case by != "":
			k.ReclaimedBy[by]++
		case deadOf[id].OriginalID != "":
			k.DeadLettered++
		}
	}
	sort.Slice(k.PendingIDs, func(i, j int) bool { return pelwarden.CompareIDs(k.PendingIDs[i], k.PendingIDs[j]) < 0 })
	k.Pending = len(k.PendingIDs)
	if !st.allTakenAt.IsZero() {
		ms := (st.allTakenAt.Sub(d.start) - d.victim.killedAt).Milliseconds()
		k.ReclaimedAfterMs = &ms
	}

	rep.Slow.HandlingMs = SlowWork.Milliseconds()
	for _, id := range st.ids {
		if st.kindOf[id] != kindSlow {
			continue
		}
		rep.Slow.Orders++
		if len(st.successes[id]) > 0 {
			rep.Slow.Handled++
		}
		_, orphan := st.orphans[id]
		if st.starts[id] > 1 && !orphan {
			rep.Slow.TakenOver++
		}
	}
	return rep, nil
}

// WriteText writes the report for people: per-consumer counts, the kill
// and what was reclaimed, the slow orders, the dead letters and why,
// duplicates and the invariant. It returns the first write error.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	printf := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	printf("\npelwarden demo: %s orders on %s in %v\n\n", numfmt.Count(int64(r.Orders)), r.Server, numfmt.Duration(time.Duration(r.ElapsedMs)*time.Millisecond))

	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tREAD\tRECLAIMED\tHANDLED\tFAILED\tDEAD-LETTERED\tACKED\tLEASES\t")
	for _, c := range r.Consumers {
		note := ""
		if c.Killed {
			note = fmt.Sprintf("killed at %v", numfmt.Duration(time.Duration(r.Killed.AtMs)*time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, numfmt.Count(c.Read), numfmt.Count(c.Reclaimed), numfmt.Count(c.Handled),
			numfmt.Count(c.Failed), numfmt.Count(c.DeadLettered), numfmt.Count(c.Acked), numfmt.Count(c.LeaseExtensions), note)
	}
	_ = tw.Flush()
	printf("  (reclaimed includes retries of failed orders; failed includes handlers cut off by the kill)\n\n")

	k := r.Killed
	if k.AtMs > 0 {
		printf("Killed %s at %v with %d handler(s) running: %s left pending in its name.\n", k.Consumer,
			numfmt.Duration(time.Duration(k.AtMs)*time.Millisecond), k.InFlight, plural(int64(k.Pending), "entry", "entries"))
		if k.Pending > 0 {
			var by []string
			names := make([]string, 0, len(k.ReclaimedBy))
			for n := range k.ReclaimedBy {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				by = append(by, fmt.Sprintf("%s %d", n, k.ReclaimedBy[n]))
			}
			line := "  reclaimed by " + strings.Join(by, ", ")
			if len(by) == 0 {
				line = "  reclaimed by nobody"
			}
			if k.ReclaimedAfterMs != nil {
				line += fmt.Sprintf(", the last %v after the kill (MinIdle %v)", numfmt.Duration(time.Duration(*k.ReclaimedAfterMs)*time.Millisecond), MinIdle)
			}
			if k.DeadLettered > 0 {
				line += fmt.Sprintf("; %d had reached %d deliveries and went to the dead-letter stream", k.DeadLettered, MaxDeliveries)
			}
			printf("%s\n  ids: %s\n", line, strings.Join(firstStrings(k.PendingIDs, 8), " "))
		}
	} else {
		printf("No consumer was killed (the run ended first).\n")
	}

	s := r.Slow
	printf("\nSlow bulk orders: %d, %v of work each (MinIdle %v); %d handled; lease extended %d times; taken over by another consumer while running: %d.\n",
		s.Orders, SlowWork, MinIdle, s.Handled, s.LeaseExtensions, s.TakenOver)

	printf("\nDead-letter stream %s: %s\n", r.DeadLetterStream, plural(int64(r.DeadLetters.Total), "record", "records"))
	reasons := make([]string, 0, len(r.byReason))
	for reason := range r.byReason {
		reasons = append(reasons, reason)
	}
	sort.Strings(reasons)
	for _, reason := range reasons {
		recs := r.byReason[reason]
		why := ""
		switch reason {
		case pelwarden.ReasonMaxDeliveries:
			why = fmt.Sprintf("failed on each of %d deliveries; moved by the reclaim pass", MaxDeliveries)
		case pelwarden.ReasonHandler:
			why = "the handler returned driver.DeadLetter: it can never succeed"
		}
		printf("  %-15s %4d  %s\n", reason, len(recs), why)
		for i, rec := range recs {
			if i == 2 {
				printf("                        ...\n")
				break
			}
			text := rec.Error
			if text == "" {
				text = "last handler error: " + rec.LastHandlerError
			}
			printf("                        %s (was %s, %s, last held by %s): %s\n", rec.ID, rec.OriginalID,
				plural(rec.Deliveries, "delivery", "deliveries"), rec.Consumer, clipText(text, 100))
		}
	}
	if r.Kept {
		printf("  inspect: pelwarden dlq list '%s'   (and pelwarden status '%s' %s)\n", r.DeadLetterStream, r.Stream, r.Group)
	}

	if r.Duplicates > 0 {
		printf("\nDuplicates: %d order(s) handled twice: %s finished them but was killed before its batched ack went out,\n"+
			"so they were reclaimed and handled again. Delivery is at least once: make handlers idempotent, keyed by the stream id.\n",
			r.Duplicates, k.Consumer)
	} else {
		printf("\nDuplicates: none this time (a consumer killed between handling and its batched ack causes them; handlers must be idempotent).\n")
	}
	if r.DriverErrors > 0 {
		printf("Driver errors on the surviving consumers: %d (last: %s)\n", r.DriverErrors, clipText(r.LastError, 160))
	}

	inv := r.Invariant
	printf("\nInvariant: %s produced = %s handled and acknowledged + %s dead-lettered", numfmt.Count(int64(inv.Produced)), numfmt.Count(int64(inv.HandledAndAcked)), numfmt.Count(int64(inv.DeadLettered)))
	if inv.Unsettled > 0 {
		printf(" + %d unsettled", inv.Unsettled)
	}
	if inv.Lost > 0 {
		printf(" + %d LOST", inv.Lost)
	}
	printf("; PEL %s\n", map[bool]string{true: "empty", false: fmt.Sprintf("holds %d", inv.Pending)}[inv.Pending == 0])
	if inv.PoisonNotDeadLettered > 0 || inv.DeadLetteredNotPoison > 0 || inv.HandledAndDeadLettered > 0 {
		printf("  note: %d poison order(s) not dead-lettered, %d healthy order(s) dead-lettered, %d handled and also dead-lettered\n",
			inv.PoisonNotDeadLettered, inv.DeadLetteredNotPoison, inv.HandledAndDeadLettered)
	}
	switch {
	case inv.Lost > 0:
		printf("FAILED: %d order(s) lost: %s\n", inv.Lost, strings.Join(firstStrings(inv.LostIDs, 10), " "))
	case !inv.OK:
		printf("NOT SETTLED within --duration: %d order(s) still open\n", inv.Unsettled)
	default:
		printf("OK: nothing lost.\n")
	}
	return ew.err
}

// errWriter keeps the first write error and drops later writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// record is a dead-letter record: its id and what pelwarden wrote.
type record struct {
	ID string
	pelwarden.DeadLetter
}

// readDeadLetters reads the whole dead-letter stream page by page.
func readDeadLetters(ctx context.Context, rdb redis.UniversalClient, key string) ([]record, error) {
	const page = 1000
	var out []record
	start := "-"
	for {
		entries, err := ops.XRange(ctx, rdb, key, start, "+", page)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			d, _ := pelwarden.ParseDeadLetter(e.Fields)
			out = append(out, record{ID: e.ID, DeadLetter: d})
		}
		if len(entries) < page {
			return out, nil
		}
		next, more := ops.After(entries[len(entries)-1].ID)
		if !more {
			return out, nil
		}
		start = next
	}
}

// plural is "1 record" or "12 records".
func plural(n int64, one, many string) string {
	if n == 1 {
		return numfmt.Count(n) + " " + one
	}
	return numfmt.Count(n) + " " + many
}

// clipText shortens s to n runes, on one line.
func clipText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
