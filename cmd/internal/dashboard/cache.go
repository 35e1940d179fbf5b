package dashboard

import (
	"context"
	"errors"
	"sync"
	"time"
)

// maxCached bounds the snapshots a cache keeps: past it, expired ones are
// dropped first.
const maxCached = 1024

// cache holds one snapshot per view key, shared by every viewer: a snapshot
// younger than ttl is served as is; an older one is refreshed by exactly
// one caller while the others wait for its result (or their context). So N
// viewers polling a view cost the server one read per ttl, like one viewer.
type cache[T any] struct {
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]*cached[T]
}

type cached[T any] struct {
	at      time.Time
	val     T
	err     error
	loading chan struct{} // closed when the running load ends; nil when idle
}

func newCache[T any](ttl time.Duration) *cache[T] {
	return &cache[T]{ttl: ttl, entries: map[string]*cached[T]{}}
}

// get returns key's snapshot, loading it with load when it is missing or
// older than the ttl. load runs detached from the caller's cancellation
// (another viewer may be waiting for it) but keeps its values.
func (c *cache[T]) get(ctx context.Context, key string, load func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.evict()
		e = &cached[T]{}
		c.entries[key] = e
	}
	if e.loading == nil && !e.at.IsZero() && time.Since(e.at) < c.ttl {
		defer c.mu.Unlock()
		return e.val, e.err
	}
	if wait := e.loading; wait != nil {
		c.mu.Unlock()
		select {
		case <-wait:
			c.mu.Lock()
			defer c.mu.Unlock()
			return e.val, e.err
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
	done := make(chan struct{})
	e.loading = done
	c.mu.Unlock()

	var v T
	err := errLoadPanicked
	defer func() {
		// Also on a panic in load: the waiters get an error, not a hang.
		c.mu.Lock()
		e.val, e.err, e.at, e.loading = v, err, time.Now(), nil
		c.mu.Unlock()
		close(done)
	}()
	v, err = load(context.WithoutCancel(ctx))
	return v, err
}

// errLoadPanicked is what waiters see when the load they waited for
// panicked (the panic goes on in the loading request).
var errLoadPanicked = errors.New("dashboard: the read of this view failed")

// evict drops expired snapshots once the cache is full (c.mu held).
func (c *cache[T]) evict() {
	if len(c.entries) < maxCached {
		return
	}
	for k, e := range c.entries {
		if e.loading == nil && time.Since(e.at) >= c.ttl {
			delete(c.entries, k)
		}
	}
	for k, e := range c.entries {
		if len(c.entries) < maxCached {
			return
		}
		if e.loading == nil {
			delete(c.entries, k)
		}
	}
}

// forget drops every snapshot, so the next viewer reads the server (after
// an action changed it).
func (c *cache[T]) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.loading == nil {
			delete(c.entries, k)
		}
	}
}
