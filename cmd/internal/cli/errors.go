package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// exitError is an error with the exit code it ends the command with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports bad arguments or flags (ExitUsage).
func usageErrorf(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// targetErrorf reports a missing stream, group or record, or a key of the
// wrong type (ExitBadTarget).
func targetErrorf(format string, a ...any) error {
	return &exitError{code: ExitBadTarget, err: fmt.Errorf(format, a...)}
}

// failuref reports a run-time failure (ExitFailure).
func failuref(format string, a ...any) error {
	return &exitError{code: ExitFailure, err: fmt.Errorf(format, a...)}
}

// classify gives an error returned by the library or go-redis its exit code.
func classify(err error) error {
	switch {
	case pelwarden.Classify(err) == pelwarden.ClassNoGroup, pelwarden.Matches(err, pelwarden.ErrWrongType):
		return &exitError{code: ExitBadTarget, err: err}
	case errors.Is(err, pelwarden.ErrInvalidArgument), errors.Is(err, pelwarden.ErrCrossSlot):
		return &exitError{code: ExitUsage, err: err}
	case errors.Is(err, context.Canceled):
		return &exitError{code: ExitFailure, err: fmt.Errorf("interrupted: %w", err)}
	}
	return &exitError{code: ExitFailure, err: err}
}

// exactArgs accepts exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s needs %d argument(s), %s; got %d (see %s --help)",
				cmd.CommandPath(), len(names), strings.Join(names, " "), len(args), cmd.CommandPath())
		}
		for i, v := range args {
			if err := pelwarden.CheckName(v); err != nil {
				return usageErrorf("%s: %s %v", cmd.CommandPath(), names[i], err)
			}
		}
		return nil
	}
}

// opsError gives an error from package ops its exit code: a failed plain
// command or an interruption is a run-time failure with ops' message, a
// refused work stream a bad target, a library error is classified.
func opsError(err error) error {
	var ce *pelwarden.CommandError
	var ws *ops.WorkStreamError
	var ae *pelwarden.ArgumentError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ops.ErrInterrupted):
		return failuref("interrupted")
	case errors.As(err, &ws):
		return targetErrorf("%v", ws)
	case errors.As(err, &ce):
		return failuref("%v", ce)
	case errors.As(err, &ae):
		return usageErrorf("%v", ae)
	}
	return classify(err)
}
