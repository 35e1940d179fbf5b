package driver

import (
	"log/slog"
	"sync/atomic"

	"github.com/pelwarden/pelwarden"
)

// lastErrors is a stream's last-errors hash (pelwarden.LastErrorsKeyFor)
// as the driver's calls name it: the fail function keeps each failed
// attempt's error there, and the calls that dead-letter at MaxDeliveries
// read it into the record. Until the server refuses this ACL user the key
// (or the hash commands), every such call names it; from the first
// refusal on they go without it, so a consumer upgraded without the new
// grant keeps running, its dead letters for max_deliveries without an
// error, and it says so once.
type lastErrors struct {
	key string
	log *slog.Logger
	off atomic.Bool
}

func newLastErrors(stream string, log *slog.Logger) *lastErrors {
	return &lastErrors{key: pelwarden.LastErrorsKeyFor(stream), log: log}
}

// with runs call with the key ("" once refused). A call refused by the
// ACL is tried once more without the key (an ACL refusal comes before
// anything changed); when that one goes through, the key is left out
// from then on.
func (e *lastErrors) with(call func(key string) error) error {
	if e == nil || e.off.Load() {
		return call("")
	}
	err := call(e.key)
	if err == nil || !pelwarden.Matches(err, pelwarden.ErrNoPermission) {
		return err
	}
	if err := call(""); err != nil {
		return err
	}
	if e.off.CompareAndSwap(false, true) {
		e.log.Warn("the server refuses this ACL user the last-errors key: dead letters for max_deliveries keep no error; grant ~"+e.key+
			" +type +exists +hget +hset +hdel +hrandfield", "key", e.key, "err", err)
	}
	return nil
}
