package integration_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pelwarden/pelwarden"
)

// The reference model of TestLibraryModel (model_test.go): one stream, one
// consumer group with its PEL, and the dead-letter stream, in plain Go. It
// follows the contracts in the header comments of lua/pelwarden.lua and the
// Go wrappers' docs, never the Lua code: each method takes the arguments of
// one call, updates the model and returns the reply the server must give.
// Ids are the server's (XADD *): the model learns them from replies and, for
// dead-letter records, from the check after the step.

// Idle times are the test's: every pending entry is fresh (touched during
// the test case, idle well under modelMinIdle) or stale (its idle time set
// to modelStaleIdle by the test or by release). Every threshold a step uses
// (min-idle, backoff delays) is 0 or far from both.
const (
	modelStaleIdle = 1_000_000_000 // ms, about 11.6 days
	modelMinIdle   = 3_600_000     // 1 h: takes stale entries only
	modelBackoff   = 7_200_000     // 2 h: between fresh and stale
	modelBackoffXL = 10_000_000_000
)

// modelEntry is one stream entry: its id and field/value list, in order.
type modelEntry struct {
	id     string
	fields []string
}

// modelPending is one PEL entry.
type modelPending struct {
	owner      string
	deliveries int64
	stale      bool
}

// idle is the model's idle time of the entry: 0 or modelStaleIdle.
func (p *modelPending) idle() int64 {
	if p.stale {
		return modelStaleIdle
	}
	return 0
}

// entryState is where one entry of the stream is, as the group sees it.
// Every id the stream ever held has exactly one.
type entryState int

const (
	stateUndelivered entryState = iota // in the stream, after the group's last-delivered id
	stateRemoved                       // deleted or trimmed before the group read it
	statePending                       // in the PEL, with one owner
	stateAcked                         // acknowledged
	stateDead                          // dead-lettered: one record in the dead-letter stream
	stateRedriven                      // dead-lettered, then its record moved back by redrive
	stateCleared                       // pending when deleted from the stream, then cleared by a function
)

func (s entryState) String() string {
	return [...]string{"undelivered", "removed", "pending", "acked", "dead-lettered", "redriven", "cleared"}[s]
}

// modelRecord is one record of the dead-letter stream.
type modelRecord struct {
	id string // "" until the check after its step reads it
	// fields are the original fields; the metadata follows them on the
	// server unless foreign.
	fields  []string
	foreign bool // a record pelwarden did not write (no metadata)
	// Metadata of a pelwarden record.
	originalID, source, consumer, reason, errText string
	deliveries                                    int64
	// timeLo and timeHi bound dead_lettered_at: the server's clock before
	// and after the call (ms).
	timeLo, timeHi int64
}

// serverFields is the record as the library writes it (metadata included),
// with dead_lettered_at as "*" (checked against timeLo..timeHi).
func (r *modelRecord) serverFields(group string) []string {
	if r.foreign {
		return r.fields
	}
	out := slices.Clone(r.fields)
	return append(out,
		pelwarden.FieldOriginalID, r.originalID,
		pelwarden.FieldStream, r.source,
		pelwarden.FieldGroup, group,
		pelwarden.FieldConsumer, r.consumer,
		pelwarden.FieldDeliveries, strconv.FormatInt(r.deliveries, 10),
		pelwarden.FieldReason, r.reason,
		pelwarden.FieldError, r.errText,
		pelwarden.FieldDeadLetteredAt, "*",
		pelwarden.FieldMetaCount, "9")
}

// model is the reference state.
type model struct {
	stream, group string
	entries       []modelEntry // the stream, in id order
	lastID        string       // the greatest id the stream ever held (XADD * goes above it)
	lastDelivered string       // the group's last-delivered id
	pel           map[string]*modelPending
	dead          []*modelRecord
	state         map[string]entryState
	fieldsOf      map[string][]string // every entry's fields, by id
}

func newModel(stream, group string) *model {
	return &model{stream: stream, group: group, lastID: "0-0", lastDelivered: "0-0",
		pel: map[string]*modelPending{}, state: map[string]entryState{}, fieldsOf: map[string][]string{}}
}

// streamID is a parsed stream id.
type streamID struct{ ms, seq uint64 }

