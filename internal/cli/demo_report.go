package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

// demoReport is the demo's outcome; with --json it is printed as is.
type demoReport struct {
	Server           string `json:"server"`
	Stream           string `json:"stream"`
	DeadLetterStream string `json:"dead_letter_stream"`
	Group            string `json:"group"`
	Orders           int    `json:"orders"`
	Produced         int64  `json:"produced"`
	ElapsedMs        int64  `json:"elapsed_ms"`
	// Finished: every order was settled before --duration.
	Finished     bool                `json:"finished"`
	Settings     demoSettingsJSON    `json:"settings"`
	Consumers    []demoConsumerJSON  `json:"consumers"`
	Killed       demoKilledJSON      `json:"killed"`
	Slow         demoSlowJSON        `json:"slow"`
	DeadLetters  demoDeadLettersJSON `json:"dead_letters"`
	Duplicates   int                 `json:"duplicates"`
	DuplicateIDs []string            `json:"duplicate_ids"`
	DriverErrors int64               `json:"driver_errors"`
	LastError    string              `json:"last_driver_error,omitempty"`
	Invariant    demoInvariantJSON   `json:"invariant"`
	Kept         bool                `json:"kept"`
	byReason     map[string][]deadRecord
}

type demoSettingsJSON struct {
	MinIdleMs         int64   `json:"min_idle_ms"`
	ReclaimIntervalMs int64   `json:"reclaim_interval_ms"`
	MaxDeliveries     int     `json:"max_deliveries"`
	SlowHandlerMs     int64   `json:"slow_handler_ms"`
	PoisonRate        float64 `json:"poison_rate"`
	Rate              int     `json:"rate"`
}

