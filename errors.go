package pelwarden

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Every error returned by this package wraps one of them, so
// callers branch with errors.Is and never on message text.
var (
	// ErrNoGroup: the stream or its consumer group does not exist. Fix the
	// group setup (XGROUP CREATE ... MKSTREAM); retrying the same call will
	// not help.
	ErrNoGroup = errors.New("pelwarden: no such stream or consumer group")

	// ErrWrongType: a key passed as a stream holds another type.
	ErrWrongType = errors.New("pelwarden: key holds a value that is not a stream")

	// ErrInvalidArgument: an argument is missing, empty, out of range or
	// malformed. Returned before any round trip when the Go side can tell,
	// and by the library otherwise. Nothing on the server was changed.
	ErrInvalidArgument = errors.New("pelwarden: invalid argument")

	// ErrInvalidID: a stream id or cursor is malformed. It also matches
	// ErrInvalidArgument.
	ErrInvalidID = fmt.Errorf("%w: malformed stream id", ErrInvalidArgument)

	// ErrCrossSlot: the keys of one call hash to different cluster slots.
	// Give them a common hash tag, such as "{orders}" and "{orders}:dead".
	ErrCrossSlot = errors.New("pelwarden: keys hash to different cluster slots; give them a common hash tag such as {orders} and {orders}:dead")

	// ErrNotOwner: the consumer no longer owns an entry (a reclaim moved it,
	// or it was acknowledged). Results list such ids; their Err methods wrap
	// this error.
	ErrNotOwner = errors.New("pelwarden: entry no longer owned by the consumer")

	// ErrLibraryMissing: the pelwarden library is not on the server and
	// could not be loaded there.
	ErrLibraryMissing = errors.New("pelwarden: function library not loaded on the server")

	// ErrServerUnsupported: the server cannot run pelwarden: older than
	// Redis 7.0, or Lua is disabled, or scripting is refused entirely.
	ErrServerUnsupported = errors.New("pelwarden: server does not support pelwarden")

	// ErrNoPermission: the server's ACL refused the call: the user may not
	// run a command the call needs, or may not access one of its keys. The
	// message names what is missing (the library checks every command it
	// can need before changing anything, so nothing was changed). Grant it
	// (see the least-privilege roles, docs/operations/acl.md); retrying will not help.
	ErrNoPermission = errors.New("pelwarden: refused by the server's ACL")

	// ErrServer: the server refused a command inside the library for a reason
	// not covered above (for example out of memory). The message carries the
	// server's text.
	ErrServer = errors.New("pelwarden: server error")

	// ErrGroupExists: XGROUP CREATE found the consumer group there already
	// (the server's BUSYGROUP reply). For a caller that creates the group
	// when it is missing, that is success. Nothing in this package returns
	// it; go-redis's error for that reply matches it through Matches, and
	// a CommandError wrapping it with errors.Is.
	ErrGroupExists = errors.New("pelwarden: consumer group already exists")

	// ErrMalformedReply: a reply did not have the shape the library's
	// contract promises (a proxy in between, or a foreign library of the same
	// name).
	ErrMalformedReply = errors.New("pelwarden: malformed reply")

	// ErrNoLimit: the named limit is not set (SetLimit, or `pelwarden limit
	// set`).
	ErrNoLimit = errors.New("pelwarden: no such limit")
)

// errorCodes maps the library's error codes (the first word of its error
// replies, table ERRORS in lua/pelwarden.lua) to sentinel errors. A test
// fails when the two tables drift apart.
var errorCodes = map[string]error{
	"PWNOGROUP":   ErrNoGroup,
	"PWWRONGTYPE": ErrWrongType,
	"PWBADARG":    ErrInvalidArgument,
	"PWBADID":     ErrInvalidID,
	"PWSERVER":    ErrServer,
	"PWNOPERM":    ErrNoPermission,
	"PWNOLIMIT":   ErrNoLimit,
}