func parseStreamID(s string) streamID {
	a, b, ok := strings.Cut(s, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		panic(fmt.Sprintf("model: bad stream id %q", s))
	}
	return streamID{ms, seq}
}

func (a streamID) less(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

// idLess compares stream ids numerically.
func idLess(a, b string) bool { return parseStreamID(a).less(parseStreamID(b)) }

// idCompare is idLess as a three-way comparison, for slices.SortFunc.
func idCompare(a, b string) int {
	switch {
	case idLess(a, b):
		return -1
	case idLess(b, a):
		return 1
	}
	return 0
}

// idAfter is the id right after id (the ids in this test stay far below
// the largest one).
func idAfter(id string) string {
	s := parseStreamID(id)
	return fmt.Sprintf("%d-%d", s.ms, s.seq+1)
}

func (m *model) entryIndex(id string) int {
	for i, e := range m.entries {
		if e.id == id {
			return i
		}
	}
	return -1
}

func (m *model) inStream(id string) bool { return m.entryIndex(id) >= 0 }

// remove deletes id from the stream (XDEL, XTRIM, trim, a delete flag):
// an entry the group never read is gone for it; a pending one stays
// pending until a function clears it.
func (m *model) remove(id string) bool {
	i := m.entryIndex(id)
	if i < 0 {
		return false
	}
	m.entries = slices.Delete(m.entries, i, i+1)
	if m.state[id] == stateUndelivered {
		m.state[id] = stateRemoved
	}
	return true
}

// pendingIDs are the PEL's ids in order.
func (m *model) pendingIDs() []string { return sortedIDs(m.pel) }

// knownIDs are every id the stream ever held, in order.
func (m *model) knownIDs() []string { return sortedIDs(m.state) }

// sortedIDs are the keys of a map by stream id, in order.
func sortedIDs[V any](byID map[string]V) []string {
	ids := slices.Collect(maps.Keys(byID))
	slices.SortFunc(ids, idCompare)
	return ids
}

// pendingOf counts each consumer's pending entries.
func (m *model) pendingOf() map[string]int64 {
	n := map[string]int64{}
	for _, p := range m.pel {
		n[p.owner]++
	}
	return n
}

// added records an entry XADD (or redrive) appended.
func (m *model) added(id string, fields []string) error {
	if !idLess(m.lastID, id) {
		return fmt.Errorf("new id %s is not above the stream's last id %s", id, m.lastID)
	}
	m.lastID = id
	m.entries = append(m.entries, modelEntry{id, fields})
	m.state[id] = stateUndelivered
	m.fieldsOf[id] = fields
	return nil
}

// readGroup is XREADGROUP ... COUNT n STREAMS stream ">": the ids the
// consumer gets.
func (m *model) readGroup(consumer string, n int) []modelEntry {
	var out []modelEntry
	for _, e := range m.entries {
		if len(out) == n {
			break
		}
		if idLess(m.lastDelivered, e.id) {
			out = append(out, e)
			m.pel[e.id] = &modelPending{owner: consumer, deliveries: 1}
			m.state[e.id] = statePending
		}
	}
	if len(out) > 0 {
		m.lastDelivered = out[len(out)-1].id
	}
	return out
}

// clear drops a pending entry whose stream entry is gone.
func (m *model) clear(id string) {
	delete(m.pel, id)
	m.state[id] = stateCleared
}

// deadLetter writes a record for pending id (present in the stream).
func (m *model) deadLetter(id, reason, errText string, timeLo, timeHi int64) {
	p := m.pel[id]
	m.dead = append(m.dead, &modelRecord{fields: m.fieldsOf[id], originalID: id, source: m.stream, consumer: p.owner,
		reason: reason, errText: errText, deliveries: p.deliveries, timeLo: timeLo, timeHi: timeHi})
	delete(m.pel, id)
	m.state[id] = stateDead
}

// modelClaimArgs are one claim call's arguments, in the model's units (ms).
type modelClaimArgs struct {
	consumer                       string
	minIdle                        int64
	cursor                         string
	count, maxDeliveries, maxBytes int
	deleteDead, deadLetterOnly     bool
	backoff                        []int64
}

// modelClaimReply is the reply the claim must give; ids in order.
type modelClaimReply struct {
	cursor    string
	live      []pelwarden.Entry
	dead      []string
	deleted   []string
	backedOff int
	takenFrom []pelwarden.ConsumerCount // sorted by consumer
}

func fieldBytes(fields []string) int {
	n := 0
	for _, f := range fields {
		n += len(f)
	}
	return n
}

// claim is pelwarden_v1_claim. timeLo and timeHi bound the server's clock
// during the call.
func (m *model) claim(a modelClaimArgs, timeLo, timeHi int64) modelClaimReply {
	limit, limited, err := pelwarden.DeliveryLimit("maxDeliveries", a.maxDeliveries)
	if err != nil {
		panic(err)
	}
	var after []string
	for _, id := range m.pendingIDs() {
		if idLess(a.cursor, id) {
			after = append(after, id)
		}
	}
	// At most count*10 PEL entries are scanned.
	budget := a.count * 10
	window := after[:min(budget, len(after))]
	exhausted := len(after) < budget
	var r modelClaimReply
	from := map[string]int{}
	taken, bytes, last, full := 0, 0, "", false
	for _, id := range window {
		if taken >= a.count || (a.maxBytes > 0 && bytes >= a.maxBytes) {
			full = true
			break
		}
		last = id
		p := m.pel[id]
		threshold := a.minIdle
		if len(a.backoff) > 0 && p.deliveries > 0 {
			threshold = max(threshold, a.backoff[min(int(p.deliveries), len(a.backoff))-1])
		}
		idle := p.idle()
		switch {
		case idle >= a.minIdle && idle < threshold:
			r.backedOff++
		case idle < threshold:
		case limited && p.deliveries >= int64(limit):
			taken++
			if !m.inStream(id) {
				m.clear(id)
				r.deleted = append(r.deleted, id)
				continue
			}
			bytes += fieldBytes(m.fieldsOf[id])
			m.deadLetter(id, pelwarden.ReasonMaxDeliveries, "", timeLo, timeHi)
			if a.deleteDead {
				m.remove(id)
			}
			r.dead = append(r.dead, id)
		case !a.deadLetterOnly:
			taken++
			if !m.inStream(id) {
				m.clear(id)
				r.deleted = append(r.deleted, id)
				continue
			}
			if p.owner != a.consumer {
				from[p.owner]++
			}
			p.owner, p.stale = a.consumer, false
			p.deliveries++
			bytes += fieldBytes(m.fieldsOf[id])
			r.live = append(r.live, pelwarden.Entry{ID: id, Fields: toFields(m.fieldsOf[id]), Deliveries: p.deliveries})
		}
	}
	r.cursor = "0-0"
	if full || !exhausted {
		r.cursor = a.cursor
		if last != "" {
			r.cursor = last
		}
	}
	for _, c := range slices.Sorted(maps.Keys(from)) {
		r.takenFrom = append(r.takenFrom, pelwarden.ConsumerCount{Consumer: c, Entries: from[c]})
	}
	return r
}

// owned splits ids into those consumer owns and the others, and the
// others into those no consumer holds.
func (m *model) owned(consumer string, ids []string) (mine, notOwned, notPending []string) {
	for _, id := range ids {
		p := m.pel[id]
		switch {
		case p != nil && p.owner == consumer:
			mine = append(mine, id)
		case p == nil:
			notOwned = append(notOwned, id)
			notPending = append(notPending, id)
		default:
			notOwned = append(notOwned, id)
		}
	}
	return mine, notOwned, notPending
}

// ack is pelwarden_v1_ack.
func (m *model) ack(consumer string, ids []string, del bool) pelwarden.AckResult {
	mine, notOwned, notPending := m.owned(consumer, ids)
	for _, id := range mine {
		delete(m.pel, id)
		m.state[id] = stateAcked
		if del {
			m.remove(id)
		}
	}
	return pelwarden.AckResult{Acked: int64(len(mine)), NotOwned: notOwned, NotPending: notPending}
}

// deadLetterCall is pelwarden_v1_deadletter (errText already bounded).
func (m *model) deadLetterCall(consumer string, ids []string, del bool, reason, errText string, timeLo, timeHi int64) pelwarden.DeadLetterResult {
	var r pelwarden.DeadLetterResult
	mine, notOwned, notPending := m.owned(consumer, ids)
	r.NotOwned, r.NotPending = notOwned, notPending
	for _, id := range mine {
		if !m.inStream(id) {
			m.clear(id)
			r.Deleted = append(r.Deleted, id)
			continue
		}
		m.deadLetter(id, reason, errText, timeLo, timeHi)
		if del {
			m.remove(id)
		}
		r.DeadLettered = append(r.DeadLettered, id)
	}
	return r
}

// retime is pelwarden_v1_extend and pelwarden_v1_release: the owned ids
// get the idle time idle (0 or modelStaleIdle), their count unchanged.
func (m *model) retime(consumer string, ids []string, idle int64) pelwarden.ExtendResult {
	var r pelwarden.ExtendResult
	mine, notOwned, _ := m.owned(consumer, ids)
	r.NotOwned = notOwned
	for _, id := range mine {
		if !m.inStream(id) {
			m.clear(id)
			r.Deleted = append(r.Deleted, id)
			continue
		}
		m.pel[id].stale = idle >= modelStaleIdle
		r.Extended++
	}
	return r
}

// redrive is pelwarden_v1_redrive to the model's stream; moved are the
// records to move, in order (their new ids come from the server).
func (m *model) redrive(cursor string, count int, anySource bool) (moved []*modelRecord, foreign, other []string, next string) {
	var page []*modelRecord
	for _, r := range m.dead {
		if len(page) == count {
			break
		}
		if idLess(cursor, r.id) {
			page = append(page, r)
		}
	}
	for _, r := range page {
		switch {
		case r.foreign:
			foreign = append(foreign, r.id)
		case !anySource && r.source != m.stream:
			other = append(other, r.id)
		default:
			moved = append(moved, r)
		}
	}
	next = "0-0"
	if len(page) >= count {
		next = page[len(page)-1].id
	}
	return moved, foreign, other, next
}

// redriven applies one moved record: its record leaves the dead-letter
// stream, an entry with its original fields (pelwarden.redrives bumped)
// joins the stream at newID.
func (m *model) redriven(r *modelRecord, newID string) error {
	m.dead = slices.DeleteFunc(m.dead, func(x *modelRecord) bool { return x == r })
	if r.source == m.stream && m.state[r.originalID] == stateDead {
		m.state[r.originalID] = stateRedriven
	}
	return m.added(newID, redriveFields(r.fields))
}

// redriveFields are a record's original fields as redrive re-adds them:
// pelwarden.redrives dropped, then appended as its previous value + 1.
func redriveFields(fields []string) []string {
	var out []string
	redrives := 0
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == pelwarden.FieldRedrives {
			redrives, _ = strconv.Atoi(fields[i+1])
			continue
		}
		out = append(out, fields[i], fields[i+1])
	}
	return append(out, pelwarden.FieldRedrives, strconv.Itoa(redrives+1))
}

