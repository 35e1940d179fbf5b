package driver

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var errTestCause = errors.New("test cause")

func requireDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("context not cancelled")
	}
}

// Nothing is made until a handler looks at its context.
func TestEntryContextMadeOnFirstUse(t *testing.T) {
	t.Parallel()
	e := newEntryContext(context.Background())
	require.Nil(t, e.state.Load())
	require.NoError(t, e.Err())
	require.NotNil(t, e.state.Load().ctx)
}

// A cancellation asked for before the context is made, or after, cancels it
// with its cause; children of it follow.
func TestEntryContextCancelWith(t *testing.T) {
	t.Parallel()
	before := newEntryContext(context.Background())
	before.cancelWith(errTestCause)
	requireDone(t, before)
	require.ErrorIs(t, context.Cause(before), errTestCause)
	require.ErrorIs(t, before.Err(), context.Canceled)

	after := newEntryContext(context.Background())
	child, cancel := context.WithCancel(after)
	defer cancel()
	after.cancelWith(errTestCause)
	requireDone(t, after)
	requireDone(t, child)
	require.ErrorIs(t, context.Cause(after), errTestCause)
	after.cancelWith(errors.New("later")) // the first cause stays
	require.ErrorIs(t, context.Cause(after), errTestCause)
}

// The parent's cancellation reaches the entry's context; values and the
// deadline come from the parent.
func TestEntryContextParent(t *testing.T) {
	t.Parallel()
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	e := newEntryContext(parent)
	require.Equal(t, "v", e.Value(key{}))
	_, ok := e.Deadline()
	require.False(t, ok)
	cancel()
	requireDone(t, e)
	require.ErrorIs(t, e.Err(), context.Canceled)
}

// After finish, a late look at the context (a goroutine the handler left
// behind) finds it cancelled.
func TestEntryContextFinish(t *testing.T) {
	t.Parallel()
	e := newEntryContext(context.Background())
	e.finish()
	requireDone(t, e)
	require.ErrorIs(t, context.Cause(e), context.Canceled)
}

// newEntryContext returns an entry's context on its own (in the driver it
// is part of the entry in hand).
func newEntryContext(parent context.Context) *entryContext {
	return &entryContext{parent: &parent}
}

// A handler looking at its context while the entry is lost (another
// goroutine) ends with one context, cancelled with the loss's cause,
// whichever came first.
func TestEntryContextRace(t *testing.T) {
	t.Parallel()
	for range 200 {
		e := newEntryContext(context.Background())
		got := make(chan context.Context, 2)
		go func() { got <- e.get() }()
		go func() { e.cancelWith(errTestCause); got <- e.get() }()
		a, b := <-got, <-got
		require.Same(t, e.state.Load().ctx, a)
		require.Same(t, a, b)
		requireDone(t, a)
		require.ErrorIs(t, context.Cause(a), errTestCause)
	}
}