type demoConsumerJSON struct {
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

type demoKilledJSON struct {
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

type demoSlowJSON struct {
	Orders     int   `json:"orders"`
	HandlingMs int64 `json:"handling_ms"`
	Handled    int   `json:"handled"`
	// TakenOver: slow orders another consumer started while the first
	// still ran them (not counting those orphaned by the kill). 0 shows the
	// lease heartbeat at work.
	TakenOver       int   `json:"taken_over"`
	LeaseExtensions int64 `json:"lease_extensions"`
}

type demoDeadLettersJSON struct {
	Total    int              `json:"total"`
	ByReason map[string]int   `json:"by_reason"`
	Records  []demoDeadRecord `json:"records"`
}

type demoDeadRecord struct {
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

type demoInvariantJSON struct {
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
func (d *demo) verify(ctx context.Context, finished bool) (*demoReport, error) {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	rep := &demoReport{
		Server: d.server, Stream: d.stream, DeadLetterStream: d.dlq, Group: demoGroup,
		Orders: d.o.orders, Produced: st.produced.Load(), ElapsedMs: time.Since(d.start).Milliseconds(),
		Finished: finished, Kept: d.o.keep,
		Settings: demoSettingsJSON{
			MinIdleMs: demoMinIdle.Milliseconds(), ReclaimIntervalMs: demoReclaimInterval.Milliseconds(),
			MaxDeliveries: demoMaxDeliveries, SlowHandlerMs: demoSlowWork.Milliseconds(),
			PoisonRate: d.o.poisonRate, Rate: d.o.rate,
		},
		DuplicateIDs: []string{},
		byReason:     map[string][]deadRecord{},
	}
	rep.DriverErrors = d.errs.n.Load()
	rep.LastError, _ = d.errs.last.Load().(string)

	// Server state: the group's PEL and last delivered id, the dead letters.
	summary, err := d.rdb.XPending(ctx, d.stream, demoGroup).Result()
	if err != nil {
		return nil, failuref("XPENDING: %v", err)
	}
	rep.Invariant.Pending = summary.Count
	pendingIDs := map[string]bool{}
	if summary.Count > 0 {
		ps, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: d.stream, Group: demoGroup, Start: "-", End: "+", Count: pelwarden.MaxCount}).Result()
		if err != nil {
			return nil, failuref("XPENDING: %v", err)
		}
		for _, p := range ps {
			pendingIDs[p.ID] = true
		}
	}
	lastDelivered := "0-0"
	if groups, err := d.rdb.XInfoGroups(ctx, d.stream).Result(); err == nil {
		for _, g := range groups {
			if g.Name == demoGroup {
				lastDelivered = g.LastDeliveredID
			}
		}
	}
	dead, err := readDeadLetters(ctx, d.rdb, d.dlq)
	if err != nil {
		return nil, failuref("read the dead-letter stream: %v", err)
	}
	deadOf := map[string]deadRecord{}
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
		rec, dl := deadOf[id]
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
			rep.byReason[rec.Reason] = append(rep.byReason[rec.Reason], rec)
		case ok && !pendingIDs[id]:
			inv.HandledAndAcked++
		case pendingIDs[id] || compareIDs(id, lastDelivered) > 0:
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
	inv.Unsettled += d.o.orders - len(st.ids)
	inv.OK = inv.Lost == 0 && inv.Unsettled == 0 && inv.Pending == 0

	rep.DeadLetters = demoDeadLettersJSON{Total: len(dead), ByReason: map[string]int{}, Records: []demoDeadRecord{}}
	for _, r := range dead {
		rep.DeadLetters.ByReason[r.Reason]++
		if len(rep.DeadLetters.Records) < 1000 {
			order := ""
			for _, f := range r.Fields {
				if f.Name == "order" {
					order = f.Value
				}
			}
			dr := demoDeadRecord{ID: r.ID, OriginalID: r.OriginalID, Order: order, Reason: r.Reason, Error: r.Error, Deliveries: r.Deliveries, Consumer: r.Consumer}
			if r.Reason == pelwarden.ReasonMaxDeliveries {
				dr.LastHandlerError = st.lastErr[r.OriginalID]
			}
			rep.DeadLetters.Records = append(rep.DeadLetters.Records, dr)
		}
	}

	for _, c := range d.cons {
		rep.Consumers = append(rep.Consumers, demoConsumerJSON{
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
	sort.Slice(k.PendingIDs, func(i, j int) bool { return compareIDs(k.PendingIDs[i], k.PendingIDs[j]) < 0 })
	k.Pending = len(k.PendingIDs)
	if !st.allTakenAt.IsZero() {
		ms := (st.allTakenAt.Sub(d.start) - d.victim.killedAt).Milliseconds()
		k.ReclaimedAfterMs = &ms
	}

	rep.Slow.HandlingMs = demoSlowWork.Milliseconds()
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

// printReport writes the human report on stdout.
func (d *demo) printReport(r *demoReport) {
	a := d.a
	a.printf("\npelwarden demo: %s orders on %s in %v\n\n", fmtCount(int64(r.Orders)), r.Server, fmtDuration(time.Duration(r.ElapsedMs)*time.Millisecond))

	tw := a.table()
	fmt.Fprintln(tw, "CONSUMER\tREAD\tRECLAIMED\tHANDLED\tFAILED\tDEAD-LETTERED\tACKED\tLEASES\t")
	for _, c := range r.Consumers {
		note := ""
		if c.Killed {
			note = fmt.Sprintf("killed at %v", fmtDuration(time.Duration(r.Killed.AtMs)*time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, fmtCount(c.Read), fmtCount(c.Reclaimed), fmtCount(c.Handled),
			fmtCount(c.Failed), fmtCount(c.DeadLettered), fmtCount(c.Acked), fmtCount(c.LeaseExtensions), note)
	}
	_ = tw.Flush()
	a.printf("  (reclaimed includes retries of failed orders; failed includes handlers cut off by the kill)\n\n")

	k := r.Killed
	if k.AtMs > 0 {
		a.printf("Killed %s at %v with %d handler(s) running: %s left pending in its name.\n", k.Consumer,
			fmtDuration(time.Duration(k.AtMs)*time.Millisecond), k.InFlight, plural(int64(k.Pending), "entry", "entries"))
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
				line += fmt.Sprintf(", the last %v after the kill (MinIdle %v)", fmtDuration(time.Duration(*k.ReclaimedAfterMs)*time.Millisecond), demoMinIdle)
			}
			if k.DeadLettered > 0 {
				line += fmt.Sprintf("; %d had reached %d deliveries and went to the dead-letter stream", k.DeadLettered, demoMaxDeliveries)
			}
			a.printf("%s\n  ids: %s\n", line, strings.Join(firstStrings(k.PendingIDs, 8), " "))
		}
	} else {
		a.printf("No consumer was killed (the run ended first).\n")
	}

	s := r.Slow
	a.printf("\nSlow bulk orders: %d, %v of work each (MinIdle %v); %d handled; lease extended %d times; taken over by another consumer while running: %d.\n",
		s.Orders, demoSlowWork, demoMinIdle, s.Handled, s.LeaseExtensions, s.TakenOver)

	a.printf("\nDead-letter stream %s: %s\n", r.DeadLetterStream, plural(int64(r.DeadLetters.Total), "record", "records"))
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
			why = fmt.Sprintf("failed on each of %d deliveries; moved by the reclaim pass", demoMaxDeliveries)
		case pelwarden.ReasonHandler:
			why = "the handler returned driver.DeadLetter: it can never succeed"
		}
		a.printf("  %-15s %4d  %s\n", reason, len(recs), why)
		for i, rec := range recs {
			if i == 2 {
				a.printf("                        ...\n")
				break
			}
			text := rec.Error
			if text == "" {
				text = "last handler error: " + d.st.lastErr[rec.OriginalID]
			}
			a.printf("                        %s (was %s, %s, last held by %s): %s\n", rec.ID, rec.OriginalID,
				plural(rec.Deliveries, "delivery", "deliveries"), rec.Consumer, clipText(text, 100))
		}
	}
	if r.Kept {
		a.printf("  inspect: pelwarden dlq list '%s'   (and pelwarden status '%s' %s)\n", r.DeadLetterStream, r.Stream, r.Group)
	}

	if r.Duplicates > 0 {
		a.printf("\nDuplicates: %d order(s) handled twice: %s finished them but was killed before its batched ack went out,\n"+
			"so they were reclaimed and handled again. Delivery is at least once: make handlers idempotent, keyed by the stream id.\n",
			r.Duplicates, k.Consumer)
	} else {
		a.printf("\nDuplicates: none this time (a consumer killed between handling and its batched ack causes them; handlers must be idempotent).\n")
	}
	if r.DriverErrors > 0 {
		a.printf("Driver errors on the surviving consumers: %d (last: %s)\n", r.DriverErrors, clipText(r.LastError, 160))
	}

	inv := r.Invariant
	a.printf("\nInvariant: %s produced = %s handled and acknowledged + %s dead-lettered", fmtCount(int64(inv.Produced)), fmtCount(int64(inv.HandledAndAcked)), fmtCount(int64(inv.DeadLettered)))
	if inv.Unsettled > 0 {
		a.printf(" + %d unsettled", inv.Unsettled)
	}
	if inv.Lost > 0 {
		a.printf(" + %d LOST", inv.Lost)
	}
	a.printf("; PEL %s\n", map[bool]string{true: "empty", false: fmt.Sprintf("holds %d", inv.Pending)}[inv.Pending == 0])
	if inv.PoisonNotDeadLettered > 0 || inv.DeadLetteredNotPoison > 0 || inv.HandledAndDeadLettered > 0 {
		a.printf("  note: %d poison order(s) not dead-lettered, %d healthy order(s) dead-lettered, %d handled and also dead-lettered\n",
			inv.PoisonNotDeadLettered, inv.DeadLetteredNotPoison, inv.HandledAndDeadLettered)
	}
	switch {
	case inv.Lost > 0:
		a.printf("FAILED: %d order(s) lost: %s\n", inv.Lost, strings.Join(firstStrings(inv.LostIDs, 10), " "))
	case !inv.OK:
		a.printf("NOT SETTLED within --duration: %d order(s) still open\n", inv.Unsettled)
	default:
		a.printf("OK: nothing lost.\n")
	}
}
