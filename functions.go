package pelwarden

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// MaxNameBytes bounds stream, group, consumer and key names.
const MaxNameBytes = 1024

// DefaultCount is the page size of Claim and Redrive when Count is 0.
const DefaultCount = 100

// Field is one field of a stream entry. Entries keep their fields in stream
// order, duplicates included.
type Field struct {
	Name  string
	Value string
}

// Entry is a stream entry handed out by Claim.
type Entry struct {
	// ID is the stream id.
	ID string
	// Fields in stream order.
	Fields []Field
	// Deliveries is how many times the entry has been delivered, this
	// delivery included.
	Deliveries int64
}

// ClaimArgs are the arguments of Claim.
type ClaimArgs struct {
	// Stream is the source stream. Required.
	Stream string
	// DeadLetterStream receives entries delivered MaxDeliveries times.
	// Required; it must hash to the same cluster slot as Stream.
	DeadLetterStream string
	// Group is the consumer group. Required.
	Group string
	// Consumer receives the live entries. Required.
	Consumer string
	// MinIdle: only entries idle at least this long are touched. Zero
	// touches every pending entry. Millisecond resolution.
	MinIdle time.Duration
	// Cursor is "" or "0-0" to start a pass, else the previous page's Cursor.
	Cursor string
	// Count bounds the entries (live plus dead-lettered) of one page, 1 to
	// MaxCount. Defaults to DefaultCount. At most Count*10 PEL entries are
	// scanned per call, so work per call is bounded whatever the PEL size.
	Count int
	// MaxDeliveries: an entry already delivered this many times is
	// dead-lettered instead of handed out. 0 means DefaultMaxDeliveries
	// and NoDeliveryLimit no limit, as everywhere (see DeliveryLimit).
	MaxDeliveries int
	// DeleteDeadLettered also XDELs dead-lettered entries from Stream.
	DeleteDeadLettered bool
	// DeadLetterOnly moves entries at MaxDeliveries to the dead-letter
	// stream and leaves every other entry untouched, owned by whoever holds
	// it. Requires a limit (MaxDeliveries not NoDeliveryLimit).
	DeadLetterOnly bool
	// MaxBytes bounds the field bytes of the live and dead-lettered entries
	// of one page (at least one entry is taken), so a PEL of large entries
	// never builds a huge reply or a long call. Zero means no limit.
	MaxBytes int
	// Backoff is an optional delay per attempt: an entry delivered n times
	// is not claimed again before it has been idle
	// max(MinIdle, Backoff[min(n, len(Backoff))-1]). Entries left alone are
	// counted in ClaimPage.BackedOff; their delivery count is not bumped.
	Backoff []time.Duration
	// LastErrors is the stream's last-errors hash (LastErrorsKeyFor), in
	// its slot: a record for MaxDeliveries keeps the error of the entry's
	// last failed attempt (Fail). Empty: records keep no error (and an
	// older library, before 1.3.0, ignores it).
	LastErrors string
}

// ClaimPage is one page of a reclaim pass.
type ClaimPage struct {
	// Cursor is the next page's cursor; "0-0" when the pass is complete.
	Cursor string
	// Entries are now owned by the calling consumer, with their fields.
	Entries []Entry
	// DeadLettered ids were copied to the dead-letter stream and acked.
	DeadLettered []string
	// Deleted ids were still pending but their entries were gone from the
	// stream (XDEL, trimming); they were cleared from the PEL. Not a success.
	Deleted []string
	// BackedOff counts idle entries left alone because of the backoff
	// schedule.
	BackedOff int
	// TooLarge ids reached MaxDeliveries but have too many fields (more
	// than about 3,900) for the library to copy them to the dead-letter
	// stream: Lua cannot build a command that long. They are left pending,
	// untouched, and reported on every pass until an operator moves them.
	TooLarge []string
	// TakenFrom says from whom the page took its Entries: for each other
	// consumer that held some of them, how many, sorted by consumer.
	// Entries the caller held already are not counted. Nil from a library
	// before 1.4.0.
	TakenFrom []ConsumerCount
}

// ConsumerCount is a number of entries of one consumer.
type ConsumerCount struct {
	Consumer string
	Entries  int
}

// Done reports whether this page completed the pass.
func (p *ClaimPage) Done() bool { return p.Cursor == "0-0" }

// Claim runs one cursor page of the reclaim step atomically: it takes entries
// idle at least MinIdle from the group's PEL, dead-letters those already
// delivered MaxDeliveries times (copy with metadata plus XACK), transfers the
// others to Consumer and returns them with their fields and delivery counts,
// and clears ids whose entries were deleted from the stream.
func (l *Library) Claim(ctx context.Context, a ClaimArgs) (*ClaimPage, error) {
	const fn = FunctionClaim
	if err := checkNames(fn, "Stream", a.Stream, "DeadLetterStream", a.DeadLetterStream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	if a.Stream == a.DeadLetterStream {
		return nil, argError(fn, "DeadLetterStream", "must differ from Stream")
	}
	keys, err := l.withLastErrors(fn, []string{a.Stream, a.DeadLetterStream}, a.LastErrors)
	if err != nil {
		return nil, err
	}
	cursor, err := checkCursor(fn, a.Cursor)
	if err != nil {
		return nil, err
	}
	count, err := checkCount(fn, "Count", a.Count)
	if err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "MinIdle", a.MinIdle); err != nil {
		return nil, err
	}
	maxDeliveries, err := wireDeliveries(fn, a.MaxDeliveries)
	if err != nil {
		return nil, err
	}
	if a.DeadLetterOnly && maxDeliveries == 0 {
		return nil, argError(fn, "MaxDeliveries", "must not be NoDeliveryLimit with DeadLetterOnly")
	}
	if a.MaxBytes < 0 {
		return nil, argError(fn, "MaxBytes", "must be 0 (no limit) or positive, got %d", a.MaxBytes)
	}
	args := []any{a.Group, a.Consumer, ms(a.MinIdle), cursor, count, maxDeliveries,
		flag(a.DeleteDeadLettered), flag(!a.DeadLetterOnly), a.MaxBytes}
	args, err = appendBackoff(fn, args, a.Backoff)
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, keys, args...)
	if err != nil {
		return nil, err
	}
	return decodeClaim(v)
}

// AckArgs are the arguments of Ack.
type AckArgs struct {
	// Stream, Group and Consumer are required. Only ids still owned by
	// Consumer are acknowledged.
	Stream, Group, Consumer string
	// IDs to acknowledge, 1 to MaxCount.
	IDs []string
	// Delete also deletes the acknowledged entries from Stream, once every
	// consumer group of the stream is done with them (XDELEX ... ACKED on
	// Redis 8.2 and later, a check of every group elsewhere; a plain XDEL
	// before library 1.3.0), so a group that has not read an entry yet
	// still gets it.
	Delete bool
}

