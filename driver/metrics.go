package driver

import "time"

// Event is a counted driver event.
type Event int

const (
	// EventRead: new entries read from the stream with XREADGROUP ">"
	// (in ordered mode: handed out new by lease_next).
	EventRead Event = iota
	// EventHandled: handler calls that returned nil.
	EventHandled
	// EventHandlerError: handler calls that returned an error or panicked
	// (DeadLetter and RetryAfter outcomes included).
	EventHandlerError
	// EventHandlerPanic: handler calls that panicked (also counted as
	// EventHandlerError).
	EventHandlerPanic
	// EventClaimed: idle entries taken over, by a reclaim pass or by a
	// read (XREADGROUP ... CLAIM, see ReadClaimAuto); in ordered mode,
	// pending entries handed out again by lease_next (a retry, or a
	// previous owner's entry).
	EventClaimed
	// EventDeletedFromPEL: pending ids whose entries were gone from the
	// stream, cleared from the PEL. Not a success.
	EventDeletedFromPEL
	// EventAcked: entries acknowledged after their handler succeeded.
	EventAcked
	// EventLostOwnership: entries another consumer took over while this one
	// held them; their outcome is dropped (not acked).
	EventLostOwnership
	// EventLeaseExtended: lease extensions of in-flight entries.
	EventLeaseExtended
	// EventReaped: dead consumers deleted from the group.
	EventReaped
	// EventCommandError: failed Redis calls (each retry counted).
	EventCommandError
	// EventTooLarge: entries that should be dead-lettered but have too many
	// fields to copy from a server-side function (see pelwarden.ClaimPage's
	// TooLarge); they stay pending, untouched, for an operator. (Where
	// reads claim, the consumer that met one parks it: see docs/reference/functions.md.)
	EventTooLarge
	// EventPaused: times the consumer stopped taking new entries because
	// the server refused a write for lack of memory (it resumes by itself
	// once a refused call succeeds).
	EventPaused
	// EventTrimmed: entries deleted from the stream by the periodic trim
	// (Config.TrimInterval), every group having acknowledged them.
	EventTrimmed
	// EventDeadLetterTrimmed: dead-letter records deleted by the
	// dead-letter retention (Config.DeadLetterMaxAge, DeadLetterMaxLen).
	EventDeadLetterTrimmed
	// EventStalled: pending entries found idle past Config.StallAfter,
	// each counted once by each consumer that found it (see StallAfter).
	EventStalled
	// EventLeaseAcquired: partition leases this consumer took, in ordered
	// mode (NewOrdered).
	EventLeaseAcquired
	// EventLeaseReleased: partition leases this consumer gave back on a
	// graceful hand-over (a rebalance or its stop), in ordered mode.
	EventLeaseReleased
	// EventLeaseLost: partition leases this consumer lost in ordered mode:
	// the server answered that another consumer holds it, or it could not
	// renew it in time (PartitionLease less its margin). A handler running
	// then is cancelled with ErrLostOwnership and its outcome dropped
	// (counted as EventLostOwnership too).
	EventLeaseLost
	// EventPartitionBlocked: times a partition's head blocked it in
	// ordered mode (once per head): it failed and waits for its Backoff,
	// or it reached MaxDeliveries but is too large to dead-letter. Each
	// is also logged once, naming the stream and the entry.
	EventPartitionBlocked
	// EventGroupPaused: times the consumer found its group paused by an
	// operator on one of its streams (pelwarden.PauseGroup, `pelwarden
	// pause`) and stopped taking entries there until the resume.
	EventGroupPaused
	numEvents
)

var eventNames = [numEvents]string{
	"read", "handled", "handler_error", "handler_panic", "claimed", "deleted_from_pel",
	"acked", "lost_ownership", "lease_extended", "reaped", "command_error", "too_large",
	"paused", "trimmed", "dead_letter_trimmed", "stalled",
	"lease_acquired", "lease_released", "lease_lost", "partition_blocked",
	"group_paused",
}

// String returns the event's snake_case name, e.g. "deleted_from_pel".
func (e Event) String() string {
	if e < 0 || e >= numEvents {
		return "unknown"
	}
	return eventNames[e]
}

// Events lists every Event, for collectors that pre-register series.
func Events() []Event {
	out := make([]Event, numEvents)
	for i := range out {
		out[i] = Event(i)
	}
	return out
}

// Metrics receives the driver's counters. Implementations must be safe for
// concurrent use and fast: they are called on the hot path. Package
// driver/prommetrics has a Prometheus implementation.
type Metrics interface {
	// Count adds n to the counter of e.
	Count(e Event, n int)
	// DeadLettered adds n entries dead-lettered for reason
	// (pelwarden.ReasonMaxDeliveries, pelwarden.ReasonHandler).
	DeadLettered(reason string, n int)
	// HandlerDuration observes one handler call's duration.
	HandlerDuration(d time.Duration)
}

// PartitionMetrics is an optional extension of Metrics for ordered mode
// (NewOrdered): a Metrics that also implements it is told, per
// partition, whether this consumer owns it and whether a failing head
// blocks it, so a dashboard or an alert can name the partitions (the
// counters of Metrics have no labels). Package driver/prommetrics
// implements it with two gauges labelled by stream.
type PartitionMetrics interface {
	// PartitionOwned reports that this consumer owns stream from now on
	// (true), or no longer (false).
	PartitionOwned(stream string, owned bool)
	// PartitionBlocked reports that stream's head fails and blocks the
	// partition while it waits for its backoff or for an operator (true),
	// or no longer does (false). It is called with false too when the
	// partition leaves this consumer while blocked.
	PartitionBlocked(stream string, blocked bool)
}

type noMetrics struct{}

func (noMetrics) Count(Event, int)              {}
func (noMetrics) DeadLettered(string, int)      {}
func (noMetrics) HandlerDuration(time.Duration) {}
