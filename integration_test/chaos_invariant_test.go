package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// chaosReport is what the invariant checker found at the end of a chaos run.
// The invariant: every entry the server acknowledged to the producer is, at
// the end, either acked after a handler succeeded or in the dead-letter
// stream exactly once with its reason; no dead-letter record is duplicated;
// the group's PEL is empty. Handler re-executions are counted, not hidden.
type chaosReport struct {
	Scenario string `json:"scenario"`
	Image    string `json:"image"`

	// Produced: entries whose XADD returned an id to the producer.
	Produced int `json:"produced"`
	// MaybeProduced: stream entries the producer got no id for (XADD failed
	// on the client side but was applied); checked like the others.
	MaybeProduced int `json:"maybe_produced"`
	// XAddErrors: failed XADD attempts (each was retried).
	XAddErrors int `json:"xadd_errors"`
	// StreamEntries: entries in the stream at the end.
	StreamEntries int `json:"stream_entries"`

	// AckedAfterSuccess: entries no longer pending whose handler recorded a
	// success (and that are not dead-lettered).
	AckedAfterSuccess int `json:"acked_after_success"`
	// DeadLettered: distinct entries in the dead-letter stream, by reason.
	DeadLettered      int            `json:"dead_lettered"`
	DeadLetterReasons map[string]int `json:"dead_letter_reasons"`
	// HealthyDeadLettered: entries that are not poison but were
	// dead-lettered (delivered MaxDeliveries times without a success that
	// got acked, because of the faults). Allowed by the invariant; reported.
	HealthyDeadLettered int `json:"healthy_dead_lettered"`
	// SucceededAndDeadLettered: of those, entries whose handler had
	// succeeded at least once (its ack was lost every time).
	SucceededAndDeadLettered int `json:"succeeded_and_dead_lettered"`
	// HealthyDeadLetteredIDs: the first of them, with their history.
	HealthyDeadLetteredIDs []string `json:"healthy_dead_lettered_ids,omitempty"`

	// Executions: handler executions (every delivery that reached it).
	Executions int64 `json:"executions"`
	// Successes: handler executions that recorded a success.
	Successes int64 `json:"successes"`
	// Duplicates: successes beyond the first of each entry (the business
	// effect ran again: at-least-once redeliveries).
	Duplicates int64 `json:"duplicates"`
	// DuplicatedEntries: entries that succeeded more than once.
	DuplicatedEntries int `json:"duplicated_entries"`
	// PoisonEntries: stream entries whose handler always fails.
	PoisonEntries int `json:"poison_entries"`
	// Panics: handler panics (each entry of the panic kind panics on its
	// first delivery only).
	Panics int64 `json:"panics"`

	// Violations of the invariant. Any of these fails the test.
	Lost                 []string `json:"lost"`                   // neither acked after success nor dead-lettered
	Vanished             []string `json:"vanished"`               // acknowledged to the producer, gone from the stream
	DuplicateDeadLetters []string `json:"duplicate_dead_letters"` // entries with more than one record
	BadDeadLetters       []string `json:"bad_dead_letters"`       // foreign, wrong reason or fields
	PoisonSucceeded      []string `json:"poison_succeeded"`       // a poison entry recorded a success
	PEL                  int64    `json:"pel"`                    // pending entries left
	Pending              []string `json:"pending,omitempty"`      // the first of them

	// Faults injected and the consumers' driver counters (summed over
	// processes; approximate for SIGKILLed ones).
	Faults map[string]int64 `json:"faults"`
	Driver map[string]int64 `json:"driver"`
	// FaultMinimums: the least count of each fault the scenario's schedule
	// guarantees (chaosInjector.minimums); a fault below it fails the run.
	FaultMinimums map[string]int64 `json:"fault_minimums"`
	// Seconds the scenario took, faults and drain included.
	Seconds float64 `json:"seconds"`
}