// Error is an error reply from the library or the server, or a failed
// argument check, translated to one of the sentinel errors.
type Error struct {
	// Function is the library function or operation that failed, e.g.
	// "pelwarden_v1_claim".
	Function string
	// Code is the library's error code (e.g. "PWNOGROUP"), or the server's
	// first word (e.g. "CROSSSLOT"), or "" for checks done in Go.
	Code string
	// Message is the human-readable text.
	Message string
	// Kind is the sentinel error this error matches with errors.Is.
	Kind error
	// Err is the underlying error, if any.
	Err error
	// Key is the key the ACL user may not access, when the server refused
	// the call for a key (Kind ErrNoPermission) and the library could tell
	// which (under FCALL); "" otherwise.
	Key string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pelwarden: ")
	if e.Function != "" {
		b.WriteString(e.Function)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Unwrap returns the sentinel and the underlying error.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// ArgumentError is an argument, option or configuration field a call
// refused before doing anything: the one type every package of the module
// returns for them (the driver's and the producer's Config, the tools'
// options). It names the field and matches ErrInvalidArgument with
// errors.Is; the library's own functions report bad arguments as an *Error
// of Kind ErrInvalidArgument, naming the function too.
type ArgumentError struct {
	// Scope is who refused it, printed first: "pelwarden/driver", "demo".
	// Empty for none.
	Scope string
	// Field names what is wrong: "Config.Stream", "Message[3].Fields",
	// "Rate".
	Field string
	// Reason says what is wrong, with the value.
	Reason string
}

// Error returns "<Scope>: invalid <Field>: <Reason>".
func (e *ArgumentError) Error() string {
	msg := "invalid " + e.Field + ": " + e.Reason
	if e.Scope == "" {
		return msg
	}
	return e.Scope + ": " + msg
}

// Unwrap returns ErrInvalidArgument.
func (e *ArgumentError) Unwrap() error { return ErrInvalidArgument }

// argError reports a bad argument found before any round trip.
func argError(function, arg, format string, a ...any) error {
	return &Error{
		Function: function,
		Message:  arg + ": " + fmt.Sprintf(format, a...),
		Kind:     ErrInvalidArgument,
	}
}

// translate turns an error from FCALL/EVALSHA on keys into an *Error that
// matches a sentinel. Errors that are not Redis replies (network, context)
// are wrapped with the function name and returned unchanged otherwise.
func translate(function string, keys []string, err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return fmt.Errorf("pelwarden: %s: %w", function, err)
	}
	msg := rerr.Error()
	code, rest, _ := strings.Cut(msg, " ")
	if kind, ok := errorCodes[code]; ok {
		return &Error{Function: function, Code: code, Message: cleanLuaMessage(rest), Kind: kind, Err: err}
	}
	switch {
	case redis.HasErrorPrefix(err, "CROSSSLOT"):
		return &Error{Function: function, Code: "CROSSSLOT", Message: ErrCrossSlot.Error()[len("pelwarden: "):], Kind: ErrCrossSlot, Err: err}
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return &Error{Function: function, Code: "NOGROUP", Message: msg, Kind: ErrNoGroup, Err: err}
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return &Error{Function: function, Code: "WRONGTYPE", Message: msg, Kind: ErrWrongType, Err: err}
	case isNoPermission(err):
		// The server's text may not say which key ("No permissions to
		// access a key"): name the call and its keys.
		what := "call"
		if len(keys) > 0 {
			what += " on keys " + strings.Join(keys, ", ")
		}
		return &Error{Function: function, Code: "NOPERM", Message: what + " refused by the server's ACL: " + msg, Kind: ErrNoPermission, Err: err}
	case isFunctionMissing(err):
		return &Error{Function: function, Code: code, Message: "the library is not loaded on the server (call Load): " + msg, Kind: ErrLibraryMissing, Err: err}
	}
	return &Error{Function: function, Code: code, Message: msg, Kind: ErrServer, Err: err}
}

// cleanLuaMessage drops the " script: ..." location suffix some servers
// append to errors raised inside a function.
func cleanLuaMessage(s string) string {
	if i := strings.Index(s, " script: "); i >= 0 {
		return s[:i]
	}
	return s
}

// isFunctionMissing reports the server's answer to FCALL of an unknown
// function ("ERR Function not found").
func isFunctionMissing(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found")
}

// isNoScript reports EVALSHA's refusal of a script the server does not
// have ("NOSCRIPT No matching script").
func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// isLibraryExists reports FUNCTION LOAD's refusal of a library that is
// there already ("ERR Library 'pelwarden' already exists").
func isLibraryExists(err error) bool {
	return redis.HasErrorPrefix(err, "Library")
}

// isNoPermission reports an ACL refusal.
func isNoPermission(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM")
}
