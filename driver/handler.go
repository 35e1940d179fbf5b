package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden"
)

// Message is one stream entry handed to a Handler.
type Message struct {
	// ID is the stream id. It is the natural idempotency key: an entry can
	// be handled more than once (at-least-once delivery).
	ID string
	// Fields in stream order, duplicates included.
	Fields []pelwarden.Field
	// Deliveries is how many times the entry has been delivered, this
	// delivery included (1 on the first).
	Deliveries int64
	// Stream the entry belongs to.
	Stream string
	// Group that delivered it.
	Group string
	// Consumer is the name of the consumer that runs the handler
	// (Config.Consumer).
	Consumer string
}

// Value returns the value of the first field called name, and whether there
// is one.
func (m *Message) Value(name string) (string, bool) {
	for _, f := range m.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// Handler runs the business work for one message. The returned error steers
// what happens to the entry:
//   - nil: it is acknowledged (in a batch; see Config.AckMode);
//   - DeadLetter(err): it is moved to the dead-letter stream at once with the
//     error text, atomically with its acknowledgement;
//   - RetryAfter(d, err): it stays pending and is not redelivered before d;
//   - any other error: it stays pending for the next reclaim pass, and is
//     dead-lettered once it has been delivered MaxDeliveries times.
//
// A panic is recovered, logged with its stack and counted as an error.
// The context is cancelled when the consumer loses ownership of the entry
// (another consumer reclaimed it) or at the end of the shutdown timeout.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// ErrLostOwnership is the cause (context.Cause) of a handler's cancelled
// context when another consumer took its entry over (its lease lapsed and
// a reclaim pass elsewhere claimed it). The entry's outcome here is
// dropped; it runs again there.
var ErrLostOwnership = errors.New("pelwarden/driver: entry ownership lost to another consumer")

// DeadLetterError is the outcome DeadLetter returns: the entry goes to the
// dead-letter stream at once, with Err's text. Middleware can recognise it
// with errors.As.
type DeadLetterError struct {
	// Err is the failure recorded in the dead-letter record.
	Err error
}

// Error returns "dead-letter: " and Err's text.
func (e *DeadLetterError) Error() string { return "dead-letter: " + errText(e.Err) }

// Unwrap returns Err.
func (e *DeadLetterError) Unwrap() error { return e.Err }

// DeadLetter marks a permanent failure: the entry is moved to the dead-letter
// stream at once, with err's text, and acknowledged, in one atomic step. It
// returns a *DeadLetterError.
func DeadLetter(err error) error { return &DeadLetterError{Err: err} }

// RetryAfterError is the outcome RetryAfter returns: the entry stays
// pending and is not redelivered before Delay. Middleware can recognise it
// with errors.As.
type RetryAfterError struct {
	// Delay before the entry may be delivered again.
	Delay time.Duration
	// Err is the failure that asked for the retry.
	Err error
}

// Error returns "retry after <Delay>: " and Err's text.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %v: %s", e.Delay, errText(e.Err))
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter leaves the entry pending and keeps it from being redelivered
// before d. A delay up to MinIdle is recorded on the server (any consumer
// honours it); a longer one is held by this consumer's heartbeat while
// it runs, and cut to MinIdle if it stops first. Zero or negative d retries
// at the next reclaim pass. It returns a *RetryAfterError.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Outcome is what a consumer does with an entry once its handler
// returned: OutcomeOf decides it, the driver's workers apply it, and so
// does the test kit (pelwardentest), so a test sees what production does.
type Outcome struct {
	// Action to take.
	Action OutcomeAction
	// Delay: with ActionRelease the entry is claimable again after it (0:
	// at the next reclaim pass); with ActionHold it is the RetryAfter
	// delay.
	Delay time.Duration
	// Retry: the handler asked for the retry (RetryAfter); otherwise an
	// ActionRelease is a failure, retried at the next reclaim pass.
	Retry bool
	// ErrText is the handler's error text: with ActionDeadLetter, what the
	// dead-letter record keeps (DeadLetter's error, unwrapped).
	ErrText string
}

// OutcomeAction is what happens to an entry after its handler returned.
type OutcomeAction int

const (
	// ActionAck: the handler returned nil; the entry is acknowledged, in a
	// batch (Config.AckMode).
	ActionAck OutcomeAction = iota
	// ActionDeadLetter: DeadLetter(err); the entry moves to the
	// dead-letter stream, atomically with its acknowledgement.
	ActionDeadLetter
	// ActionRelease: RetryAfter(d, err) with d up to MinIdle, or any other
	// error; the entry is released (the release function), claimable
	// again after Delay, its delivery count unchanged.
	ActionRelease
	// ActionHold: RetryAfter(d, err) with d beyond MinIdle; the consumer
	// keeps the entry, extending its lease, until the retry is within
	// MinIdle, then releases it for what is left (cut to MinIdle if the
	// consumer stops first).
	ActionHold
)

// ReleaseDelay is how long an entry released for this outcome
// (ActionRelease) waits before it may be taken again, as a consumer
// releases it: Delay for a RetryAfter; for a plain failure nothing where
// reclaim passes take idle entries (the next pass takes it), and
// min(reclaimInterval, minIdle) where reads claim (readsClaim: see
// ReadClaimAuto), about when a pass would have taken it, since the very
// next read would take it at once and spend its MaxDeliveries in
// milliseconds.
func (o Outcome) ReleaseDelay(readsClaim bool, reclaimInterval, minIdle time.Duration) time.Duration {
	if o.Retry || !readsClaim {
		return o.Delay
	}
	return min(reclaimInterval, minIdle)
}

// OutcomeOf returns what a consumer whose MinIdle is minIdle does with an
// entry whose handler returned err.
func OutcomeOf(err error, minIdle time.Duration) Outcome {
	if err == nil {
		return Outcome{Action: ActionAck}
	}
	var dl *DeadLetterError
	if errors.As(err, &dl) {
		return Outcome{Action: ActionDeadLetter, ErrText: errText(dl.Err)}
	}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		if ra.Delay > minIdle {
			return Outcome{Action: ActionHold, Delay: ra.Delay, Retry: true, ErrText: errText(err)}
		}
		return Outcome{Action: ActionRelease, Delay: max(ra.Delay, 0), Retry: true, ErrText: errText(err)}
	}
	return Outcome{Action: ActionRelease, ErrText: errText(err)}
}