// violations lists what breaks the invariant, empty when it holds.
func (r *chaosReport) violations() []string {
	var v []string
	add := func(what string, ids []string) {
		if len(ids) > 0 {
			v = append(v, fmt.Sprintf("%d %s: %s", len(ids), what, strings.Join(firstN(ids, 10), " ")))
		}
	}
	add("lost entries (acknowledged to the producer, neither acked after a success nor dead-lettered)", r.Lost)
	add("vanished entries (acknowledged to the producer, missing from the stream)", r.Vanished)
	add("entries dead-lettered more than once", r.DuplicateDeadLetters)
	add("bad dead-letter records", r.BadDeadLetters)
	add("poison entries that succeeded", r.PoisonSucceeded)
	if r.PEL != 0 {
		v = append(v, fmt.Sprintf("PEL not empty after the drain: %d pending (first: %s)", r.PEL, strings.Join(r.Pending, " ")))
	}
	return v
}

func (r *chaosReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos %s on %s: %d entries produced (+%d maybe produced, %d XADD errors retried) in %.0fs\n",
		r.Scenario, r.Image, r.Produced, r.MaybeProduced, r.XAddErrors, r.Seconds)
	fmt.Fprintf(&b, "  acked after success %d, dead-lettered %d %v (healthy %d, of which had succeeded %d)\n",
		r.AckedAfterSuccess, r.DeadLettered, r.DeadLetterReasons, r.HealthyDeadLettered, r.SucceededAndDeadLettered)
	if len(r.HealthyDeadLetteredIDs) > 0 {
		fmt.Fprintf(&b, "  healthy dead-lettered: %s\n", strings.Join(r.HealthyDeadLetteredIDs, " "))
	}
	fmt.Fprintf(&b, "  handler executions %d, successes %d, duplicates %d (%d entries), panics %d\n",
		r.Executions, r.Successes, r.Duplicates, r.DuplicatedEntries, r.Panics)
	fmt.Fprintf(&b, "  lost %d, vanished %d, duplicate dead-letters %d, bad dead-letters %d, poison succeeded %d, PEL %d\n",
		len(r.Lost), len(r.Vanished), len(r.DuplicateDeadLetters), len(r.BadDeadLetters), len(r.PoisonSucceeded), r.PEL)
	fmt.Fprintf(&b, "  faults %s\n", sortedCounts(r.Faults))
	fmt.Fprintf(&b, "  fault minimums %s\n", sortedCounts(r.FaultMinimums))
	fmt.Fprintf(&b, "  driver %s", sortedCounts(r.Driver))
	return b.String()
}

func sortedCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// checkChaosInvariant reads the scenario's stream, PEL, dead-letter stream
// and the handlers' records and checks the invariant for produced, the ids
// XADD acknowledged. It returns an error only when it cannot read them; the
// report's violations say whether the invariant holds.
func checkChaosInvariant(ctx context.Context, rdb *redis.Client, k chaosKeys, produced []string) (*chaosReport, error) {
	r := &chaosReport{Produced: len(produced), DeadLetterReasons: map[string]int{},
		// Empty, not null, in the JSON report.
		Lost: []string{}, Vanished: []string{}, DuplicateDeadLetters: []string{}, BadDeadLetters: []string{}, PoisonSucceeded: []string{}}

	entries, err := readStream(ctx, rdb, k.Stream)
	if err != nil {
		return nil, err
	}
	r.StreamEntries = len(entries)
	inProduced := make(map[string]bool, len(produced))
	for _, id := range produced {
		inProduced[id] = true
		if _, ok := entries[id]; !ok {
			r.Vanished = append(r.Vanished, id)
		}
	}
	for id := range entries {
		if !inProduced[id] {
			r.MaybeProduced++
		}
	}

	runs, err := hashCounts(ctx, rdb, k.Runs)
	if err != nil {
		return nil, err
	}
	oks, err := hashCounts(ctx, rdb, k.OK)
	if err != nil {
		return nil, err
	}
	for _, n := range runs {
		r.Executions += n
	}
	for _, n := range oks {
		r.Successes += n
		if n > 1 {
			r.Duplicates += n - 1
			r.DuplicatedEntries++
		}
	}
	if v, err := rdb.HGet(ctx, k.Events, "panic").Int64(); err == nil {
		r.Panics = v
	} else if err != redis.Nil {
		return nil, err
	}

	dead, err := readDeadLetters(ctx, rdb, k.DLQ)
	if err != nil {
		return nil, err
	}
	records := map[string]int{} // original id -> records
	recordOf := map[string]pelwarden.DeadLetter{}
	for _, d := range dead {
		e, known := entries[d.rec.OriginalID]
		switch {
		case !d.ok:
			r.BadDeadLetters = append(r.BadDeadLetters, d.id+" (not a pelwarden record)")
			continue
		case !known:
			r.BadDeadLetters = append(r.BadDeadLetters, d.id+" (original "+d.rec.OriginalID+" is not a stream entry)")
			continue
		}
		records[d.rec.OriginalID]++
		recordOf[d.rec.OriginalID] = d.rec
		r.DeadLetterReasons[d.rec.Reason]++
		if problem := deadLetterProblem(d.rec, e, k); problem != "" {
			r.BadDeadLetters = append(r.BadDeadLetters, d.id+" ("+problem+")")
		}
	}
	for id, n := range records {
		if n > 1 {
			r.DuplicateDeadLetters = append(r.DuplicateDeadLetters, fmt.Sprintf("%s(x%d)", id, n))
		}
	}
	r.DeadLettered = len(records)

	pel, err := rdb.XPending(ctx, k.Stream, k.Group).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", k.Stream, err)
	}
	r.PEL = pel.Count
	pendingIDs := map[string]bool{}
	if pel.Count > 0 {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Stream, Group: k.Group, Start: "-", End: "+", Count: 100000}).Result()
		if err != nil {
			return nil, err
		}
		for i, e := range p {
			pendingIDs[e.ID] = true
			if i < 10 {
				r.Pending = append(r.Pending, fmt.Sprintf("%s(owner %s, deliveries %d, idle %v)", e.ID, e.Consumer, e.RetryCount, e.Idle))
			}
		}
	}

	for id, e := range entries {
		kind := kindOf(e.seq)
		switch {
		case kind.poison():
			r.PoisonEntries++
			if oks[id] > 0 {
				r.PoisonSucceeded = append(r.PoisonSucceeded, id)
			}
			if records[id] == 0 && !pendingIDs[id] {
				r.Lost = append(r.Lost, id+" (poison, not dead-lettered)")
			}
		case records[id] > 0:
			r.HealthyDeadLettered++
			if oks[id] > 0 {
				r.SucceededAndDeadLettered++
			}
			if len(r.HealthyDeadLetteredIDs) < 10 {
				d := recordOf[id]
				r.HealthyDeadLetteredIDs = append(r.HealthyDeadLetteredIDs, fmt.Sprintf("%s(seq %d, %d executions, %d successes, %d deliveries, last owner %s, at %s)",
					id, e.seq, runs[id], oks[id], d.Deliveries, d.Consumer, d.DeadLetteredAt.Format("15:04:05.000")))
			}
		case pendingIDs[id]:
			// Reported as PEL.
		case oks[id] > 0:
			r.AckedAfterSuccess++
		default:
			r.Lost = append(r.Lost, fmt.Sprintf("%s (seq %d, %d executions, no success)", id, e.seq, runs[id]))
		}
	}
	slices.Sort(r.Lost)
	slices.Sort(r.Vanished)
	return r, nil
}