// AckResult is the outcome of Ack.
type AckResult struct {
	// Acked is how many entries were acknowledged.
	Acked int64
	// NotOwned ids were not acknowledged: another consumer owns them now, or
	// they are no longer pending.
	NotOwned []string
	// NotPending are the NotOwned ids no consumer holds: they were acked
	// already (for instance by an earlier attempt of a call retried after
	// its connection dropped) or cleared from the group. The others in
	// NotOwned are owned by another consumer. Empty from a server running a
	// library older than 1.0.3.
	NotPending []string
}

// OwnedElsewhere returns the NotOwned ids that another consumer holds now.
func (r *AckResult) OwnedElsewhere() []string { return without(r.NotOwned, r.NotPending) }

// without returns ids minus drop, in order (ids itself when drop is empty).
func without(ids, drop []string) []string {
	if len(drop) == 0 {
		return ids
	}
	gone := make(map[string]bool, len(drop))
	for _, id := range drop {
		gone[id] = true
	}
	var out []string
	for _, id := range ids {
		if !gone[id] {
			out = append(out, id)
		}
	}
	return out
}

// Err returns an error wrapping ErrNotOwner that lists NotOwned, or nil.
func (r *AckResult) Err() error { return notOwnedErr(FunctionAck, r.NotOwned) }

// Ack acknowledges a batch of ids, fenced by ownership: XACK itself does not
// check the owner, so a consumer whose entry was reclaimed could otherwise
// ack work it no longer holds.
func (l *Library) Ack(ctx context.Context, a AckArgs) (*AckResult, error) {
	const fn = FunctionAck
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	args, err := idArgs(fn, a.IDs, a.Group, a.Consumer, flag(a.Delete))
	if err != nil {
		return nil, err
	}
	boundsFirstLast(args[3:])
	v, err := l.call(ctx, fn, []string{a.Stream}, args...)
	if err != nil {
		return nil, err
	}
	return decodeAck(v)
}

// DeadLetterArgs are the arguments of DeadLetter.
type DeadLetterArgs struct {
	// Stream, DeadLetterStream (same cluster slot), Group and Consumer are
	// required. Only ids still owned by Consumer are moved.
	Stream, DeadLetterStream, Group, Consumer string
	// IDs to dead-letter, 1 to MaxCount.
	IDs []string
	// Reason is a short machine-readable reason, at most MaxReasonBytes.
	// Defaults to ReasonHandler.
	Reason string
	// Error is the error text, stored bounded to MaxErrorBytes (cut on a
	// UTF-8 boundary, ending with TruncatedMarker).
	Error string
	// Delete also deletes the entries from Stream once every consumer
	// group is done with them (see AckArgs.Delete).
	Delete bool
	// LastErrors is the stream's last-errors hash (LastErrorsKeyFor): with
	// an empty Error, each record keeps its entry's last error (as Claim
	// does for MaxDeliveries). Optional.
	LastErrors string
}

// DeadLetterResult is the outcome of DeadLetter.
type DeadLetterResult struct {
	// DeadLettered ids were copied to the dead-letter stream and acked.
	DeadLettered []string
	// NotOwned ids were left alone: owned by another consumer or no longer
	// pending (a repeated call lands here, writing nothing).
	NotOwned []string
	// Deleted ids were pending but gone from the stream; they were cleared.
	Deleted []string
	// TooLarge ids are owned but have too many fields (more than about
	// 3,900) for the library to copy them to the dead-letter stream. They
	// were left pending and owned by the consumer; nothing was written.
	TooLarge []string
	// NotPending are the NotOwned ids no consumer holds: dead-lettered or
	// acked already (for instance by an earlier attempt of a call retried
	// after its connection dropped). The others in NotOwned are owned by
	// another consumer. Empty from a server running a library older than
	// 1.0.3.
	NotPending []string
}

// OwnedElsewhere returns the NotOwned ids that another consumer holds now.
func (r *DeadLetterResult) OwnedElsewhere() []string { return without(r.NotOwned, r.NotPending) }

// Err returns an error wrapping ErrNotOwner that lists NotOwned, or nil.
func (r *DeadLetterResult) Err() error { return notOwnedErr(FunctionDeadLetter, r.NotOwned) }

// DeadLetter records a handler's permanent failure: each owned entry is
// copied to the dead-letter stream with the error text and acked, in one
// atomic step, so a crash can neither lose nor duplicate it. Idempotent.
func (l *Library) DeadLetter(ctx context.Context, a DeadLetterArgs) (*DeadLetterResult, error) {
	const fn = FunctionDeadLetter
	if err := checkNames(fn, "Stream", a.Stream, "DeadLetterStream", a.DeadLetterStream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	if a.Stream == a.DeadLetterStream {
		return nil, argError(fn, "DeadLetterStream", "must differ from Stream")
	}
	keys, err := l.withLastErrors(fn, []string{a.Stream, a.DeadLetterStream}, a.LastErrors)
	if err != nil {
		return nil, err
	}
	reason := a.Reason
	if reason == "" {
		reason = ReasonHandler
	}
	if len(reason) > MaxReasonBytes {
		return nil, argError(fn, "Reason", "must be at most %d bytes, got %d", MaxReasonBytes, len(reason))
	}
	args, err := idArgs(fn, a.IDs, a.Group, a.Consumer, flag(a.Delete), reason, TruncateError(a.Error))
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, keys, args...)
	if err != nil {
		return nil, err
	}
	return decodeDeadLetter(v)
}

// ExtendArgs are the arguments of Extend.
type ExtendArgs struct {
	// Stream, Group and Consumer are required.
	Stream, Group, Consumer string
	// IDs whose lease to extend, 1 to MaxCount.
	IDs []string
}

// ExtendResult is the outcome of Extend.
type ExtendResult struct {
	// Extended is how many ids had their idle time reset.
	Extended int64
	// NotOwned ids are no longer owned by the consumer: stop working on them.
	NotOwned []string
	// Deleted ids were pending but gone from the stream; they were cleared.
	Deleted []string
}

// Err returns an error wrapping ErrNotOwner that lists NotOwned, or nil.
func (r *ExtendResult) Err() error { return notOwnedErr(FunctionExtend, r.NotOwned) }

// Extend is the lease heartbeat: it resets the idle time of ids still owned
// by the consumer without bumping their delivery count (XCLAIM ... JUSTID),
// so a slow but healthy handler is not reclaimed by another consumer.
func (l *Library) Extend(ctx context.Context, a ExtendArgs) (*ExtendResult, error) {
	const fn = FunctionExtend
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	args, err := idArgs(fn, a.IDs, a.Group, a.Consumer)
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, []string{a.Stream}, args...)
	if err != nil {
		return nil, err
	}
	return decodeExtend(v)
}

// ReleaseArgs are the arguments of Release.
type ReleaseArgs struct {
	// Stream, Group and Consumer are required. Only ids still owned by
	// Consumer are released.
	Stream, Group, Consumer string
	// IDs to release, 1 to MaxCount.
	IDs []string
	// MinIdle is the MinIdle reclaimers pass to Claim.
	MinIdle time.Duration
	// Delay: the entries become claimable after this long. A delay longer
	// than MinIdle is cut to MinIdle (idle time cannot be set in the future).
	// It is sent in whole milliseconds, rounded up, plus one for the
	// server's clock, so no claim comes before it.
	Delay time.Duration
}

