package ops

import (
	"errors"
	"fmt"
	"strings"
)

// CommandError is a plain command (not a library function) that failed: it
// names the command and key and wraps the server's or the connection's
// error, so errors.Is and redis.HasErrorPrefix see through it.
type CommandError struct {
	// Command is the command's name, e.g. "XRANGE".
	Command string
	// Key is the key it ran on ("" for none).
	Key string
	// Err is go-redis's error.
	Err error
}

// Error names the command and key, then the cause.
func (e *CommandError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("%s %s: %v", e.Command, e.Key, e.Err)
}

// Unwrap returns go-redis's error.
func (e *CommandError) Unwrap() error { return e.Err }

func commandError(cmd, key string, err error) error {
	return &CommandError{Command: cmd, Key: key, Err: err}
}

// ErrInterrupted is returned (wrapping the context's error) when an action
// stopped because its context was done. The result returned beside it
// counts what was done before.
var ErrInterrupted = errors.New("interrupted")

func interrupted(cause error) error {
	return fmt.Errorf("%w: %w", ErrInterrupted, cause)
}

// WorkStreamError: Purge refused a stream that has consumer groups: it is a
// work stream, not a dead-letter stream. Nothing was deleted.
type WorkStreamError struct {
	// Key is the stream, Groups its consumer groups.
	Key    string
	Groups []string
}

// Error names the stream and its groups.
func (e *WorkStreamError) Error() string {
	return fmt.Sprintf("%s has consumer groups (%s): it is a work stream, not a dead-letter stream; nothing deleted", e.Key, strings.Join(e.Groups, ", "))
}

// ArgumentError is an option out of range, found before anything ran.
type ArgumentError struct {
	// Option names the field, e.g. "Rate".
	Option string
	// Message says what is wrong.
	Message string
}

// Error names the option and what is wrong with it.
func (e *ArgumentError) Error() string { return e.Option + " " + e.Message }

func argumentError(option, format string, a ...any) error {
	return &ArgumentError{Option: option, Message: fmt.Sprintf(format, a...)}
}
