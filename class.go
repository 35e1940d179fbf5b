package pelwarden

import (
	"context"
	"crypto/tls"
	"errors"

	"github.com/redis/go-redis/v9"
)

// ErrorClass is what an error of a Redis call (a library function's or a
// plain command's, through go-redis) means for its caller: retry it, stop,
// pause writing, or fix the setup. Classify gives it, and Matches the
// sentinel a plain command's reply means: with them, class.go and
// errors.go hold the only code that reads the server's error replies.
type ErrorClass int

// The classes, in the order Classify tries them.
const (
	// ClassNone: no error.
	ClassNone ErrorClass = iota
	// ClassNoPermission: the deployment refuses the caller: the ACL
	// (ErrNoPermission, NOPERM), the credentials (WRONGPASS, NOAUTH), or
	// the server's TLS certificate does not verify. Retrying will not help.
	ClassNoPermission
	// ClassNoGroup: the stream or its consumer group does not exist
	// (ErrNoGroup, NOGROUP).
	ClassNoGroup
	// ClassOutOfMemory: the server refused a write at maxmemory (OOM). It
	// passes once memory is freed; writers should pause, not hammer it.
	ClassOutOfMemory
	// ClassPermanent: retrying the same call cannot help: a key of the
	// wrong type, a bad argument, keys in different cluster slots, a
	// server that cannot run the library.
	ClassPermanent
	// ClassStaleTopology: no reply came (connection refused, reset or cut,
	// a timeout: the node may be dead and its replica promoted), or the
	// server says it is reconfiguring (CLUSTERDOWN, TRYAGAIN, MASTERDOWN,
	// LOADING, READONLY). Retry; a cluster client should reload its slot
	// map. Also transient.
	ClassStaleTopology
	// ClassTransient: retry later: the call was cancelled, the reply was
	// malformed, or the server is busy (BUSY, NOREPLICAS, MISCONF, too
	// many clients).
	ClassTransient
	// ClassServer: any other error reply. It says the server refused this
	// call; whether a retry helps depends on the call.
	ClassServer
)

var classNames = [...]string{"none", "no_permission", "no_group", "out_of_memory", "permanent", "stale_topology", "transient", "server"}

// String returns the class's snake_case name, e.g. "stale_topology".
func (c ErrorClass) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "unknown"
	}
	return classNames[c]
}

// Transient reports whether the class says nothing about what the server
// can do, only about this moment: stale topology, transient, out of
// memory.
func (c ErrorClass) Transient() bool {
	return c == ClassStaleTopology || c == ClassTransient || c == ClassOutOfMemory
}

// Permanent reports whether retrying the same call cannot help: no
// permission, no group, permanent.
func (c ErrorClass) Permanent() bool {
	return c == ClassNoPermission || c == ClassNoGroup || c == ClassPermanent
}

// staleReplies and transientReplies are the first words of replies that
// ask to retry later; the stale ones also say a cluster may have moved
// slots.
var (
	staleReplies     = []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY"}
	transientReplies = []string{"BUSY ", "NOREPLICAS", "MISCONF", "max number of clients reached"}
)

// Classify returns err's class. It sees through wrapping: a library
// *Error by its Kind, a server reply by its first word
// (redis.HasErrorPrefix), never by its full text.
func Classify(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	var cv *tls.CertificateVerificationError
	var e *Error
	switch {
	case errors.Is(err, ErrNoPermission), isNoPermission(err), redis.HasErrorPrefix(err, "WRONGPASS"),
		redis.HasErrorPrefix(err, "NOAUTH"), errors.As(err, &cv):
		return ClassNoPermission
	case errors.Is(err, ErrNoGroup), redis.HasErrorPrefix(err, "NOGROUP"):
		return ClassNoGroup
	case redis.HasErrorPrefix(err, "OOM"), errors.As(err, &e) && e.Code == "OOM":
		return ClassOutOfMemory
	case errors.Is(err, ErrWrongType), redis.HasErrorPrefix(err, "WRONGTYPE"), errors.Is(err, ErrInvalidArgument),
		errors.Is(err, ErrServerUnsupported), errors.Is(err, ErrCrossSlot), redis.HasErrorPrefix(err, "CROSSSLOT"):
		return ClassPermanent
	case errors.Is(err, context.Canceled), errors.Is(err, ErrMalformedReply):
		return ClassTransient
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return ClassStaleTopology // no reply from the server
	}
	for _, p := range staleReplies {
		if redis.HasErrorPrefix(err, p) {
			return ClassStaleTopology
		}
	}
	for _, p := range transientReplies {
		if redis.HasErrorPrefix(err, p) {
			return ClassTransient
		}
	}
	return ClassServer
}

// transient reports errors that say nothing about what the server can do:
// no reply at all (connection refused, reset or cut, timeout, cancelled
// context, even a refused TLS handshake), or a reply asking to retry later
// (loading its data after a restart, busy running a script, failing over,
// out of memory or clients). Load never concludes ErrServerUnsupported
// from them.
func transient(err error) bool {
	var reply redis.Error
	return !errors.As(err, &reply) || Classify(err).Transient()
}

// CommandError is a plain command (not a library function) that failed:
// it names the command and key and wraps go-redis's error, so errors.Is
// and redis.HasErrorPrefix see through it. A refusal Classify reads as a
// missing group, an ACL refusal or a key of the wrong type also matches
// ErrNoGroup, ErrNoPermission or ErrWrongType, as the library's own errors
// do.
type CommandError struct {
	// Command is the command, e.g. "XRANGE" or "XREADGROUP GROUP g c".
	Command string
	// Key is the key it ran on ("" for none).
	Key string
	// Err is go-redis's error.
	Err error
}

// Error names the command and key, then the cause.
func (e *CommandError) Error() string {
	if e.Key == "" {
		return e.Command + ": " + e.Err.Error()
	}
	return e.Command + " " + e.Key + ": " + e.Err.Error()
}

// Unwrap returns go-redis's error and the sentinel its reply means, if
// any (see Matches).
func (e *CommandError) Unwrap() []error {
	if s := replySentinel(e.Err); s != nil {
		return []error{e.Err, s}
	}
	return []error{e.Err}
}

// Matches reports whether err matches sentinel with errors.Is, or is (or
// wraps) a server error reply that means it: NOGROUP ErrNoGroup, NOPERM
// ErrNoPermission, WRONGTYPE ErrWrongType, BUSYGROUP ErrGroupExists. It is
// for the errors of plain go-redis commands, which carry no sentinel of
// their own; the library's errors and a CommandError match with errors.Is
// already. Like Classify, it reads a reply by its first word, never by its
// full text.
func Matches(err, sentinel error) bool {
	if err == nil || sentinel == nil {
		return false
	}
	return errors.Is(err, sentinel) || replySentinel(err) == sentinel
}

// replySentinel returns the sentinel a server error reply means, for the
// replies that have one (see Matches), else nil.
func replySentinel(err error) error {
	switch {
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return ErrNoGroup
	case isNoPermission(err):
		return ErrNoPermission
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return ErrWrongType
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return ErrGroupExists
	}
	return nil
}