// groupBound is the group's trim bound: the lower of its oldest pending id
// and the id right after its last-delivered id.
func (m *model) groupBound() (bound, oldest string) {
	bound = idAfter(m.lastDelivered)
	if ids := m.pendingIDs(); len(ids) > 0 {
		oldest = ids[0]
		if idLess(oldest, bound) {
			bound = oldest
		}
	}
	return bound, oldest
}

// trim is pelwarden_v1_trim (and its dry run).
func (m *model) trim(limit int, dry bool) pelwarden.TrimResult {
	bound, oldest := m.groupBound()
	r := pelwarden.TrimResult{Bound: bound, Holder: m.group, Groups: []pelwarden.GroupBound{{
		Name: m.group, Pending: int64(len(m.pel)), OldestPending: oldest, LastDelivered: m.lastDelivered, Bound: bound}}}
	var below []string
	for _, e := range m.entries {
		if idLess(e.id, bound) {
			below = append(below, e.id)
		}
	}
	cut := below[:min(limit, len(below))]
	r.Trimmed, r.More = int64(len(cut)), len(below) > limit
	if len(cut) > 0 {
		r.FirstID, r.LastID = cut[0], cut[len(cut)-1]
	}
	if !dry {
		for _, id := range cut {
			m.remove(id)
		}
	}
	r.Length = int64(len(m.entries))
	return r
}
