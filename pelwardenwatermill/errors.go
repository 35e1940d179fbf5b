package pelwardenwatermill

import (
	"errors"
)

var (
	// ErrClosed is returned by Subscribe and Publish once Close was called.
	ErrClosed = errors.New("pelwarden/watermill: closed")
	// ErrNacked is the error a Subscriber hands the driver for a message
	// that was Nacked: it is wrapped in a *driver.RetryAfterError with
	// SubscriberConfig.NackDelay, so driver middleware (such as
	// pelwardenotel.Handler) sees the Nack as a retry.
	ErrNacked = errors.New("pelwarden/watermill: message nacked")
	// ErrNotAcked is the error a Subscriber hands the driver for a message
	// that was neither acked nor nacked within CloseTimeout of its
	// subscription closing (or that was still waiting for its turn on the
	// channel): the entry is released for another consumer at once.
	ErrNotAcked = errors.New("pelwarden/watermill: subscription closed before the message was acked")
	// ErrDeadLettered is the error DeadLetter records when given a nil
	// error.
	ErrDeadLettered = errors.New("pelwarden/watermill: dead-lettered by the handler")
	// ErrNotWatermill is the cause recorded in the dead-letter record of
	// an entry that is in neither layout DefaultMarshaler reads: it has no
	// FieldUUID and no watermill-redisstream UUID field.
	ErrNotWatermill = errors.New("pelwarden/watermill: entry is not a watermill message")
)