// ReleaseResult is the outcome of Release.
type ReleaseResult struct {
	// Released is how many ids were given back.
	Released int64
	// NotOwned ids are no longer owned by the consumer: left alone.
	NotOwned []string
	// Deleted ids were pending but gone from the stream; they were cleared.
	Deleted []string
}

// Err returns an error wrapping ErrNotOwner that lists NotOwned, or nil.
func (r *ReleaseResult) Err() error { return notOwnedErr(FunctionRelease, r.NotOwned) }

// Release gives owned entries back for a later retry without acking them:
// their idle time is set to MinIdle-Delay (at least 0) and their delivery
// count is left alone, so a Claim with MinIdle takes them again after Delay.
func (l *Library) Release(ctx context.Context, a ReleaseArgs) (*ReleaseResult, error) {
	const fn = FunctionRelease
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "MinIdle", a.MinIdle); err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "Delay", a.Delay); err != nil {
		return nil, err
	}
	args, err := idArgs(fn, a.IDs, a.Group, a.Consumer, ms(a.MinIdle), delayMs(a.Delay))
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, []string{a.Stream}, args...)
	if err != nil {
		return nil, err
	}
	return decodeRelease(fn, v)
}

// FailArgs are the arguments of Fail.
type FailArgs struct {
	// Stream, Group and Consumer are required. Only ids still owned by
	// Consumer are touched.
	Stream, Group, Consumer string
	// LastErrors is the stream's last-errors hash (LastErrorsKeyFor), where
	// Error is kept. Empty keeps no error (the rest is the same).
	LastErrors string
	// IDs of the failed attempts, 1 to MaxCount.
	IDs []string
	// MinIdle is the MinIdle reclaimers pass to Claim (0 for partitions
	// in ordered mode: LeaseNext compares idle time with Backoff alone).
	MinIdle time.Duration
	// Delay is the least wait before a retry (a RetryAfter's), at most
	// MinIdle; sent as ReleaseArgs.Delay is.
	Delay time.Duration
	// Backoff is the consumers' Backoff: an entry delivered n times waits
	// max(Delay, Backoff[min(n, len(Backoff))-1]) from this call.
	Backoff []time.Duration
	// Error is the attempt's error text, kept bounded to MaxErrorBytes
	// until the entry is acked or dead-lettered; a record for
	// MaxDeliveries carries it. Empty keeps nothing new.
	Error string
}

// Fail records failed attempts (library 1.3.0): each owned entry is given
// back for a retry d = max(Delay, its Backoff) after this call, its
// delivery count unchanged (its idle time is set to max(0, MinIdle-d)), and
// its error is kept in the LastErrors hash, so that the dead letter written
// when it reaches MaxDeliveries says why, whichever consumer made the last
// attempt. One round trip, one small write per entry; a success costs
// nothing of it.
func (l *Library) Fail(ctx context.Context, a FailArgs) (*ReleaseResult, error) {
	const fn = FunctionFail
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	keys, err := l.withLastErrors(fn, []string{a.Stream}, a.LastErrors)
	if err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "MinIdle", a.MinIdle); err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "Delay", a.Delay); err != nil {
		return nil, err
	}
	if len(a.Backoff) > MaxCount {
		return nil, argError(fn, "Backoff", "at most %d values, got %d", MaxCount, len(a.Backoff))
	}
	head, err := appendBackoff(fn, []any{a.Group, a.Consumer, ms(a.MinIdle), delayMs(a.Delay), TruncateError(a.Error), len(a.Backoff)}, a.Backoff)
	if err != nil {
		return nil, err
	}
	args, err := idArgs(fn, a.IDs, head...)
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, keys, args...)
	if err != nil {
		return nil, err
	}
	return decodeRelease(fn, v)
}

// GiveBack returns owned entries that were handed out but never started
// (library 1.3.0), as a consumer does at a graceful stop: each gets its
// delivery count less one, so a delivery limit counts only attempts, and
// idle time MinIdle, so a Claim with MinIdle takes it at once. The
// arguments are Release's; Delay is ignored.
func (l *Library) GiveBack(ctx context.Context, a ReleaseArgs) (*ReleaseResult, error) {
	const fn = FunctionGiveBack
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group, "Consumer", a.Consumer); err != nil {
		return nil, err
	}
	if err := checkDuration(fn, "MinIdle", a.MinIdle); err != nil {
		return nil, err
	}
	args, err := idArgs(fn, a.IDs, a.Group, a.Consumer, ms(a.MinIdle))
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, []string{a.Stream}, args...)
	if err != nil {
		return nil, err
	}
	return decodeRelease(fn, v)
}

// decodeRelease decodes the reply of release, fail and giveback (extend's
// shape).
func decodeRelease(fn string, v any) (*ReleaseResult, error) {
	r, err := decodeExtendAs(fn, v)
	if err != nil {
		return nil, err
	}
	return &ReleaseResult{Released: r.Extended, NotOwned: r.NotOwned, Deleted: r.Deleted}, nil
}

// withLastErrors appends the optional last-errors key to keys, checking
// that it is a valid name, differs from them and shares their slot.
func (l *Library) withLastErrors(fn string, keys []string, lastErrors string) ([]string, error) {
	if lastErrors != "" {
		if err := checkNames(fn, "LastErrors", lastErrors); err != nil {
			return nil, err
		}
		if slices.Contains(keys, lastErrors) {
			return nil, argError(fn, "LastErrors", "must differ from the other keys, got %q", lastErrors)
		}
		keys = append(keys, lastErrors)
	}
	if err := l.checkSlots(fn, keys...); err != nil {
		return nil, err
	}
	return keys, nil
}

// ReapArgs are the arguments of Reap.
type ReapArgs struct {
	// Stream and Group are required.
	Stream, Group string
	// Idle: consumers idle at least this long are candidates. Must be
	// positive: reaping consumers that were active a moment ago is a mistake.
	Idle time.Duration
	// Keep names consumers never deleted (typically the caller itself).
	Keep []string
}

// ConsumerPending names a consumer and its pending count.
type ConsumerPending struct {
	Name    string
	Pending int64
}

// ReapResult is the outcome of Reap.
type ReapResult struct {
	// Deleted consumers were idle past the threshold and owned nothing.
	Deleted []string
	// Kept consumers were idle past the threshold but still own pending
	// entries; deleting them would drop those entries. Reclaim first.
	Kept []ConsumerPending
}

// Reap deletes the group's consumers idle longer than Idle that own no
// pending entries. The check and XGROUP DELCONSUMER are one atomic step: a
// consumer with pending entries is never deleted.
func (l *Library) Reap(ctx context.Context, a ReapArgs) (*ReapResult, error) {
	const fn = FunctionReap
	if err := checkNames(fn, "Stream", a.Stream, "Group", a.Group); err != nil {
		return nil, err
	}
	if a.Idle <= 0 {
		return nil, argError(fn, "Idle", "must be positive, got %v", a.Idle)
	}
	if err := checkDuration(fn, "Idle", a.Idle); err != nil {
		return nil, err
	}
	args := []any{a.Group, ms(a.Idle)}
	for i, k := range a.Keep {
		if err := checkName(fn, fmt.Sprintf("Keep[%d]", i), k); err != nil {
			return nil, err
		}
		args = append(args, k)
	}
	v, err := l.call(ctx, fn, []string{a.Stream}, args...)
	if err != nil {
		return nil, err
	}
	return decodeReap(v)
}