// deadLetterProblem checks one record against its entry and the handler's
// rules: poison entries that fail plainly reach MaxDeliveries (with the
// last failed attempt's error); those whose
// handler asks for it carry its error text (or reached MaxDeliveries when
// the dead-letter call itself kept failing); healthy entries can only have
// reached MaxDeliveries.
func deadLetterProblem(d pelwarden.DeadLetter, e chaosEntry, k chaosKeys) string {
	if d.Stream != k.Stream || d.Group != k.Group {
		return fmt.Sprintf("source %s/%s", d.Stream, d.Group)
	}
	if !slices.Equal(d.Fields, e.fields) {
		return fmt.Sprintf("fields %v differ from the entry's %v", d.Fields, e.fields)
	}
	switch kind := kindOf(e.seq); {
	case d.Reason == pelwarden.ReasonMaxDeliveries:
		// The record keeps the last failed attempt's error: the poison
		// text only on poison entries; otherwise none (every attempt
		// crashed, or its failure was never recorded) or a failure of the
		// handler's own bookkeeping, a panic or a cancellation.
		switch {
		case d.Error == "":
		case d.Error == chaosPoisonError:
			if !kind.poison() {
				return "max_deliveries with the poison error on an entry of kind " + strconv.Itoa(int(kind))
			}
		case strings.HasPrefix(d.Error, "record "), strings.Contains(d.Error, "chaos: handler panics"),
			strings.Contains(d.Error, context.Canceled.Error()), strings.Contains(d.Error, context.DeadlineExceeded.Error()):
		default:
			return "max_deliveries with error text " + strconv.Quote(d.Error)
		}
	case d.Reason == pelwarden.ReasonHandler && kind == kindPoisonDL:
		if d.Error != chaosPoisonDLError {
			return "handler reason with error text " + strconv.Quote(d.Error)
		}
	default:
		return fmt.Sprintf("reason %q for an entry of kind %d", d.Reason, kind)
	}
	return ""
}

// chaosEntry is a stream entry as the checker needs it.
type chaosEntry struct {
	seq    int64
	fields []pelwarden.Field
}

// readStream reads every entry of a stream, page by page, fields in order.
func readStream(ctx context.Context, rdb *redis.Client, stream string) (map[string]chaosEntry, error) {
	out := map[string]chaosEntry{}
	err := rangeRaw(ctx, rdb, stream, func(id string, fields []pelwarden.Field) error {
		e := chaosEntry{seq: -1, fields: fields}
		for _, f := range fields {
			if f.Name == "seq" {
				e.seq, _ = strconv.ParseInt(f.Value, 10, 64)
			}
		}
		if e.seq < 0 {
			return fmt.Errorf("stream entry %s has no seq field: %v", id, fields)
		}
		out[id] = e
		return nil
	})
	return out, err
}

// deadRecord is a dead-letter record as read.
type deadRecord struct {
	id  string
	rec pelwarden.DeadLetter
	ok  bool
}

func readDeadLetters(ctx context.Context, rdb *redis.Client, dlq string) ([]deadRecord, error) {
	var out []deadRecord
	err := rangeRaw(ctx, rdb, dlq, func(id string, fields []pelwarden.Field) error {
		d, ok := pelwarden.ParseDeadLetter(fields)
		out = append(out, deadRecord{id: id, rec: d, ok: ok})
		return nil
	})
	return out, err
}

// rangeRaw calls fn for every entry of stream, in pages of raw XRANGE
// (go-redis's XRange decodes fields into a map, losing their order).
func rangeRaw(ctx context.Context, rdb *redis.Client, stream string, fn func(id string, fields []pelwarden.Field) error) error {
	const page = 10000
	start := "-"
	for {
		raw, err := rdb.Do(ctx, "XRANGE", stream, start, "+", "COUNT", page).Slice()
		if err != nil && err != redis.Nil {
			return fmt.Errorf("XRANGE %s: %w", stream, err)
		}
		for _, e := range raw {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				return fmt.Errorf("XRANGE %s: unexpected entry %#v", stream, e)
			}
			id, _ := pair[0].(string)
			kv, _ := pair[1].([]any)
			fields := make([]pelwarden.Field, 0, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				n, _ := kv[i].(string)
				v, _ := kv[i+1].(string)
				fields = append(fields, pelwarden.Field{Name: n, Value: v})
			}
			if err := fn(id, fields); err != nil {
				return err
			}
			start = "(" + id
		}
		if len(raw) < page {
			return nil
		}
	}
}

// hashCounts reads a hash of integer counts.
func hashCounts(ctx context.Context, rdb *redis.Client, key string) (map[string]int64, error) {
	m, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("HGETALL %s: %w", key, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("HGETALL %s: %s=%q is not a count", key, k, v)
		}
		out[k] = n
	}
	return out, nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}
