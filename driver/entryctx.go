package driver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// entryContext is the context a handler gets: the consumer's handler
// context, plus cancellation of this one entry when its lease is lost.
//
// Cancelling one handler needs a context of its own per entry, and
// context.WithCancelCause for every entry costs more client CPU than a
// fast handler does (it registers with the parent under the parent's lock,
// and unregisters). So the per-entry context is made on first use: a
// handler that never looks at its context, or whose entry is never lost,
// pays nothing. A cause set before the context is made cancels it as soon
// as it is made.
type entryContext struct {
	parent context.Context

	made atomic.Pointer[cancelPair] // nil until first use

	mu    sync.Mutex
	cause error // cancellation asked for before the context was made
}

type cancelPair struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ context.Context = (*entryContext)(nil)

func newEntryContext(parent context.Context) *entryContext {
	return &entryContext{parent: parent}
}

// get returns the per-entry context, making it on first use.
func (e *entryContext) get() context.Context {
	if p := e.made.Load(); p != nil {
		return p.ctx
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.made.Load(); p != nil {
		return p.ctx
	}
	ctx, cancel := context.WithCancelCause(e.parent)
	if e.cause != nil {
		cancel(e.cause)
	}
	e.made.Store(&cancelPair{ctx: ctx, cancel: cancel})
	return ctx
}

// Deadline implements context.Context.
func (e *entryContext) Deadline() (time.Time, bool) { return e.parent.Deadline() }

// Done implements context.Context.
func (e *entryContext) Done() <-chan struct{} { return e.get().Done() }

// Err implements context.Context.
func (e *entryContext) Err() error { return e.get().Err() }

// Value implements context.Context. It goes through the per-entry context
// so that context.Cause finds it.
func (e *entryContext) Value(key any) any { return e.get().Value(key) }

// cancelWith cancels the entry's context with cause, now or when it is made.
func (e *entryContext) cancelWith(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cause == nil {
		e.cause = cause
	}
	if p := e.made.Load(); p != nil {
		p.cancel(cause)
	}
}

// finish cancels the entry's context once its handler returned, freeing
// it if it was made (a goroutine the handler left behind that looks at the
// context later finds it cancelled).
func (e *entryContext) finish() { e.cancelWith(context.Canceled) }