// RedriveArgs are the arguments of Redrive.
type RedriveArgs struct {
	// DeadLetterStream to move records from. Required.
	DeadLetterStream string
	// Stream to move records to. Required; same cluster slot as
	// DeadLetterStream.
	Stream string
	// AnySource moves every pelwarden record to Stream. When false, only
	// records whose recorded source stream is Stream move; the others are
	// listed in RedrivePage.OtherSource and stay.
	AnySource bool
	// Cursor is "" or "0-0" to start, else the previous page's Cursor.
	Cursor string
	// Count bounds the records examined per page, 1 to MaxCount. Defaults
	// to DefaultCount.
	Count int
}

// Redriven maps a dead-letter record to the entry that replaced it.
type Redriven struct {
	// From is the id in the dead-letter stream (now deleted).
	From string
	// To is the new id in the target stream.
	To string
}

// RedrivePage is one page of a redrive.
type RedrivePage struct {
	// Cursor is the next page's cursor; "0-0" when done.
	Cursor string
	// Moved records, in dead-letter order.
	Moved []Redriven
	// Foreign ids have no pelwarden metadata; they are left in place.
	Foreign []string
	// OtherSource ids came from another stream; they are left in place.
	OtherSource []string
	// TooLarge ids are pelwarden records with too many fields (more than
	// about 3,900) for the library to re-add them; they are left in place.
	TooLarge []string
}

// Done reports whether this page completed the redrive.
func (p *RedrivePage) Done() bool { return p.Cursor == "0-0" }

// Redrive moves one page of dead-letter records back to a stream: each record
// is re-added with its original fields (metadata dropped) plus FieldRedrives,
// and deleted from the dead-letter stream, atomically for the page.
func (l *Library) Redrive(ctx context.Context, a RedriveArgs) (*RedrivePage, error) {
	const fn = FunctionRedrive
	if err := checkNames(fn, "DeadLetterStream", a.DeadLetterStream, "Stream", a.Stream); err != nil {
		return nil, err
	}
	if a.Stream == a.DeadLetterStream {
		return nil, argError(fn, "Stream", "must differ from DeadLetterStream")
	}
	if err := l.checkSlots(fn, a.DeadLetterStream, a.Stream); err != nil {
		return nil, err
	}
	cursor, err := checkCursor(fn, a.Cursor)
	if err != nil {
		return nil, err
	}
	count, err := checkCount(fn, "Count", a.Count)
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, []string{a.DeadLetterStream, a.Stream}, cursor, count, flag(a.AnySource))
	if err != nil {
		return nil, err
	}
	return decodeRedrive(v)
}

// StatsArgs are the arguments of Stats.
type StatsArgs struct {
	// Stream, DeadLetterStream (same cluster slot) and Group are required.
	Stream, DeadLetterStream, Group string
}

// ConsumerStats describes one consumer of a group.
type ConsumerStats struct {
	Name    string
	Pending int64
	// Idle is the time since the consumer's last interaction.
	Idle time.Duration
}

// Stats is a one-call snapshot of a consumer group.
type Stats struct {
	// Pending is the PEL size.
	Pending int64
	// LowestID and HighestID bound the PEL ("" when it is empty).
	LowestID, HighestID string
	// Consumers with their pending counts and idle times.
	Consumers []ConsumerStats
	// Lag is the number of entries not yet delivered to the group, -1 when
	// the server cannot tell.
	Lag int64
	// EntriesRead is the group's entries-read counter, -1 when unknown.
	EntriesRead int64
	// LastDeliveredID is the group's last delivered id.
	LastDeliveredID string
	// Length is the stream's length.
	Length int64
	// DeadLetterLength is the dead-letter stream's length (0 if absent).
	DeadLetterLength int64
}

// Stats returns a snapshot of a consumer group in one call. It is read only
// (FCALL_RO): a user with read-only access to the keys may call it, and so
// may a replica.
func (l *Library) Stats(ctx context.Context, a StatsArgs) (*Stats, error) {
	const fn = FunctionStats
	if err := checkNames(fn, "Stream", a.Stream, "DeadLetterStream", a.DeadLetterStream, "Group", a.Group); err != nil {
		return nil, err
	}
	if err := l.checkSlots(fn, a.Stream, a.DeadLetterStream); err != nil {
		return nil, err
	}
	v, err := l.callRO(ctx, fn, []string{a.Stream, a.DeadLetterStream}, a.Group)
	if err != nil {
		return nil, err
	}
	return decodeStats(v)
}

// DefaultTrimLimit is the most entries one Trim call deletes when
// TrimArgs.Limit is 0.
const DefaultTrimLimit = 1000

// TrimArgs are the arguments of Trim.
type TrimArgs struct {
	// Stream to trim. Required. It must have at least one consumer group.
	Stream string
	// Limit bounds the entries one call deletes (or, with DryRun, counts),
	// 1 to MaxCount, so one call's work is bounded however far behind the
	// trimming is; call again while TrimResult.More. Defaults to
	// DefaultTrimLimit.
	Limit int
	// DryRun deletes nothing: the result says what the call would delete.
	// It calls the read-only twin of the trim function with FCALL_RO, so a
	// user with read-only access to the stream (the ACL guide's operator, docs/operations/acl.md), or
	// a replica, may ask.
	DryRun bool
}

// GroupBound is one consumer group's part in a trim: the entries it still
// needs start at Bound.
type GroupBound struct {
	// Name of the group.
	Name string
	// Pending is the size of the group's PEL.
	Pending int64
	// OldestPending is the group's lowest pending id, "" when none.
	OldestPending string
	// LastDelivered is the group's last-delivered id.
	LastDelivered string
	// Bound is the lower of OldestPending and the id right after
	// LastDelivered: every entry below it was delivered to the group and
	// acknowledged (or skipped with XGROUP SETID).
	Bound string
}

// TrimResult is the outcome of Trim.
type TrimResult struct {
	// Trimmed is how many entries were deleted (with DryRun: would be).
	Trimmed int64
	// Bound: every entry strictly below it is acknowledged by every group;
	// no entry at or above it is ever trimmed. It is the lowest of the
	// groups' bounds.
	Bound string
	// Holder is the group whose bound is Bound: the one holding the
	// trimming back (the most lagging, or the one with the oldest pending
	// entry).
	Holder string
	// More reports that entries below Bound remain after this call (Limit
	// stopped it): call again.
	More bool
	// FirstID and LastID are the first and the last id trimmed, "" when
	// none.
	FirstID, LastID string
	// Length is the stream's length after the call.
	Length int64
	// Groups are every group's bounds, in XINFO GROUPS order.
	Groups []GroupBound
}

