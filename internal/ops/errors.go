package ops

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pelwarden/pelwarden"
)

// commandError is a failed plain command (not a library function): it
// names the command and key, and matches the sentinel of its class (see
// pelwarden.CommandError).
func commandError(cmd, key string, err error) error {
	return &pelwarden.CommandError{Command: cmd, Key: key, Err: err}
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

// argumentError is an option out of range, found before anything ran: a
// *pelwarden.ArgumentError naming it.
func argumentError(option, format string, a ...any) error {
	return &pelwarden.ArgumentError{Field: option, Reason: fmt.Sprintf(format, a...)}
}