// Trim deletes the oldest entries of a stream that every consumer group has
// both delivered and acknowledged, at most Limit per call: the entries
// strictly below the lowest, over the groups, of each group's oldest
// pending id and the id right after its last-delivered id. An entry a group
// still needs (pending there, or not yet delivered to it) is never deleted,
// so a lagging group holds the trimming back at its position (Holder names
// it). The groups are read and the entries deleted in one atomic call.
//
// A stream without consumer groups is refused with an error matching
// ErrNoGroup: nothing records what its readers have processed. A group
// created later at "0" only finds the entries not trimmed yet.
func (l *Library) Trim(ctx context.Context, a TrimArgs) (*TrimResult, error) {
	const fn = FunctionTrim
	if err := checkName(fn, "Stream", a.Stream); err != nil {
		return nil, err
	}
	limit := a.Limit
	switch {
	case limit == 0:
		limit = DefaultTrimLimit
	case limit < 0 || limit > MaxCount:
		return nil, argError(fn, "Limit", "must be between 1 and %d, got %d", MaxCount, limit)
	}
	var v any
	var err error
	if a.DryRun {
		// The read-only twin: FCALL_RO, so a read-only user or a replica
		// may ask.
		v, err = l.callRO(ctx, FunctionTrimPlan, []string{a.Stream}, limit)
	} else {
		v, err = l.call(ctx, fn, []string{a.Stream}, limit, flag(false))
	}
	if err != nil {
		return nil, err
	}
	return decodeTrim(v)
}

// Version returns the version of the library on the server (in ModeEval,
// the embedded version the shim runs). It is read only (FCALL_RO).
func (l *Library) Version(ctx context.Context) (string, error) {
	v, err := l.callRO(ctx, FunctionVersion, nil)
	if err != nil {
		return "", err
	}
	return asString(FunctionVersion, "version", v)
}

// TruncateError bounds an error text to MaxErrorBytes, cutting on a UTF-8
// boundary and ending with TruncatedMarker. The library applies the same
// bound; doing it here keeps large texts off the wire.
func TruncateError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes - len(TruncatedMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + TruncatedMarker
}

// DeadLetterStreamFor returns the dead-letter stream of a stream: the one
// name the driver, the CLI, the dashboard, the Watermill adapter and the
// test kit all use. It is always in the stream's cluster slot:
//
//   - a stream with a hash tag keeps it: "{orders}" -> "{orders}:dead",
//     "{orders}:p3" -> "{orders}:p3:dead";
//   - a stream without one is hashed whole, as the stream itself is:
//     "orders" -> "{orders}:dead";
//   - the rare name with no hash tag but a '}' in it (which cannot be put
//     inside a tag) gets a tag of its braces-free name plus a short suffix
//     chosen to land in its slot: "a}b" -> "{ab" + suffix + "}:dead".
//
// Before v1.3.0 the name was always stream + ":dead", which for a stream
// without a hash tag is another name in another slot: see
// LegacyDeadLetterStreamFor.
func DeadLetterStreamFor(stream string) string { return keyInSlot(stream, deadSuffix) }

const deadSuffix = ":dead"

// LastErrorsKeyFor returns the last-errors hash of a stream (library
// 1.3.0): per pending entry, the error of its last failed attempt (Fail),
// read into the dead letter written when it reaches MaxDeliveries. It is named like the
// dead-letter stream, in the stream's slot: "{orders}" ->
// "{orders}:errors", "orders" -> "{orders}:errors". Its fields are
// "<group> <id>"; acks never touch it (a success costs nothing), and each
// Fail drops a few fields of entries no longer pending, so it stays about
// the size of the entries failing now. ACL users of a consumer need read
// and write access to it.
func LastErrorsKeyFor(stream string) string { return keyInSlot(stream, ":errors") }

// keyInSlot names a key of stream (stream + suffix) in the stream's slot;
// see DeadLetterStreamFor for the rule.
func keyInSlot(stream, suffix string) string {
	if k := stream + suffix; Slot(k) == Slot(stream) {
		return k
	}
	if !strings.Contains(stream, "}") {
		return "{" + stream + "}" + suffix
	}
	return "{" + tagInSlot(stream) + "}" + suffix
}

// LegacyDeadLetterStreamFor returns the dead-letter stream that pelwarden
// before v1.3.0 chose for stream (stream + ":dead"), and whether it differs
// from DeadLetterStreamFor(stream): it does for every stream without a hash
// tag. Tools look there for records written by older versions, so that none
// is orphaned by the rename.
func LegacyDeadLetterStreamFor(stream string) (name string, differs bool) {
	name = stream + deadSuffix
	return name, name != DeadLetterStreamFor(stream)
}

// tagInSlot returns a hash tag (no braces) in the slot of name: name
// without its braces, then the first suffix of up to four characters of
// tagAlphabet that lands there (a search of at most a few thousand CRCs;
// four characters cover every slot).
func tagInSlot(name string) string {
	base := strings.NewReplacer("{", "", "}", "").Replace(name)
	want := Slot(name)
	buf := []byte(base)
	var try func(depth int) bool
	try = func(depth int) bool {
		if int(crc16(string(buf))%SlotCount) == want {
			return true
		}
		if depth == 0 {
			return false
		}
		for i := 0; i < len(tagAlphabet); i++ {
			buf = append(buf, tagAlphabet[i])
			if try(depth - 1) {
				return true
			}
			buf = buf[:len(buf)-1]
		}
		return false
	}
	for depth := 1; depth <= 4; depth++ {
		buf = append(buf[:0], base...)
		buf = append(buf, '~')
		if try(depth) {
			return string(buf)
		}
	}
	return string(buf)
}

const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// ----------------------------------------------------------------------------
// argument checks

func ms(d time.Duration) int64 { return d.Milliseconds() }

// delayMs is a least delay before a retry, as the functions take it:
// whole milliseconds, rounded up, plus one for the server's clock. The
// server counts idle time in whole milliseconds of its clock, so an idle
// time set at 12.9 ms counts from 12; without the extra millisecond an
// entry could be claimed again up to 2 ms before its delay.
func delayMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Milliseconds() + 1
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// CheckName checks a stream, group, consumer or key name the way every
// function of the library does: not empty, at most MaxNameBytes. Its error
// matches ErrInvalidArgument and says only what is wrong ("must not be
// empty", "must be at most 1024 bytes, got 2000"): the caller names the
// argument.
func CheckName(name string) error {
	switch {
	case name == "":
		return nameError("must not be empty")
	case len(name) > MaxNameBytes:
		return nameError(fmt.Sprintf("must be at most %d bytes, got %d", MaxNameBytes, len(name)))
	}
	return nil
}

// nameError is CheckName's error.
type nameError string

func (e nameError) Error() string { return string(e) }
func (nameError) Unwrap() error   { return ErrInvalidArgument }

func checkName(fn, arg, v string) error {
	if err := CheckName(v); err != nil {
		return argError(fn, arg, "%v", err)
	}
	return nil
}

// checkNames takes (argument name, value) pairs.
func checkNames(fn string, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := checkName(fn, pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// checkID validates a stream id ("ms-seq", both parts decimal uint64).
// It is on the hot path (every id of every ack batch), so it parses by hand.
func checkID(fn, arg, id string) error {
	if !validID(id) {
		return &Error{Function: fn, Message: fmt.Sprintf("%s: must be a stream id like 1700000000000-0, got %q", arg, clip(id)), Kind: ErrInvalidID}
	}
	return nil
}

// validID reports whether id is a stream id: "ms-seq", both decimal
// numbers that fit in a uint64.
func validID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	return ok && isUint64(ms) && isUint64(seq)
}

// isUint64 reports whether s is a decimal number that fits in a uint64.
func isUint64(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	if len(s) == 20 {
		_, err := strconv.ParseUint(s, 10, 64)
		return err == nil
	}
	return true
}

func checkCursor(fn, c string) (string, error) {
	if c == "" {
		return "0-0", nil
	}
	if err := checkID(fn, "Cursor", c); err != nil {
		return "", err
	}
	return c, nil
}

func checkCount(fn, arg string, n int) (int, error) {
	switch {
	case n == 0:
		return DefaultCount, nil
	case n < 0 || n > MaxCount:
		return 0, argError(fn, arg, "must be between 1 and %d, got %d", MaxCount, n)
	}
	return n, nil
}

func checkDuration(fn, arg string, d time.Duration) error {
	if d < 0 {
		return argError(fn, arg, "must not be negative, got %v", d)
	}
	return nil
}

func idArgs(fn string, ids []string, head ...any) ([]any, error) {
	if len(ids) == 0 {
		return nil, argError(fn, "IDs", "at least one id is required")
	}
	if len(ids) > MaxCount {
		return nil, argError(fn, "IDs", "at most %d ids per call, got %d", MaxCount, len(ids))
	}
	args := make([]any, 0, len(head)+len(ids))
	args = append(args, head...)
	for i, id := range ids {
		if !validID(id) {
			return nil, checkID(fn, fmt.Sprintf("IDs[%d]", i), id)
		}
		args = append(args, id)
	}
	return args, nil
}

// boundsFirstLast moves the lowest of the checked ids to the front and the
// highest to the back, in place. The ack function reads the consumer's
// pending entries between the first and the last id in one range read, so
// it need not parse every id to find the bounds.
func boundsFirstLast(ids []any) {
	if len(ids) < 2 {
		return
	}
	lo, hi := 0, 0
	loID, hiID := splitID(ids[0].(string)), splitID(ids[0].(string))
	for i := 1; i < len(ids); i++ {
		id := splitID(ids[i].(string))
		if id.less(loID) {
			lo, loID = i, id
		}
		if hiID.less(id) {
			hi, hiID = i, id
		}
	}
	ids[0], ids[lo] = ids[lo], ids[0]
	if hi == 0 {
		hi = lo // the highest was at the front and has just moved
	}
	ids[len(ids)-1], ids[hi] = ids[hi], ids[len(ids)-1]
}

// idParts are the two numbers of a stream id that validID accepted, as
// decimal strings without leading zeros, so that they compare without
// being parsed.
type idParts struct{ ms, seq string }

func splitID(s string) idParts {
	ms, seq, _ := strings.Cut(s, "-")
	return idParts{trimZeros(ms), trimZeros(seq)}
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

// decimalLess compares decimal strings without leading zeros.
func decimalLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func (a idParts) less(b idParts) bool {
	if a.ms != b.ms {
		return decimalLess(a.ms, b.ms)
	}
	return decimalLess(a.seq, b.seq)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func notOwnedErr(fn string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return &Error{Function: fn, Message: fmt.Sprintf("%d id(s) no longer owned by the consumer: %s", len(ids), strings.Join(firstN(ids, 10), " ")), Kind: ErrNotOwner}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

func msDuration(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// checkSlots refuses keys in different cluster slots before any round trip
// when the client is a cluster client. Standalone servers accept any keys.
func (l *Library) checkSlots(fn string, keys ...string) error {
	if _, ok := l.rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	first := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != first {
			return &Error{Function: fn, Code: "CROSSSLOT", Message: fmt.Sprintf("keys %q and %q hash to different cluster slots; give them a common hash tag such as {orders} and {orders}:dead", keys[0], k), Kind: ErrCrossSlot}
		}
	}
	return nil
}

// LeaseKeyFor is the conventional lease key of a partition stream: the
// stream's name with ":lease" appended, in the stream's cluster slot when
// the stream's name is one hash tag (as Partitions makes them).
func LeaseKeyFor(stream string) string { return stream + ":lease" }

// Lease is the state of a partition's lease as a lease function saw it.
type Lease struct {
	// Held reports whether the calling consumer holds the lease now.
	Held bool
	// Owner holds the lease ("" when free).
	Owner string
	// Token is the lease's fencing token: it grows by one each time the
	// lease passes to another consumer and never goes down.
	Token int64
	// TTL is how long the lease lasts from the call (0 when expired).
	TTL time.Duration
}

// LeaseArgs are the arguments of AcquireLease.
type LeaseArgs struct {
	// Stream (the partition), Lease (its lease key, see LeaseKeyFor),
	// Group and Consumer are required; Lease must hash to Stream's slot.
	Stream, Lease, Group, Consumer string
	// TTL is how long the lease lasts from the call; at least 1 ms.
	TTL time.Duration
}

// AcquireLease takes or renews a partition's lease for Consumer: it is
// taken when free, expired or already Consumer's. A consumer that held it
// keeps its token, any other gets the next one. A lease another consumer
// holds and that has not expired is left alone (Held false, Owner and TTL
// say whose and for how long).
func (l *Library) AcquireLease(ctx context.Context, a LeaseArgs) (*Lease, error) {
	const fn = FunctionLease
	if err := checkLeaseKeys(fn, a.Stream, a.Lease, a.Group, a.Consumer); err != nil {
		return nil, err
	}
	if err := l.checkSlots(fn, a.Stream, a.Lease); err != nil {
		return nil, err
	}
	if a.TTL < time.Millisecond {
		return nil, argError(fn, "TTL", "must be at least 1ms, got %v", a.TTL)
	}
	v, err := l.call(ctx, fn, []string{a.Stream, a.Lease}, a.Group, a.Consumer, ms(a.TTL))
	if err != nil {
		return nil, err
	}
	return decodeLease(v)
}

// ReleaseLeaseArgs are the arguments of ReleaseLease.
type ReleaseLeaseArgs struct {
	// Stream, Lease, Group and Consumer are required.
	Stream, Lease, Group, Consumer string
	// Token is the token Consumer holds the lease with (at least 1).
	Token int64
	// AckIDs are acked first, as LeaseNextArgs.AckIDs are (the entries
	// handled since the last LeaseNext), in the same atomic call; at most
	// MaxCount.
	AckIDs []string
	// GiveBack are entries a LeaseNext handed out as new that no handler
	// ran; see LeaseNextArgs.GiveBack. At most MaxCount.
	GiveBack []string
	// Delete also deletes the acked entries once every consumer group is
	// done with them (see AckArgs.Delete).
	Delete bool
}

// ReleaseLeaseResult is the outcome of ReleaseLease.
type ReleaseLeaseResult struct {
	// Released is false when Consumer did not hold the lease with Token:
	// nothing changed.
	Released bool
	// Acked is how many of AckIDs were acked (the others were no longer
	// pending); GivenBack how many of GiveBack were given back (the others
	// were no longer Consumer's).
	Acked, GivenBack int64
}

// ReleaseLease frees a partition's lease at once, for a graceful hand-over:
// another consumer may acquire it with the next call. Its token stays, so
// the next owner's token is greater.
func (l *Library) ReleaseLease(ctx context.Context, a ReleaseLeaseArgs) (*ReleaseLeaseResult, error) {
	const fn = FunctionLeaseRelease
	if err := checkLeaseKeys(fn, a.Stream, a.Lease, a.Group, a.Consumer); err != nil {
		return nil, err
	}
	if err := l.checkSlots(fn, a.Stream, a.Lease); err != nil {
		return nil, err
	}
	if a.Token < 1 {
		return nil, argError(fn, "Token", "must be at least 1, got %d", a.Token)
	}
	args := []any{a.Group, a.Consumer, a.Token, flag(a.Delete)}
	args, err := appendLeaseIDs(fn, args, a.AckIDs, a.GiveBack)
	if err != nil {
		return nil, err
	}
	v, err := l.call(ctx, fn, []string{a.Stream, a.Lease}, args...)
	if err != nil {
		return nil, err
	}
	return decodeLeaseRelease(v)
}

// LeaseNextArgs are the arguments of LeaseNext.
type LeaseNextArgs struct {
	// Stream, DeadLetterStream, Lease, Group and Consumer are required;
	// the three keys must differ and hash to one slot.
	Stream, DeadLetterStream, Lease, Group, Consumer string
	// Token is the token Consumer holds the lease with (at least 1).
	Token int64
	// TTL renews the lease to last this long from the call; at least 1 ms.
	TTL time.Duration
	// MaxDeliveries: a pending head already delivered this many times is
	// dead-lettered. 0 means DefaultMaxDeliveries and NoDeliveryLimit no
	// limit, as everywhere (see DeliveryLimit).
	MaxDeliveries int
	// Delete also deletes acked and dead-lettered entries once every
	// consumer group is done with them (see AckArgs.Delete).
	Delete bool
	// LastErrors is the stream's last-errors hash (LastErrorsKeyFor): a
	// head dead-lettered at MaxDeliveries keeps its last error (Fail).
	// Optional.
	LastErrors string
	// Count is how many new entries are handed out at most, when nothing
	// is pending: 1 to MaxCount; zero means 1.
	Count int
	// AckIDs are acked first: the entries handled since the previous call.
	// The token fence makes Consumer the partition's only reader, so they
	// are acked as listed; list only entries a LeaseNext handed out and a
	// handler ran to success. At most MaxCount.
	AckIDs []string
	// GiveBack are entries a previous call handed out as new that no
	// handler ran (the rest of a batch behind a head that failed). Each
	// that Consumer still owns stays pending to it with its delivery count
	// set back to 0, so the call that hands it out again counts its first
	// attempt as delivery 1. At most MaxCount.
	GiveBack []string
	// Backoff is the delay per attempt, as in ClaimArgs: a head delivered n
	// times and idle less than Backoff[min(n, len(Backoff))-1] blocks the
	// partition for the time left.
	Backoff []time.Duration
}

// LeaseNextResult is the outcome of LeaseNext.
type LeaseNextResult struct {
	// Held is false when Consumer does not hold the lease with Token:
	// nothing changed, the rest is empty; stop handling the partition.
	Held bool
	// Acked is how many of AckIDs were acked (the others were no longer
	// pending); GivenBack how many of GiveBack were given back (the others
	// were no longer Consumer's).
	Acked, GivenBack int64
	// Entries are the partition's next entries in stream order, now owned
	// by Consumer: one pending entry with its delivery count bumped, or,
	// when nothing is pending, up to Count new ones (delivery 1); none
	// when the partition is empty or blocked. Handle them in order; ack
	// those handled with the next call and give back those behind a
	// failure.
	Entries []Entry
	// DeadLettered ids (pending heads at MaxDeliveries) were copied to the
	// dead-letter stream and acked.
	DeadLettered []string
	// Deleted ids were pending but gone from the stream; they were cleared.
	Deleted []string
	// Blocked is the pending head that blocks the partition ("" when none):
	// it waits for its backoff (Wait) or, with Wait < 0, is too large to be
	// dead-lettered by the library and waits for an operator.
	Blocked string
	// Wait is the time left before Blocked may be tried again.
	Wait time.Duration
	// BlockedDeliveries is Blocked's delivery count.
	BlockedDeliveries int64
	// NonePending: the call found nothing pending to hand out first (the
	// group's PEL was empty, or every pending head it met was dead-lettered
	// or cleared), so any Entries are new ones, and a read of new entries
	// right after this call is next in the partition's order.
	NonePending bool
	// Deferred (LeaseNextRead only) are the entries the call's read took
	// that may not run now; see LeaseNextRead.
	Deferred []string
}

// LeaseNext is the ordered step of a lease holder, one atomic call: it
// checks the fence (Consumer holds the lease with Token), renews the lease,
// acks AckIDs, gives GiveBack back, and hands out the partition's next
// entries in stream order: the lowest pending id of the group, whoever owns
// it (a previous owner's entries come first, in id order), alone; else up to
// Count new entries. Pending heads at MaxDeliveries are dead-lettered on the
// way (at most 100 per call); a head in its backoff blocks the partition
// (Blocked, Wait) and nothing behind it is handed out. A pending entry comes
// alone, so every delivery the server counts is an attempt, with one
// exception: new entries of a batch that a crash or a lost lease left
// unhandled count one delivery, and the next owner sees delivery 2.
func (l *Library) LeaseNext(ctx context.Context, a LeaseNextArgs) (*LeaseNextResult, error) {
	keys, args, err := l.leaseNextArgs(a)
	if err != nil {
		return nil, err
	}
	return l.leaseNext(ctx, keys, args)
}

func (l *Library) leaseNext(ctx context.Context, keys []string, args []any) (*LeaseNextResult, error) {
	v, err := l.call(ctx, FunctionLeaseNext, keys, args...)
	if err != nil {
		return nil, err
	}
	return decodeLeaseNext(v)
}

// leaseNextCountArg is the index of the count in lease_next's arguments.
const leaseNextCountArg = 6

// leaseNextArgs checks a and returns lease_next's keys and arguments.
func (l *Library) leaseNextArgs(a LeaseNextArgs) ([]string, []any, error) {
	const fn = FunctionLeaseNext
	if err := checkLeaseKeys(fn, a.Stream, a.Lease, a.Group, a.Consumer); err != nil {
		return nil, nil, err
	}
	if err := checkName(fn, "DeadLetterStream", a.DeadLetterStream); err != nil {
		return nil, nil, err
	}
	if a.DeadLetterStream == a.Stream || a.DeadLetterStream == a.Lease {
		return nil, nil, argError(fn, "DeadLetterStream", "must differ from Stream and Lease")
	}
	if a.LastErrors == a.Lease || a.LastErrors == a.DeadLetterStream {
		return nil, nil, argError(fn, "LastErrors", "must differ from the other keys, got %q", a.LastErrors)
	}
	keys, err := l.withLastErrors(fn, []string{a.Stream, a.DeadLetterStream, a.Lease}, a.LastErrors)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case a.Token < 1:
		return nil, nil, argError(fn, "Token", "must be at least 1, got %d", a.Token)
	case a.TTL < time.Millisecond:
		return nil, nil, argError(fn, "TTL", "must be at least 1ms, got %v", a.TTL)
	}
	maxDeliveries, err := wireDeliveries(fn, a.MaxDeliveries)
	if err != nil {
		return nil, nil, err
	}
	count := a.Count
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxCount {
		return nil, nil, argError(fn, "Count", "must be between 1 and %d, got %d", MaxCount, a.Count)
	}
	args := []any{a.Group, a.Consumer, a.Token, ms(a.TTL), maxDeliveries, flag(a.Delete), count}
	args, err = appendLeaseIDs(fn, args, a.AckIDs, a.GiveBack)
	if err != nil {
		return nil, nil, err
	}
	args, err = appendBackoff(fn, args, a.Backoff)
	if err != nil {
		return nil, nil, err
	}
	return keys, args, nil
}

// appendBackoff appends a Backoff argument to args, in milliseconds, after
// checking each value. The rule itself (an entry delivered n times waits
// Backoff[min(n, len(Backoff))-1] after its last delivery or failure) has
// one home: the library's retrydelay, which claim, fail and lease_next
// share.
func appendBackoff(fn string, args []any, backoff []time.Duration) ([]any, error) {
	for i, d := range backoff {
		if err := checkDuration(fn, fmt.Sprintf("Backoff[%d]", i), d); err != nil {
			return nil, err
		}
		args = append(args, ms(d))
	}
	return args, nil
}

// LeaseNextRead is LeaseNext with the new entries read apart from the
// function, for the same outcome at a lower cost: one MULTI/EXEC holds a
// lease_next that hands out no new entries (the fence, the renewal, the
// acks, the give-backs and the pending head, as LeaseNext) and, behind it,
// a plain XREADGROUP ... COUNT Count ... > of Stream. The server then
// hands the new entries out as it does to any reader, without passing
// them through Lua (BENCHMARKS.md: about 40% less server CPU per entry at
// Count 100), and the transaction keeps every other client's commands
// (a former lease holder's read among them) from landing between the two.
//
// When the function found nothing pending to hand out first
// (NonePending), Entries are the read's entries. Otherwise (it handed out
// a pending entry, reported a blocked head, spent its scan on dead
// letters, or found the lease not held) the read's entries must not run
// now: they are pending to Consumer, delivered once, and listed in
// Deferred. While Held, give them back with the next call (GiveBack), and
// they come out again in order, counted from delivery 1; when not Held
// they belong to the partition's next owner, who hands them out in order
// as delivery 2. The same holds for the entries of a read whose
// transaction failed on the way back (a connection cut after EXEC ran):
// they stay pending to Consumer and later calls hand them out in order.
//
// The ACL user needs MULTI and EXEC besides LeaseNext's commands. Where
// the library runs under EVALSHA and the server lost its scripts, the
// call reloads them and asks again through LeaseNext, giving the read's
// entries back in that call.
func (l *Library) LeaseNextRead(ctx context.Context, a LeaseNextArgs) (*LeaseNextResult, error) {
	const fn = FunctionLeaseNext
	keys, args, err := l.leaseNextArgs(a)
	if err != nil {
		return nil, err
	}
	if l.Mode() == ModeUnknown {
		// Not loaded yet: LeaseNext's call loads it (or finds out how).
		return l.LeaseNext(ctx, a)
	}
	count := args[leaseNextCountArg]
	args[leaseNextCountArg] = 0
	pipe := l.rdb.TxPipeline()
	var next *redis.Cmd
	if l.Mode() == ModeEval {
		next = pipe.EvalSha(ctx, l.script.Hash(), keys, append([]any{fn}, args...)...)
	} else {
		next = pipe.FCall(ctx, fn, keys, args...)
	}
	read := pipe.Do(ctx, "XREADGROUP", "GROUP", a.Group, a.Consumer, "COUNT", count, "STREAMS", a.Stream, ">")
	_, _ = pipe.Exec(ctx) // each command's own error is looked at below
	var entries []Entry
	switch err := read.Err(); {
	case errors.Is(err, redis.Nil):
	case err != nil:
		if next.Err() == nil {
			// The function ran and the read failed (a refused XREADGROUP):
			// nothing was read.
			return nil, &CommandError{Command: "XREADGROUP GROUP " + a.Group + " " + a.Consumer, Key: a.Stream, Err: err}
		}
	default:
		if entries, err = decodeReadEntries(read.Val()); err != nil {
			return nil, err
		}
	}
	if err := next.Err(); err != nil {
		if !isFunctionMissing(err) && !isNoScript(err) {
			return nil, translate(fn, keys, err)
		}
		// The server lost the library (a restart without persistence, a
		// failover to a replica without it, a SCRIPT FLUSH): LeaseNext's
		// call loads it again (FUNCTION LOAD, or EVAL under EVALSHA); it
		// gives back what the read took.
		a.GiveBack = append(slices.Clip(a.GiveBack), entryIDs(entries)...)
		if keys, args, err = l.leaseNextArgs(a); err != nil {
			return nil, err
		}
		args[leaseNextCountArg] = 0
		return l.leaseNext(ctx, keys, args)
	}
	res, err := decodeLeaseNext(next.Val())
	if err != nil {
		return nil, err
	}
	if res.Held && res.NonePending && len(res.Entries) == 0 {
		res.Entries = entries
	} else {
		res.Deferred = entryIDs(entries)
	}
	return res, nil
}

// entryIDs returns the ids of entries.
func entryIDs(entries []Entry) []string {
	if len(entries) == 0 {
		return nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// appendLeaseIDs appends the ack and give-back id lists of lease_next and
// lease_release to args, each as its length and then its ids.
func appendLeaseIDs(fn string, args []any, acks, giveBack []string) ([]any, error) {
	for _, list := range []struct {
		field string
		ids   []string
	}{{"AckIDs", acks}, {"GiveBack", giveBack}} {
		if len(list.ids) > MaxCount {
			return nil, argError(fn, list.field, "must hold at most %d ids, got %d", MaxCount, len(list.ids))
		}
		args = append(args, len(list.ids))
		for i, id := range list.ids {
			if err := checkID(fn, fmt.Sprintf("%s[%d]", list.field, i), id); err != nil {
				return nil, err
			}
			args = append(args, id)
		}
	}
	return args, nil
}

func checkLeaseKeys(fn, stream, lease, group, consumer string) error {
	if err := checkNames(fn, "Stream", stream, "Lease", lease, "Group", group, "Consumer", consumer); err != nil {
		return err
	}
	if stream == lease {
		return argError(fn, "Lease", "must differ from Stream")
	}
	return nil
}
